"""Find text that cannot be stored: a lone UTF-16 surrogate (``"\\ud800"`` in JSON) decodes to a Python
str that no UTF-8 encoder (SQLite, orjson, the search index) accepts."""

from __future__ import annotations

from typing import Any


def unencodable(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (no UTF-8 encoder accepts it)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def unencodable_path(value: Any) -> str | None:
    """The dotted path (``logs.0.text``; ``""`` for the value itself) of the first string or key holding a
    lone surrogate, or None when every string is valid Unicode. Iterative: depth costs no stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if unencodable(item):
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and unencodable(key):
                    return f"{path}.<key>" if path else "<key>"
                stack.append((name, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}.{i}" if path else str(i), child) for i, child in enumerate(item))
    return None
