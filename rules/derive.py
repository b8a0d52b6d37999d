"""The derivation step: the three looks (first error, scope, phase) and derived numeric facts.

1. **First error**: the earliest error line by timestamp (then by order), skipping victim lines
   (rules flagged ``secondary``: a peer's watchdog timeout or closed connection after one rank
   died). Victims on other ranks after the origin become ``s.secondary_timeouts``.
2. **Scope** (rules/scope.py): which ranks and nodes show the error, origin and victims apart:
   single-rank, single-node, multi-node or global.
3. **Phase**: when the first error happened: launch, first-step, steady, checkpoint, eval or
   exit, from the traceback frames before it, the phase markers and training progress before it.

Derived numeric facts: NaN/inf on a subset of ranks vs all, from the first step; fp16 overflow
repeated vs warm-up only; loss scale falling or at its minimum; loss exactly 0; OOM figures
(fragmentation, capacity, other processes) and the traceback stage of an OOM.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import re2

from dsdoctor.rules.collect import Collector, Event
from dsdoctor.rules.compact import NO_TIME as _NO_TIME
from dsdoctor.rules.compact import Light, LightTable, TimeKey, time_key, to_micros
from dsdoctor.rules.matcher import re2_options
from dsdoctor.rules.model import Extraction, FirstError, LineRef, ObservedSymptom
from dsdoctor.rules.scope import attribute_sources, derive_scope
from dsdoctor.rules.settings import Settings
from dsdoctor.rules.units import parse_float

SCOPES = {"single-rank": "s.scope_single_rank", "single-node": "s.scope_single_node",
          "multi-node": "s.scope_multi_node", "global": "s.scope_global"}
PHASES = {"launch": "s.phase_launch", "first-step": "s.phase_first_step", "steady": "s.phase_steady",
          "checkpoint": "s.phase_checkpoint", "eval": "s.phase_eval", "exit": "s.phase_exit"}


def finish(collector: Collector, evidence: dict[str, Any], settings: Settings, extraction: Extraction) -> None:
    """Run every derivation and fill ``extraction`` from the collector."""
    cfg = settings.derive
    _resolve_years(collector)
    environment = evidence.get("environment") if isinstance(evidence.get("environment"), dict) else {}
    world = _world_size(environment, collector, extraction)
    nodes = _int(environment.get("nodes"))
    if nodes == 1:
        _local_ranks_are_ranks(collector)

    _numeric(collector, cfg, extraction, world)
    _overflow(collector, cfg, extraction, evidence)
    _oom(collector, cfg)
    attribute_sources(collector)
    job = collector.job
    extraction.context.script, extraction.context.launcher = job.script, job.launcher
    extraction.context.config_file = job.config_file
    first = _first_error(collector, extraction)
    scope = derive_scope(collector, cfg, world, nodes)
    extraction.scope = scope.value
    extraction.scope_detail = scope.as_dict(world, nodes or extraction.context.nodes)
    _emit_exclusive(collector, extraction, SCOPES, scope.value)
    phase = _phase(first, collector, cfg) if first is not None else "unknown"
    extraction.phase = phase
    _emit_exclusive(collector, extraction, PHASES, phase)
    _oom_after_many_steps(collector, cfg)
    _rule_asserted_fallback(collector, extraction)

    if extraction.context.nodes == 1:
        for sid in cfg["multi_node_only"]:
            collector.symptoms.pop(sid, None)
    extraction.ranks_seen |= collector.ranks_seen
    extraction.nodes_seen |= collector.nodes_seen
    by_symptom: dict[str, list[Event]] = defaultdict(list)
    for (s, _), e in collector.events.items():
        by_symptom[s].append(e)
    for sid, obs in collector.symptoms.items():
        _finish_symptom(obs, by_symptom.get(sid, []), collector.tables(sid), collector)
        extraction.symptoms[sid] = obs
    extraction.absent -= set(extraction.symptoms)


# ---------------------------------------------------------------------- helpers


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _time_key(event: Event | Light) -> TimeKey:
    """Earliest first (a line without its own stamp is placed by the nearest earlier one); without times,
    a line that names its rank before one that does not (a kernel line). One definition with the
    reader's (rules/compact.py), which decides by it which lines may stay light."""
    return time_key(event.near_time, event.rank, event.order)


