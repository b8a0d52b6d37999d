"""Turn an evidence document (and log files) into an :class:`~rules.model.Extraction`.

Logs are read as bytes in chunks split at newlines (bounded memory for any size); Hyperscan
scans each chunk once; only lines some rule hits get per-line work (prefix parsing, RE2
captures, attribution). Then the derivation step (rules/derive.py) reads the collected state
for the three looks (first error, scope, phase) and the numeric facts, and the metric, config,
environment and phrase checks add their own symptoms.

Entry points: :func:`extract` (evidence dict + optional log files) and :func:`extract_text`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress
from pathlib import Path
from typing import Any, BinaryIO

from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.rules import (
    accelerate_config,
    config_checks,
    derive,
    env_checks,
    env_normalize,
    launch_env,
    metrics,
    model_states,
    phrases,
    unnamed,
)
from dsdoctor.rules.collect import Collector, SourceState
from dsdoctor.rules.context import LEADING_RANK, LineContext, SourceHint, parse_prefix, source_hint, untimed
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import (
    LineMatcher,
    cached_file,
    cached_fingerprint,
    cached_matcher,
    hyperscan_expression,
    relax_bounds,
    write_cached,
)
from dsdoctor.rules.model import Extraction
from dsdoctor.rules.ruleset import Rule, RuleSet
from dsdoctor.rules.settings import Settings, load_settings
from dsdoctor.rules.shapes import BLIND, digit_blind, newline_free
from dsdoctor.rules.units import parse_int

ProgressCallback = Callable[[int], None]
_LEADING_RANK_AT = LEADING_RANK.match
#: the ``[rankN]:`` of every line that starts with one, in ``b"\\n" + text`` (``LEADING_RANK`` after each
#: newline: a literal start lets the regex engine jump from newline to newline, where ``^`` tries every byte)
_LEADING_RANKS = re.compile(b"\n" + LEADING_RANK.pattern).findall
_UNSEEN = object()

#: magic numbers of files that are not text logs: (prefix, what it is)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive"), (b"%PDF", "a PDF document"), (b"\x7fELF", "an ELF binary"),
    (b"BZh", "a bzip2 archive"), (b"\xfd7zXZ\x00", "an xz archive"), (b"(\xb5/\xfd", "a zstd archive"),
    (b"7z\xbc\xaf'\x1c", "a 7z archive"), (b"\x93NUMPY", "a NumPy array"), (b"SQLite format 3\x00", "an SQLite database"),
)
_GZIP = b"\x1f\x8b"
#: bytes of a source's start checked for control characters (binary data scanned as text gets a warning)
BINARY_SNIFF_BYTES = 16384


@dataclass
class _LookbackCache:
    """Per source: how far back lines were already searched for a timestamp, and what was found."""

    upto: int = -1  # absolute offset up to which lines were searched
    time: datetime | None = None
    year_known: bool = True


#: (what re-confirms a light record's line, the indexes of rules whose rank capture must agree)
_LightPlan = tuple[tuple[LineMatcher, tuple[int, ...]], list[int]]


class _HitSet:
    """What the read loop needs to know about a line hit by one set of rules (see :meth:`_Plan.hit_set`)."""

    __slots__ = (
        "all_repeatable",
        "by_rank",
        "id",
        "indexes",
        "key",
        "light",
        "progress",
        "rank_countable",
        "sampled",
        "structure",
        "symptoms",
    )

    def __init__(self, number: int, indexes: tuple[int, ...], sampled: bool, key: int, progress: bool,
                 symptoms: list[Rule], structure: bool, all_repeatable: bool, rank_countable: bool):
        self.id = number  # index into the per-source state of the read loop; -1 when not remembered
        self.indexes = indexes  # the rule indexes hitting the line
        self.sampled = sampled  # only context-only rules
        self.key = key  # sampling key
        self.progress = progress  # a progress rule among them
        self.symptoms = symptoms  # the symptom rules
        self.structure = structure  # only traceback structure
        self.all_repeatable = all_repeatable  # symptom rules that may be counted once confirmed often ...
        self.rank_countable = rank_countable  # ... whatever the line / when the line names its rank
        self.by_rank = structure or rank_countable  # the line's leading [rankN]: may let it be skipped
        self.light: _LightPlan | object | None = _UNSEEN  # see _Plan.light_plan


class _Plan:
    """Per-rule facts of one compiled matcher that the read loop needs."""

    def __init__(self, matcher: LineMatcher, settings: Settings):
        self.matcher = matcher
        self.context_only = [_context_only(r, settings) for r in matcher.rules]
        self.is_progress = [r.marker == "progress" for r in matcher.rules]
        self.is_structure = [r.marker in ("traceback", "frame") for r in matcher.rules]
        self.repeatable = [_repeatable(r, anchored, settings) for r, anchored in zip(matcher.rules, matcher.anchored,
                                                                                        strict=True)]
        # rules that capture the rank: repeatable when the prefix gives the rank (both name the same process)
        self.rank_capture = [_repeatable(r, anchored, settings, allow_rank=True) and not rep
                             for r, anchored, rep in zip(matcher.rules, matcher.anchored, self.repeatable, strict=True)]
        # (rule indexes hitting one line) -> what the read loop needs to know about such a line
        self.line_kinds: dict[tuple[int, ...], _HitSet] = {}
        # the hit set of a line hit by one rule only, by its index (most hit lines: no tuple, no hash)
        self.singles: list[_HitSet | None] = [None] * len(matcher.rules)
        self.by_id: list[_HitSet] = []
        self._lock = threading.Lock()
        fields = settings.derive["fields"]
        read_names = {*fields["world_size"], *fields["nodes"], *fields["series"]}
        self.lightable = [_lightable(r, read_names) for r in matcher.rules]
        self._blind: list[bool] | None = None
        self.rank_spans: dict[tuple[int, bytes], tuple[int, int] | None] = {}  # (rule, line shape) -> rank span
        self._risky: list[bool] | None = None
        self._risky_matcher: LineMatcher | object | None = _UNSEEN
        self.shape_hits: dict[bytes, _HitSet | None] = {}  # digit-blind line shape -> its hit set (None: no hit)

    @property
    def risky(self) -> list[bool]:
        """Per rule: may its hits on a line differ from its hits on the line's digit-blind shape (a digit
        matters, or Python cannot tell)? A region where one hits is never folded (``_Reader._fold``).
        Worked out on first use (~60 ms of regex parsing), so only logs long enough to fold pay for it."""
        if self._risky is None:
            self._risky = _risky_of([r.pattern for r in self.matcher.rules])
        return self._risky

    @property
    def blind(self) -> list[bool]:
        """Per rule: does it treat all ten digits alike (rules/shapes.py), so its rank span can be looked up
        by the line's shape? Worked out on first use and kept in the disk cache like ``risky`` (~40 ms of
        regex parsing that a small diagnosis, which never reads a light line, used to pay)."""
        if self._blind is None:
            flags = _blind_of([r.pattern for r in self.matcher.rules])
            self._blind = [b and not anchored for b, anchored in zip(flags, self.matcher.anchored, strict=True)]
        return self._blind

    @property
    def risky_matcher(self) -> LineMatcher | None:
        """The risky rules of this plan, compiled on first use (``None`` when there are none)."""
        if self._risky_matcher is _UNSEEN:
            rules = [r for r, risky in zip(self.matcher.rules, self.risky, strict=True) if risky]
            self._risky_matcher = cached_matcher(RuleSet(rules).fingerprint(), rules, utf8=False) if rules else None
        return self._risky_matcher  # type: ignore[return-value]

    def hit_sets_of(self, shapes: list[bytes]) -> bool:
        """Learn the hit sets of these digit-blind line shapes (one scan of them all), risky rules left out:
        the caller has checked that none hits the real lines."""
        if len(self.shape_hits) + len(shapes) > 4096:
            self.shape_hits.clear()
        text = b"\n".join(shapes) + b"\n"
        ends: dict[int, int] = {}
        at = -1
        for number, shape in enumerate(shapes):
            at += len(shape) + 1
            ends[at] = number
        found: list[list[int]] = [[] for _ in shapes]
        risky = self.risky
        for end, index in self.matcher.scan(text):
            number = ends.get(end)
            if number is None:
                return False  # a match that does not end a line: nothing is learnt
            if not risky[index]:
                found[number].append(index)
        for shape, indexes in zip(shapes, found, strict=True):
            if not indexes:
                self.shape_hits[shape] = None
                continue
            key = tuple(sorted(set(indexes)))
            hit = self.line_kinds.get(key) if len(key) > 1 else self.singles[key[0]]
            self.shape_hits[shape] = hit if hit is not None else self.hit_set(key)
        return True

    def light_plan(self, hit: _HitSet, indexes: tuple[int, ...]) -> _LightPlan | None:
        """For a line hit by ``indexes`` whose symptoms may get light records (rules/compact.py): what
        re-confirms it when shown and the rules whose rank capture must name the line's rank. ``None``
        when such a line is always read in full."""
        if hit.light is not _UNSEEN:
            return hit.light  # type: ignore[return-value]
        plan = None
        if all(self.lightable[k] and not self.context_only[k] for k in indexes):
            plan = ((self.matcher, indexes), [k for k in indexes if self.rank_capture[k]])
        hit.light = plan
        return plan

    def hit_set(self, indexes: tuple[int, ...]) -> _HitSet:
        """What the read loop needs to know about a line hit by ``indexes``, remembered for the next such line."""
        context_only, is_progress = self.context_only, self.is_progress
        key = min(indexes)
        symptom = [k for k in indexes if not context_only[k]]
        args = (all(context_only[k] for k in indexes), key, is_progress[key] or any(is_progress[k] for k in indexes),
                [self.matcher.rules[k] for k in symptom], all(self.is_structure[k] for k in indexes),
                bool(symptom) and all(self.repeatable[k] for k in symptom),
                bool(symptom) and all(self.repeatable[k] or self.rank_capture[k] for k in symptom))
        with self._lock:  # a plan is shared by the threads of a server
            hit = self.line_kinds.get(indexes)
            if hit is not None:
                return hit
            if len(self.by_id) >= 4096:
                return _HitSet(-1, indexes, *args)
            hit = _HitSet(len(self.by_id), indexes, *args)
            self.by_id.append(hit)
            self.line_kinds[indexes] = hit
            if len(indexes) == 1:
                self.singles[indexes[0]] = hit
            return hit


_PLANS: dict[tuple[LineMatcher, tuple[frozenset[str], ...]], _Plan] = {}


def _plan(matcher: LineMatcher, settings: Settings) -> _Plan:
    """The plan of a (process-cached) matcher under these settings, built once."""
    cfg = settings.derive
    key = (matcher, (frozenset(cfg["derived_only"]), frozenset(cfg["overflow_symptoms"]), frozenset(cfg["oom_symptoms"])))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(matcher, settings)
    return plan


_SUBSETS: dict[tuple[_Plan, tuple[bool, ...]], _Plan] = {}


def _without(plan: _Plan, leave_out: list[bool], settings: Settings) -> _Plan:
    """The plan of ``plan``'s rules minus those flagged in ``leave_out`` (compiled once per process; a
    plan stands for its matcher and the settings it was built under, so it is the key)."""
    key = (plan, tuple(leave_out))
    found = _SUBSETS.get(key)
    if found is None:
        rules = [r for r, out in zip(plan.matcher.rules, leave_out, strict=True) if not out]
        found = _SUBSETS[key] = _plan(cached_matcher(RuleSet(rules).fingerprint(), rules, utf8=False), settings)
    return found


class _Reader:
    """Scans one source chunk by chunk and feeds hit lines to the collector.

    With ``shortcuts`` off every hit line is read in full (the straightforward path the tests compare
    the counted-not-read shortcuts against).

    Context-only lines (progress, init, memory lines: see ``_context_only``) are sampled: the
    first ``context_full_lines`` of each kind are read, then every ``context_stride``-th; progress
    lines past their first ones are sampled by window instead (``_full_chunk``). Past the first
    ``context_full_chunks`` chunks of a source, only every ``context_chunk_stride``-th chunk is
    scanned with the full rule set; the others with the "lean" set (no context-only rules), which
    never reports a progress line at all.
    """

    shortcuts = True
    fold_bytes = 65536  # regions of this size are counted by shape when every line is a repeat (_fold)

    def __init__(self, rules: RuleSet, collector: Collector, settings: Settings,
                 progress: ProgressCallback | None):
        limits = settings.derive["limits"]
        self.rules = rules
        self.settings = settings
        line_rules = rules.line_rules
        self.full = _plan(cached_matcher(cached_fingerprint(rules, line_rules), line_rules, utf8=False), settings)
        self.collector = collector
        self.chunk_bytes: int = limits["chunk_bytes"]
        self.max_line: int = limits["max_line_bytes"]
        self.max_rules: int = limits["max_rules_per_line"]
        self.lookback_bytes: int = limits["lookback_bytes"]
        self.lookback_lines: int = limits["lookback_lines"]
        self.progress = progress
        self.full_lines: int = limits["context_full_lines"]
        self.stride: int = limits["context_stride"]
        self.stride_after: int = limits["context_stride_after"]
        self.stride_late: int = limits["context_stride_late"]
        self.full_chunks: int = limits["context_full_chunks"]
        self.chunk_stride: int = limits["context_chunk_stride"]
        self.repeat_after: int = limits["repeat_after"]
        self.window_bytes: int = limits["progress_window_bytes"]

    @property
    def progress_lean(self) -> _Plan:
        """The rule set without the progress markers: the windows between sampled ones."""
        return _without(self.full, self.full.is_progress, self.settings)

    @property
    def lean(self) -> _Plan:
        """The rule set without context-only rules (only big logs need it)."""
        return _without(self.full, self.full.context_only, self.settings)

    def chunks(self, stream: BinaryIO) -> Iterator[tuple[bytes, int, int]]:
        """``(buffer, begin, end)``: ``buffer[begin:end]`` is whole lines (a line over ``max_line`` is cut).

        Blocks are used in place (no copy); only a line split across two blocks is joined.
        """
        rest = b""
        while True:
            data = stream.read(self.chunk_bytes)
            if not data:
                if rest:
                    yield rest, 0, len(rest)
                return
            first = data.find(b"\n")
            if first < 0:
                rest += data
                if len(rest) >= self.max_line:
                    yield rest, 0, len(rest)
                    rest = b""
                continue
            begin = 0
            if rest:
                head = rest + data[: first + 1]
                yield head, 0, len(head)
                begin = first + 1
            last = data.rfind(b"\n") + 1
            if last > begin:
                yield data, begin, last
            rest = data[last:]
            if len(rest) >= self.max_line:
                yield rest, 0, len(rest)
                rest = b""

    def read(self, src: SourceState, stream: BinaryIO, size: int | None = None) -> None:
        """Read one source; ``size`` (bytes, when known) lets the last window before the end be read whole."""
        lineno = 0
        base = 0  # offset in the source of the next chunk
        cache = _LookbackCache()
        seen: dict[int, int] = {}
        self.confirmed: dict[str, int] = {}  # confirmations per rule id in this source
        self.parsed: dict[int, LineContext] = {}  # source offset -> prefix of a recently parsed hit line
        self.ready: dict[_Plan, set[tuple[int, ...]]] = {}  # per plan: hit sets past ``repeat_after``
        self.held: dict[_Plan, list[list[set[int]] | None]] = {}
        self.quiet: set[int] = set()
        windows = _ProgressWindows()
        last_byte = b"\n"
        for number, (buf, begin, end) in enumerate(self.chunks(stream)):
            origin = base - begin
            if number < self.full_chunks or number % self.chunk_stride == 0:
                lineno = self._full_chunk(src, buf, begin, end, origin, lineno, cache, seen, windows, size)
            else:
                lineno = self._chunk(self.lean, src, buf, begin, end, origin, lineno, cache, seen)[0]
            base += end - begin
            src.bytes += end - begin
            if end > begin:
                last_byte = buf[end - 1:end]
            if self.progress is not None:
                self.progress(end - begin)
        src.lines = lineno + (last_byte != b"\n")  # a last line without a newline is a line too

    def _full_chunk(self, src: SourceState, buf: bytes, begin: int, end: int, origin: int, lineno: int,
                    cache: _LookbackCache, seen: dict[int, int], windows: _ProgressWindows, size: int | None) -> int:
        """Read ``buf[begin:end]`` with every rule until progress lines are past their full reads; then in
        windows of ``progress_window_bytes``: one window in ``context_stride`` (later ``context_stride_late``)
        with every rule and all its progress lines read, the others without the progress markers (their
        progress lines are not even reported), and the last window before the end of the source whole.

        Progress lines are most of a training log; sampling them by window keeps their density (one in
        ``context_stride``) while the windows between cost no per-line work at all.
        """
        pos = begin
        segment = self.window_bytes * 4
        tail = end if size is None else _line_start(buf, size - origin - self.window_bytes, begin, end)
        while pos < end:
            if not windows.sampling:
                stop = _line_end(buf, pos + segment, end)
                segment = min(segment * 2, self.chunk_bytes)
                lineno, resume = self._chunk(self.full, src, buf, pos, stop, origin, lineno, cache, seen,
                                             floor=begin, stop_on_sampling=True)
                if resume is None:
                    pos = stop
                else:
                    windows.sampling = True
                    pos = resume
                continue
            if pos >= tail:
                lineno = self._chunk(self.full, src, buf, pos, end, origin, lineno, cache, seen, floor=begin,
                                     progress_all=True)[0]
                break
            stride = self.stride if windows.read < self.stride_after // self.stride else self.stride_late
            if windows.count % stride == 0:
                stop = min(_line_end(buf, pos + self.window_bytes, end), tail)
                lineno = self._chunk(self.full, src, buf, pos, stop, origin, lineno, cache, seen, floor=begin,
                                     progress_all=True)[0]
                windows.read += 1
                windows.count += 1
            else:
                skip = stride - windows.count % stride
                stop = min(_line_end(buf, pos + self.window_bytes * skip, end), tail)
                lineno = self._chunk(self.progress_lean, src, buf, pos, stop, origin, lineno, cache, seen,
                                     floor=begin)[0]
                windows.count += skip
            pos = stop
        return lineno

    def _keep(self, count: int) -> bool:
        if count <= self.full_lines:
            return True
        if count <= self.stride_after:
            return count % self.stride == 0
        return count % self.stride_late == 0

    def _chunk(self, plan: _Plan, src: SourceState, chunk: bytes, begin: int, limit: int, origin: int,
               lineno: int, cache: _LookbackCache, seen: dict[int, int], *, floor: int | None = None,
               stop_on_sampling: bool = False, progress_all: bool = False) -> tuple[int, int | None]:
        """Process the lines in ``chunk[begin:limit]`` (``origin + i`` is the source offset of ``chunk[i]``;
        lookback for timestamps may reach back to ``floor``, default ``begin``).

        Return the line count after them, and with ``stop_on_sampling`` the start of the first progress
        line that would be sampled out (nothing from it on is read; ``None`` if there was none).
        ``progress_all`` reads every progress line (a sampled window).

        A long range goes region by region (``fold_bytes``): a region whose every line would only be
        counted is counted by its shapes (:meth:`_fold`), any other is read line by line.
        """
        floor = begin if floor is None else floor
        size = self.fold_bytes
        if not self.shortcuts or limit - begin < 2 * size:
            return self._lines(plan, src, chunk, begin, limit, origin, lineno, cache, seen, floor=floor,
                               stop_on_sampling=stop_on_sampling, progress_all=progress_all)
        pos = begin
        while pos < limit:
            stop = _line_end(chunk, pos + size - 1, limit)
            if limit - stop < size:
                stop = limit  # no short last region
            folded = self._fold(plan, src, chunk, pos, stop, lineno)
            if folded is not None:
                lineno = folded
            else:
                lineno, resume = self._lines(plan, src, chunk, pos, stop, origin, lineno, cache, seen, floor=floor,
                                             stop_on_sampling=stop_on_sampling, progress_all=progress_all)
                if resume is not None:
                    return lineno, resume
            pos = stop
        return lineno, None

    def _fold(self, plan: _Plan, src: SourceState, chunk: bytes, begin: int, end: int, lineno: int) -> int | None:
        """Count the lines of ``chunk[begin:end]`` without reading them one by one, when :meth:`_lines` would
        only count or skip every one of them; return the line count after them, or ``None`` (nothing done).

        That holds when every line starts with ``[rankN]:``, no risky rule (see ``_Plan.risky``) hits the
        region, and by the digit-blind shape of each line (which fixes the rules that hit it: its rules are
        digit-blind and their matches lie inside a line) each hit line is either traceback structure of a
        rank that already erred, or lines of rules confirmed often whose every symptom has an event on the
        line's rank. The counts, the skipped lines and the streams whose open traceback is forgotten are
        then what the line-by-line read gives (tests/test_rules_fold.py compares both).
        """
        region = chunk[begin:end]
        if not region.endswith(b"\n"):
            return None
        lines = region.count(b"\n")
        ranks = _LEADING_RANKS(b"\n" + region)
        if len(ranks) != lines:
            return None
        if not self.collector.ranks_seen.issuperset(map(int, ranks)):
            return None  # a rank seen for the first time: its lines are read
        risky = plan.risky_matcher
        if risky is not None and risky.hits_any(region):
            return None
        shapes = region.translate(BLIND).split(b"\n")
        shapes.pop()
        counts = Counter(shapes)
        known = plan.shape_hits
        unknown = [shape for shape in counts if shape not in known]
        if unknown and not plan.hit_sets_of(unknown):
            return None
        structure: set[bytes] = set()
        groups: dict[_HitSet, set[bytes]] = {}
        for shape in counts:
            hit = known.get(shape)
            if hit is None:
                if shape not in known:
                    return None  # forgotten meanwhile (the memo was full)
                continue
            if hit.sampled or not hit.by_rank:
                return None
            if hit.structure:
                structure.add(shape)
            else:
                groups.setdefault(hit, set()).add(shape)
        collector = self.collector
        quiet = self.quiet
        erred = collector.erred
        newly: list[int] = []
        if structure:
            for rank in set(map(int, compress(ranks, map(structure.__contains__, shapes)))):
                if rank not in quiet:
                    if ("r", rank) not in erred:
                        return None  # its traceback is read
                    newly.append(rank)
        held = self.held.setdefault(plan, [])
        ready = self.ready.setdefault(plan, set())
        counted: list[tuple[_HitSet, int]] = []
        for hit, members in groups.items():
            number = hit.id
            holders = held[number] if 0 <= number < len(held) else None
            if holders is None:
                holders = self._hold(hit, held, ready)
            if holders is None:
                return None
            present = set(map(int, compress(ranks, map(members.__contains__, shapes))))
            for ranks_of in holders:
                if not present <= ranks_of:
                    return None
            counted.append((hit, sum(counts[shape] for shape in members)))
        for hit, number in counted:
            collector.count_repeats(src, hit.symptoms, number)
        if structure:
            for rank in newly:
                collector.skip_traceback_of(src, ("r", rank))  # forgets an open traceback; counts one line
                quiet.add(rank)
            src.other_lines += sum(counts[shape] for shape in structure) - len(newly)
        return lineno + lines

    def _lines(self, plan: _Plan, src: SourceState, chunk: bytes, begin: int, limit: int, origin: int,
               lineno: int, cache: _LookbackCache, seen: dict[int, int], *, floor: int,
               stop_on_sampling: bool = False, progress_all: bool = False) -> tuple[int, int | None]:
        """:meth:`_chunk` line by line: Hyperscan finds the hit lines, each is counted, skipped or read."""
        matcher = plan.matcher
        whole = begin == 0 and limit == len(chunk)
        hits = matcher.scan(chunk if whole else memoryview(chunk)[begin:limit])
        hits.sort()  # ends are relative to ``begin`` (shifting 100,000 hits would cost more than the adds)
        counted = begin
        i, n = 0, len(hits)
        confirm = matcher.confirm
        collector = self.collector
        confirmed = self.confirmed
        repeat_after = self.repeat_after
        full_lines = self.full_lines
        keep = self._keep
        max_rules = self.max_rules
        line_kinds = plan.line_kinds
        parsed = self.parsed
        ready = self.ready.setdefault(plan, set())  # hit sets whose symptom rules were all confirmed often
        leading = _LEADING_RANK_AT
        shortcuts = self.shortcuts
        # per hit set (by id) once its rules were confirmed often: the rank sets of its symptoms' events
        held = self.held.setdefault(plan, [])
        tally: dict[_HitSet, int] = {}  # hit set -> lines of it only counted
        quiet = self.quiet  # ranks that erred and have no open traceback: their traceback lines are skipped
        skipped = 0
        singles = plan.singles
        while i < n:
            at, first = hits[i]
            i += 1
            if i < n and hits[i][0] == at:
                j = i + 1
                while j < n and hits[j][0] == at:
                    j += 1
                indexes: tuple[int, ...] = (first, *[hit[1] for hit in hits[i:j]])
                i = j
                hit = line_kinds.get(indexes)
                if hit is None:
                    hit = plan.hit_set(indexes)
            else:
                hit = singles[first]
                if hit is None:
                    hit = plan.hit_set((first,))
                indexes = hit.indexes
            end = at + begin
            if hit.sampled and not (hit.progress and progress_all):
                key = hit.key
                count = seen.get(key, 0) + 1
                if count > full_lines and not keep(count):
                    if hit.progress and stop_on_sampling:  # from here on the caller samples progress by window
                        start = max(chunk.rfind(b"\n", begin, end) + 1, begin)
                        self._flush(src, plan, tally, skipped)
                        return lineno + chunk.count(b"\n", counted, start), start
                    seen[key] = count
                    continue
                seen[key] = count
            start = chunk.rfind(b"\n", begin, end) + 1 or begin  # 0 only when no newline precedes it
            ctx = None
            rank = None
            # the rank of a line that starts with torchrun's [rankN]: (rules.context.leading_rank), read in place
            if shortcuts and hit.by_rank:
                m = leading(chunk, start)
                if m is not None:  # the participant is known without parsing the prefix: try to only count it
                    rank = int(m.group(1))
                    if hit.structure:
                        if rank in quiet:
                            skipped += 1
                            continue
                        if collector.skip_traceback_of(src, ("r", rank)):
                            quiet.add(rank)
                            continue
                    else:
                        number = hit.id
                        holders = held[number] if 0 <= number < len(held) else None
                        if holders is None:
                            holders = self._hold(hit, held, ready)
                        if holders is not None:
                            for ranks in holders:
                                if rank not in ranks:
                                    break
                            else:  # every symptom of the line has an event on this rank: count the line
                                tally[hit] = tally.get(hit, 0) + 1
                                continue
                            light = hit.light if hit.light is not _UNSEEN else plan.light_plan(hit, indexes)
                            if light is not None:
                                line = chunk[start:end]
                                if line.endswith(b"\r"):
                                    line = line[:-1]
                                ctx = parse_prefix(line)
                                if ctx.rank == rank and ctx.node is None and ctx.local_rank is None \
                                        and not ctx.kernel and src.hint.node is None \
                                        and (not light[1] or self._names_rank(plan, light[1], line, ctx, rank)):
                                    lineno += chunk.count(b"\n", counted, start)
                                    counted = start
                                    if collector.light(src, rank, ctx, hit.symptoms, lineno + 1, origin + start,
                                                       end - start, light[0],
                                                       lambda s=start: self._lookback(chunk, s, floor, origin, cache)):
                                        if len(line) == end - start:
                                            if len(parsed) >= 256:
                                                parsed.clear()
                                            parsed[origin + start] = ctx
                                        continue
            if ctx is None:
                line = chunk[start:end]
                if line.endswith(b"\r"):
                    line = line[:-1]
                ctx = parse_prefix(line)
            if len(line) == end - start:  # a later lookback may need this line's time: parsed once
                if len(parsed) >= 256:
                    parsed.clear()
                parsed[origin + start] = ctx
            if rank is None and shortcuts:
                if hit.structure and collector.skip_traceback(src, ctx):
                    continue  # a later traceback of a rank that already erred: its frames go unused
                if (hit.all_repeatable or (hit.rank_countable and ctx.rank is not None)) \
                        and (indexes in ready or _often(confirmed, hit.symptoms, repeat_after, ready, indexes)) \
                        and collector.repeat(src, ctx, hit.symptoms):
                    continue  # a line like many before it, from a rank already seen: counted, not re-read
            lineno += chunk.count(b"\n", counted, start)
            counted = start
            if len(indexes) > max_rules:
                indexes = sorted(set(indexes))[:max_rules]
            matches = []
            message_start = ctx.message_start
            for index in indexes:
                m = confirm(index, line, message_start)
                if m is not None:
                    matches.append(m)
                    rule_id = m.rule.id
                    confirmed[rule_id] = confirmed.get(rule_id, 0) + 1
            if not matches:
                continue
            collector.on_line(src, line, lineno + 1, ctx, matches,
                              lambda s=start: self._lookback(chunk, s, floor, origin, cache))
            touched = collector.touched
            if touched is not None and touched[0] == "r":
                quiet.discard(touched[1])  # its stream may hold an open traceback again
        self._flush(src, plan, tally, skipped)
        return lineno + chunk.count(b"\n", counted, limit), None

    def _hold(self, hit: _HitSet, held: list[list[set[int]] | None], ready: set[tuple[int, ...]]) -> list[set[int]] | None:
        """The rank sets of ``hit``'s symptoms' events once its rules were all confirmed often (then kept in
        ``held`` by the hit set's id, so later lines find them by index), else ``None``."""
        if not (hit.indexes in ready or _often(self.confirmed, hit.symptoms, self.repeat_after, ready, hit.indexes)):
            return None
        holders = [self.collector.ranks_with(r.symptom or "") for r in hit.symptoms]
        number = hit.id
        if number >= 0:
            held.extend([None] * (number + 1 - len(held)))
            held[number] = holders
        return holders

    def _flush(self, src: SourceState, plan: _Plan, tally: dict[_HitSet, int], skipped: int) -> None:
        """Add the lines one call of :meth:`_chunk` only counted (nothing reads the counts meanwhile)."""
        count = self.collector.count_repeats
        for hit, lines in tally.items():
            count(src, hit.symptoms, lines)
        src.other_lines += skipped

    @staticmethod
    def _names_rank(plan: _Plan, indexes: list[int], line: bytes, ctx: LineContext, rank: int) -> bool:
        """Do the rank captures of these rules (when any) confirm on the line and name ``rank``? A digit-blind
        rule's rank span is looked up by the line's shape (rules/shapes.py), the others run RE2."""
        shape = None
        for index in indexes:
            if plan.blind[index]:
                if shape is None:
                    shape = line.translate(BLIND)
                key = (index, shape)
                spans = plan.rank_spans
                span = spans.get(key, _UNSEEN)
                if span is _UNSEEN:
                    span = plan.matcher.group_span(index, line, "rank")
                    if len(spans) >= 4096:
                        spans.clear()
                    spans[key] = span
                if span is None or span[0] < 0 or parse_int(line[span[0]:span[1]].decode("utf-8", "replace")) != rank:
                    return False
            else:
                m = plan.matcher.confirm(index, line, ctx.message_start)
                if m is None or parse_int(m.groups.get("rank")) != rank:
                    return False
        return True

    def _lookback(self, chunk: bytes, start: int, begin: int, origin: int,
                  cache: _LookbackCache) -> tuple[datetime | None, bool]:
        """The timestamp of the nearest earlier line that has one (bounded search, cached per source)."""
        floor = max(begin, start - self.lookback_bytes, cache.upto - origin)
        pos = start - 1  # the newline ending the previous line
        found: tuple[datetime | None, bool] | None = None
        for _ in range(self.lookback_lines):
            if pos <= floor:
                break
            newline = chunk.rfind(b"\n", floor, pos)
            if newline < 0 and floor != begin:
                break  # the window starts inside a line
            prev = newline + 1 if newline >= 0 else begin
            if untimed(chunk, prev):  # a frame or traceback line: no time to find
                pos = prev - 1
                continue
            ctx = self.parsed.get(origin + prev) or parse_prefix(chunk[prev:pos])
            if ctx.time is not None:
                found = (ctx.time, ctx.year_known)
                break
            pos = prev - 1
        if found is not None:
            cache.time, cache.year_known = found
        cache.upto = origin + start
        return (cache.time, cache.year_known) if cache.time is not None else (None, True)


# bump when translation to Hyperscan or the shape analysis (rules/shapes.py) changes what a pattern yields
_RISKY_VERSION = "risky 2"


def _risky_of(patterns: list[str]) -> list[bool]:
    """Per rule pattern: is its Hyperscan expression not both digit-blind and newline-free (``_Plan.risky``)?"""
    def risky(pattern: str) -> bool:
        expression = hyperscan_expression(pattern).decode("utf-8")
        return not (digit_blind(expression) and newline_free(expression))

    return _cached_flags("risky", patterns, risky)


def _blind_of(patterns: list[str]) -> list[bool]:
    """Per rule pattern: is it digit-blind once its bounds are relaxed (``_Plan.blind``)?"""
    return _cached_flags("blind", patterns, lambda pattern: digit_blind(relax_bounds(pattern)))


def _cached_flags(kind: str, patterns: list[str], flag: Callable[[str], bool]) -> list[bool]:
    """``flag`` of every pattern. The answer for a rule set is kept in the disk cache beside the compiled
    databases (keyed by the patterns' hash and the code's version tag), so a new process pays the regex
    parsing once per rule set, not once per run."""
    digest = hashlib.sha256("\0".join([_RISKY_VERSION, kind, *patterns]).encode()).hexdigest()[:24]
    path = cached_file(f"{kind}-{digest}.json")
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text())
            if isinstance(stored, list) and len(stored) == len(patterns) \
                    and all(isinstance(value, bool) for value in stored):
                return stored
        except (OSError, ValueError):
            pass  # a damaged entry is worked out again and rewritten
    flags = [flag(p) for p in patterns]
    if path is not None:
        write_cached(path, json.dumps(flags).encode())
    return flags


