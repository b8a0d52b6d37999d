"""The ranking model: local vs global anomalies, context gates, negative evidence, site priors."""

from __future__ import annotations

import math

import pytest

from dsdoctor.kb.inference import UNEXPLAINED, EvidenceState, rank, symptom_likelihood
from dsdoctor.kb.planner import information_gain, propose
from dsdoctor.rules.model import JobContext
from tests.kbfactory import build, cause, nan_kb, symptom


def _ev(present=(), absent=(), supplied=("logs",), **kw) -> EvidenceState:
    return EvidenceState(present={s: 1.0 for s in present}, absent=set(absent), supplied=set(supplied), **kw)


def test_nan_on_one_rank_points_at_local_causes_not_the_learning_rate():
    kb = nan_kb()
    ranking = rank(kb, _ev(["s.loss_nan", "s.nan_subset_ranks", "s.scope_single_rank"],
                           absent=["s.scope_global", "s.nan_all_ranks"]))
    order = [c.id for c in ranking.causes]
    assert set(order[:2]) == {"data.corrupt_sample", "hardware.silent_data_corruption"}
    assert ranking.posterior["compute.lr_divergence"] < 0.02


def test_nan_on_every_rank_points_at_global_divergence():
    kb = nan_kb()
    ranking = rank(kb, _ev(["s.loss_nan", "s.nan_all_ranks", "s.scope_global"],
                           absent=["s.scope_single_rank", "s.nan_subset_ranks"]))
    assert ranking.causes[0].id == "compute.lr_divergence"


def test_context_gate_rules_out_fp16_overflow_without_fp16():
    kb = nan_kb()
    ranking = rank(kb, _ev(["s.loss_nan", "s.scope_global", "s.nan_all_ranks"],
                           context=JobContext(precision="bf16")))
    assert "compute.fp16_overflow" not in ranking.posterior
    reasons = dict(ranking.ruled_out)
    assert "fp16" in reasons["compute.fp16_overflow"] and "bf16" in reasons["compute.fp16_overflow"]


def test_absence_of_a_characteristic_symptom_counts_against_its_cause():
    kb = nan_kb()
    seen = ["s.loss_nan", "s.scope_global", "s.nan_all_ranks"]
    with_logs = rank(kb, _ev(seen, supplied=("logs",)))
    without_logs = rank(kb, _ev(seen, supplied=()))
    # no OVERFLOW lines although logs were supplied: fp16 overflow loses ground
    assert with_logs.posterior["compute.fp16_overflow"] < without_logs.posterior["compute.fp16_overflow"]


def test_one_mechanism_explaining_many_symptoms_is_not_overcounted():
    """Three symptoms of one mechanism: exact inference sums over the mechanism's state."""
    kb = build(
        [cause("memory.a", 0.5, {"m.x": 0.5}), cause("memory.b", 0.5, {"m.y": 0.9})],
        {"m.x": {"s.1": 0.99, "s.2": 0.99, "s.3": 0.99}, "m.y": {"s.1": 0.5}},
        [symptom("s.1"), symptom("s.2"), symptom("s.3")],
    )
    ranking = rank(kb, _ev(["s.1", "s.2", "s.3"]))
    a = next(c for c in ranking.causes if c.id == "memory.a")
    # exact: P(E|a) ≈ w(a->m.x) * 0.99^3 ≈ 0.485; the product of marginals would give 0.495^3 ≈ 0.12
    p_e_given_a = math.exp(a.log_likelihood_ratio / 0.85) * 0.01**3
    assert p_e_given_a == pytest.approx(0.5 * 0.99**3, rel=0.05)


def test_marginal_likelihood_is_noisy_or_with_leak():
    kb = nan_kb()
    expected = 1 - (1 - 0.01) * (1 - 0.9 * 0.85)
    assert symptom_likelihood(kb, "s.nan_all_ranks", "compute.lr_divergence") == pytest.approx(expected)
    assert symptom_likelihood(kb, "s.same_node_repeatedly", "compute.lr_divergence") == 0.01


def test_unexplained_dominates_when_no_cause_produces_what_was_seen():
    kb = build([cause("memory.a", 1.0, {"m.x": 0.9})], {"m.x": {"s.1": 0.9}},
               [symptom("s.1"), symptom("s.2"), symptom("s.3")])
    explained = rank(kb, _ev(["s.1"]))
    assert explained.causes[0].id == "memory.a" and explained.unexplained < 0.1
    ranking = rank(kb, _ev(["s.2", "s.3"], absent=["s.1"]))
    assert ranking.unexplained > 0.5
    assert sum(ranking.posterior.values()) == pytest.approx(1.0)


