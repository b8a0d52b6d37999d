"""Experiments the reporter already ran, read from their words, become soft observations.

Every example here is written for this test (none is a corpus case's sentence).
"""

from __future__ import annotations

import math

import pytest

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.inference import EvidenceState, _outcome_log_ratios, rank
from dsdoctor.kb.loader import get_kb
from dsdoctor.rules.extract import extract
from dsdoctor.rules.schema import validate_rule


def _outcomes(text: str) -> dict[str, bool]:
    return {o.key: o.happened for o in extract({"description": text}).outcomes}


@pytest.mark.parametrize(("text", "key"), [
    ("All eight ranks freeze in the first all_reduce; after exporting NCCL_P2P_DISABLE=1 the run goes through.",
     "x.nccl_p2p_disable=issue_gone"),
    ("A tiny DDP script finishes with gloo, nccl never gets past the barrier.", "x.switch_backend_gloo=works_with_gloo"),
    ("Rolling back deepspeed to 0.12.6 solves the assertion.", "x.other_release=older_works"),
    ("The crash went away with the nightly build of torch.", "x.other_release=newer_works"),
    ("With ZeRO stage 2 instead of 3 it trains fine.", "x.lower_zero_stage=works"),
    ("The NaN shows up at the same step on a different GPU model and on the CPU.", "x.other_hardware_repro=same_failure"),
    ("把 deepspeed 退回上一个版本就可以了", "x.other_release=older_works"),
    ("禁用 P2P 之后训练就正常了", "x.nccl_p2p_disable=issue_gone"),
    ("关闭 offload 以后能跑", "x.disable_offload=fast_and_fits"),
])
def test_a_reported_experiment_is_read_as_its_outcome(text, key):
    assert _outcomes(text) == {key: True}


@pytest.mark.parametrize(("text", "key"), [
    ("Cutting the learning rate by ten did not help: the loss still explodes at step 900.",
     "x.lower_lr_warmup_clip=stable"),
    ("It doesn't work with NCCL_P2P_DISABLE=1 either.", "x.nccl_p2p_disable=issue_gone"),
    ("换了 bf16 也没用", "x.switch_fp16_to_bf16=issue_gone"),
])
def test_a_denied_outcome_is_read_as_not_having_happened(text, key):
    read = _outcomes(text)
    assert read[key] is False
    assert all(happened for k, happened in read.items() if k != key)  # anything else read is said to happen


def test_a_remedy_that_did_not_help_is_also_read_as_its_failure_outcome():
    read = _outcomes("Cutting the learning rate by ten did not help: the loss still explodes at step 900.")
    assert read == {"x.lower_lr_warmup_clip=stable": False, "x.lower_lr_warmup_clip=still_diverges": True}


def test_a_span_across_but_joins_two_statements_and_says_neither():
    assert _outcomes("NCCL_P2P_DISABLE=1 changes nothing but gloo works") == {
        "x.switch_backend_gloo=works_with_gloo": True}


def test_a_word_read_outcome_is_soft():
    kb = get_kb()
    hard = _outcome_log_ratios(kb, "comm.p2p_topology", [("x.nccl_p2p_disable", "issue_gone", True)])
    soft = _outcome_log_ratios(kb, "comm.p2p_topology", [("x.nccl_p2p_disable", "issue_gone", True)],
                               {("x.nccl_p2p_disable", "issue_gone"): 0.5})
    assert 0 < soft[0][1] < hard[0][1]
    # r * p + (1 - r) against the default's, in logs
    x = kb.experiments["x.nccl_p2p_disable"]
    p_c, p_0 = x.outcome_probabilities("comm.p2p_topology")["issue_gone"], x.default["issue_gone"]
    assert soft[0][1] == pytest.approx(math.log(0.5 * p_c + 0.5) - math.log(0.5 * p_0 + 0.5))


def test_the_reported_outcome_moves_the_ranking_and_is_not_proposed_again():
    text = "Eight GPUs in one server stall in the first collective. NCCL_P2P_DISABLE=1 makes it finish."
    d = diagnose({"description": text})
    assert [r["observe"] for r in d["reported_experiments"]] == ["x.nccl_p2p_disable=issue_gone"]
    assert d["reported_experiments"][0]["reliability"] < 1
    assert d["causes"][0]["id"] == "comm.p2p_topology"
    assert "x.nccl_p2p_disable" not in {e["id"] for e in d["next_experiments"]}
    without = diagnose({"description": "Eight GPUs in one server stall in the first collective."})
    p = {c["id"]: c["probability"] for c in without["causes"]}
    assert d["causes"][0]["probability"] > p.get("comm.p2p_topology", 0.0)


def test_an_explicit_observation_wins_over_the_words():
    text = "Eight GPUs in one server stall in the first collective. NCCL_P2P_DISABLE=1 makes it finish."
    d = diagnose({"description": text, "observations": {"x.nccl_p2p_disable=issue_persists": True}})
    assert d["reported_experiments"] == []
    assert d["observations"] == {"x.nccl_p2p_disable=issue_persists": True}
    words_only = diagnose({"description": text})
    p2p = {c["id"]: c["probability"] for c in d["causes"]}.get("comm.p2p_topology", 0.0)
    p2p_words = {c["id"]: c["probability"] for c in words_only["causes"]}["comm.p2p_topology"]
    # the explicit "it persists" counted, the words' "it works" did not: the two differ by more than
    # the words' outcome alone could move (log-odds, so the posterior temperature does not matter)
    assert math.log(p2p / (1 - p2p)) < math.log(p2p_words / (1 - p2p_words)) - 2.0


def test_outcomes_reach_the_evidence_state_with_their_strength():
    x = extract({"description": "with num_workers=0 the epoch completes"})
    ev = EvidenceState.from_extraction(x)
    assert ev.outcomes == [("x.dataloader_workers_zero", "issue_gone", True)]
    assert 0 < ev.outcome_strength[("x.dataloader_workers_zero", "issue_gone")] < 1
    assert rank(get_kb(), ev).causes[0].outcome_factors


def test_an_outcome_rule_needs_no_symptom_but_a_valid_key():
    rule = {"id": "outcome_en.sample", "title": "t", "kind": "phrase", "observation": "x.some_exp=done",
            "lang": "en", "pattern": "done", "examples": {"match": ["done"], "no_match": ["x"]}}
    assert validate_rule(rule)[1] == []
    assert validate_rule({**rule, "observation": "x.some_exp"})[1]
    assert validate_rule({**rule, "kind": "log", "symptom": "s.hang"})[1]  # only phrase rules report outcomes
    assert validate_rule({**rule, "reliability": 1.5})[1]
