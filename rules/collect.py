"""Accumulate what matched lines say: symptoms, per-rank first events, streams, numbers.

The extractor calls :meth:`Collector.on_line` for every line a rule confirmed on. Everything
kept is bounded: a sample of lines per symptom, the first event per (symptom, rank) (past a
symptom's first ranks a small record, rules/compact.py), small
per-stream state (last timestamp, progress, phase markers, the frames of an open traceback)
and bounded numeric summaries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import re2

from dsdoctor.rules.compact import (
    Earliest,
    Light,
    LightKind,
    LightTable,
    Reread,
    from_micros,
    time_class,
    time_key,
    to_micros,
)
from dsdoctor.rules.context import LineContext, SourceHint, parse_prefix
from dsdoctor.rules.jobfacts import JobFacts, read_command, read_frame
from dsdoctor.rules.matcher import RuleMatch, re2_options
from dsdoctor.rules.model import LineRef, ObservedSymptom
from dsdoctor.rules.numeric import NumericFacts
from dsdoctor.rules.ruleset import Rule
from dsdoctor.rules.units import convert, parse_float, parse_int, parse_size

Participant = tuple[Any, ...]


@dataclass
class SourceState:
    """One log source being read."""

    index: int
    name: str
    hint: SourceHint
    kinds: set[str] = field(default_factory=set)  # logs / dmesg / nvidia-smi seen in its content
    lines: int = 0
    bytes: int = 0
    reliability: float = 1.0  # of the symptoms its lines assert (below 1 for machine lines pasted into prose)
    other_lines: int = 0  # hit lines that are neither kernel nor nvidia-smi output
    error_hits: int = 0  # lines an error-level rule hit
    tracebacks: int = 0  # Python tracebacks opened in it
    progress: int = 0  # progress lines in this source (read in full)
    max_stream_progress: int = 0  # the most progress lines any one participant printed in it
    max_step: int | None = None
    last_overflow_line: int = 0  # line number of its last fp16 overflow line (0: none)
    last_marker: str | None = None  # the last phase marker any participant printed
    init_seen: bool = False
    train_started: bool = False
    first_progress_time: datetime | None = None
    last_progress_time: datetime | None = None
    years: dict[int, int] = field(default_factory=dict)  # year -> lines of this source stamped with it
    nodes: set[str] = field(default_factory=set)  # node names its lines print (one: the source is that node)
    # rank -> the last time of a rank seen only in light lines (no Stream): to_micros, -1 - it when year-less
    light_times: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Stream:
    """What one (source, participant) printed so far: enough context to place an error."""

    last_time: datetime | None = None
    last_time_year_known: bool = True
    progress: int = 0  # progress lines seen
    max_step: int | None = None
    last_marker: str | None = None  # last phase marker: checkpoint_start/_end, eval_start/_end, exit, train_start
    init_seen: bool = False
    train_started: bool = False
    # (lineno, func, file), at most max_frames; a shared empty tuple until a frame comes (most streams never have one)
    frames: list[tuple[int, str, str]] | tuple[()] = ()
    traceback_at: int | None = None  # line of the open "Traceback (most recent call last):"


@dataclass(slots=True)
class Event:
    """The first line of one symptom on one participant, with the context needed to place it."""

    symptom: str
    rule: str
    severity: str
    secondary: bool
    rank: int | None
    node: str | None
    local_rank: int | None
    participant: Participant
    time: datetime | None  # the line's own timestamp, or None: a line never shows another line's time
    year_known: bool
    order: int
    source: str
    source_index: int
    lineno: int
    text: str
    fields: dict[str, Any]
    steps_before: int = 0  # progress seen in the stream before this line
    max_step: int | None = None
    last_marker: str | None = None
    init_seen: bool = False
    train_started: bool = False
    frames: tuple[tuple[str, str], ...] = ()  # (func, file), outermost first
    line_fields: dict[str, Any] = field(default_factory=dict)  # every field captured on the line (markers too)
    source_progress: int = 0  # the most progress lines one participant of the source printed before this line
    source_max_step: int | None = None
    source_marker: str | None = None  # the last phase marker of any participant of the source
    count: int = 1  # its lines read in full (a line only counted adds to the observed symptom's count)
    near_time: datetime | None = None  # own time, else the nearest earlier one: for ordering only
    near_year_known: bool = True
    whole: str = ""  # the whole line (up to first_error_chars), for showing it as the first error
    year_from: str | None = None  # set when the year of a year-less stamp was taken from other lines


@dataclass(slots=True)
class Overflow:
    rank: int | None
    order: int
    step_hint: int  # progress lines seen in the stream when it happened
    attempted: float | None
    new: float | None


class Collector:
    """Receives confirmed matches line by line; holds the bounded state the derivation reads."""

    def __init__(self, settings: dict[str, Any]):
        limits = settings["limits"]
        self.sample_lines: int = limits["sample_lines"]
        self.sample_lines_per_rank: int = limits["sample_lines_per_rank"]
        self.line_chars: int = limits["line_chars"]
        self.whole_chars: int = limits["first_error_chars"]
        self.max_gap = settings["traceback"]["max_gap_lines"]
        self.max_frames = settings["traceback"]["max_frames"]
        self.derived_only = set(settings["derived_only"])
        self.oom_symptoms = set(settings["oom_symptoms"])
        self.overflow_symptoms = set(settings["overflow_symptoms"])
        fields = settings["fields"]
        self.step_fields: list[str] = list(fields["step"])
        self.world_size_fields: list[str] = list(fields["world_size"])
        self.nodes_fields: list[str] = list(fields["nodes"])
        self.overflow_attempted: list[str] = list(fields["overflow_attempted"])
        self.overflow_new: list[str] = list(fields["overflow_new"])
        self.series_fields: dict[str, dict[str, Any]] = dict(fields["series"])
        # captured names that feed the job facts / the numeric series (a line without any skips both)
        self._fact_names = frozenset(self.world_size_fields) | frozenset(self.nodes_fields)
        self._series_names = frozenset(self.series_fields)
        self._series = [(name, target["series"], float(target.get("scale", 1.0)))
                        for name, target in self.series_fields.items()]
        own = settings["error_lines"]
        self.error_line_facts = frozenset(own["ignored_facts"])
        self.error_line_markers = frozenset(own["ignored_markers"])
        self.node_counts: set[int] = set()
        self.decided: set[str] = set()  # derived-only symptoms a derivation has ruled on
        self._process_re = re2.compile(settings["oom"]["other_process_pattern"].encode(),
                                       re2_options(caseless=False, utf8=False))
        self.symptoms: dict[str, ObservedSymptom] = {}
        self.events: dict[tuple[str, Participant], Event] = {}
        self.erred: set[Participant] = set()  # participants with an error event
        self.streams: dict[tuple[int, Participant], Stream] = {}
        self.ranks_seen: set[int] = set()
        self.nodes_seen: set[str] = set()
        self.rank_nodes: dict[int, str] = {}
        self.participants: set[Participant] = set()
        self.world_sizes: list[int] = []
        self.versions: dict[str, dict[str, str]] = {}  # name -> {node or "?": version}
        self.frameworks: set[str] = set()  # frameworks named by lines only they print (framework markers)
        self.numbers = NumericFacts()
        self.overflow_head: list[Overflow] = []  # the first overflows ...
        self.overflow_tail: deque[Overflow] = deque(maxlen=2048)  # ... and the last ones
        self.overflow_count = 0
        self.progress_epochs: dict[Participant, float] = {}
        self.derived_inputs: dict[str, list[Event]] = {}  # derived-only symptoms asserted by log rules
        self.order = 0
        self.touched: Participant | None = None  # the participant of the last line read in full
        self.ranked: dict[str, set[int]] = {}  # symptom -> ranks with an event of it (see ranks_with)
        self.earliest: dict[str, Earliest] = {}  # symptom -> its earliest events (rules/compact.py)
        self.rereads: dict[int, Reread] = {}  # source index -> how to read one of its lines again
        self.light_kinds: dict[tuple[str, int, Any], LightKind] = {}
        # symptom -> its light records (not in ``events``; derived-only symptoms keep Light objects there)
        self.light_tables: dict[str, list[LightTable]] = {}
        self._tables: dict[LightKind, LightTable] = {}
        self.rank_keys: dict[int, Participant] = {}  # one ("r", rank) tuple per rank, shared by its records
        self.sources: list[SourceState] = []
        self.years: dict[int, int] = {}  # year -> lines with a full date (for year-less timestamps)
        self.job = JobFacts()

    # ------------------------------------------------------------------ sources

    def begin_source(self, name: str, hint: SourceHint) -> SourceState:
        state = SourceState(len(self.sources), name, hint)
        self.sources.append(state)
        if hint.rank is not None:
            self.ranks_seen.add(hint.rank)
            self.participants.add(("r", hint.rank))
        if hint.node is not None:
            self.nodes_seen.add(hint.node)
        return state

    # ------------------------------------------------------------------ lines

    def on_line(self, src: SourceState, line: bytes, lineno: int, ctx: LineContext,
                matches: list[RuleMatch], lookback: Callable[[], tuple[datetime | None, bool]]) -> None:
        """Record one hit line (``line`` without newline) and the rules confirmed on it."""
        self.order += 1
        order = self.order
        groups: dict[str, Any] = {}
        symptom_matches: list[RuleMatch] = []
        source_marker = overflow = has_marker = False
        overflow_symptoms = self.overflow_symptoms
        for m in matches:
            rule = m.rule
            if m.groups:
                kinds = rule.fields
                for name, raw in m.groups.items():
                    if name not in groups:  # the first rule to capture a field wins
                        groups[name] = convert(raw, kinds.get(name, "str"))
            marker = rule.marker
            if rule.kind == "marker":
                has_marker = True
            else:
                symptom_matches.append(m)
            if marker == "source_dmesg" or marker == "source_nvidia_smi":
                source_marker = True
            if marker == "overflow" or rule.symptom in overflow_symptoms:
                overflow = True
        rank = parse_int(groups["rank"]) if "rank" in groups else None
        if rank is None:
            rank = ctx.rank if ctx.rank is not None else src.hint.rank
        node = ctx.node or (groups.get("node") if isinstance(groups.get("node"), str) else None) or src.hint.node
        local_rank = ctx.local_rank
        if node is not None and not ctx.kernel and len(src.nodes) < 64:
            src.nodes.add(node)
        if ctx.kernel:
            src.kinds.add("dmesg")
        elif not source_marker:
            src.other_lines += 1
        participant = self._participant(src, rank, node, local_rank)
        self.touched = participant  # the reader forgets what it knew of this participant's stream
        stream = self.streams.get((src.index, participant))
        if stream is None:
            stream = self.streams[(src.index, participant)] = Stream()
            if participant[0] == "r" and participant[1] in src.light_times:  # its light lines' last time
                stream.last_time, stream.last_time_year_known = _last_time(src.light_times.pop(participant[1]))
        time, year_known = ctx.time, ctx.year_known
        near, near_year_known = time, year_known
        if time is not None:
            stream.last_time, stream.last_time_year_known = time, year_known
            if year_known:
                self.years[time.year] = self.years.get(time.year, 0) + 1
                src.years[time.year] = src.years.get(time.year, 0) + 1

        if symptom_matches and time is None:  # an estimate to order the line by, never shown as its time
            near, near_year_known = lookback()
            if near is None and stream.last_time is not None:
                near, near_year_known = stream.last_time, stream.last_time_year_known

        frames: tuple[tuple[str, str], ...] = ()
        error_line = bool(symptom_matches) and any(m.rule.severity == "error" for m in symptom_matches)
        if error_line:
            src.error_hits += 1
            frames = self._traceback_frames(stream, lineno)

        step = self._first(groups, self.step_fields)
        if step is not None:
            groups.setdefault("step", step)
        if has_marker:
            progress_done = False
            for m in matches:
                if m.rule.kind != "marker":
                    continue
                if error_line and m.rule.marker in self.error_line_markers:
                    continue  # the failing line's own words ("... during init") place nothing in time
                if m.rule.marker == "progress":
                    if progress_done:
                        continue  # several progress markers on one line are one step
                    progress_done = True
                self._marker(m, src, stream, participant, node, lineno, groups)
        if overflow:
            self._overflow(groups, rank, order, stream, src)
            src.last_overflow_line = lineno
        if groups:
            # a failing message's own arithmetic (a world size inside a failed assertion) is no job fact
            if not self._fact_names.isdisjoint(groups):
                self._facts(groups, self.error_line_facts if error_line else frozenset())
            if not self._series_names.isdisjoint(groups):
                self._numbers(groups, rank, order)

        text = None
        for m in symptom_matches:
            if text is None:
                text = self._text(line, m)
            if m.rule.symptom in self.oom_symptoms and "other_processes" not in groups:
                groups["other_processes"] = self._other_processes(line)
            self._symptom(m, src, participant, rank, node, local_rank, (time, year_known, near, near_year_known),
                          order, lineno, line, text, groups, stream, frames, ctx.pid)

    def repeat(self, src: SourceState, ctx: LineContext, rules: list[Rule]) -> bool:
        """Count a line of already-seen rules from an already-seen participant without reading it.

        Returns False (nothing recorded) when the line may be new: a participant this symptom was not
        seen on yet. The caller then reads the line in full.
        """
        key = self._key(src, ctx.rank if ctx.rank is not None else src.hint.rank, ctx.node or src.hint.node,
                        ctx.local_rank)
        if not self.repeat_of(src, key, rules):
            return False
        if ctx.time is not None and ctx.year_known:
            self.years[ctx.time.year] = self.years.get(ctx.time.year, 0) + 1
            src.years[ctx.time.year] = src.years.get(ctx.time.year, 0) + 1
        return True

    def repeat_of(self, src: SourceState, key: Participant, rules: list[Rule]) -> bool:
        """:meth:`repeat` for a participant already known (the line carries no dated timestamp)."""
        for rule in rules:
            if not self.has_event(rule.symptom or "", key):
                return False
        self.count_repeats(src, rules, 1)
        return True

    def has_event(self, sid: str, key: Participant) -> bool:
        """Has ``key`` an event of ``sid``, full or light? (A rank's: ``ranks_with`` holds both kinds.)"""
        if key[0] == "r":
            ranks = self.ranked.get(sid)
            return ranks is not None and key[1] in ranks
        return (sid, key) in self.events

    def tables(self, sid: str | None = None) -> list[LightTable]:
        """The light tables of one symptom, or of all."""
        if sid is not None:
            return self.light_tables.get(sid, [])
        return [t for tables in self.light_tables.values() for t in tables]

    def participant_of(self, rank: int) -> Participant:
        found = self.rank_keys.get(rank)
        return found if found is not None else ("r", rank)

    def all_events(self) -> list[tuple[tuple[str, Participant], Event | Light]]:
        """Every event, light records made objects (for tests and small logs: one object per record)."""
        out: list[tuple[tuple[str, Participant], Event | Light]] = list(self.events.items())
        for sid, tables in self.light_tables.items():
            for table in tables:
                out += [((sid, light.participant), light) for light in table.records(self.participant_of)]
        return out

    def count_repeats(self, src: SourceState, rules: list[Rule], lines: int) -> None:
        """Count ``lines`` lines of ``rules`` whose participant has an event of each rule's symptom (a
        repeat adds to the observed symptom's count only; nothing else of it is kept)."""
        symptoms = self.symptoms
        for rule in rules:
            obs = symptoms.get(rule.symptom or "")
            if obs is not None:
                obs.count += lines
        src.other_lines += lines

    def light(self, src: SourceState, rank: int, ctx: LineContext, rules: list[Rule], lineno: int, at: int,
              size: int, spec: Any, lookback: Callable[[], tuple[datetime | None, bool]]) -> bool:
        """Record a line of ``rules`` (log rules without captures the collector reads, confirmed often) from
        rank ``rank`` as light records where its symptoms have no event on the rank yet (rules/compact.py).

        Returns False, recording nothing, when the line may be shown or may change anything a full read
        keeps beyond counts: the caller then reads it in full.
        """
        key: Participant = ("r", rank)
        stream = self.streams.get((src.index, key))
        time, year_known = ctx.time, ctx.year_known
        if time is None:
            near, near_year_known = lookback()
            if near is None:
                if stream is not None and stream.last_time is not None:
                    near, near_year_known = stream.last_time, stream.last_time_year_known
                elif stream is None and rank in src.light_times:
                    near, near_year_known = _last_time(src.light_times[rank])
        else:
            near, near_year_known = time, year_known
        order = self.order + 1
        tkey = time_key(near, rank, order)
        klass = time_class(near, near_year_known, src.index)
        has_time = time is not None
        error_line = False
        created: set[str] = set()
        events, symptoms = self.events, self.symptoms
        for rule in rules:
            sid = rule.symptom or ""
            if rule.severity == "error":
                error_line = True
            if sid in created:
                continue
            obs = symptoms.get(sid)
            if self.has_event(sid, key):
                if obs is not None and len(obs.lines) < self.sample_lines and rank not in obs.ranks:
                    return False  # a full read would keep this line
                continue
            state = self.earliest.get(sid)
            if state is None or not state.admits(tkey, klass, has_time):
                return False
            if sid not in self.derived_only and (obs is None or len(obs.lines) < self.sample_lines_per_rank):
                return False
            created.add(sid)
        if not created or (error_line and stream is not None and self._traceback_frames(stream, lineno)):
            return False
        self.order = order
        participant = self._participant(src, rank, None, None)
        rank = participant[1]  # the rank's one int object, shared by its records and sets
        self.touched = participant
        src.other_lines += 1
        if time is not None:
            if stream is None:  # a rank seen only in light lines has no stream: its last time is a number
                src.light_times[rank] = to_micros(time) if year_known else -1 - to_micros(time)
            else:
                stream.last_time, stream.last_time_year_known = time, year_known
            if year_known:
                self.years[time.year] = self.years.get(time.year, 0) + 1
                src.years[time.year] = src.years.get(time.year, 0) + 1
        if error_line:
            src.error_hits += 1
        for rule in rules:
            sid = rule.symptom or ""
            obs = symptoms.get(sid)
            if sid not in created:  # its symptom has an event on the rank already
                event = events.get((sid, participant))
                if event is not None:
                    event.count += 1
                if obs is not None:
                    obs.count += 1
                    obs.rules.add(rule.id)
                continue
            created.discard(sid)
            kinds = self.light_kinds
            kind = kinds.get((rule.id, src.index, spec))
            if kind is None:
                kind = kinds[(rule.id, src.index, spec)] = LightKind(sid, rule.id, rule.severity, rule.secondary,
                                                                     src.name, src.index, spec)
            self.ranks_with(sid).add(rank)
            self.earliest[sid].note(tkey, klass, has_time, False)
            if rule.severity == "error":
                self.erred.add(participant)
            if sid in self.derived_only:
                inputs = self.derived_inputs.setdefault(sid, [])
                if len(inputs) < 4096:  # derived_inputs holds objects: such a record stays one (at most 4096)
                    event = Light(kind, rank, participant, time, year_known, near, near_year_known, order, lineno,
                                  at, size)
                    events[(sid, participant)] = event  # type: ignore[assignment]
                    inputs.append(event)  # type: ignore[arg-type]
                    continue
            table = self._tables.get(kind)
            if table is None:
                table = self._tables[kind] = LightTable(kind, klass == "known")
                self.light_tables.setdefault(sid, []).append(table)
            table.add(rank, time, near, order, lineno, at, size)
            if sid in self.derived_only:
                continue
            assert obs is not None
            obs.secondary = obs.secondary and rule.secondary
            obs.reliability = max(obs.reliability, src.reliability)
            obs.count += 1
            obs.rules.add(rule.id)
            obs.ranks.add(rank)
        return True

    def line_of(self, event: Event | Light) -> tuple[str, dict[str, Any]]:
        """The text and fields of an event's line; a light record's line is read again from its source."""
        if not isinstance(event, Light):
            return event.text, event.fields
        reread = self.rereads.get(event.source_index)
        line = reread(event.at, event.size) if reread is not None else b""
        if line.endswith(b"\r"):
            line = line[:-1]
        matcher, indexes = event.spec
        ctx = parse_prefix(line)
        text: str | None = None
        fields: dict[str, Any] = {}
        for index in indexes:
            m = matcher.confirm(index, line, ctx.message_start)
            if m is None or m.rule.kind == "marker":
                continue
            if text is None:
                text = self._text(line, m)
            if m.rule.id == event.rule:
                fields = {k: convert(v, m.rule.fields.get(k, "str")) for k, v in m.groups.items()}
        if text is None:  # the source changed since it was read: say where the line was
            text = f"(line {event.lineno} of {event.source} could not be read again)"
        return text, fields

    def ranks_with(self, symptom: str) -> set[int]:
        """The ranks that have an event of ``symptom`` (the very set, kept up to date while lines are read)."""
        return self.ranked.setdefault(symptom, set())

    def skip_traceback(self, src: SourceState, ctx: LineContext) -> bool:
        """Count a traceback header or frame line without reading it when its participant already has an
        error event (frames are only kept on the first event of a symptom, and a rank's first error has
        them). The stream forgets its open traceback, so a later new symptom gets no frames, never wrong ones.
        """
        return self.skip_traceback_of(src, self._key(src, ctx.rank if ctx.rank is not None else src.hint.rank,
                                                     ctx.node or src.hint.node, ctx.local_rank))

    def skip_traceback_of(self, src: SourceState, key: Participant) -> bool:
        """:meth:`skip_traceback` for a participant already known."""
        if key not in self.erred:
            return False
        stream = self.streams.get((src.index, key))
        if stream is not None and stream.traceback_at is not None:
            stream.traceback_at = None
            stream.frames = ()
        src.other_lines += 1
        return True

    @staticmethod
    def _key(src: SourceState, rank: int | None, node: str | None, local_rank: int | None) -> Participant:
        if rank is not None:
            return ("r", rank)
        if node is not None or local_rank is not None:
            return ("n", node if node is not None else f"source:{src.name}", local_rank)
        return ("s", src.index)

    def _participant(self, src: SourceState, rank: int | None, node: str | None,
                     local_rank: int | None) -> Participant:
        if rank is not None:
            self.ranks_seen.add(rank)
            if node is not None:
                self.rank_nodes.setdefault(rank, node)
        if node is not None:
            self.nodes_seen.add(node)
        if rank is not None:
            found = self.rank_keys.get(rank)
            if found is None:
                found = self.rank_keys[rank] = ("r", rank)
            key: Participant = found
        elif node is not None or local_rank is not None:
            key = ("n", node if node is not None else f"source:{src.name}", local_rank)
        else:
            key = ("s", src.index)
        if key[0] != "s":
            self.participants.add(key)
        return key

    def _text(self, line: bytes, m: RuleMatch) -> str:
        limit = self.line_chars
        if len(line) <= limit * 2:
            raw = line
        else:  # a window around the match
            start = max(0, m.start - limit // 4)
            raw = line[start:start + limit * 2]
        text = raw.decode("utf-8", "replace").rstrip("\r") if isinstance(raw, bytes) else raw
        return text if len(text) <= limit else text[:limit] + "…"

    # ------------------------------------------------------------------ markers

    def _marker(self, m: RuleMatch, src: SourceState, stream: Stream, participant: Participant,
                node: str | None, lineno: int, groups: dict[str, Any]) -> None:
        kind = m.rule.marker
        if kind == "progress":
            stream.progress += 1
            src.progress += 1
            src.train_started = True
            src.max_stream_progress = max(src.max_stream_progress, stream.progress)
            stream.train_started = True
            step = parse_int(groups.get("step"))
            if step is not None:
                stream.max_step = step if stream.max_step is None else max(stream.max_step, step)
                src.max_step = step if src.max_step is None else max(src.max_step, step)
            if stream.last_time is not None:
                src.first_progress_time = src.first_progress_time or stream.last_time
                src.last_progress_time = stream.last_time
            epoch = parse_float(groups.get("epoch"))
            if epoch is not None:
                self.progress_epochs.setdefault(participant, epoch)
        elif kind == "init":
            stream.init_seen = src.init_seen = True
        elif kind in ("train_start", "checkpoint_start", "checkpoint_end", "eval_start", "eval_end", "exit"):
            stream.last_marker = kind
            src.last_marker = kind
            if kind == "train_start":
                stream.train_started = src.train_started = True
        elif kind == "traceback":
            src.tracebacks += 1
            stream.traceback_at = lineno
            stream.frames = ()
        elif kind == "frame":
            if stream.traceback_at is None:  # frames without a header (rich tracebacks, cut logs)
                stream.traceback_at = lineno
            elif stream.frames and lineno - stream.frames[-1][0] > self.max_gap:
                stream.frames = ()
                stream.traceback_at = lineno
            if len(stream.frames) < self.max_frames:
                stream.frames = [*stream.frames, (lineno, str(groups.get("func", "")), str(groups.get("file", "")))]
            read_frame(str(groups.get("file", "")), str(groups.get("func", "")), self.job)
        elif kind == "launch_command":
            read_command(str(groups.get("command") or groups.get("spawned") or ""), self.job)
        elif kind == "version":
            for name, value in groups.items():
                if name.endswith("_version") and isinstance(value, str):
                    per_node = self.versions.setdefault(name.removesuffix("_version"), {})
                    if len(per_node) < 4096:
                        per_node.setdefault(node or f"source:{src.name}", value)
        elif kind == "framework":
            self.frameworks.update(name for name, value in groups.items() if value)
        elif kind == "source_dmesg":
            src.kinds.add("dmesg")
        elif kind == "source_nvidia_smi":
            src.kinds.add("nvidia-smi")

    @staticmethod
    def _first(groups: dict[str, Any], names: list[str]) -> int | None:
        for name in names:
            if name in groups:
                value = parse_int(groups[name])
                if value is not None:
                    return value
        return None

    def _overflow(self, groups: dict[str, Any], rank: int | None, order: int, stream: Stream, src: SourceState) -> None:
        """One fp16 overflow (skipped step) with the attempted and the new loss scale when printed.

        Its position in training is the step number printed so far (any participant of the source), or
        else the progress lines its own stream printed.
        """
        self.overflow_count += 1
        numbered = [s for s in (stream.max_step, src.max_step) if s is not None]
        step_hint = max(numbered) if numbered else stream.progress
        attempted = next((parse_float(groups[n]) for n in self.overflow_attempted if n in groups), None)
        new = next((parse_float(groups[n]) for n in self.overflow_new if n in groups), None)
        event = Overflow(rank, order, step_hint, attempted, new)
        if len(self.overflow_head) < 2048:
            self.overflow_head.append(event)
        else:
            self.overflow_tail.append(event)

    def _facts(self, groups: dict[str, Any], ignored: frozenset[str]) -> None:
        """Job-wide facts printed on a line: world size, node count (not those in ``ignored``)."""
        size = None if "world_size" in ignored else self._first(groups, self.world_size_fields)
        if size is not None and 0 < size < 10_000_000 and len(self.world_sizes) < 1024:
            self.world_sizes.append(size)
        nodes = None if "nodes" in ignored else self._first(groups, self.nodes_fields)
        if nodes is not None and 0 < nodes < 1_000_000:
            self.node_counts.add(nodes)

    def _numbers(self, groups: dict[str, Any], rank: int | None, order: int) -> None:
        if not groups:
            return
        step_value = parse_int(groups.get("step"))
        step = float(step_value) if step_value is not None else None
        for name, series, scale in self._series:
            if name in groups:
                value = parse_float(groups[name])
                if value is not None:
                    self.numbers.add(series, rank, value * scale, step, order, "logs")

    def _other_processes(self, line: bytes) -> int:
        """Bytes that other processes hold on the GPU, from an OOM message's per-process list."""
        total = 0
        for m in self._process_re.finditer(line[:65536]):
            raw = {k.decode() if isinstance(k, bytes) else k: v for k, v in m.groupdict().items()}.get("size")
            size = parse_size(raw.decode("ascii", "replace")) if raw else None
            total += size or 0
        return total

    def _traceback_frames(self, stream: Stream, lineno: int) -> tuple[tuple[str, str], ...]:
        if stream.traceback_at is None or not stream.frames:
            return ()
        if lineno - stream.frames[-1][0] > self.max_gap:
            return ()
        return tuple((func, file) for _, func, file in stream.frames)

    # ------------------------------------------------------------------ symptoms

    def _symptom(self, m: RuleMatch, src: SourceState, participant: Participant, rank: int | None,
                 node: str | None, local_rank: int | None,
                 times: tuple[datetime | None, bool, datetime | None, bool], order: int, lineno: int,
                 line: bytes, text: str, groups: dict[str, Any], stream: Stream,
                 frames: tuple[tuple[str, str], ...], pid: int | None = None) -> None:
        rule = m.rule
        time, year_known, near, near_year_known = times
        sid = rule.symptom or ""
        key = (sid, participant)
        event = self.events.get(key)
        obs = self.symptoms.get(sid)
        lit = event is None and participant[0] == "r" and self.has_event(sid, participant)  # a light record
        if event is not None or lit:
            if event is not None:
                event.count += 1
            if obs is not None and (len(obs.lines) >= self.sample_lines or rank in obs.ranks):
                obs.count += 1  # a further line of a known (symptom, rank): counted, nothing new to keep
                obs.rules.add(rule.id)
                return
        fields = {k: convert(v, rule.fields.get(k, "str")) for k, v in m.groups.items()}
        if event is None and not lit:
            event = Event(
                symptom=sid, rule=rule.id, severity=rule.severity, secondary=rule.secondary,
                rank=rank, node=node, local_rank=local_rank, participant=participant,
                time=time, year_known=year_known, order=order, source=src.name, source_index=src.index,
                lineno=lineno, text=text, fields=fields,
                steps_before=stream.progress, max_step=stream.max_step, last_marker=stream.last_marker,
                init_seen=stream.init_seen or src.init_seen, train_started=stream.train_started or src.train_started,
                frames=frames,
                line_fields=dict(groups), source_progress=src.max_stream_progress, source_max_step=src.max_step,
                source_marker=src.last_marker, near_time=near, near_year_known=near_year_known,
                whole=self._whole(line, text),
            )
            self.events[key] = event
            if participant[0] == "r":
                self.ranks_with(sid).add(participant[1])
            earliest = self.earliest.get(sid)
            if earliest is None:
                earliest = self.earliest[sid] = Earliest()
            earliest.note(time_key(near, rank, order), time_class(near, near_year_known, src.index), time is not None,
                          True)
            if rule.severity == "error":
                self.erred.add(participant)
        if sid in self.derived_only:
            inputs = self.derived_inputs.setdefault(sid, [])
            if event is not None and event.count == 1 and len(inputs) < 4096:
                inputs.append(event)
            return
        new_rank = False
        if obs is None:
            obs = self.symptoms[sid] = ObservedSymptom(id=sid, first_order=order, secondary=rule.secondary,
                                                       fields=dict(fields), reliability=src.reliability)
        else:
            obs.secondary = obs.secondary and rule.secondary
            obs.reliability = max(obs.reliability, src.reliability)
        obs.count += 1
        obs.rules.add(rule.id)
        if rank is not None and rank not in obs.ranks:
            obs.ranks.add(rank)
            new_rank = True
        if node is not None:
            obs.nodes.add(node)
        last = obs.lines[-1] if obs.lines else None
        if last is not None and last.lineno == lineno and last.source == src.name:
            last.fields.update(fields)  # another rule of the same symptom on the same line
            if last.rule and rule.id not in last.rule.split(","):
                last.rule += "," + rule.id
        elif len(obs.lines) < self.sample_lines or (new_rank and len(obs.lines) < self.sample_lines_per_rank):
            obs.lines.append(LineRef(source=src.name, lineno=lineno, text=text, rank=rank, local_rank=local_rank,
                                     node=node, pid=pid, time=None, rule=rule.id, fields=fields))
            obs.lines[-1].time = _iso(time, year_known)  # the year is fixed later if it was missing

    def _whole(self, line: bytes, text: str) -> str:
        """The line kept whole for showing it as the first error; ``""`` when that is ``text`` itself (a
        short line): one copy per (symptom, rank) event instead of two."""
        whole = line[:self.whole_chars].decode("utf-8", "replace").rstrip("\r")
        return "" if whole == text else whole

    @property
    def overflows(self) -> list[Overflow]:
        """Overflow events kept (the first and the last ones of a long run), in order."""
        return [*self.overflow_head, *self.overflow_tail]

    def observe(self, sid: str, *, source: str, text: str, rule: str | None = None, reliability: float = 1.0,
                fields: dict[str, Any] | None = None, lineno: int = 0, rank: int | None = None) -> ObservedSymptom:
        """Assert a symptom found outside log lines (metrics, config, environment, description, derivation)."""
        obs = self.symptoms.get(sid)
        if obs is None:
            self.order += 1
            obs = self.symptoms[sid] = ObservedSymptom(id=sid, first_order=self.order, reliability=reliability,
                                                       fields=dict(fields or {}))
        else:
            obs.reliability = max(obs.reliability, reliability)
        obs.count += 1
        if rule:
            obs.rules.add(rule)
        if rank is not None:
            obs.ranks.add(rank)
        if len(obs.lines) < self.sample_lines:
            obs.lines.append(LineRef(source=source, lineno=lineno, text=text[: self.line_chars], rank=rank,
                                     rule=rule, fields=dict(fields or {})))
        return obs


def _last_time(number: int) -> tuple[datetime | None, bool]:
    """A light-only rank's last time and whether its year is known (see ``SourceState.light_times``)."""
    return (from_micros(number), True) if number >= 0 else (from_micros(-1 - number), False)


def _iso(time: datetime | None, year_known: bool) -> str | None:
    if time is None:
        return None
    text = time.isoformat()
    return text if year_known else "--" + text[5:]  # ISO 8601 without year: --MM-DDThh:mm:ss