def _iso(time: datetime | None, year_known: bool = True) -> str | None:
    if time is None:
        return None
    return time.isoformat() if year_known else "--" + time.isoformat()[5:]  # ISO 8601 without a year


def _with_year(time: datetime, year: int) -> datetime | None:
    try:
        return time.replace(year=year)
    except ValueError:  # Feb 29 in a non-leap year
        return None


def _resolve_years(collector: Collector) -> None:
    """Year-less stamps (glog, syslog): a line's shown time takes the year only from other stamps of
    its own source (and says so, ``year_from``); otherwise it stays year-unknown. Ordering across
    sources uses the year most lines of the evidence show, as an estimate."""
    by_source = {src.index: Counter(src.years).most_common(1)[0][0] for src in collector.sources if src.years}
    by_name = {src.name: by_source[src.index] for src in collector.sources if src.index in by_source}
    years = Counter(collector.years)
    years.update(e.time.year for e in collector.events.values() if e.time is not None and e.year_known)
    tables = collector.tables()
    for table in tables:
        years.update(table.years)
    overall = years.most_common(1)[0][0] if years else None
    for table in tables:
        own_year = by_source.get(table.kind.source_index)
        table.give_years(own_year, own_year or overall)
    for event in collector.events.values():
        own_year = by_source.get(event.source_index)
        if event.time is not None and not event.year_known and own_year is not None:
            dated = _with_year(event.time, own_year)
            if dated is not None:
                event.time, event.year_known, event.year_from = dated, True, event.source
        estimate = own_year or overall
        if event.near_time is not None and not event.near_year_known and estimate is not None:
            event.near_time = _with_year(event.near_time, estimate) or event.near_time
            event.near_year_known = True
    for obs in collector.symptoms.values():
        for ref in obs.lines:
            if ref.time and ref.time.startswith("--") and ref.source in by_name:
                ref.time = f"{by_name[ref.source]}-{ref.time[2:]}"


def _world_size(environment: dict[str, Any], collector: Collector, extraction: Extraction) -> int | None:
    world = _int(environment.get("world_size"))
    if world is None and collector.world_sizes:
        world = max(collector.world_sizes)
    if world is not None and world > 0:
        extraction.context.world_size = extraction.context.world_size or world
        return world
    return None


def _local_ranks_are_ranks(collector: Collector) -> None:
    """On a single-node job the local rank ([default3]:, NCCL's [3]) is the global rank."""
    for event in collector.events.values():
        if event.rank is None and event.local_rank is not None:
            event.rank = event.local_rank
            collector.ranks_seen.add(event.rank)
            obs = collector.symptoms.get(event.symptom)
            if obs is not None:
                obs.ranks.add(event.rank)
                for ref in obs.lines:
                    if ref.rank is None and ref.local_rank == event.local_rank:
                        ref.rank = event.rank
    for participant in list(collector.participants):
        if participant[0] == "n" and participant[2] is not None:
            collector.ranks_seen.add(participant[2])


def _emit_exclusive(collector: Collector, extraction: Extraction, ids: dict[str, str], value: str) -> None:
    """Assert the one symptom for ``value``; the alternatives become known-absent."""
    if value not in ids:
        return
    for key, sid in ids.items():
        if key == value:
            if sid not in collector.symptoms:
                collector.observe(sid, source="derived", text=f"{key}", rule="derive")
        else:
            extraction.absent.add(sid)


def _events(collector: Collector, sid: str) -> list[Event]:
    return [e for (s, _), e in collector.events.items() if s == sid]


_Picked = list[tuple[LightTable, array]]  # light records: (table, the indexes of the chosen ones)