def _often(confirmed: dict[str, int], rules: list[Rule], repeat_after: int, ready: set[tuple[int, ...]],
           indexes: tuple[int, ...]) -> bool:
    """Were all these rules confirmed ``repeat_after`` times in this source? Counts only grow, so a yes
    is remembered in ``ready`` for the hit set."""
    if all(confirmed.get(r.id, 0) >= repeat_after for r in rules):
        ready.add(indexes)
        return True
    return False


@dataclass
class _ProgressWindows:
    """Per source: whether progress lines are sampled by window yet, windows passed, windows read."""

    sampling: bool = False
    count: int = 0
    read: int = 0


def _line_end(buf: bytes, at: int, end: int) -> int:
    """The offset just after the line that contains ``buf[at]`` (``end`` at the latest)."""
    if at >= end:
        return end
    newline = buf.find(b"\n", at, end)
    return end if newline < 0 else newline + 1


def _line_start(buf: bytes, at: int, begin: int, end: int) -> int:
    """The start of the first line at or after ``buf[at]`` (within ``begin``..``end``)."""
    return begin if at <= begin else _line_end(buf, at - 1, end)


_SAMPLED_MARKERS = frozenset({"progress", "init", "memory", "world_size", "version", "source_dmesg",
                               "source_nvidia_smi"})