def test_site_history_raises_the_prior_of_confirmed_causes():
    kb = nan_kb()
    ev = _ev(["s.loss_nan", "s.nan_subset_ranks", "s.scope_single_rank"])
    plain = rank(kb, ev)
    local = rank(kb, ev, site_counts={"hardware.silent_data_corruption": 12})
    assert local.posterior["hardware.silent_data_corruption"] > plain.posterior["hardware.silent_data_corruption"]


def test_experiment_outcome_updates_the_ranking():
    kb = nan_kb()
    seen = ["s.loss_nan", "s.nan_subset_ranks", "s.scope_single_rank"]
    before = rank(kb, _ev(seen))
    after = rank(kb, _ev(seen, outcomes=[("x.swap_suspect_gpu", "issue_follows_gpu", True)]))
    assert after.causes[0].id == "hardware.silent_data_corruption"
    assert after.posterior["hardware.silent_data_corruption"] > before.posterior["hardware.silent_data_corruption"]


def test_planner_prefers_the_experiment_that_separates_the_leaders():
    kb = nan_kb()
    ranking = rank(kb, _ev(["s.loss_nan", "s.nan_subset_ranks", "s.scope_single_rank"]))
    proposals = propose(kb, ranking.posterior)
    assert proposals and proposals[0].experiment.id in {"x.swap_suspect_gpu", "x.fixed_seed_data_order"}
    assert all(p.experiment.id != "x.useless" for p in proposals)  # no information, however cheap
    assert set(proposals[0].separates) >= {"data.corrupt_sample", "hardware.silent_data_corruption"}


def test_planner_skips_experiments_already_run():
    kb = nan_kb()
    ranking = rank(kb, _ev(["s.loss_nan", "s.nan_subset_ranks"]))
    ids = {p.experiment.id for p in propose(kb, ranking.posterior, done={"x.swap_suspect_gpu"})}
    assert "x.swap_suspect_gpu" not in ids


def test_information_gain_is_zero_when_every_cause_predicts_the_same():
    kb = nan_kb()
    gain, forecasts = information_gain(kb.experiments["x.useless"], {"data.corrupt_sample": 0.5, UNEXPLAINED: 0.5})
    assert gain == pytest.approx(0.0, abs=1e-9)
    assert sum(f.probability for f in forecasts) == pytest.approx(1.0)


def test_phase_stated_in_words_gates_like_a_phase_from_the_logs():
    from dsdoctor.rules.model import Extraction, ObservedSymptom

    kb = build(
        [cause("memory.activation_memory", 0.6, {"m.a": 0.9}, phases=["first-step", "steady"]),
         cause("memory.checkpoint_peak", 0.2, {"m.c": 0.9}, phases=["checkpoint"])],
        {"m.a": {"s.cuda_oom": 0.9}, "m.c": {"s.cuda_oom": 0.6, "s.phase_checkpoint": 0.8}},
        [symptom("s.cuda_oom"), symptom("s.phase_checkpoint", source="description")],
    )
    extraction = Extraction()
    for sid in ("s.cuda_oom", "s.phase_checkpoint"):
        extraction.symptoms[sid] = ObservedSymptom(sid, reliability=0.8)
    state = EvidenceState.from_extraction(extraction)
    assert state.phase == "checkpoint"
    assert rank(kb, state).causes[0].id == "memory.checkpoint_peak"


def _brute_force_log_ratio(kb, table, evidence) -> float:
    """The definition: sum over every state of the cause's mechanisms of P(state) * prod of factors."""
    import itertools

    from dsdoctor.kb.inference import _factor

    relevant = [s for s in table.reach if s in evidence]
    total = 0.0
    for state in itertools.product((False, True), repeat=len(table.mechanisms)):
        term = 1.0
        for active, (_, w) in zip(state, table.mechanisms, strict=True):
            term *= w if active else 1.0 - w
        for sid in relevant:
            miss = 1.0 - kb.symptoms[sid].leak
            for k, w_ms in table.reach[sid]:
                if state[k]:
                    miss *= 1.0 - w_ms
            term *= _factor(1.0 - miss, *evidence[sid])
        total += term
    leak = sum(math.log(_factor(kb.symptoms[s].leak, *evidence[s])) for s in relevant)
    return math.log(total) - leak


