"""Where jieba keeps its dictionary cache, set once per process before the first Chinese text.

The command line points it at the user cache directory, the server at ``DSDOCTOR_HOME/cache``.
It lives apart from the analyzer so that setting it imports nothing heavy (Whoosh, jieba).
"""

from __future__ import annotations

from pathlib import Path

_directory: Path | None = None


def configure(path: Path) -> None:
    """Use ``path`` for jieba's dictionary cache."""
    global _directory
    _directory = Path(path)


def directory() -> Path | None:
    """The configured directory, or None when nobody set one."""
    return _directory
