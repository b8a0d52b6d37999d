"""Metric rules over the evidence ``metrics`` series (and values captured from log lines).

Names follow the evidence contract (``step_time_s``, ``loss``, ``grad_norm``, ``loss_scale``,
``lr``, ``gpu_util``, ``mem_allocated_gb``, ``mem_reserved_gb``, ``samples_per_sec``,
``tflops``); unknown names are kept and ignored. Thresholds are data (rules/data/metrics.yaml).
NaN/inf and loss-scale facts that also come from logs are derived in rules/derive.py from the
same per-rank summaries, so a value counts the same whichever way it arrived.
"""

from __future__ import annotations

import itertools
import math
from statistics import median
from typing import Any

from dsdoctor.rules.collect import Collector
from dsdoctor.rules.model import Extraction
from dsdoctor.rules.numeric import SeriesSummary
from dsdoctor.rules.settings import Settings
from dsdoctor.rules.units import parse_float

KNOWN = ("step_time_s", "loss", "grad_norm", "loss_scale", "lr", "gpu_util", "mem_allocated_gb", "mem_reserved_gb",
         "samples_per_sec", "tflops")
MAX_POINTS = 2_000_000


def read_metrics(metrics: Any, collector: Collector, settings: Settings, extraction: Extraction) -> None:
    """Add the evidence metrics to the numeric facts, then run the metric checks."""
    if metrics is not None:
        _read(metrics, collector, extraction)
    check(collector, settings.metrics, extraction)


def _read(metrics: Any, collector: Collector, extraction: Extraction) -> None:
    if not isinstance(metrics, list):
        extraction.warnings.append("'metrics' must be a list of {name, rank, step, value}; ignored")
        return
    rows = []
    bad = 0
    unknown: set[str] = set()
    for index, entry in enumerate(metrics[:MAX_POINTS]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            bad += 1
            continue
        value = parse_float(entry.get("value"))
        rank = entry.get("rank")
        step = entry.get("step")
        if value is None or (rank is not None and (isinstance(rank, bool) or not isinstance(rank, int))) \
                or (step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)))):
            bad += 1
            continue
        if entry["name"] not in KNOWN:
            unknown.add(entry["name"])
        rows.append((entry["name"], rank, step, index, value))
    if bad:
        extraction.warnings.append(f"metrics: {bad} entr{'y' if bad == 1 else 'ies'} without a valid name, rank, "
                                   "step or value were skipped")
    if unknown:
        extraction.warnings.append("metrics: unknown metric name(s) kept and ignored: " + ", ".join(sorted(unknown)[:10]))
    if not rows:
        return
    extraction.supplied_sources.add("metrics")
    rows.sort(key=lambda r: (r[0], -1 if r[1] is None else r[1], math.inf if r[2] is None else r[2], r[3]))
    for name, rank, step, index, value in rows:
        collector.numbers.add(name, rank, value, None if step is None else float(step), index, "metrics")
        if rank is not None:
            collector.ranks_seen.add(rank)


def _median(values: list[float]) -> float | None:
    values = [v for v in values if math.isfinite(v)]
    return median(values) if values else None


def _windows(series: SeriesSummary, baseline: int, recent: int) -> tuple[float | None, float | None]:
    values = series.finite_values()
    if len(values) < baseline + recent:
        return None, None
    return _median(values[:baseline]), _median(values[-recent:])


def _rank_text(rank: int | None) -> str:
    return "unattributed values" if rank is None else f"rank {rank}"


def check(collector: Collector, cfg: dict[str, Any], extraction: Extraction) -> None:
    """Run every metric check over the per-rank summaries."""
    numbers = collector.numbers
    if not numbers.series:
        return
    _step_time(collector, cfg["step_time"], numbers.by_name("step_time_s"), numbers.by_name("gpu_util"))
    _straggler(collector, cfg["straggler"], numbers.by_name("step_time_s"))
    _gpu_util(collector, cfg["gpu_util"], numbers.by_name("gpu_util"))
    _memory(collector, cfg["memory"], numbers.by_name("mem_allocated_gb"), numbers.by_name("mem_reserved_gb"))
    _loss(collector, cfg["loss"], numbers.by_name("loss"))
    _loss_scale(collector, cfg["loss_scale"], numbers.by_name("loss_scale"))
    _breakdown(collector, cfg["step_breakdown"], extraction)