def test_factorised_likelihood_equals_the_sum_over_every_mechanism_state():
    """Folding one-mechanism symptoms into their mechanism and summing uncoupled mechanisms out
    independently gives the same value as enumerating every state, for every cause of the real KB."""
    import random

    from dsdoctor.kb.inference import _cause_log_ratio, _tables
    from dsdoctor.kb.loader import get_kb

    kb = get_kb()
    rng = random.Random(5)
    sids = sorted(kb.symptoms)
    for _ in range(6):
        evidence = {}
        for sid in rng.sample(sids, 60):
            evidence[sid] = rng.choice([("present", rng.uniform(0.3, 1.0)), ("absent", 1.0),
                                        ("unseen", rng.uniform(0.1, 0.8))])
        for table in _tables(kb).values():
            assert _cause_log_ratio(table, kb, evidence, 16) == pytest.approx(
                _brute_force_log_ratio(kb, table, evidence), abs=1e-9)


def test_memoised_ranking_equals_a_fresh_one_and_follows_new_evidence():
    kb = nan_kb()
    local = _ev(["s.loss_nan", "s.nan_subset_ranks"], absent=["s.nan_all_ranks"])
    first = rank(kb, local)
    again = rank(kb, local)  # every ratio served from the memo
    kb.cache.pop("likelihood_memo")
    kb.cache.pop("ranking_memo")
    fresh = rank(kb, local)
    assert again.posterior == first.posterior == fresh.posterior
    assert [c.weights for c in again.causes] == [c.weights for c in fresh.causes]  # explanations too
    assert any(c.weights for c in fresh.causes)
    assert first.causes[0].id != "compute.lr_divergence"
    every_rank = rank(kb, _ev(["s.loss_nan", "s.nan_all_ranks"], absent=["s.nan_subset_ranks"]))
    assert every_rank.causes[0].id == "compute.lr_divergence"  # new evidence, new key: not a stale answer
    # the same symptoms under another context, other site history or an experiment's outcome: new answers
    bf16 = rank(kb, _ev(["s.loss_nan", "s.nan_subset_ranks"], absent=["s.nan_all_ranks"],
                        context=JobContext(precision="bf16")))
    assert "compute.fp16_overflow" in first.posterior and "compute.fp16_overflow" not in bf16.posterior
    history = rank(kb, local, site_counts={"data.corrupt_sample": 20})
    assert history.posterior["data.corrupt_sample"] > first.posterior["data.corrupt_sample"]
    first.causes.clear()  # a caller's copy: the remembered ranking keeps its causes
    assert rank(kb, local).causes


def _reference_gain(experiment, posterior):
    """IG by the definition: H(P) - sum_o P(o) H(P | o), with normalised posteriors per outcome."""
    def h(dist):
        return -sum(p * math.log2(p) for p in dist.values() if p > 0)

    expected = 0.0
    for outcome in experiment.outcomes:
        joint = {}
        for cid, p in posterior.items():
            dist = experiment.default if cid == UNEXPLAINED else experiment.outcome_probabilities(cid)
            if outcome.id in dist and dist[outcome.id] * p > 0:
                joint[cid] = dist[outcome.id] * p
        p_o = sum(joint.values())
        if p_o > 0:
            expected += p_o * h({c: j / p_o for c, j in joint.items()})
    return max(0.0, h(posterior) - expected)


def test_information_gain_matches_its_definition_on_the_real_knowledge_base():
    import random

    from dsdoctor.kb.loader import get_kb

    kb = get_kb()
    rng = random.Random(11)
    causes = sorted(kb.causes)
    for _ in range(5):
        weights = {c: rng.random() ** 4 for c in rng.sample(causes, 12)}
        weights[UNEXPLAINED] = 0.05
        total = sum(weights.values())
        posterior = {c: w / total for c, w in weights.items()}
        for experiment in kb.experiments.values():
            gain, forecasts = information_gain(experiment, posterior)
            assert gain == pytest.approx(_reference_gain(experiment, posterior), abs=1e-9)
            assert sum(f.probability for f in forecasts) == pytest.approx(1.0, abs=1e-6) or not forecasts
