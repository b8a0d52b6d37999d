"""Troubleshooting simulation: how much experimenting each policy needs to reach a confident diagnosis.

For every cause of the knowledge base: sample which of its mechanisms are active and which
symptoms they produce (noisy-OR with leaks), rank the causes, then loop — a policy picks an
experiment, its outcome is drawn from the knowledge base's P(outcome | true cause) — until one
hypothesis reaches 0.9 or no experiment is left. Three policies in the same run, on the same
sampled cases and outcome draws:

* engine: net value of information, V x expected information gain - cost (kb/planner.py)
* cheapest-first: the cheapest experiment that bears on a cause still above 1 %
* probability/cost: the experiment whose targeted causes hold the most probability per GPU-minute

The posterior every policy starts from and updates is the exact one of the world simulated here:
causes drawn equally often, symptoms and outcomes drawn from the model itself, so a uniform prior
and plain Bayes (``--posterior model``, the default). The engine's answers to real reports use
priors and a temperature fitted to how real reports deviate from the model (kb/engine.yaml:
``prior_temper``, ``temper``, ``posterior_temperature``); in this world they overstate confidence,
and a planner fed an overconfident posterior stops too early. ``--posterior engine`` shows that.

Usage: python -m bench.simulation [--trials 8] [--seed 7] [--posterior model|engine]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
from collections.abc import Callable, Iterator

from dsdoctor.kb.inference import UNEXPLAINED, EvidenceState, rank
from dsdoctor.kb.model import Experiment, KnowledgeBase
from dsdoctor.kb.planner import propose

OBSERVED = {"logs", "derived", "config", "environment"}
MAX_STEPS = 25
CONFIDENT = 0.9
#: the settings that make rank() the exact posterior of the simulated world (uniform prior, plain Bayes)
MODEL_POSTERIOR = {"prior_temper": 0.0, "temper": 1.0, "posterior_temperature": 1.0}

Policy = Callable[[KnowledgeBase, dict[str, float], set[str]], Experiment | None]


def sample_evidence(kb: KnowledgeBase, cause_id: str, rng: random.Random) -> EvidenceState:
    cause = kb.causes[cause_id]
    active = [mid for mid, w in cause.mechanisms.items() if mid in kb.mechanisms and rng.random() < w]
    present = {}
    for sid, symptom in kb.symptoms.items():
        if symptom.source not in OBSERVED:
            continue
        miss = 1.0 - symptom.leak
        for mid in active:
            miss *= 1.0 - kb.mechanisms[mid].symptoms.get(sid, 0.0)
        if rng.random() < 1.0 - miss:
            present[sid] = 1.0
    return EvidenceState(present=present, supplied=set(OBSERVED))


def _relevant(exp: Experiment, posterior: dict[str, float]) -> float:
    return sum(p for c, p in posterior.items() if c in exp.expects)


def engine_policy(kb, posterior, done):
    """The planner's first proposal, and stop when no experiment is worth its cost any more."""
    best = propose(kb, posterior, done, top=1)
    return best[0].experiment if best and best[0].score > 0 else None


def cheapest_first(kb, posterior, done):
    options = [e for e in kb.experiments.values() if e.id not in done and
               any(posterior.get(c, 0) >= 0.01 for c in e.expects)]
    return min(options, key=lambda e: (e.cost, e.id), default=None)


def probability_per_cost(kb, posterior, done):
    options = [e for e in kb.experiments.values() if e.id not in done and _relevant(e, posterior) > 0]
    return max(options, key=lambda e: (_relevant(e, posterior) / e.cost, e.id), default=None)


POLICIES: dict[str, Policy] = {"engine (V*IG-cost)": engine_policy, "cheapest-first": cheapest_first,
                               "probability/cost": probability_per_cost}


def run_case(kb, true_cause, posterior, policy, rng) -> tuple[float, int, str]:
    posterior = dict(posterior)
    done: set[str] = set()
    cost, steps = 0.0, 0
    while max(posterior.values()) < CONFIDENT and steps < MAX_STEPS:
        exp = policy(kb, posterior, done)
        if exp is None:
            break
        done.add(exp.id)
        dist = exp.outcome_probabilities(true_cause)
        outcome = rng.choices(list(dist), weights=list(dist.values()))[0]
        for c in posterior:
            table = exp.default if c == UNEXPLAINED else exp.outcome_probabilities(c)
            posterior[c] *= table.get(outcome, 1e-6)
        norm = sum(posterior.values()) or 1.0
        posterior = {c: p / norm for c, p in posterior.items()}
        cost += exp.cost
        steps += 1
    return cost, steps, max(posterior, key=posterior.get)


@contextlib.contextmanager
def posterior_of(kind: str) -> Iterator[None]:
    """``model``: rank with the simulated world's own exact posterior; ``engine``: as for real reports."""
    from dsdoctor.kb.inference import engine_settings_replaced

    with engine_settings_replaced({} if kind == "engine" else MODEL_POSTERIOR):
        yield


def simulate(kb: KnowledgeBase, trials: int, seed: int, posterior: str = "model") -> dict[str, dict[str, float]]:
    with posterior_of(posterior):
        return _simulate(kb, trials, seed)


def _simulate(kb: KnowledgeBase, trials: int, seed: int) -> dict[str, dict[str, float]]:
    from dsdoctor.kb.diagnosis import catalog_cause

    results: dict[str, list[tuple[float, int, bool]]] = {name: [] for name in POLICIES}
    case_rng = random.Random(seed)
    for cause_id in sorted(kb.causes):
        for trial in range(trials):
            evidence = sample_evidence(kb, cause_id, case_rng)
            start = rank(kb, evidence).posterior
            for name, policy in POLICIES.items():
                rng = random.Random(f"{seed}/{cause_id}/{trial}")  # same outcome draws for every policy
                cost, steps, verdict = run_case(kb, cause_id, start, policy, rng)
                correct = verdict != UNEXPLAINED and catalog_cause(kb, verdict) == catalog_cause(kb, cause_id)
                results[name].append((cost, steps, correct))
    return {
        name: {"cost": statistics.mean(r[0] for r in rows), "median_cost": statistics.median(r[0] for r in rows),
               "steps": statistics.mean(r[1] for r in rows), "accuracy": statistics.mean(r[2] for r in rows)}
        for name, rows in results.items()
    }


def main() -> None:
    from dsdoctor.kb.loader import get_kb

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=8, help="sampled cases per cause")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--posterior", choices=("model", "engine"), default="model",
                        help="the simulated world's exact posterior (default) or the engine's real-report calibration")
    args = parser.parse_args()
    kb = get_kb()
    table = simulate(kb, args.trials, args.seed, args.posterior)
    base = table["cheapest-first"]["cost"] or 1.0
    print(f"   {len(kb.causes)} causes x {args.trials} trials; cost in GPU-minutes to P>={CONFIDENT}; "
          f"posterior: {args.posterior}")
    print(f"   {'policy':<18} {'mean cost':>10} {'median':>8} {'vs cheapest':>12} {'experiments':>12} {'accuracy':>9}")
    for name, r in table.items():
        print(f"   {name:<18} {r['cost']:>10.1f} {r['median_cost']:>8.1f} {r['cost'] / base:>12.0%} "
              f"{r['steps']:>12.2f} {r['accuracy']:>9.1%}")


if __name__ == "__main__":
    main()
