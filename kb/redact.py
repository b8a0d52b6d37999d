"""Remove secrets from text and JSON-like values before anything is stored or echoed.

The secret shapes are data (``kb/redaction.yaml``: tokens, keys, ``password=`` values,
credentials in URLs, Authorization headers, ...); PEM private keys are found here, with or
without their END line. A secret becomes ``[REDACTED:<kind>]``; the key name or URL scheme
before it is kept. Redacting twice changes nothing.

Linear time on any input: the patterns form one RE2 automaton (google-re2: no backtracking) that
scans the UTF-8 bytes in C at hundreds of MB/s; Python only assembles the replacements of the
matches found, and PEM blocks are found with ``str.find``. Matching bytes, not str, matters: on
str, google-re2 converts offsets per match at a cost that grows with the text.

This module sits below ``api/`` so that the incident store (``kb.incidents.store``) can call it
on every write: the store is the one place every incident passes, whatever the caller.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2
import yaml

MARK = "[REDACTED:{kind}]"
PATTERNS_FILE = Path(__file__).with_name("redaction.yaml")
_ALREADY = b"[REDACTED"
_B64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


@dataclass(frozen=True)
class Shape:
    """One secret pattern of ``redaction.yaml``, with its group numbers in the combined automaton."""

    kind: str
    group: int  #: the group wrapping the whole pattern
    secret: int | None  #: group of the part replaced (None: the whole match)
    harmless_values: bool
    standalone: bool
    mixed_case: bool
    examples: dict[str, list[str]]


def _load(path: Path = PATTERNS_FILE) -> tuple[Any, list[Shape], list[int], frozenset[str], re.Pattern[str]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    words = "|".join(sorted(data["secret_words"], key=len, reverse=True))
    shapes: list[Shape] = []
    pieces: list[str] = []
    group = 1
    for entry in data["patterns"]:
        source = entry["pattern"].replace("{secret_words}", words)
        alone = re2.compile(source)
        names = {(k.decode() if isinstance(k, bytes) else k): v for k, v in alone.groupindex.items()}
        secret = names.get("secret")
        shapes.append(Shape(kind=entry["kind"], group=group, secret=None if secret is None else group + secret,
                            harmless_values=bool(entry.get("harmless_values")),
                            standalone=bool(entry.get("standalone")), mixed_case=bool(entry.get("mixed_case")),
                            examples=entry.get("examples") or {}))
        pieces.append("(" + re.sub(r"\(\?P<\w+>", "(", source) + ")")
        group += 1 + alone.groups
    combined = re2.compile("|".join(pieces).encode("ascii"))
    key_words = "|".join(w.replace("_", "[_-]?") for w in [*data["secret_words"], *data["secret_key_names"]])
    key_name = re.compile(rf"(?i)^(?:.*[_.-])?(?:{key_words})$")
    return combined, shapes, [s.group for s in shapes], frozenset(data["harmless_values"]), key_name


_PATTERN, SHAPES, _GROUPS, _HARMLESS_VALUES, _KEY_NAME = _load()
_PEM_BEGIN = "-----BEGIN "
_PEM_END = "-----END "
_PEM_TAIL = "PRIVATE KEY-----"


@dataclass
class Redactions:
    """What was removed, by kind (never the secrets themselves)."""

    counts: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line such as ``2 secrets redacted (hf_token: 1, url_credentials: 1)``."""
        kinds = ", ".join(f"{kind}: {n}" for kind, n in sorted(self.counts.items()))
        return f"{self.total} secret{'s' if self.total != 1 else ''} redacted before storing ({kinds})"


def _looks_random(value: bytes) -> bool:
    """Upper case, lower case and a digit, and not a hex digest: a key, not a word or a path."""
    return (any(65 <= c <= 90 for c in value) and any(97 <= c <= 122 for c in value)
            and any(48 <= c <= 57 for c in value) and value.count(b"/") < 4)