def _breakdown(collector: Collector, cfg: dict[str, Any], extraction: Extraction) -> None:
    """Which part of the step dominates, from DeepSpeed's wall-clock breakdown (median over the lines)."""
    numbers = collector.numbers

    def med(name: str) -> float | None:
        values = [v for s in numbers.by_name(name).values() for v in s.finite_values()]
        return median(values) if len(values) >= cfg["min_points"] else None

    fwd, bwd, step, allreduce = med("fwd_ms"), med("bwd_ms"), med("optimizer_step_ms"), med("bwd_allreduce_ms")
    if fwd is None or bwd is None or step is None:
        return
    total = fwd + bwd + step
    if total <= 0:
        return
    if allreduce is not None:
        collector.decided.add("s.large_allreduce_time")
        if allreduce / total >= cfg["allreduce_share"]:
            _observe(collector, "s.large_allreduce_time",
                     f"backward all-reduce takes {allreduce / total:.0%} of the step ({allreduce:.0f} of {total:.0f} ms)",
                     "metrics.large_allreduce_time", None, {"allreduce_ms": allreduce, "step_total_ms": total})
    if extraction.context.offload:
        collector.decided.add("s.slow_step_with_offload")
        if step / total >= cfg["optimizer_share"]:
            _observe(collector, "s.slow_step_with_offload",
                     f"the optimizer step takes {step / total:.0%} of the step with offload on ({step:.0f} of "
                     f"{total:.0f} ms)", "metrics.slow_step_with_offload", None,
                     {"optimizer_step_ms": step, "step_total_ms": total})


def _observe(collector: Collector, sid: str, text: str, rule: str, rank: int | None, fields: dict[str, Any]) -> None:
    collector.observe(sid, source="metrics", text=text, rule=rule, fields=fields, rank=rank)


def _step_time(collector: Collector, cfg: dict[str, Any], step_time: dict, util: dict) -> None:
    for rank, series in step_time.items():
        base, recent = _windows(series, cfg["baseline_points"], cfg["recent_points"])
        if not base or recent is None or recent < base * cfg["up_factor"]:
            continue
        util_series = util.get(rank) or util.get(None)
        if util_series is None:
            continue
        u_base, u_recent = _windows(util_series, cfg["baseline_points"], cfg["recent_points"])
        if u_base is None or u_recent is None:
            continue
        fields = {"rank": rank, "step_time_baseline": base, "step_time_recent": recent,
                  "gpu_util_baseline": u_base, "gpu_util_recent": u_recent}
        text = (f"{_rank_text(rank)}: step time {base:.3g}s -> {recent:.3g}s (x{recent / base:.2f}), "
                f"GPU utilisation {u_base:.3g} -> {u_recent:.3g}")
        if u_recent <= u_base * (1 - cfg["util_drop_fraction"]):
            _observe(collector, "s.step_time_up_util_down", text, "metrics.step_time_up_util_down", rank, fields)
        elif abs(u_recent - u_base) <= cfg["util_steady_fraction"] * max(u_base, 1e-9):
            _observe(collector, "s.step_time_up_util_steady", text, "metrics.step_time_up_util_steady", rank, fields)


def _straggler(collector: Collector, cfg: dict[str, Any], step_time: dict) -> None:
    per_rank = {r: s.median() for r, s in step_time.items() if r is not None and s.median() is not None}
    if len(per_rank) < cfg["min_ranks"]:
        return
    values = list(per_rank.values())
    center = median(values)
    mad = median(abs(v - center) for v in values)
    for rank, value in sorted(per_rank.items()):
        if center <= 0 or value < center * cfg["min_ratio"]:
            continue
        z = 0.6745 * (value - center) / mad if mad > 0 else math.inf
        if z >= cfg["robust_z"]:
            _observe(collector, "s.straggler_rank",
                     f"rank {rank}: median step time {value:.3g}s vs {center:.3g}s across {len(values)} ranks "
                     f"(x{value / center:.2f})",
                     "metrics.straggler_rank", rank, {"rank": rank, "median_step_time": value, "peer_median": center})


