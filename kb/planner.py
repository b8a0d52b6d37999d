"""Choose the next isolation experiment: the expected value of its information minus its cost.

For an experiment e with outcomes o and P(o | c) from the knowledge base (its ``default`` for
causes it does not bear on, and for c0), P(o) = sum_c P(o | c) P(c); the posterior after o
follows by Bayes, and IG(e) = H(P) - sum_o P(o) H(P | o) in bits. Experiments are ranked by
their net value V * IG(e) - cost(e), cost in GPU-minutes (at least one) and V the worth of one
bit in GPU-minutes (kb/engine.yaml). Ranking by IG / cost alone keeps choosing cheap checks that
barely move the distribution; the simulation benchmark (bench/simulation.py) shows the net
value reaches a confident diagnosis at about a third of the cost of cheapest-first, at equal or
better accuracy. Experiments whose outcome is already known are skipped.

With ``planner_focus`` k > 0 the gain that is ranked is :func:`focused_gain`: information about
which of the k leading causes it is, or, when it is none of them, which domain (memory, comm,
config, ...) holds it (``planner_rest_by_domain``; else the rest is one hypothesis). Checks that only
tell improbable causes of one domain apart then gain nothing; what confirms or refutes the leader
wins, and so does a bisection that tells whole domains apart, which bears on every cause of them.
The gain is weighed on the posterior raised to ``planner_posterior_power`` (< 1: flatter), so the
causes the answer's sharpened posterior squeezes still count when the leader is wrong.

:func:`plan` is what a diagnosis shows: it also skips experiments the evidence already settles
(an outcome's ``settled_by`` symptom was seen), leaves out proposals below the information floor
(``min_information_gain_bits``) before taking the best by net value, and once the leading cause is above the confidence threshold
makes its fix and regression check the next step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dsdoctor.kb.inference import UNEXPLAINED, engine_settings
from dsdoctor.kb.lru import memo
from dsdoctor.kb.model import Experiment, KnowledgeBase


@dataclass
class OutcomeForecast:
    id: str
    probability: float  # P(outcome) under the current posterior
    leading_cause: str  # the most probable cause if this outcome comes back
    leading_probability: float


@dataclass
class Proposal:
    experiment: Experiment
    information_gain: float  # bits
    score: float  # net value: bit_value_gpu_minutes * information_gain - cost (GPU-minutes)
    separates: list[str]  # top causes whose expected outcomes differ
    outcomes: list[OutcomeForecast]


def entropy(dist: dict[str, float]) -> float:
    """Shannon entropy in bits."""
    return -sum(p * math.log2(p) for p in dist.values() if p > 0)


def information_gain(experiment: Experiment, posterior: dict[str, float],
                     h_now: float | None = None) -> tuple[float, list[OutcomeForecast]]:
    """Expected reduction of the entropy of the cause distribution, and the outcome forecasts.

    Uses H(P|o) = log2 P(o) - sum_c j(c,o) log2 j(c,o) / P(o) with j(c,o) = P(o|c) P(c) the joint,
    so no normalised posterior is built per outcome. ``h_now`` is H(posterior) when the caller has it.
    """
    if h_now is None:
        h_now = entropy(posterior)
    ids, default_row, rows = experiment.outcome_rows
    columns = [(cause, p, default_row if cause == UNEXPLAINED else rows.get(cause, default_row))
               for cause, p in posterior.items() if p > 0]
    expected = 0.0
    forecasts = []
    log2 = math.log2
    for k, outcome in enumerate(ids):
        p_o = 0.0
        plogp = 0.0
        lead, lead_p = "", -1.0
        for cause, p, row in columns:
            q = row[k]
            if q is None:
                continue
            j = q * p
            if j > 0.0:
                p_o += j
                plogp += j * log2(j)
                if j > lead_p or (j == lead_p and cause > lead):
                    lead, lead_p = cause, j
        if p_o <= 0:
            continue
        expected += p_o * log2(p_o) - plogp  # = p_o * H(P | o)
        forecasts.append(OutcomeForecast(outcome, p_o, lead, lead_p / p_o))
    return max(0.0, h_now - expected), forecasts


def partition_gain(experiment: Experiment, posterior: dict[str, float], group: Callable[[str], str]) -> float:
    """Expected information about which block of a partition of the hypotheses holds the cause: the
    causes ``group`` maps to one key are one hypothesis whose outcome distribution is their mixture."""
    ids, default_row, rows = experiment.outcome_rows
    blocks: dict[str, tuple[float, list[float]]] = {}
    for cause, p in posterior.items():
        if p <= 0.0:
            continue
        row = default_row if cause == UNEXPLAINED else rows.get(cause, default_row)
        key = group(cause)
        mass, mixed = blocks.get(key, (0.0, [0.0] * len(ids)))
        blocks[key] = (mass + p, [a + p * (q or 0.0) for a, q in zip(mixed, row, strict=True)])
    total = sum(mass for mass, _ in blocks.values())
    if total <= 0.0:
        return 0.0
    h_now = entropy({key: mass / total for key, (mass, _) in blocks.items()})
    expected = 0.0
    for k in range(len(ids)):
        joint = [mixed[k] / total for _, mixed in blocks.values() if mixed[k] > 0.0]
        p_o = sum(joint)
        if p_o > 0.0:
            expected += p_o * math.log2(p_o) - sum(j * math.log2(j) for j in joint)
    return max(0.0, h_now - expected)


def domain(cause: str) -> str:
    """The domain of a cause id (``comm.network_interface`` -> ``comm``); c0 is its own."""
    return cause.split(".", 1)[0]


def focused_gain(experiment: Experiment, posterior: dict[str, float], leaders: list[str],
                 by_domain: bool = False) -> float:
    """Expected information about which of ``leaders`` is the cause, or that none of them is: the
    other causes (and c0) are one hypothesis whose outcome distribution is their mixture, or with
    ``by_domain`` one hypothesis per domain (memory, comm, config, ...). An experiment that only
    reshuffles improbable causes of one domain among themselves gains nothing here; one that tells
    whole domains apart does, as the bisection a person runs (one GPU or all, one node or many,
    config or code) first narrows the domain."""
    lead = set(leaders)
    if by_domain:
        return partition_gain(experiment, posterior, lambda c: c if c in lead else "rest:" + domain(c))
    return partition_gain(experiment, posterior, lambda c: c if c in lead else "rest")


def leading_causes(posterior: dict[str, float], limit: int = 6) -> list[str]:
    """The ``limit`` most probable causes holding at least 1 % (c0 left out)."""
    return [c for c, p in sorted(posterior.items(), key=lambda kv: -kv[1]) if c != UNEXPLAINED and p >= 0.01][:limit]


def separated_causes(experiment: Experiment, posterior: dict[str, float], limit: int = 6,
                     leaders: list[str] | None = None) -> list[str]:
    """Leading causes whose most likely outcome under this experiment differs from another's."""
    leaders = leading_causes(posterior, limit) if leaders is None else leaders[:limit]
    expected = {}
    for cause in leaders:
        dist = experiment.outcome_probabilities(cause)
        expected[cause] = max(dist, key=lambda o: dist[o]) if dist else None
    if len(set(expected.values())) < 2:
        return []
    return leaders


