"""Convert captured text to typed values: sizes to bytes, numbers that may be nan/inf, integers.

Sizes follow what PyTorch and DeepSpeed print: ``2.00 GiB``, ``512.00 MiB``, ``20 MB``,
``1024 bytes``. Both ``GiB`` and ``GB`` mean 1024**3 (PyTorch's ``format_size`` prints binary
units; DeepSpeed's ``see_memory_usage`` prints "GB" for 1024**3).
"""

from __future__ import annotations

import math
import re
from typing import Any

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGTP])i?B?|(B|bytes?))?\s*", re.IGNORECASE)
_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")
_NONFINITE = {
    "nan": math.nan, "-nan": math.nan, "+nan": math.nan,
    "inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
    "-inf": -math.inf, "-infinity": -math.inf,
}

FIELD_TYPES = ("size", "int", "float", "str")


def parse_size(text: str) -> int | None:
    """``"2.00 GiB"`` -> 2147483648; ``None`` when the text is not a size."""
    if len(text) > 64:
        return None
    m = _SIZE.fullmatch(text)
    if not m:
        return None
    unit = (m.group(2) or "").upper()
    return round(float(m.group(1)) * _UNITS[unit])


def parse_float(text: Any) -> float | None:
    """A number as printed by training code: ``1.2E+00``, ``nan``, ``inf``, ``-inf``, ``"nan"``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    t = text.strip().rstrip(",;").strip("'\"")
    special = _NONFINITE.get(t.lower())
    if special is not None:
        return special
    try:
        return float(t)
    except ValueError:
        return None


def release_key(version: str) -> tuple[int, ...] | None:
    """``(0, 14, 2)`` for "0.14.2", "v0.14.2+cu121" or "0.14.2rc1", for comparing releases; None when it
    does not start with a number ("master")."""
    m = _RELEASE.match(version)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def parse_int(text: Any) -> int | None:
    """An integer (``"1,024"`` and ``"1024.0"`` are accepted); ``None`` otherwise."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text
    if isinstance(text, str):
        try:
            return int(text)
        except ValueError:
            pass
    value = parse_float(text.replace(",", "") if isinstance(text, str) else text)
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def convert(text: str, kind: str) -> Any:
    """Convert one captured field; text that does not parse stays text."""
    if kind == "str":
        return text
    if type(text) is str:  # the common case first: a plain number (the general parsers follow on failure)
        try:
            if kind == "int":
                return int(text)
            if kind == "float" and len(text) <= 64:
                return float(text)
        except ValueError:
            pass
    if kind == "size":
        value: Any = parse_size(text)
    elif kind == "int":
        value = parse_int(text)
    elif kind == "float":
        value = parse_float(text)
    else:
        return text
    return text if value is None else value


def is_nonfinite(value: Any) -> bool:
    """True for nan/inf numbers (and their text forms)."""
    number = parse_float(value)
    return number is not None and not math.isfinite(number)