def _gpu_util(collector: Collector, cfg: dict[str, Any], util: dict) -> None:
    values = [v for s in util.values() for v in s.finite_values()]
    if len(values) < cfg["min_points"]:
        return
    scale = 100.0 if max(values) <= 1.0 else 1.0  # fractions or percent
    level = median(values) * scale
    if level <= cfg["low_percent"]:
        _observe(collector, "s.low_gpu_util", f"median GPU utilisation {level:.0f}% over {len(values)} samples",
                 "metrics.low_gpu_util", None, {"median_gpu_util_percent": level})


def _memory(collector: Collector, cfg: dict[str, Any], allocated: dict, reserved: dict) -> None:
    for rank, series in allocated.items():
        values = series.finite_values()
        if len(values) < cfg["rising_min_points"]:
            continue
        collector.decided.add("s.mem_allocated_rising")
        diffs = [b - a for a, b in itertools.pairwise(values)]
        rising = sum(1 for d in diffs if d > 0) / len(diffs)
        increase = values[-1] - values[0]
        if rising >= cfg["rising_min_fraction"] and increase >= cfg["rising_min_increase_gb"]:
            _observe(collector, "s.mem_allocated_rising",
                     f"{_rank_text(rank)}: allocated memory {values[0]:.3g} -> {values[-1]:.3g} GB, rising in "
                     f"{rising:.0%} of steps", "metrics.mem_allocated_rising", rank,
                     {"rank": rank, "first_gb": values[0], "last_gb": values[-1]})
    for rank, series in reserved.items():
        alloc = allocated.get(rank)
        if alloc is None or not alloc.finite_values() or not series.finite_values():
            continue
        collector.decided.add("s.mem_reserved_far_above_allocated")
        a, r = alloc.finite_values()[-1], series.finite_values()[-1]
        if a > 0 and r / a >= cfg["reserved_ratio"] and r - a >= cfg["reserved_min_gap_gb"]:
            _observe(collector, "s.mem_reserved_far_above_allocated",
                     f"{_rank_text(rank)}: reserved {r:.3g} GB vs allocated {a:.3g} GB",
                     "metrics.mem_reserved_far_above_allocated", rank, {"rank": rank, "reserved_gb": r, "allocated_gb": a})


def _loss(collector: Collector, cfg: dict[str, Any], loss: dict) -> None:
    for rank, series in loss.items():
        values = series.finite_values()
        if len(values) < cfg["min_points"]:
            continue
        collector.decided.add("s.loss_diverging")
        low_index = min(range(len(values)), key=values.__getitem__)
        if low_index >= len(values) - cfg["recent_points"]:
            continue
        low = values[low_index]
        recent = _median(values[-cfg["recent_points"]:])
        if recent is not None and recent >= low * cfg["diverge_factor"] and recent - low >= cfg["diverge_min_increase"]:
            _observe(collector, "s.loss_diverging", f"{_rank_text(rank)}: loss fell to {low:.4g}, now {recent:.4g}",
                     "metrics.loss_diverging", rank, {"rank": rank, "lowest": low, "recent": recent})


def _loss_scale(collector: Collector, cfg: dict[str, Any], scale: dict) -> None:
    """Reductions of the loss scale after the warm-up (the first steps halve it until it settles)."""
    for rank, series in scale.items():
        points = [p for p in series.points() if math.isfinite(p.value)]
        after = [p for i, p in enumerate(points) if (p.step if p.step is not None else i) > cfg["warmup_steps"]]
        reductions = sum(1 for a, b in itertools.pairwise(after) if b.value < a.value)
        if reductions >= cfg["falling_min_reductions"] and "s.loss_scale_falling" not in collector.symptoms:
            _observe(collector, "s.loss_scale_falling",
                     f"{_rank_text(rank)}: loss scale reduced {reductions} times after warm-up",
                     "metrics.loss_scale_falling", rank, {"rank": rank, "reductions": reductions})
