"""Issue 13, round m: NaN that follows the data, a fault that follows one node, nccl-tests outcomes.

Examples are our own sentences, written for these tests (no corpus case contains them)."""

from __future__ import annotations

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.rules.extract import extract


def _rank(evidence: dict) -> list[str]:
    return [c["id"] for c in diagnose(evidence, top=10)["causes"]]


def test_nan_tied_to_some_batches_or_one_step_is_data_locked() -> None:
    texts = [
        "The loss turns NaN at the same step every time I rerun the job, everything before it looks normal.",
        "Only a few samples give a NaN loss, the other batches train fine.",
        "每次重跑都在同一个 step 出现 nan，之前一切正常",
    ]
    for text in texts:
        evidence = {"description": text}
        assert "s.nan_data_locked" in extract(evidence).symptoms, text
        ranked = _rank(evidence)
        # a NaN that follows the data is a sample (or an op's edge case), not a learning rate that diverges
        assert ranked.index("data.corrupt_sample") < ranked.index("compute.lr_divergence"), text


def test_nan_after_some_steps_is_not_data_locked() -> None:
    for text in ("After some steps the loss becomes NaN.", "跑了一些步之后 loss 变成 nan",
                 "The NaN shows up at a different step on every run."):
        assert "s.nan_data_locked" not in extract({"description": text}).symptoms, text


def test_data_locked_nan_moves_mass_from_divergence_to_the_sample() -> None:
    plain = {"description": "The training loss becomes NaN."}
    locked = {"description": "The training loss becomes NaN, always at the same iteration when I rerun."}

    def ratio(evidence: dict) -> float:
        p = {c["id"]: c["probability"] for c in diagnose(evidence, top=20)["causes"]}
        return p["data.corrupt_sample"] / p["compute.lr_divergence"]

    assert ratio(locked) > 2 * ratio(plain)


def test_one_node_in_every_bad_run_is_a_fault_that_follows_a_node() -> None:
    for text in ("Host gpu-217 was part of every failing job last week.",
                 "After draining that node the next twenty jobs were fine.",
                 "失败的那几次都用到了同一台机器", "把那台机器下线之后就正常了"):
        assert "s.same_node_repeatedly" in extract({"description": text}).symptoms, text
    for text in ("All the failing runs use the same config file.", "去掉这个参数之后就正常了"):
        assert "s.same_node_repeatedly" not in extract({"description": text}).symptoms, text


def _said(extraction, outcome: str) -> bool:
    return any(o.experiment == "x.nccl_tests" and o.outcome == outcome and o.happened for o in extraction.outcomes)


def test_nccl_tests_bandwidth_in_words_is_an_experiment_outcome() -> None:
    low = extract({"description": "The busbw from nccl-tests is only about 20 GB/s between the two hosts."})
    assert _said(low, "bandwidth_low")
    fine = extract({"description": "all_reduce_perf looks fine on both machines."})
    assert _said(fine, "nominal") and not _said(fine, "bandwidth_low")
    zh = extract({"description": "用 nccl-tests 测了一下，两台机器之间带宽偏低"})
    assert _said(zh, "bandwidth_low")
