"""Match rules against text: Hyperscan finds which rules hit which lines, RE2 extracts the captures.

Each rule pattern P is compiled for Hyperscan as ``(?:P').*$`` (multi-line mode), where P'
is P without ``^``/``\\A`` anchors. Ending every expression at the end of the line makes
Hyperscan report each (rule, line) pair exactly once however often P occurs in the line, so a
line full of trigger words costs one callback per rule, not one per occurrence. The callback
only appends ``(line end, rule index)``; everything else happens per hit line afterwards.

RE2 (linear time) then confirms the rule on the hit line and extracts named groups: on the
whole line, or on the message after the context prefix when the rule is anchored with ``^``
(``^`` means "the message starts with"). Log text is matched as bytes (Latin-1 semantics in
both engines: one byte per ``.``); phrase rules run on UTF-8 text with Hyperscan's UTF-8 mode.

Databases are compiled once per process and rule-set fingerprint, and cached.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import hyperscan
import re2

from dsdoctor.rules.ruleset import Rule, RuleSet

#: RE2 looks at most this many bytes at the start and at the end of a very long line
LONG_LINE_WINDOW = 65536


def translate(pattern: str) -> tuple[str, bool]:
    """Return the Hyperscan form of ``pattern`` (anchors removed) and whether it was anchored at the start.

    Removing anchors only widens what Hyperscan reports; RE2 then checks the real pattern.
    """
    out: list[str] = []
    anchored = False
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            pair = pattern[i:i + 2]
            if not in_class and pair == "\\A":
                anchored = True
            elif not in_class and pair in ("\\z", "\\Z"):
                pass  # an end anchor: dropped for Hyperscan (a superset), RE2 enforces it
            else:
                out.append(pair)
            i += 2
            continue
        if in_class:
            out.append(c)
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            # a class: an optional ^, then a leading ] is literal
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            out.append(pattern[i:j])
            in_class = True
            i = j
            continue
        if c == "^":
            anchored = True
            i += 1
            continue
        if c == "$":  # Hyperscan rejects embedded end anchors; every expression ends with .*$ anyway
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out), anchored


#: bounded repetitions at or above this upper bound are treated as unbounded (see :func:`relax_bounds`)
RELAX_BOUND = 32
_BOUND = re.compile(r"(?<!\\)\{(\d+),(\d+)\}")


def relax_bounds(pattern: str) -> str:
    """``x{0,120}`` -> ``x*`` and ``x{1,120}`` -> ``x+`` (upper bounds >= RELAX_BOUND).

    Large counted repetitions cost RE2 ~4x per line (its DFA blows up and it falls back to slower
    engines) and buy nothing for safety: RE2 and Hyperscan are linear-time anyway. A bound is a
    limit on distance inside one line, which the line already bounds; the match examples of each
    rule are tested against the relaxed form.
    """
    def repl(m: re.Match[str]) -> str:
        low, high = int(m.group(1)), int(m.group(2))
        if high < RELAX_BOUND or low > 1:
            return m.group(0)
        return "*" if low == 0 else "+"

    return _BOUND.sub(repl, pattern)


#: what ``\\s`` matches inside one line (RE2's ``\\s`` is ``[\\t\\n\\f\\r ]``; the vertical tab only widens)
_LINE_SPACE = "\\t\\x0b\\x0c\\r "


def line_local(body: str) -> str:
    """``body`` with its newline-matching classes narrowed to one line: ``\\s`` -> ``[\\t\\x0b\\x0c\\r ]``,
    ``\\D`` / ``\\W`` -> ``[^\\d\\n]`` / ``[^\\w\\n]``, and a negated class ``[^...]`` also excludes ``\\n``.

    RE2 confirms a rule on one line, which holds no newline, so this drops no match RE2 could make;
    it only keeps Hyperscan from reporting a match that starts on an earlier line (a line hit by
    such a match is counted without RE2 once its rules are confirmed often). With every match inside
    its line, the rules hitting a line depend on that line alone: what lets lines of one digit-blind
    shape be counted together (``_Reader._fold``). ``rules.shapes.newline_free`` checks the result.
    """
    out: list[str] = []
    i, n = 0, len(body)
    in_class = negated = False
    while i < n:
        c = body[i]
        if c == "\\":
            pair = body[i:i + 2]
            if pair == "\\s":
                out.append(_LINE_SPACE if in_class else "[" + _LINE_SPACE + "]")
            elif pair in ("\\D", "\\W") and not in_class:
                out.append("[^\\" + pair[1].lower() + "\\n]")
            else:
                out.append(pair)
            i += 2
            continue
        if in_class:
            if c == "]":
                if negated:
                    out.append("\\n")
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            j = i + 1
            negated = j < n and body[j] == "^"
            if negated:
                j += 1
            if j < n and body[j] == "]":
                j += 1
            out.append(body[i:j])
            in_class = True
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def hyperscan_expression(pattern: str) -> bytes:
    """The expression compiled into the Hyperscan database for one rule pattern: anchors removed,
    large bounds relaxed, matches kept inside one line, then up to the line's end."""
    body, _ = translate(relax_bounds(pattern))
    return ("(?:" + line_local(body) + ").*$").encode("utf-8")