def _derived(collector: Collector, sid: str, events: Iterable[Event], text: str, fields: dict[str, Any] | None = None,
             reliability: float = 1.0, lights: _Picked | None = None) -> ObservedSymptom:
    """Assert a derived symptom with the lines of the events (and light records) that support it."""
    events = list(events)
    limit = collector.sample_lines
    lights = lights or []
    shown: list[Event | Light] = [*events]
    for table, chosen in lights:  # only the earliest of a table can be shown: the others stay numbers
        nears, orders = table.nears, table.orders
        first = heapq.nsmallest(limit, chosen, key=lambda i: (nears[i], orders[i]))
        shown += [table.record(i, collector.participant_of(table.ranks[i])) for i in first]
    shown.sort(key=_time_key)
    obs = collector.symptoms.get(sid)
    if obs is None:
        obs = ObservedSymptom(id=sid, first_order=shown[0].order if shown else collector.order + 1,
                              reliability=reliability, fields=dict(fields or {}))
        collector.symptoms[sid] = obs
    obs.rules.add("derive")
    for e in events:
        obs.count += 1
        if e.rank is not None:
            obs.ranks.add(e.rank)
        if e.node is not None:
            obs.nodes.add(e.node)
    for table, chosen in lights:
        obs.count += len(chosen)
        ranks = table.ranks
        obs.ranks.update(collector.participant_of(ranks[i])[1] for i in chosen)  # the rank's one int object
        if chosen and table.node is not None:
            obs.nodes.add(table.node)
    for e in shown:
        if len(obs.lines) < limit:
            obs.lines.append(_ref(e, collector))
    if not shown:
        obs.count = max(obs.count, 1)
        if not obs.lines:
            obs.lines.append(LineRef(source="derived", lineno=0, text=text, rule="derive", fields=dict(fields or {})))
    return obs


def _ref(e: Event | Light, collector: Collector) -> LineRef:
    text, fields = collector.line_of(e)  # a light record's line is read again (rules/compact.py)
    return LineRef(source=e.source, lineno=e.lineno, text=text, rank=e.rank, local_rank=e.local_rank,
                   node=e.node, time=_iso(e.time, e.year_known), rule=e.rule, fields=dict(fields))


def _finish_symptom(obs: ObservedSymptom, events: list[Event], tables: list[LightTable],
                    collector: Collector) -> None:
    timed: list[Event | Light] = [e for e in events if e.time is not None]
    orders = [e.order for e in events]
    for table in tables:
        i = table.earliest_timed()
        if i is not None:
            timed.append(table.record(i, collector.participant_of(table.ranks[i])))
        orders.append(table.orders[0])  # records are added in order
    if timed:
        first = min(timed, key=_time_key)
        obs.first_seen = _iso(first.time, first.year_known)
    if orders:
        obs.first_order = min(orders)


# ---------------------------------------------------------------------- first error


def _failure_events(collector: Collector) -> tuple[list[Event], list[LightTable]]:
    """Error-level events and light tables; when there are none, warning-level ones (a NaN loss logged as
    a warning)."""
    for severity in ("error", "warning"):
        events = [e for e in collector.events.values() if e.severity == severity]
        tables = [t for t in collector.tables() if t.kind.severity == severity and len(t)]
        if events or tables:
            return events, tables
    return [], []


def _first_error(collector: Collector, extraction: Extraction) -> Event | None:
    errors, tables = _failure_events(collector)
    if not errors and not tables:
        return None
    primaries = [e for e in errors if not e.secondary]
    primary_tables = [t for t in tables if not t.kind.secondary]
    if primaries or primary_tables:
        errors, tables = primaries, primary_tables
    candidates = [*errors, *(t.record(i, collector.participant_of(t.ranks[i])) for t in tables
                             for i in (t.earliest(),))]
    first = min(candidates, key=_time_key)
    extraction.first_error = FirstError(rank=first.rank, node=first.node, time=_iso(first.time, first.year_known),
                                        line=first.whole or first.text,
                                        source=first.source, lineno=first.lineno, symptom=first.symptom, rule=first.rule,
                                        year_from=first.year_from)
    if primaries or primary_tables:
        collector.decided.add("s.secondary_timeouts")
        victims = [e for e in collector.events.values()
                   if e.secondary and e.participant != first.participant and _after(e, first)]
        lights = [(t, _after_in(t, first)) for t in collector.tables() if t.kind.secondary]
        lights = [(t, chosen) for t, chosen in lights if chosen]
        if victims or lights:
            ranks = {e.rank for e in victims if e.rank is not None}
            for table, chosen in lights:
                ranks.update(collector.participant_of(table.ranks[i])[1] for i in chosen)
            count = len(victims) + sum(len(chosen) for _, chosen in lights)
            _derived(collector, "s.secondary_timeouts", victims,
                     f"{count} victim line(s) on other ranks after the first error", {"victim_ranks": sorted(ranks)},
                     lights=lights)
    return first  # type: ignore[return-value]