def _context_only(rule: Rule, settings: Settings) -> bool:
    """May lines hit only by rules like this one be sampled (context, not evidence of a fault)?"""
    if rule.kind == "marker":
        return rule.marker in _SAMPLED_MARKERS
    cfg = settings.derive
    return (rule.kind == "log" and rule.severity == "info" and rule.symptom in cfg["derived_only"]
            and rule.symptom not in cfg["overflow_symptoms"] and rule.symptom not in cfg["oom_symptoms"])


def _repeatable(rule: Rule, anchored: bool, settings: Settings, allow_rank: bool = False) -> bool:
    """May a line of this rule be counted without re-reading it once the rule was confirmed often?

    Not for anchored rules (Hyperscan's view is wider), markers, rules whose captures attribute the
    line (rank, node; ``allow_rank`` admits the rank) and lines whose numbers the derivation reads
    (overflow, OOM).
    """
    cfg = settings.derive
    attributes = {"node", "local_rank"} if allow_rank else {"rank", "node", "local_rank"}
    return (rule.kind == "log" and not anchored and not (attributes & set(rule.fields))
            and not any(f"(?P<{name}>" in rule.pattern for name in attributes)
            and rule.symptom not in cfg["overflow_symptoms"] and rule.symptom not in cfg["oom_symptoms"])