def re2_options(*, caseless: bool, utf8: bool) -> re2.Options:
    options = re2.Options()
    options.case_sensitive = not caseless
    options.log_errors = False
    if not utf8:
        options.encoding = re2.Options.Encoding.LATIN1
    return options


def compile_re2(rule: Rule, *, utf8: bool | None = None) -> re2._Regexp:
    """Compile a rule for RE2 (raises ``re2.error`` on a bad pattern)."""
    utf8 = rule.kind == "phrase" if utf8 is None else utf8
    options = re2_options(caseless=rule.caseless, utf8=utf8)
    relaxed = relax_bounds(rule.pattern)
    pattern = relaxed if utf8 else relaxed.encode("utf-8")
    return re2.compile(pattern, options)


def hyperscan_flags(rule: Rule, *, utf8: bool) -> int:
    flags = hyperscan.HS_FLAG_MULTILINE
    if rule.caseless:
        flags |= hyperscan.HS_FLAG_CASELESS
    if utf8:
        flags |= hyperscan.HS_FLAG_UTF8
    return flags


def compile_hyperscan(rules: Sequence[Rule], *, utf8: bool) -> hyperscan.Database:
    """Compile a block-mode database whose expression ids are the rule indexes."""
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[hyperscan_expression(r.pattern) for r in rules],
        ids=list(range(len(rules))),
        elements=len(rules),
        flags=[hyperscan_flags(r, utf8=utf8) for r in rules],
    )
    return db


_DISK_CACHE: Path | None = None


def configure_disk_cache(directory: Path | None) -> None:
    """Keep compiled databases in ``directory`` (e.g. DSDOCTOR_HOME/cache) so a new process skips compiling.

    Off by default. Entries are keyed by the expressions, flags and Hyperscan version; a damaged
    entry is ignored and rewritten.
    """
    global _DISK_CACHE
    _DISK_CACHE = Path(directory) if directory is not None else None


def cached_file(name: str) -> Path | None:
    """Where an artefact called ``name`` (its content hash in the name) lives in the disk cache, if one is set."""
    return _DISK_CACHE / name if _DISK_CACHE is not None else None


def _cache_key(rules: Sequence[Rule], utf8: bool) -> str:
    # The patterns and this module's own source (where the translation to Hyperscan lives) stand for the
    # expressions: translating ~330 patterns only to name the cache entry cost ~15 ms of every start-up.
    h = hashlib.sha256(f"hyperscan {getattr(hyperscan, '__version__', '?')} utf8={utf8}\n".encode())
    h.update(_translation_source())
    for r in rules:
        h.update(f"{r.pattern}\0{hyperscan_flags(r, utf8=utf8)}\n".encode())
    return h.hexdigest()[:24]