def _after_in(table: LightTable, origin: Event) -> array:
    """The indexes of a table's records that :func:`_after` keeps (none on the origin's participant), as an
    array: at 100,000 ranks a list of them would be an int object each."""
    ranks, nears, orders = table.ranks, table.nears, table.orders
    skip = origin.rank if origin.participant[0] == "r" else None
    own = range(len(ranks))
    same_source = table.kind.source_index == origin.source_index
    if origin.near_time is not None:
        at = to_micros(origin.near_time)
        if not same_source:  # a record without a near time (NO_TIME) is after it too
            return array("q", (i for i in own if nears[i] >= at and ranks[i] != skip))
        return array("q", (i for i in own if ranks[i] != skip and (
            nears[i] >= at if nears[i] != _NO_TIME else orders[i] > origin.order)))
    if same_source:
        return array("q", (i for i in own if orders[i] > origin.order and ranks[i] != skip))
    return array("q", (i for i in own if ranks[i] != skip))


def _after(event: Event, origin: Event) -> bool:
    if event.near_time is not None and origin.near_time is not None:
        return event.near_time >= origin.near_time
    if event.source_index == origin.source_index:
        return event.order > origin.order
    return True  # different sources without timestamps: a victim line is a victim whatever the order


# ---------------------------------------------------------------------- phase


_STAGE_MATCHERS: dict[tuple[tuple[Any, Any, Any], ...], list[tuple[str, Any, Any]]] = {}