def _replacement(match: Any, data: bytes, found: Redactions) -> tuple[int, int, bytes] | None:
    """(start, end, new bytes) of the secret in one match, or None when it is not one after all."""
    shape = SHAPES[bisect.bisect_right(_GROUPS, match.lastindex) - 1]
    start, end = match.span(shape.secret) if shape.secret is not None else match.span()
    value = data[start:end]
    if value.startswith(_ALREADY):
        return None
    if shape.harmless_values and value.lower().decode("utf-8", "replace") in _HARMLESS_VALUES:
        return None
    if shape.standalone and end < len(data) and data[end] in _B64:
        return None
    if shape.mixed_case and not _looks_random(value):
        return None
    found.counts[shape.kind] += 1
    return start, end, MARK.format(kind=shape.kind).encode("ascii")


def redact_text(text: str, found: Redactions | None = None) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED:<kind>]`` (linear time)."""
    found = found if found is not None else Redactions()
    if not text:
        return text
    if _PEM_BEGIN in text:
        text = _redact_pem(text, found)
    data = text.encode("utf-8", "surrogatepass")
    pieces: list[bytes] = []
    pos = scan = 0
    while (match := _PATTERN.search(data, scan)) is not None:
        replaced = _replacement(match, data, found)
        if replaced is None:  # not a secret after all: look again one byte on, it may hide one
            scan = match.start() + 1
            continue
        start, end, mark = replaced
        pieces.append(data[pos:start])
        pieces.append(mark)
        pos = scan = max(end, match.start() + 1)
    if not pieces:
        return text
    pieces.append(data[pos:])
    return b"".join(pieces).decode("utf-8", "surrogatepass")


def _redact_pem(text: str, found: Redactions) -> str:
    """Replace each ``-----BEGIN ... PRIVATE KEY----- ... -----END ... PRIVATE KEY-----`` block; a block
    without its END line loses everything up to the end of its base64 body."""
    out, pos = [], 0
    ends = True  # False once no END line follows: later blocks need not look again (linear time)
    while (begin := text.find(_PEM_BEGIN, pos)) >= 0:
        header_end = text.find("-----", begin + len(_PEM_BEGIN))
        if header_end < 0 or not text[begin:header_end + 5].endswith(_PEM_TAIL) or header_end - begin > 60:
            out.append(text[pos:begin + 1])
            pos = begin + 1
            continue
        end = text.find(_PEM_END, header_end + 5) if ends else -1
        close = text.find(_PEM_TAIL, end) if end >= 0 else -1
        ends = close >= 0
        stop = close + len(_PEM_TAIL) if close >= 0 else _body_end(text, header_end + 5)
        out.append(text[pos:begin] + MARK.format(kind="private_key"))
        found.counts["private_key"] += 1
        pos = stop
    out.append(text[pos:])
    return "".join(out)


def _body_end(text: str, pos: int) -> int:
    """Where the base64 body (and ``Name: value`` headers) of a PEM block starting at ``pos`` ends;
    each step consumes what it reads, so hostile input stays linear."""
    while (line := _PEM_LINE.match(text, pos)) is not None and line.end() > pos:
        pos = line.end()
    return pos - 1 if text[pos - 1:pos] == "\n" else pos  # the line break after the body stays


_PEM_LINE = re.compile(r"[ \t\r]*(?:[A-Za-z0-9+/=]+|[A-Z][A-Za-z-]{1,40}: [^\n]{0,200})?[ \t\r]*(?:\n|\Z)")


def is_secret_key(name: str) -> bool:
    """True when a dictionary key names a secret (``password``, ``hf_token``, ``aws_secret_access_key``)."""
    return bool(_KEY_NAME.match(name))


def redact_value(value: Any, found: Redactions | None = None) -> Any:
    """A deep copy of a JSON-like value with secrets removed from every string, every key, and the
    values of secret-named keys."""
    found = found if found is not None else Redactions()
    if isinstance(value, str):
        return redact_text(value, found)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            clean_key = redact_text(key, found) if isinstance(key, str) else key
            while clean_key in out:  # two secrets as keys would otherwise collapse into one entry
                clean_key = f"{clean_key}'"
            if isinstance(key, str) and is_secret_key(key) and isinstance(item, str | int | float) \
                    and not isinstance(item, bool) and str(item).lower() not in _HARMLESS_VALUES and item != "" \
                    and not str(item).startswith("[REDACTED"):
                found.counts["secret_value"] += 1
                out[clean_key] = MARK.format(kind="secret_value")
            else:
                out[clean_key] = redact_value(item, found)
        return out
    if isinstance(value, list | tuple):
        return [redact_value(item, found) for item in value]
    return value