@functools.cache
def _translation_source() -> bytes:
    return Path(__file__).read_bytes()


def load_or_compile(rules: Sequence[Rule], *, utf8: bool) -> tuple[hyperscan.Database, hyperscan.Scratch | None]:
    """A database for ``rules``: from the disk cache when configured and present, else compiled."""
    path = _DISK_CACHE / f"hyperscan-{_cache_key(rules, utf8)}.db" if _DISK_CACHE is not None else None
    if path is not None and path.is_file():
        try:
            db = hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
            return db, hyperscan.Scratch(db)
        except (hyperscan.error, OSError, TypeError):
            pass
    db = compile_hyperscan(rules, utf8=utf8)
    if path is not None:
        write_cached(path, hyperscan.dumpb(db))
    return db, None


def write_cached(path: Path, data: bytes) -> None:
    """Write a cache entry atomically (a reader never sees half of it); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        pass


_FAST_LIMIT = 2 * LONG_LINE_WINDOW
_UNANCHORED = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)


def _raw_regexp(regex: re2._Regexp) -> object | None:
    """RE2's compiled object behind the ``re2`` wrapper, when this google-re2 exposes it (else ``None``)."""
    raw = getattr(regex, "_regexp", None)
    return raw if _UNANCHORED is not None and callable(getattr(raw, "Match", None)) else None


@dataclass(slots=True)
class RuleMatch:
    """A confirmed match of one rule on one line: raw captured text and the match span."""

    rule: Rule
    index: int
    groups: dict[str, str]
    start: int
    end: int


