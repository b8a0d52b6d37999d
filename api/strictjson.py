"""Untrusted JSON text -> a value every later layer can store and encode, or a problem naming the field.

The standard parser accepts three things nothing downstream can hold: a lone surrogate escape
(``"\\ud800"``) becomes a str that no UTF-8 encoder takes (SQLite, orjson, the index), an integer
of more than 4,300 digits raises ValueError inside ``int()``, and ``NaN`` / ``Infinity`` are not
JSON at all. Here surrogates and huge integers are a 422 naming the field; the non-finite
literals are kept only where a number may be non-finite (a metric's ``value``: a NaN loss is
evidence) and are a 422 anywhere else, instead of turning into the text "nan".
"""

from __future__ import annotations

import json
import re
from typing import Any

from dsdoctor.api.errors import ApiError, field_error, validation_error
from dsdoctor.kb.textcheck import unencodable

MAX_DEPTH = 64
MAX_INT_DIGITS = 4300  # Python's own limit for int() on text (sys.get_int_max_str_digits)
#: paths where NaN / Infinity / -Infinity are accepted (metric values), as ``nan`` / ``inf`` / ``-inf``
NON_FINITE_PATHS = re.compile(r"^(?:metrics\.)?(?:\d+\.)?value$")


class NonFinite(str):
    """``NaN`` / ``Infinity`` / ``-Infinity`` as read (a str: ``nan``, ``inf``, ``-inf``), until checked."""


class _HugeInt:
    def __init__(self, digits: int):
        self.digits = digits


_CONSTANTS = {"NaN": NonFinite("nan"), "Infinity": NonFinite("inf"), "-Infinity": NonFinite("-inf")}


def _int(text: str) -> int | _HugeInt:
    return int(text) if len(text) <= MAX_INT_DIGITS else _HugeInt(len(text.lstrip("-")))


def parse(text: str, what: str, location: str = "body") -> Any:
    """JSON text -> value; 400 when it is not JSON (line and column named) or nested too deeply, 422 naming
    the field of a lone surrogate, a huge integer or a misplaced NaN / Infinity."""
    try:
        try:
            value = json.loads(text, parse_constant=_CONSTANTS.__getitem__)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer beyond int()'s digit limit; parse again to find where (rare)
            value = json.loads(text, parse_constant=_CONSTANTS.__getitem__, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"{what} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}",
                       title="Malformed JSON") from None
    except RecursionError:
        raise ApiError(400, f"{what} is nested too deeply (limit {MAX_DEPTH} levels)", title="Malformed JSON") from None
    depth, suspect = _scan(value)
    if depth > MAX_DEPTH:
        raise ApiError(400, f"{what} is nested too deeply (limit {MAX_DEPTH} levels)", title="Malformed JSON")
    if suspect:
        problems = _problems(value, location)
        if problems:
            raise validation_error(problems)
    return value




def _scan(value: Any) -> tuple[int, bool]:
    """(nesting depth, whether anything may need a problem) in one pass without paths (the common case)."""
    deepest, suspect, stack = 0, False, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth, suspect
            for key, child in item.items():
                suspect = suspect or unencodable(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth, suspect
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, NonFinite | _HugeInt) or (isinstance(item, str) and unencodable(item)):
            suspect = True
    return deepest, suspect


def _problems(value: Any, location: str, limit: int = 20) -> list[dict[str, str]]:
    """Each field holding something that cannot be accepted, with what to send instead (never the value)."""
    out: list[dict[str, str]] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack and len(out) < limit:
        path, item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                name = f"{path}.{key}" if path else str(key)
                if unencodable(key):
                    name = f"{path}.<key>" if path else "<key>"
                    out.append(field_error(name, "a key holds a lone surrogate (\\ud800-\\udfff), which is not "
                                                 "Unicode text; send valid UTF-8", location))
                stack.append((name, child))
        elif isinstance(item, list):
            stack.extend((f"{path}.{i}" if path else str(i), child) for i, child in enumerate(item))
        elif isinstance(item, _HugeInt):
            out.append(field_error(path, f"is an integer of {item.digits} digits; numbers may have at most "
                                         f"{MAX_INT_DIGITS} digits", location))
        elif isinstance(item, NonFinite):
            if not NON_FINITE_PATHS.match(path):
                out.append(field_error(path, "NaN and Infinity are not JSON values; send a number, or text in "
                                             "quotes", location))
        elif isinstance(item, str) and unencodable(item):
            out.append(field_error(path, "holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text; "
                                         "send valid UTF-8", location))
    return sorted(out, key=lambda e: e["field"])