def _lightable(rule: Rule, read_names: set[str]) -> bool:
    """May this rule's first line on a rank become a light record? A log rule whose captures no job fact
    or numeric series reads (the caller also needs it counted-repeatable or capturing only the rank)."""
    return (rule.kind == "log" and bool(rule.symptom) and not (read_names & set(rule.fields))
            and not any(f"(?P<{name}>" in rule.pattern for name in read_names))


def _sniff(head: bytes) -> str | None:
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    return None


def _open_log(path: Path) -> tuple[BinaryIO | None, str | None]:
    """Open a log file as a byte stream; gzip is read transparently. Returns (stream, warning)."""
    try:
        fh: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except IsADirectoryError:
        raise DsdoctorError(f"{path} is a directory, not a log file: pass the files inside it") from None
    except FileNotFoundError:
        raise DsdoctorError(f"log file not found: {path}") from None
    except OSError as exc:
        raise DsdoctorError(f"cannot read log file {path}: {exc.strerror or exc}") from None
    head = fh.read(16)
    fh.seek(0)
    if head.startswith(_GZIP):
        return gzip.GzipFile(fileobj=fh, mode="rb"), None  # type: ignore[return-value]
    what = _sniff(head)
    if what is not None:
        fh.close()
        return None, f"{path}: skipped, it is {what}, not a text log"
    return fh, None


