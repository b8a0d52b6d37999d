"""The troubleshooting simulation ranks with its own world's exact posterior unless asked otherwise."""

from __future__ import annotations

from bench import simulation
from dsdoctor.kb.inference import engine_settings


def test_the_model_posterior_is_used_only_inside_the_run():
    before = dict(engine_settings())
    with simulation.posterior_of("model"):
        inside = dict(engine_settings())
    assert {k: inside[k] for k in simulation.MODEL_POSTERIOR} == simulation.MODEL_POSTERIOR
    assert engine_settings() == before
    with simulation.posterior_of("engine"):
        assert engine_settings() == before


def test_every_policy_runs_on_the_same_cases_and_the_engine_spends_less_than_cheapest_first(real_kb):
    table = simulation.simulate(real_kb, trials=2, seed=3)
    assert set(table) == set(simulation.POLICIES)
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["cost"] >= 0.0 for r in table.values())
    assert table["engine (V*IG-cost)"]["cost"] < table["cheapest-first"]["cost"]
