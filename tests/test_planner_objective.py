"""The planner's objective (kb/planner.py): the information floor before the net value, and the focus
on the leading causes. Small hand-made experiments on the real knowledge base's causes."""

from __future__ import annotations

import dataclasses

import pytest

from dsdoctor.kb.inference import engine_settings
from dsdoctor.kb.model import Experiment, Outcome, Text
from dsdoctor.kb.planner import focused_gain, information_gain, plan


def _experiment(ident: str, cost_minutes: float, expects: dict[str, dict[str, float]]) -> Experiment:
    outcomes = [Outcome("yes", Text(en="yes", zh="是")), Outcome("no", Text(en="no", zh="否"))]
    return Experiment(ident, Text(en=ident, zh=ident), Text(en="", zh=""), [], cost_minutes, 1, outcomes,
                      {"yes": 0.1, "no": 0.9}, expects, [])


@pytest.fixture
def causes(real_kb):
    return sorted(real_kb.causes)[:5]


def test_a_check_that_only_reshuffles_improbable_causes_gains_nothing_under_focus(causes):
    lead, second, *tail = causes
    posterior = {lead: 0.7, second: 0.2, tail[0]: 0.05, tail[1]: 0.03, tail[2]: 0.02}
    # tells the improbable causes apart, but taken together they answer like everything else (0.1 "yes")
    tail_only = _experiment("x.tail", 1, {tail[0]: {"yes": 0.2, "no": 0.8}, tail[1]: {"yes": 0.0, "no": 1.0},
                                          tail[2]: {"yes": 0.0, "no": 1.0}})
    on_leader = _experiment("x.lead", 1, {lead: {"yes": 0.9, "no": 0.1}})
    assert information_gain(tail_only, posterior)[0] > 0.01  # the whole distribution counts it
    assert focused_gain(tail_only, posterior, [lead, second]) == pytest.approx(0.0, abs=1e-9)
    assert focused_gain(on_leader, posterior, [lead, second]) > 0.3
    # with every cause in focus the focused gain is the plain information gain
    assert focused_gain(on_leader, posterior, list(posterior)) == pytest.approx(information_gain(on_leader, posterior)[0])


def test_cheap_checks_below_the_floor_do_not_hide_an_informative_costlier_one(real_kb, causes):
    lead, second, *tail = causes
    posterior = {lead: 0.8, second: 0.15, tail[0]: 0.05}
    floor = engine_settings()["min_information_gain_bits"]
    cheap = {f"x.cheap{k}": _experiment(f"x.cheap{k}", 1, {tail[0]: {"yes": 0.2, "no": 0.8}}) for k in range(4)}
    decisive = _experiment("x.decisive", 600, {lead: {"yes": 0.95, "no": 0.05}})
    kb = dataclasses.replace(real_kb, experiments={**cheap, "x.decisive": decisive}, cache={})
    assert all(information_gain(e, posterior)[0] < floor for e in cheap.values())
    steps = plan(kb, posterior, {})
    assert [p.experiment.id for p in steps.proposals] == ["x.decisive"]
    assert steps.proposals[0].score < 0  # shown although its net value is negative: it is the only next step


def test_a_check_that_splits_whole_domains_of_the_tail_gains_when_the_rest_is_grouped_by_domain(real_kb):
    by_domain: dict[str, list[str]] = {}
    for cause in sorted(real_kb.causes):
        by_domain.setdefault(cause.split(".")[0], []).append(cause)
    mem, comm = by_domain["memory"], by_domain["comm"]
    lead = by_domain["config"][0]
    posterior = {lead: 0.6, mem[0]: 0.1, mem[1]: 0.1, comm[0]: 0.1, comm[1]: 0.1}
    # says "yes" for every memory cause and "no" for every comm cause: a bisection between domains
    split = _experiment("x.split", 1, {**{c: {"yes": 0.9, "no": 0.1} for c in mem[:2]},
                                       **{c: {"yes": 0.1, "no": 0.9} for c in comm[:2]},
                                       lead: {"yes": 0.5, "no": 0.5}})
    # tells two causes of one domain apart, and says nothing about the other causes: nothing about the domain
    within = _experiment("x.within", 1, {mem[0]: {"yes": 0.9, "no": 0.1}, mem[1]: {"yes": 0.1, "no": 0.9},
                                         **{c: {"yes": 0.5, "no": 0.5} for c in [lead, *comm[:2]]}})
    assert focused_gain(split, posterior, [lead], by_domain=True) > 0.2
    assert focused_gain(split, posterior, [lead]) < 0.05  # one lump: memory and comm average out
    assert focused_gain(within, posterior, [lead], by_domain=True) < 0.05
    # with every cause in focus grouping changes nothing
    assert focused_gain(split, posterior, list(posterior), by_domain=True) == pytest.approx(
        information_gain(split, posterior)[0])


def test_the_planning_posterior_flattens_but_keeps_the_order():
    from dsdoctor.kb.planner import planning_posterior

    posterior = {"a": 0.9, "b": 0.08, "c": 0.02}
    flat = planning_posterior(posterior, 0.5)
    assert sum(flat.values()) == pytest.approx(1.0)
    assert flat["a"] > flat["b"] > flat["c"]
    assert flat["a"] < 0.9 and flat["c"] > 0.02
    assert planning_posterior(posterior, 1.0) == posterior
