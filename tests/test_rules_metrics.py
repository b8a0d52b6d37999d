"""Metric rules over evidence.metrics (thresholds in rules/data/metrics.yaml)."""

from __future__ import annotations

from tests.rulesfx import run


def series(name: str, values: list[float], rank: int | None = 0, start: int = 1) -> list[dict]:
    return [{"name": name, "rank": rank, "step": start + i, "value": v} for i, v in enumerate(values)]


def test_step_time_up_while_utilisation_falls_vs_steady() -> None:
    steps = series("step_time_s", [1.0] * 10 + [1.9] * 10)
    down = run(metrics=steps + series("gpu_util", [95] * 10 + [40] * 10))
    assert "s.step_time_up_util_down" in down.symptoms and "s.step_time_up_util_steady" not in down.symptoms
    steady = run(metrics=steps + series("gpu_util", [95] * 10 + [93] * 10))
    assert "s.step_time_up_util_steady" in steady.symptoms
    flat = run(metrics=series("step_time_s", [1.0] * 20) + series("gpu_util", [95] * 20))
    assert not flat.symptoms and flat.supplied_sources == {"metrics"}


def test_straggler_rank_is_a_robust_outlier() -> None:
    data = []
    for rank in range(16):
        base = 1.0 + 0.01 * (rank % 3)
        data += series("step_time_s", [base * (1.8 if rank == 11 else 1.0)] * 6, rank)
    x = run(metrics=data)
    assert x.symptoms["s.straggler_rank"].ranks == {11}
    even = run(metrics=[p for r in range(16) for p in series("step_time_s", [1.0 + 0.02 * (r % 4)] * 6, r)])
    assert "s.straggler_rank" not in even.symptoms


def test_low_gpu_util_accepts_fractions_and_percent() -> None:
    assert "s.low_gpu_util" in run(metrics=series("gpu_util", [0.3] * 8)).symptoms
    assert "s.low_gpu_util" in run(metrics=series("gpu_util", [30] * 8)).symptoms
    assert "s.low_gpu_util" not in run(metrics=series("gpu_util", [88] * 8)).symptoms


def test_memory_rising_and_reserved_far_above_allocated() -> None:
    rising = run(metrics=series("mem_allocated_gb", [10 + 0.5 * i for i in range(10)]))
    assert "s.mem_allocated_rising" in rising.symptoms
    flat = run(metrics=series("mem_allocated_gb", [10, 10.1, 10, 10.1, 10, 10.1, 10]))
    assert "s.mem_allocated_rising" not in flat.symptoms
    cached = run(metrics=series("mem_allocated_gb", [20.0] * 5) + series("mem_reserved_gb", [60.0] * 5))
    assert "s.mem_reserved_far_above_allocated" in cached.symptoms


def test_loss_diverging() -> None:
    x = run(metrics=series("loss", [3.0, 2.5, 2.1, 1.9, 1.8, 1.75, 2.4, 3.9, 5.2, 6.8]))
    assert "s.loss_diverging" in x.symptoms
    y = run(metrics=series("loss", [3.0, 2.5, 2.1, 1.9, 1.8, 1.75, 1.7, 1.7, 1.65, 1.6]))
    assert "s.loss_diverging" not in y.symptoms


def test_nan_values_in_metrics_per_rank() -> None:
    data = [p for r in range(4) for p in series("loss", [2.0, 1.9, 1.8], r)] + series("loss", ["nan"], 2, start=4)
    x = run(metrics=data)
    assert "s.loss_nan" in x.symptoms and "s.nan_subset_ranks" in x.symptoms
    assert x.symptoms["s.loss_nan"].ranks == {2}


def test_loss_scale_falling_after_warm_up_only() -> None:
    warm = run(metrics=series("loss_scale", [65536, 32768, 16384, 8192] + [8192] * 10))
    assert "s.loss_scale_falling" not in warm.symptoms
    late = run(metrics=series("loss_scale", [8192, 4096, 2048, 1024, 512], start=2000))
    assert "s.loss_scale_falling" in late.symptoms


def test_bad_metric_entries_are_skipped_with_a_warning() -> None:
    x = run(metrics=[{"name": "loss", "value": "x"}, {"value": 1}, {"name": "loss", "rank": "3", "value": 1},
                     {"name": "custom_thing", "value": 1, "step": 1}, {"name": "loss", "step": True, "value": 1}])
    assert any("4 entries" in w for w in x.warnings) and any("custom_thing" in w for w in x.warnings)


def test_wall_clock_breakdown_shares_from_logs() -> None:
    line = "[Rank 0] time (ms) | fwd: 100.00 | bwd: {0} | bwd_inner: 100.00 | bwd_allreduce: {1} | step: {2}"
    comm = run("\n".join(line.format(1000.0, 900.0, 50.0) for _ in range(5)))
    assert "s.large_allreduce_time" in comm.symptoms and "s.slow_step_with_offload" not in comm.symptoms
    fast = run("\n".join(line.format(300.0, 20.0, 50.0) for _ in range(5)))
    assert "s.large_allreduce_time" not in fast.symptoms
    offload = run("\n".join(line.format(300.0, 20.0, 2000.0) for _ in range(5)),
                  config={"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})
    assert "s.slow_step_with_offload" in offload.symptoms