_CONTROL = bytes([*range(0, 9), *range(14, 27), *range(28, 32), 127])  # not tab, newlines, form feed, ESC


def _binary_warning(name: str, sample: bytes) -> str | None:
    """A warning when a sample looks like binary data (many control bytes) rather than text."""
    if not sample:
        return None
    sample = sample[:BINARY_SNIFF_BYTES]  # enough to tell text from binary (all 64 KiB: ~10 % of a 100 KB log)
    control = len(sample) - len(sample.translate(None, _CONTROL))
    if control > len(sample) // 20 or sample.count(b"\x00") > len(sample) // 1000:
        return f"{name}: looks like binary data ({control} control bytes in the first {len(sample)}); scanned as text anyway"
    return None


class _Extractor:
    def __init__(self, rules: RuleSet, settings: Settings, progress: ProgressCallback | None):
        self.rules = rules
        self.settings = settings
        self.collector = Collector(settings.derive)
        self.reader = _Reader(rules, self.collector, settings, progress)
        self.warnings: list[str] = []

    def pasted_source(self, name: str, text: str, reliability: float) -> None:
        """Read prose (a description, a chat message) with the log rules too: a machine line pasted
        into it (an Xid line, an NCCL WARN, a CUDA OOM with its figures) is read with its fields,
        ranks and numbers. Such a source never counts as supplied logs (nothing is absent from it)."""
        data = text.encode("utf-8", "surrogatepass")
        src = self.collector.begin_source(name, SourceHint(name=name, kind="description"))
        self.collector.rereads[src.index] = _in_bytes(data)
        src.reliability = reliability
        self.reader.read(src, io.BytesIO(data), len(data))

    def text_source(self, name: str, text: Any) -> None:
        if isinstance(text, str):
            data = text.encode("utf-8", "surrogatepass")
        elif isinstance(text, (bytes, bytearray)):
            data = bytes(text)
        else:
            self.warnings.append(f"log {name!r}: 'text' must be text, got {type(text).__name__}; skipped")
            return
        warning = _binary_warning(name, data[:65536])
        if warning:
            self.warnings.append(warning)
        src = self.collector.begin_source(name, source_hint(name))
        self.collector.rereads[src.index] = _in_bytes(data)
        self.reader.read(src, io.BytesIO(data), len(data))

    def file_source(self, name: str, path: Path) -> None:
        stream, warning = _open_log(Path(path))
        if stream is None:
            self.warnings.append(warning or f"{path}: skipped")
            return
        with stream:
            try:
                sample = stream.read(65536)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                self.warnings.append(f"{path}: cannot be read as a log ({exc}); skipped")
                return
            warning = _binary_warning(str(path), sample)
            if warning:
                self.warnings.append(warning)
            src = self.collector.begin_source(name, source_hint(name))
            self.collector.rereads[src.index] = _in_file(Path(path), isinstance(stream, gzip.GzipFile))
            size = None if isinstance(stream, gzip.GzipFile) else _file_size(path)
            try:
                self.reader.read(src, _Prepend(sample, stream), size)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                self.warnings.append(f"{path}: reading stopped early ({exc}); the part read was used")