def _stage_matchers(cfg: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The compiled frame-stage patterns (compiled once per distinct setting, not per extraction)."""
    key = tuple((entry["stage"], entry.get("func"), entry.get("file")) for entry in cfg["frame_stages"])
    cached = _STAGE_MATCHERS.get(key)
    if cached is not None:
        return cached
    out = []
    options = re2_options(caseless=False, utf8=True)
    for stage, func_pattern, file_pattern in key:
        func = re2.compile(func_pattern, options) if func_pattern else None
        file = re2.compile(file_pattern, options) if file_pattern else None
        out.append((stage, func, file))
    if len(_STAGE_MATCHERS) >= 16:
        _STAGE_MATCHERS.clear()
    _STAGE_MATCHERS[key] = out
    return out


def frame_stages(frames: Iterable[tuple[str, str]], cfg: dict[str, Any]) -> list[str]:
    """The stage of each frame that has one, outermost first."""
    matchers = _stage_matchers(cfg)
    stages = []
    for func, file in frames:
        for stage, func_re, file_re in matchers:
            if func_re is not None and not func_re.search(func):
                continue
            if file_re is not None and not file_re.search(file):
                continue
            stages.append(stage)
            break
    return stages


def _steps_before(event: Event, collector: Collector) -> tuple[int, bool]:
    """How many training steps went by before the event (an estimate), and whether progress was seen.

    Printed step numbers win; otherwise the progress lines one participant printed are counted.
    """
    numbered = [s for s in (event.max_step, event.source_max_step) if s is not None]
    steps = max(numbered) if numbered else max(event.steps_before, event.source_progress)
    if steps == 0 and event.near_time is not None:  # another source (rank 0's log) may show the progress
        for src in collector.sources:
            if src.index != event.source_index and src.last_progress_time is not None \
                    and src.first_progress_time is not None and src.first_progress_time <= event.near_time:
                steps = max(steps, src.max_step if src.max_step is not None else src.max_stream_progress)
    return steps, steps > 0


def _counted_in_prose(event: Event, collector: Collector) -> bool:
    """Is the event a machine fragment pasted into a description, with no step number printed?"""
    if event.max_step is not None or event.source_max_step is not None:
        return False
    source = next((s for s in collector.sources if s.index == event.source_index), None)
    return source is not None and source.hint.kind == "description"


def _phase(first: Event, collector: Collector, cfg: dict[str, Any]) -> str:
    stages = frame_stages(first.frames, cfg)
    for stage, phase in (("checkpoint", "checkpoint"), ("eval", "eval"), ("optimizer_init", "launch"),
                         ("exit", "exit")):
        if stage in stages:
            return phase
    for phase, symptoms in cfg["symptom_phases"].items():
        if first.symptom in symptoms:
            return phase
    marker = first.last_marker or first.source_marker  # its own stream first, else the source (rank 0 busy)
    marker_phase = {"checkpoint_start": "checkpoint", "eval_start": "eval", "exit": "exit"}.get(marker or "")
    if marker_phase:
        return marker_phase
    steps, progressed = _steps_before(first, collector)
    limits = cfg["phase"]
    if _counted_in_prose(first, collector):
        return "unknown"  # "only rank 37 shows loss=nan": a fragment quoted in words says nothing of when
    if progressed:
        return "first-step" if steps <= limits["first_step_max_steps"] else "steady"
    if first.train_started or (first.init_seen and any(s in stages for s in ("forward", "backward", "optimizer_step"))):
        return "first-step"
    if first.init_seen:
        return "launch"
    return "unknown"


# ---------------------------------------------------------------------- numbers


def _numeric(collector: Collector, cfg: dict[str, Any], extraction: Extraction, world: int | None) -> None:
    numbers = collector.numbers
    limits = cfg["numerics"]
    loss = numbers.by_name("loss")
    grad = numbers.by_name("grad_norm")
    reporting = {r for r, s in [*loss.items(), *grad.items()] if s.count}
    if loss:
        collector.decided.add("s.loss_zero")
    nan_loss = {r for r, s in loss.items() if s.nonfinite}
    nan_grad = {r for r, s in grad.items() if s.nonfinite}
    nan_ranks = nan_loss | nan_grad
    summary = lambda ranks: ", ".join("?" if r is None else str(r) for r in sorted(ranks, key=lambda r: -1 if r is None else r))  # noqa: E731
    if nan_loss and "s.loss_nan" not in collector.symptoms:
        _derived(collector, "s.loss_nan", [], f"loss is NaN/inf on rank(s) {summary(nan_loss)}",
                 {"ranks": sorted(r for r in nan_loss if r is not None)})
    if nan_grad and "s.grad_norm_nan" not in collector.symptoms:
        _derived(collector, "s.grad_norm_nan", [], f"grad norm is NaN/inf on rank(s) {summary(nan_grad)}",
                 {"ranks": sorted(r for r in nan_grad if r is not None)})
    for sid, ranks in (("s.loss_nan", nan_loss), ("s.grad_norm_nan", nan_grad)):
        if sid in collector.symptoms:
            collector.symptoms[sid].ranks |= {r for r in ranks if r is not None}
    if nan_ranks:
        collector.decided.add("s.nan_from_first_step")
        known = {r for r in reporting if r is not None}
        nan_known = {r for r in nan_ranks if r is not None}
        if len(known) >= 2 and nan_known:
            collector.decided |= {"s.nan_subset_ranks", "s.nan_all_ranks"}
            whole = known == nan_known and (world is None or len(known) >= world)
            sid = "s.nan_all_ranks" if whole else "s.nan_subset_ranks"
            other = "s.nan_subset_ranks" if whole else "s.nan_all_ranks"
            if known != nan_known or whole:
                _derived(collector, sid, [], f"NaN/inf on {len(nan_known)} of {len(known)} reporting ranks "
                         f"({summary(nan_known)})", {"nan_ranks": sorted(nan_known), "reporting_ranks": len(known)})
                extraction.absent.add(other)
        first_step = []
        for name in ("loss", "grad_norm"):
            for rank, series in numbers.by_name(name).items():
                point = series.first
                if point is None or math.isfinite(point.value):
                    continue
                early = point.step is not None and point.step <= limits["first_step_max"]
                if point.step is None:
                    epoch = collector.progress_epochs.get(("r", rank)) if rank is not None else None
                    if epoch is None and len(collector.progress_epochs) == 1:
                        epoch = next(iter(collector.progress_epochs.values()))
                    early = epoch is not None and epoch <= limits["first_epoch_max"]
                if early:
                    first_step.append(rank)
        if first_step:
            _derived(collector, "s.nan_from_first_step", [], "the first reported loss/grad norm is already NaN/inf",
                     {"ranks": sorted({r for r in first_step if r is not None})})
    zero_ranks = [r for r, s in loss.items() if s.zeros >= limits["loss_zero_min"]]
    if zero_ranks and "s.loss_zero" not in collector.symptoms:
        _derived(collector, "s.loss_zero", [], f"loss is exactly 0 on rank(s) {summary(zero_ranks)}",
                 {"ranks": sorted(r for r in zero_ranks if r is not None)})


def _went_on(events: list[Any], collector: Collector) -> bool:
    """Did the job go on after its last overflow (a later step or progress line, or any later line of a source
    that printed overflows)? Only then is a short chain of overflows a warm-up that ended."""
    last = max(e.step_hint for e in events)
    reached = [src.max_step if src.max_step is not None else src.max_stream_progress for src in collector.sources]
    return max(reached, default=0) > last or any(
        0 < src.last_overflow_line < src.lines for src in collector.sources)


def _overflow(collector: Collector, cfg: dict[str, Any], extraction: Extraction, evidence: dict[str, Any]) -> None:
    """Warm-up overflows vs repeated overflows, from the chain of loss-scale reductions."""
    events = collector.overflows
    if not events:
        return
    collector.decided |= {"s.fp16_overflow_repeated", "s.fp16_overflow_early_only", "s.fp16_overflow_periodic",
                          "s.loss_scale_falling"}
    limits = cfg["overflow"]
    min_scale = limits["low_scale"]
    config = evidence.get("config") if isinstance(evidence.get("config"), dict) else {}
    fp16 = config.get("fp16") if isinstance(config.get("fp16"), dict) else {}
    configured_min = parse_float(fp16.get("min_loss_scale")) if fp16 else None
    if configured_min is not None and configured_min > 0:
        min_scale = max(min_scale, configured_min)
    late = probes = 0
    previous_new: float | None = None
    lowest: float | None = None
    for e in events:
        recovered = (previous_new is not None and e.attempted is not None and e.attempted > previous_new)
        if recovered and e.new is not None and previous_new is not None and e.new >= previous_new:
            probes += 1  # the scale grew after a clean window, overflowed, and went back: the scaler probing
        elif e.step_hint > limits["warmup_steps"] or recovered:
            late += 1
        if e.new is not None:
            previous_new = e.new
            lowest = e.new if lowest is None else min(lowest, e.new)
    # the scaler saying it is at its floor ("already at minimum") ends any warm-up reading of the chain
    at_minimum = (lowest is not None and lowest <= min_scale) or "s.loss_scale_at_minimum" in collector.symptoms
    count = collector.overflow_count
    fields = {"overflows": count, "late_overflows": late, "probe_overflows": probes, "lowest_scale": lowest}
    ranks = sorted({e.rank for e in events if e.rank is not None})
    if late >= limits["late_min"] or at_minimum:
        _derived(collector, "s.fp16_overflow_repeated", [], f"{count} fp16 overflow(s), {late} after warm-up; "
                 f"lowest loss scale {lowest}", fields)
        extraction.absent.add("s.fp16_overflow_early_only")
    elif probes >= limits["probe_min"]:
        _derived(collector, "s.fp16_overflow_periodic", [], f"{count} fp16 overflow(s); {probes} after the scale grew "
                 f"back, each returning to the level before (the scaler probing upward); lowest loss scale {lowest}",
                 fields)
        extraction.absent.add("s.fp16_overflow_repeated")
    elif _went_on(events, collector):
        _derived(collector, "s.fp16_overflow_early_only", [], f"{count} fp16 overflow(s) during loss-scale warm-up "
                 f"only; lowest loss scale {lowest}", fields)
        extraction.absent.add("s.fp16_overflow_repeated")
    # else the log stops at its overflows (a pasted line): whether they stopped cannot be told
    if late >= limits["falling_min_reductions"] or at_minimum:
        _derived(collector, "s.loss_scale_falling", [], f"loss scale reduced {late} time(s) after warm-up", fields)
    if at_minimum and "s.loss_scale_at_minimum" not in collector.symptoms:
        _derived(collector, "s.loss_scale_at_minimum", [], f"loss scale reached {lowest} (minimum {min_scale})", fields)
    for sid in ("s.fp16_overflow_repeated", "s.fp16_overflow_early_only", "s.fp16_overflow_periodic"):
        if sid in collector.symptoms:
            collector.symptoms[sid].ranks |= set(ranks)


# ---------------------------------------------------------------------- OOM


def _oom(collector: Collector, cfg: dict[str, Any]) -> None:
    """Read the figures of OOM lines and the traceback stage they happened in."""
    oom_events = [e for (s, _), e in collector.events.items() if s in collector.oom_symptoms]
    if not oom_events:
        return
    limits = cfg["oom"]
    found: dict[str, list[Event]] = {}
    collector.decided.add("s.oom_after_many_steps")
    for e in oom_events:
        if e.line_fields.get("total") is not None:
            collector.decided |= {"s.oom_fragmented", "s.oom_capacity_full", "s.oom_other_process_on_gpu"}
        if e.frames:
            collector.decided |= {entry["symptom"] for entry in cfg["oom_stage_symptoms"]}
        for sid in _oom_figures(e.line_fields, limits):
            found.setdefault(sid, []).append(e)
        stages = frame_stages(e.frames, cfg)
        for entry in cfg["oom_stage_symptoms"]:
            if entry["stage"] in stages:
                found.setdefault(entry["symptom"], []).append(e)
                break
    for sid, events in found.items():
        _derived(collector, sid, events, f"derived from {len(events)} OOM line(s)")


def _oom_figures(f: dict[str, Any], limits: dict[str, Any]) -> list[str]:
    def num(name: str) -> float | None:
        value = f.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    requested, total, free = num("requested"), num("total"), num("free")
    allocated = num("allocated")
    unallocated = num("reserved_unallocated")
    if unallocated is None and num("reserved") is not None and allocated is not None:
        unallocated = max(0.0, num("reserved") - allocated)  # type: ignore[operator]
    other = num("other_processes") or 0.0
    out = []
    if total and other and (other >= limits["other_process_min_bytes"]
                            or other >= limits["other_process_min_fraction"] * total):
        out.append("s.oom_other_process_on_gpu")
    fragmented = (requested is not None and total and unallocated is not None and unallocated >= requested
                  and unallocated >= limits["fragmented_min_fraction_of_total"] * total
                  and (free is None or free < requested))
    if fragmented:
        out.append("s.oom_fragmented")
    elif (total and allocated is not None and "s.oom_other_process_on_gpu" not in out
          and allocated + (unallocated or 0.0) >= limits["capacity_full_min_fraction"] * total):
        out.append("s.oom_capacity_full")
    return out


def _oom_after_many_steps(collector: Collector, cfg: dict[str, Any]) -> None:
    threshold = cfg["phase"]["oom_after_many_steps"]
    late = []
    for sid in collector.oom_symptoms:
        for e in _events(collector, sid):
            steps, _ = _steps_before(e, collector)
            if steps >= threshold:
                late.append(e)
    if late:
        _derived(collector, "s.oom_after_many_steps", late, f"OOM after {threshold}+ training steps")


def _rule_asserted_fallback(collector: Collector, extraction: Extraction) -> None:
    """A derived-only symptom that a warning/error log rule asserted is kept when no derivation ruled on it.

    Info-level assertions (a rule firing on every progress line) are only inputs, never kept.
    """
    for sid, events in collector.derived_inputs.items():
        strong = [e for e in events if e.severity in ("warning", "error")]
        if strong and sid not in collector.symptoms and sid not in extraction.absent \
                and sid not in collector.decided and not sid.startswith(("s.scope_", "s.phase_")):
            _derived(collector, sid, strong, "asserted by a log rule")
