"""Where dsdoctor keeps what it writes, and the environment variables it reads."""

from __future__ import annotations

import os
from pathlib import Path

#: Every environment variable dsdoctor reads, with its meaning (the README documents each).
ENVIRONMENT = {
    "DSDOCTOR_HOME": "data directory for everything the service writes (default ./var)",
    "DSDOCTOR_KB_PATH": "extra knowledge-base overlay directories, separated by ':'",
    "DSDOCTOR_MAX_BODY_MB": "REST request body limit in MiB, also applied after gzip (default 32)",
    "DSDOCTOR_SLACK_SIGNING_SECRET": "Slack signing secret used to verify slash commands",
    "PROMETHEUS_MULTIPROC_DIR": "set by dsdoctor serve (under DSDOCTOR_HOME) so /metrics sums every worker",
    "DSDOCTOR_CONFIG": "the server's TOML config file (default DSDOCTOR_HOME/dsdoctor.toml when present)",
    "DSDOCTOR_SERVER": "the CLI's default --server URL",
    "DSDOCTOR_TOKEN": "the CLI's default --token",
    "DSDOCTOR_DATABASE_URL": "postgresql://... to share one PostgreSQL between replicas (default: SQLite in DSDOCTOR_HOME)",
}


def home(create: bool = True) -> Path:
    """Return the data directory (``DSDOCTOR_HOME``, default ``./var``), creating it unless ``create`` is false."""
    path = Path(os.environ.get("DSDOCTOR_HOME") or "var").expanduser()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def database_url() -> str | None:
    """``DSDOCTOR_DATABASE_URL`` when set (a ``postgresql://`` URL), else None: the embedded SQLite files."""
    return os.environ.get("DSDOCTOR_DATABASE_URL", "").strip() or None


def cli_cache_dir() -> Path:
    """Where the command line keeps its caches (compiled rules, jieba's dictionary): the user cache
    directory (platformdirs: ~/.cache/dsdoctor, or $XDG_CACHE_HOME/dsdoctor), so a command leaves
    nothing behind in the folder it runs in."""
    from platformdirs import user_cache_path

    return user_cache_path("dsdoctor", appauthor=False)


_jieba_cache: Path | None = None


def set_jieba_cache_dir(path: Path) -> None:
    """Where jieba keeps its dictionary cache (set before the first Chinese text; here, not in the
    analyzer, so that a command can choose it without importing the search index)."""
    global _jieba_cache
    _jieba_cache = Path(path)


def jieba_cache_dir() -> Path:
    """jieba's cache directory: the one set last, else ``DSDOCTOR_HOME/cache``."""
    return _jieba_cache or home() / "cache"


def kb_overlay_paths() -> list[Path]:
    """Overlay directories listed in ``DSDOCTOR_KB_PATH`` (':'-separated), in order."""
    raw = os.environ.get("DSDOCTOR_KB_PATH", "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]