def _in_bytes(data: bytes) -> Callable[[int, int], bytes]:
    """Read a line of a text source again (a light record shown after all, rules/compact.py)."""
    return lambda at, size: data[at:at + size]


def _in_file(path: Path, gzipped: bool) -> Callable[[int, int], bytes]:
    """Read a line of a log file again; ``b""`` when it can no longer be read."""
    def reread(at: int, size: int) -> bytes:
        try:
            with open(path, "rb") as fh:
                stream: BinaryIO = gzip.GzipFile(fileobj=fh, mode="rb") if gzipped else fh  # type: ignore[assignment]
                stream.seek(at)
                return stream.read(size)
        except (OSError, EOFError, gzip.BadGzipFile):
            return b""
    return reread


def _stated_texts(evidence: dict[str, Any]) -> list[str]:
    """The texts where a report states its setup: description, pasted logs (a launch command), and the
    environment's free-form values (``model: llama-2-70b``)."""
    texts = [evidence["description"]] if isinstance(evidence.get("description"), str) else []
    logs = evidence.get("logs") if isinstance(evidence.get("logs"), list) else []
    texts += [e["text"] for e in logs if isinstance(e, dict) and isinstance(e.get("text"), str)]
    env = evidence.get("environment")
    if isinstance(env, dict):
        texts += [f"{k}: {v}" for k, v in env.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    return texts


def _covers_failure(src: SourceState, settings: Settings) -> bool:
    """Whether a log source plausibly shows the failure, so that what its rules did not hit is absent:
    an error-level hit, a traceback, or a run's worth of training output (progress or init lines,
    and enough of them). A command line, a few INFO lines or a benchmark printout are not."""
    if src.error_hits or src.tracebacks:
        return True
    ran = src.progress > 0 or src.init_seen or src.train_started
    return ran and src.lines >= settings.derive["supplied"]["logs_min_lines"]


def _file_size(path: Path) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None


class _Prepend(io.RawIOBase):
    """A byte stream that yields ``head`` first, then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self.head = head
        self.stream = stream

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0 or size >= len(self.head):
                out, self.head = self.head, b""
                more = self.stream.read(-1 if size < 0 else size - len(out))
                return out + more
            out, self.head = self.head[:size], self.head[size:]
            return out
        return self.stream.read(size)


def extract(evidence: dict[str, Any] | None, *, log_files: Sequence[tuple[str, Path]] = (),
            progress: ProgressCallback | None = None, rules: RuleSet | None = None,
            settings: Settings | None = None) -> Extraction:
    """Extract observed symptoms, first error, scope, phase and context from evidence and log files.

    ``log_files`` are ``(source name, path)`` pairs read in bounded memory (gzip is decompressed
    on the fly). ``progress`` is called with the number of bytes just processed.
    """
    evidence = evidence if isinstance(evidence, dict) else {}
    rules = rules or default_rules()
    settings = settings or load_settings()
    ex = _Extractor(rules, settings, progress)
    logs = evidence.get("logs") or []
    if not isinstance(logs, list):
        ex.warnings.append("'logs' must be a list of {source, text}; ignored")
        logs = []
    for index, entry in enumerate(logs):
        if not isinstance(entry, dict) or "text" not in entry:
            ex.warnings.append(f"logs[{index}] must be an object with 'source' and 'text'; skipped")
            continue
        ex.text_source(str(entry.get("source") or f"log{index + 1}"), entry["text"])
    for name, path in log_files:
        ex.file_source(str(name), Path(path))
    description = evidence.get("description")
    if isinstance(description, str) and description.strip():
        ex.pasted_source("description", description[:phrases.MAX_DESCRIPTION_CHARS],
                         settings.derive["phrases"]["pasted_reliability"])

    extraction = Extraction(warnings=ex.warnings)
    collector = ex.collector
    logs_read = [s for s in collector.sources if s.hint.kind != "description"]  # the prose is no log
    extraction.bytes_processed = sum(s.bytes for s in logs_read)
    extraction.lines_processed = sum(s.lines for s in logs_read)
    for src in collector.sources:
        if src.bytes == 0 or src.hint.kind == "description":
            continue
        if src.hint.kind != "logs":
            extraction.supplied_sources.add(src.hint.kind)
        extraction.supplied_sources |= src.kinds
        if src.hint.kind == "logs" and (src.other_lines or not src.kinds) and _covers_failure(src, settings):
            extraction.supplied_sources.add("logs")

    if accelerate_config.is_accelerate(evidence.get("config")):
        ds_config, stated = accelerate_config.translate(evidence["config"])
        env = evidence.get("environment") if isinstance(evidence.get("environment"), dict) else {}
        evidence = {**evidence, "config": ds_config, "environment": {**stated, **env}}
        if ds_config is None:
            extraction.supplied_sources.add("config")
    environment = env_normalize.normalize(evidence.get("environment"), settings)
    if environment is not evidence.get("environment"):
        evidence = {**evidence, "environment": environment}
    config_checks.check(evidence.get("config"), environment, collector, settings, extraction)
    env_checks.check(environment, collector, settings, extraction)
    stated = _stated_texts(evidence)
    model_states.check(stated, collector, extraction)
    launch_env.check(evidence, collector, extraction)
    metrics.read_metrics(evidence.get("metrics"), collector, settings, extraction)
    phrases.read_description(evidence.get("description"), rules, collector, settings, extraction)
    unnamed.check(evidence.get("description"), stated, collector, extraction)
    derive.finish(collector, evidence, settings, extraction)
    return extraction


def warm_up(rules: RuleSet | None = None, settings: Settings | None = None) -> None:
    """Compile (or load from the disk cache) every database extraction may need, e.g. at server start."""
    rules = rules or default_rules()
    settings = settings or load_settings()
    reader = _Reader(rules, Collector(settings.derive), settings, None)
    _ = reader.lean
    _ = reader.progress_lean
    phrase_rules = rules.phrase_rules
    cached_matcher(cached_fingerprint(rules, phrase_rules), phrase_rules, utf8=True)


def extract_text(text: str | bytes, source: str = "stdout", **kwargs: Any) -> Extraction:
    """Extract from one text (convenience for tests and the CLI)."""
    return extract({"logs": [{"source": source, "text": text}]}, **kwargs)
