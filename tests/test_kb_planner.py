"""What the planner shows (kb/planner.py `plan`): settled experiments skipped, the fix when confident,
no proposal below the information floor. On seed cases, with the real knowledge base."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.api.evidence_files import load_case_dir
from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.inference import engine_settings
from dsdoctor.kb.planner import plan, settled_experiments

SEED = Path(__file__).resolve().parent.parent / "seed_cases"
GPU_LOST = "one-gpu-falls-off-the-bus-with-xid-79-and-the-other-ranks-time-out"
HOST_OOM = "zero-3-offload-run-killed-with-return-code-minus-9-by-the-kernel-oom-killer"
DOCKER0 = "two-node-job-hangs-at-the-first-broadcast-because-nccl-bound-docker0"


def _diagnose(case: str, kb) -> dict:
    evidence, log_files, _ = load_case_dir(SEED / case)
    return diagnose(evidence, kb=kb, log_files=log_files, top=10)


def test_nvidia_smi_query_is_not_proposed_when_the_supplied_nvidia_smi_says_the_gpu_is_lost(real_kb) -> None:
    d = _diagnose(GPU_LOST, real_kb)
    proposed = {x["id"] for x in d["next_experiments"]}
    assert "x.nvidia_smi_query" not in proposed and "x.dmesg_check" not in proposed
    settled = {x["id"]: (x["outcome"], x["by"]) for x in d["settled_experiments"]}
    assert settled["x.nvidia_smi_query"] == ("gpu_missing", "s.gpu_lost_nvidia_smi")
    assert settled["x.dmesg_check"] == ("xid_found", "s.xid_fallen_off_bus")


def test_kernel_log_is_not_proposed_when_the_supplied_dmesg_shows_the_oom_killer(real_kb) -> None:
    d = _diagnose(HOST_OOM, real_kb)
    assert "x.dmesg_check" not in {x["id"] for x in d["next_experiments"]}
    assert {"id": "x.dmesg_check", "outcome": "oom_killer", "by": "s.host_oom_killer",
            "observe": "x.dmesg_check=oom_killer"} in d["settled_experiments"]


def test_above_the_confidence_threshold_the_next_step_is_the_fix_and_its_regression_check(real_kb) -> None:
    d = _diagnose(DOCKER0, real_kb)
    assert d["causes"][0]["probability"] >= engine_settings()["confident"]
    step = d["next_step"]
    assert step["kind"] == "fix" and step["cause"] == d["causes"][0]["id"] == "comm.network_interface"
    assert step["fix"]["title"] and step["regression"]


def test_below_the_confidence_threshold_there_is_no_fix_step(real_kb) -> None:
    posterior = {"data.loader_hang": 0.6, "comm.slow_rank_exceeds_timeout": 0.3, "unexplained": 0.1}
    steps = plan(real_kb, posterior, {"s.nccl_watchdog_timeout": 1.0})
    assert steps.fix_cause is None and steps.proposals


@pytest.mark.parametrize("case", [GPU_LOST, HOST_OOM, DOCKER0, "every-rank-ooms-in-attention-forward-after-raising-sequence-length-to-16k"])
def test_no_proposal_below_the_information_floor(case, real_kb) -> None:
    floor = engine_settings()["min_information_gain_bits"]
    assert floor > 0.0
    d = _diagnose(case, real_kb)
    assert all(x["information_gain"] >= floor for x in d["next_experiments"])


def test_a_soft_free_text_match_settles_nothing(real_kb) -> None:
    assert settled_experiments(real_kb, {"s.gpu_lost_nvidia_smi": 0.6}) == []
    assert [s.experiment for s in settled_experiments(real_kb, {"s.gpu_lost_nvidia_smi": 1.0})] == ["x.nvidia_smi_query"]


def test_plan_skips_what_was_done_and_what_is_settled(real_kb) -> None:
    posterior = {c: 1 / len(real_kb.causes) for c in real_kb.causes}
    steps = plan(real_kb, posterior, {"s.host_oom_killer": 1.0}, done={"x.single_gpu_repro"}, top=20)
    ids = {p.experiment.id for p in steps.proposals}
    assert ids and not ids & {"x.single_gpu_repro", "x.dmesg_check", "x.watch_host_memory"}
    assert steps.fix_cause is None


def test_when_no_experiment_is_left_the_summary_does_not_ask_for_one(real_kb) -> None:
    from dsdoctor.kb.diagnosis import _summary
    from dsdoctor.kb.inference import RankedCause, Ranking

    leader = RankedCause("hardware.gpu_lost", 0.88, 0.01, 3.0, [], [], [])
    ranking = Ranking([leader], 0.02, [], {"hardware.gpu_lost": 0.88, "unexplained": 0.02})
    text = _summary(real_kb, ranking, "en", experiments_left=False)["text"]  # 88 %, every check settled
    assert "run the next experiment" not in text and "no experiment left" in text
    assert "run the next experiment" in _summary(real_kb, ranking, "en", experiments_left=True)["text"]