#: proposals remembered per knowledge base: the same evidence gives the same posterior, bit for bit
PROPOSAL_MEMO_SIZE = 256


def propose(
    kb: KnowledgeBase, posterior: dict[str, float], done: set[str] | None = None, top: int = 3,
    min_gain: float = 1e-3,
) -> list[Proposal]:
    """The ``top`` experiments by net value of information among those expected to gain at least
    ``min_gain`` bits, skipping those already run."""
    done = frozenset(done or ())
    settings = engine_settings()
    bit_value = settings["bit_value_gpu_minutes"]
    focus = int(settings.get("planner_focus", 0))
    by_domain = bool(settings.get("planner_rest_by_domain", 0))
    power = settings.get("planner_posterior_power", 1.0)
    key = (tuple(posterior.items()), done, top, bit_value, min_gain, focus, by_domain, power)
    return list(memo(kb.cache, "proposal_memo", PROPOSAL_MEMO_SIZE).get_or_compute(
        key, lambda: _propose(kb, posterior, done, top, bit_value, min_gain, focus, by_domain, power)))


def planning_posterior(posterior: dict[str, float], power: float) -> dict[str, float]:
    """The posterior the planner weighs: raised to ``power`` (< 1 flattens) and renormalised."""
    if power == 1.0:
        return dict(posterior)
    raised = {c: p ** power for c, p in posterior.items() if p > 0.0}
    total = sum(raised.values()) or 1.0
    return {c: p / total for c, p in raised.items()}