class LineMatcher:
    """Compiled rules over lines of text: ``scan`` finds hit lines, ``confirm`` extracts captures."""

    def __init__(self, rules: Sequence[Rule], *, utf8: bool = False):
        self.rules = list(rules)
        self.utf8 = utf8
        self.anchored = [translate(r.pattern)[1] for r in self.rules]
        self.regexes = [compile_re2(r, utf8=utf8) for r in self.rules]
        # For the byte-line fast path of ``confirm``: RE2's compiled object and (name, group index) per rule,
        # so a hit line costs one call into RE2 and no per-match wrapper objects.
        raw = [_raw_regexp(rx) for rx in self.regexes]
        self._names = [tuple((k.decode() if isinstance(k, bytes) else k, i) for k, i in rx.groupindex.items())
                       for rx in self.regexes]
        self._fast = list(zip(raw, self._names, self.anchored, self.rules, strict=True))
        self.db, self.scratch = load_or_compile(self.rules, utf8=utf8) if self.rules else (None, None)
        self._lock = threading.Lock()  # a database owns one scratch space

    def scan(self, data: bytes | memoryview) -> list[tuple[int, int]]:
        """Return ``(line end offset, rule index)`` for every rule hitting a line, in line order."""
        hits: list[tuple[int, int]] = []
        if self.db is None or not len(data):
            return hits
        append = hits.append

        def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
            append((end, index))

        self._scan(data, on_match)
        return hits

    def hits_any(self, data: bytes | memoryview) -> bool:
        """Does any rule hit a line of ``data``? (The scan stops at the first hit.)"""
        if self.db is None or not len(data):
            return False

        def on_match(index: int, start: int, end: int, flags: int, context: object) -> bool:
            return True  # stop scanning

        try:
            self._scan(data, on_match)
        except hyperscan.ScanTerminated:
            return True
        return False

    def _scan(self, data: bytes | memoryview, on_match: Callable[..., bool | None]) -> None:
        """One Hyperscan scan of ``data`` with this database's scratch space (one scan at a time)."""
        with self._lock:
            if self.scratch is not None:
                self.db.scan(data, match_event_handler=on_match, scratch=self.scratch)
            else:
                self.db.scan(data, match_event_handler=on_match)

    def confirm(self, index: int, line: bytes | str, message_start: int = 0) -> RuleMatch | None:
        """Run RE2 for rule ``index`` on one line; ``None`` if it does not really match."""
        raw, names, anchored, rule = self._fast[index]
        if raw is not None and type(line) is bytes:
            # fast path (every log line): the same RE2 search the wrapper's ``search`` runs, spans read directly
            target = line[message_start:] if anchored else line
            size = len(target)
            if size <= _FAST_LIMIT:
                spans = raw.Match(_UNANCHORED, target, 0, size)
                start, end = spans[0]
                if start < 0:
                    return None
                groups = {}
                for name, group in names:
                    g_start, g_end = spans[group]
                    if g_start >= 0:
                        groups[name] = target[g_start:g_end].decode("utf-8", "replace")
                if anchored:
                    return RuleMatch(rule, index, groups, start + message_start, end + message_start)
                return RuleMatch(rule, index, groups, start, end)
        target = line[message_start:] if anchored else line
        regex = self.regexes[index]
        offset = message_start if anchored else 0
        if len(target) > 2 * LONG_LINE_WINDOW:
            m = regex.search(target[:LONG_LINE_WINDOW])
            if m is None and not self.anchored[index]:
                tail_at = len(target) - LONG_LINE_WINDOW
                m = regex.search(target[tail_at:])
                offset += tail_at
        else:
            m = regex.search(target)
        if m is None:
            return None
        groups = {}
        for name, value in m.groupdict().items():
            if value is not None:
                key = name.decode() if isinstance(name, bytes) else name
                groups[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        start, end = m.span()
        return RuleMatch(self.rules[index], index, groups, start + offset, end + offset)

    def group_span(self, index: int, line: bytes, name: str) -> tuple[int, int] | None:
        """Where rule ``index`` (not anchored) captures group ``name`` on a byte line: ``(-1, -1)`` when the
        rule matches without that group, ``None`` when it does not match (what :meth:`confirm` would say)."""
        m = self.regexes[index].search(line)
        if m is None:
            return None
        group = next((g for n, g in self._names[index] if n == name), None)
        return (-1, -1) if group is None else m.span(group)

    def match_line(self, line: bytes | str, message_start: int = 0) -> list[RuleMatch]:
        """All rules that match one line (Hyperscan pre-filter, then RE2); for examples and small texts."""
        data = line.encode("utf-8") if isinstance(line, str) else line
        if isinstance(line, str) and not self.utf8:
            line = data
        seen: list[int] = []
        for _, index in self.scan(data):
            if index not in seen:
                seen.append(index)
        out = []
        for index in sorted(seen):
            m = self.confirm(index, line, message_start)
            if m is not None:
                out.append(m)
        return out


_FINGERPRINTS: dict[tuple[int, int], tuple[list[Rule], list[Rule], str]] = {}


def cached_fingerprint(ruleset: RuleSet, rules: list[Rule]) -> str:
    """``ruleset.fingerprint(rules)``, remembered while the very same rule objects come back.

    Saves hashing every pattern on each extraction. The cache keeps the rule objects (so their ids
    are never reused while cached) and checks identity, so a changed rule list is hashed afresh.
    """
    key = (id(ruleset), len(rules))
    cached = _FINGERPRINTS.get(key)
    if cached is not None and (cached[1] is rules or all(a is b for a, b in zip(cached[0], rules, strict=True))):
        return cached[2]
    fingerprint = ruleset.fingerprint(rules)
    if len(_FINGERPRINTS) >= 64:
        _FINGERPRINTS.clear()
    _FINGERPRINTS[key] = (list(rules), rules, fingerprint)
    return fingerprint


_CACHE: dict[tuple[str, bool], LineMatcher] = {}
_CACHE_LOCK = threading.Lock()


def cached_matcher(fingerprint: str, rules: Sequence[Rule], *, utf8: bool) -> LineMatcher:
    """The compiled matcher for these rules, compiled once per process."""
    key = (fingerprint, utf8)
    with _CACHE_LOCK:
        matcher = _CACHE.get(key)
        if matcher is None:
            matcher = LineMatcher(rules, utf8=utf8)
            _CACHE[key] = matcher
        return matcher
