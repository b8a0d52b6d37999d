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
}


def home() -> Path:
    """Return the data directory (``DSDOCTOR_HOME``, default ``./var``), creating it on first use."""
    path = Path(os.environ.get("DSDOCTOR_HOME") or "var").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def kb_overlay_paths() -> list[Path]:
    """Overlay directories listed in ``DSDOCTOR_KB_PATH`` (':'-separated), in order."""
    raw = os.environ.get("DSDOCTOR_KB_PATH", "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]