def _propose(kb: KnowledgeBase, posterior: dict[str, float], done: frozenset[str], top: int,
             bit_value: float, min_gain: float, focus: int = 0, by_domain: bool = False,
             power: float = 1.0) -> list[Proposal]:
    # causes below 1e-5 cannot change an expected gain measurably; leaving them out halves the work
    posterior = {c: p for c, p in posterior.items() if p >= 1e-5}
    h_now = entropy(posterior)
    leaders = leading_causes(posterior)
    focused = leading_causes(posterior, limit=focus) if focus > 0 else []
    # the gain is weighed on the planning posterior; what an outcome is forecast to be, on the answer's own
    weighed = planning_posterior(posterior, power)
    h_weighed = entropy(weighed)
    proposals = []
    for experiment in kb.experiments.values():
        if experiment.id in done or getattr(experiment, "status", "active") != "active":
            continue
        gain, forecasts = information_gain(experiment, posterior, h_now)
        if focused:
            gain = focused_gain(experiment, weighed, focused, by_domain)
        elif power != 1.0:
            gain = information_gain(experiment, weighed, h_weighed)[0]
        if gain < max(min_gain, 1e-3):
            continue
        proposals.append(
            Proposal(experiment, gain, bit_value * gain - experiment.cost, separated_causes(experiment, posterior, leaders=leaders),
                     forecasts)
        )
    proposals.sort(key=lambda p: (-p.score, p.experiment.id))
    return proposals[:top]


@dataclass
class Settled:
    """An experiment the evidence already answers: its outcome and the symptom that gives it."""

    experiment: str
    outcome: str
    symptom: str


@dataclass
class Plan:
    """What to do next: the leading cause's fix when confident (else None), then the experiments."""

    fix_cause: str | None
    proposals: list[Proposal]
    settled: list[Settled]


def settled_experiments(kb: KnowledgeBase, present: dict[str, float], min_reliability: float = 0.99) -> list[Settled]:
    """Experiments one of whose outcomes a symptom seen in full (not a soft free-text match) gives."""
    out = []
    for experiment in kb.experiments.values():
        for outcome in experiment.outcomes:
            symptom = next((s for s in outcome.settled_by if present.get(s, 0.0) >= min_reliability), None)
            if symptom is not None:
                out.append(Settled(experiment.id, outcome.id, symptom))
                break
    return out


def plan(kb: KnowledgeBase, posterior: dict[str, float], present: dict[str, float],
         done: set[str] | None = None, top: int = 3) -> Plan:
    """The next steps a diagnosis shows (see the module docstring)."""
    settings = engine_settings()
    settled = settled_experiments(kb, present)
    skip = set(done or ()) | {s.experiment for s in settled}
    # the floor first, then the net value: cheap checks that barely move anything must not crowd
    # out, and then hide with themselves, an informative experiment that costs more
    proposals = propose(kb, posterior, skip, top=top, min_gain=settings["min_information_gain_bits"])
    leader = leading_causes(posterior, limit=1)
    fix = leader[0] if leader and posterior[leader[0]] >= settings["confident"] else None
    return Plan(fix, proposals, settled)
