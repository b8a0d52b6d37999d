"""Loaded knowledge (knowledge base, rule set) kept on disk as a pickle, checked by content hash.

Parsing and validating ~80 YAML files costs a few hundred ms per process; a command-line run
pays it every time. With a cache directory configured (the CLI uses the user cache directory, next to
the compiled Hyperscan databases) a successful load is stored under a key hashing the bytes of
every input file, the code that builds it and the Python version, so any edit of data or code
builds afresh. Off by default (tests, the server's own processes).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_DIRECTORY: Path | None = None


def configure(directory: Path | None) -> None:
    """Keep snapshots in ``directory`` (``None``: off)."""
    global _DIRECTORY
    _DIRECTORY = Path(directory) if directory is not None else None


def content_key(kind: str, files: Iterable[Path], code: Iterable[str], salt: str = "") -> str:
    """A hash of the input files (path and bytes), the named modules' source, ``salt`` and the Python version."""
    h = hashlib.sha256(f"{kind}\0{sys.version}\0{salt}\0".encode())
    for name in code:  # found, not imported: a snapshot must not cost the imports it saves
        spec = importlib.util.find_spec(name)
        source = spec.origin if spec is not None else None
        h.update(name.encode() + b"\0" + (Path(source).read_bytes() if source else b"?") + b"\0")
    for path in files:
        h.update(str(path).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return h.hexdigest()[:24]


def cached(kind: str, files: Callable[[], Iterable[Path]], code: Iterable[str], build: Callable[[], T],
           salt: Callable[[], str] = str) -> T:
    """``build()``, or its stored result for the same inputs (``salt()``: what else they depend on). A
    damaged or unreadable entry is rebuilt; an exception from ``build`` is raised and nothing is stored."""
    if _DIRECTORY is None:
        return build()
    try:
        path = _DIRECTORY / f"{kind}-{content_key(kind, files(), code, salt())}.pickle"
    except OSError:
        return build()
    if path.is_file():
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except Exception:  # any damaged entry is rebuilt, never trusted
            pass
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass
    return value
