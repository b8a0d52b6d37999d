"""Rank root causes: exact single-fault inference over cause -> mechanism -> symptom noisy-OR links.

Hypotheses are the knowledge base's causes plus c0, "something the knowledge base does not
describe". Under a cause c each of its mechanisms m is active with probability w(c->m),
independently; a symptom s is then present with probability
``1 - (1 - leak_s) * prod over active m of (1 - w(m->s))``. Symptoms of one mechanism are
therefore correlated (one active mechanism explains all of them at once), which is why the
likelihood sums over the mechanism states instead of multiplying marginals. Under c0 every
symptom appears only through its leak. Evidence per symptom:

* seen, with reliability r (soft evidence): P(s|z) + (1 - r) * (1 - P(s|z))
* known absent (a person or an experiment said no): 1 - P(s|z)
* not seen, although its source was supplied: 1 - a * P(s|z), a = absent_reliability * absence_scale

An experiment outcome o counts P(o|c) against its default, or 1 - P(o|c) when it did not happen. One
read from a person's words ("with NCCL_P2P_DISABLE=1 it works") has a strength r < 1 and counts like a
soft symptom: r * P(o|c) + (1 - r), i.e. with probability 1 - r the words say nothing.

The posterior is prior x likelihood, normalised over the causes and c0. Each symptom's weight for
a cause is its log-likelihood ratio against c0, which is what the explanation shows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dsdoctor.kb.graph import cause_likelihoods, noisy_or_likelihood
from dsdoctor.kb.lru import memo
from dsdoctor.kb.model import Cause, KnowledgeBase
from dsdoctor.rules.model import Extraction, JobContext

UNEXPLAINED = "unexplained"
#: the phase names of the rules layer and the symptom that states each
PHASE_SYMPTOMS = {"launch": "s.phase_launch", "first-step": "s.phase_first_step", "steady": "s.phase_steady",
                  "checkpoint": "s.phase_checkpoint", "eval": "s.phase_eval", "exit": "s.phase_exit"}
SETTINGS_FILE = Path(__file__).with_name("engine.yaml")


@lru_cache(maxsize=1)
def engine_settings() -> dict[str, float]:
    """The engine's numeric settings (kb/engine.yaml); a snapshot where the CLI keeps them (kb/snapshot.py)."""
    from dsdoctor.kb import snapshot

    return snapshot.cached("engine", lambda: [SETTINGS_FILE], ("dsdoctor.kb.inference",), _read_engine_settings)


def _read_engine_settings() -> dict[str, float]:
    import yaml  # only on a snapshot miss: the import is ~15 ms of a small diagnosis

    with SETTINGS_FILE.open(encoding="utf-8") as fh:
        return {k: float(v) for k, v in yaml.safe_load(fh).items()}


@contextmanager
def engine_settings_replaced(values: Mapping[str, float]) -> Iterator[None]:
    """Within this block the engine runs with these kb/engine.yaml settings replaced (benches
    and cross-validation); the cached settings are restored, absent keys removed, on the way out."""
    settings = engine_settings()
    saved = {k: settings[k] for k in values if k in settings}
    settings.update(values)
    try:
        yield
    finally:
        for k in values:
            settings.pop(k, None)
        settings.update(saved)


@dataclass
class EvidenceState:
    """What is known, per symptom and experiment, in the form the model consumes."""

    present: dict[str, float] = field(default_factory=dict)  # symptom -> reliability in (0, 1]
    absent: set[str] = field(default_factory=set)  # symptoms known absent
    absent_strength: dict[str, float] = field(default_factory=dict)  # strength of a soft "no" (default 1)
    supplied: set[str] = field(default_factory=set)  # evidence sources that were supplied
    outcomes: list[tuple[str, str, bool]] = field(default_factory=list)  # (experiment, outcome, happened)
    outcome_strength: dict[tuple[str, str], float] = field(default_factory=dict)  # below 1: read from words
    context: JobContext = field(default_factory=JobContext)
    phase: str = "unknown"
    phase_from_words: bool = False  # the phase was read from a description, not from the logs
    text_factors: dict[str, float] = field(default_factory=dict)  # cause -> soft log-ratio of the words (kb/retrieval.py)

    @classmethod
    def from_extraction(cls, extraction: Extraction) -> EvidenceState:
        settings = engine_settings()
        present: dict[str, float] = {}
        # victim lines only lose weight when an origin error elsewhere explains them (the rules
        # layer then reports s.secondary_timeouts); in a pure hang the watchdog timeouts are the
        # first error and count in full
        has_origin = "s.secondary_timeouts" in extraction.symptoms
        for sid, obs in extraction.symptoms.items():
            reliability = obs.reliability
            if obs.secondary and has_origin:
                reliability = min(reliability, settings["secondary_reliability"])
            present[sid] = max(present.get(sid, 0.0), reliability)
        phase = extraction.phase
        phase_from_words = False
        if phase in ("unknown", "", None):  # no phase in the logs: take it from a person's words
            told = [name for name, sid in PHASE_SYMPTOMS.items() if sid in present]
            phase = told[0] if len(told) == 1 else "unknown"
            phase_from_words = phase != "unknown"
        outcomes = [(o.experiment, o.outcome, o.happened) for o in extraction.outcomes]
        strength = {(o.experiment, o.outcome): o.reliability for o in extraction.outcomes}
        return cls(
            present=present,
            outcomes=outcomes,
            outcome_strength=strength,
            absent=set(extraction.absent) - set(present),
            absent_strength=dict(extraction.absent_strength),
            supplied=set(extraction.supplied_sources) | {"derived"},
            context=extraction.context,
            phase=phase,
            phase_from_words=phase_from_words,
        )


@dataclass
class SymptomWeight:
    symptom: str
    state: str  # present | absent | unseen
    weight: float  # log-likelihood ratio against c0 (natural log)
    likelihood: float  # P(s | cause), marginal
    mechanism: str | None  # strongest mechanism on the path, when the cause reaches the symptom


@dataclass
class RankedCause:
    id: str
    probability: float
    prior: float
    log_likelihood_ratio: float
    weights: list[SymptomWeight]
    unexplained_present: list[str]  # symptoms seen that this cause does not produce
    outcome_factors: list[tuple[str, float]]  # (experiment=outcome, log ratio against c0)
    phase_note: str | None = None


@dataclass
class Ranking:
    causes: list[RankedCause]  # sorted by descending probability
    unexplained: float  # posterior of c0
    ruled_out: list[tuple[str, str]]  # (cause id, reason)
    posterior: dict[str, float]  # cause id (and UNEXPLAINED) -> probability


# ---------------------------------------------------------------- compiled per-cause tables


@dataclass
class _CauseTable:
    mechanisms: list[tuple[str, float]]  # (mechanism, w(c->m))
    reach: dict[str, list[tuple[int, float]]]  # symptom -> [(mechanism index, w(m->s))]
    marginal: dict[str, float]  # symptom -> P(s | c)


#: memo sizes per knowledge base: failures of one kind repeat, and so does their evidence. A ratio or an
#: explanation is small (~1-5 KB in memory), a whole ranking is not (~50-100 KB), hence fewer of those.
LIKELIHOOD_MEMO_SIZE = 4096
RANKING_MEMO_SIZE = 128


def _tables(kb: KnowledgeBase) -> dict[str, _CauseTable]:
    tables = kb.cache.get("inference_tables")
    if tables is None:
        tables = {cid: _compile_cause(kb, cause) for cid, cause in kb.causes.items()}
        kb.cache["inference_tables"] = tables
    return tables


def _compile_cause(kb: KnowledgeBase, cause: Cause) -> _CauseTable:
    mechanisms = [(mid, w) for mid, w in cause.mechanisms.items() if mid in kb.mechanisms]
    reach: dict[str, list[tuple[int, float]]] = {}
    for index, (mid, _) in enumerate(mechanisms):
        for sid, w_ms in kb.mechanisms[mid].symptoms.items():
            if sid in kb.symptoms:
                reach.setdefault(sid, []).append((index, w_ms))
    # the marginals are the loader's table (kb/graph.py), computed once per load
    marginal = kb.likelihoods.get(cause.id) or cause_likelihoods(cause, kb.mechanisms, kb.symptoms)
    return _CauseTable(mechanisms, reach, marginal)


def symptom_likelihood(kb: KnowledgeBase, symptom_id: str, cause_id: str) -> float:
    """Marginal P(symptom | cause) under the noisy-OR model (the leak when it is not reached)."""
    return noisy_or_likelihood(kb, symptom_id, cause_id)


# ---------------------------------------------------------------- evidence factors


def _factor(p: float, state: str, strength: float) -> float:
    if state == "present":  # strength = reliability of the observation
        return p + (1.0 - strength) * (1.0 - p)
    value = 1.0 - strength * p  # absent (strength 1) or unseen (strength a)
    return value if value > 1e-12 else 1e-12


def _evidence_symptoms(kb: KnowledgeBase, ev: EvidenceState) -> dict[str, tuple[str, float]]:
    """Every symptom that carries evidence, with its state and strength."""
    scale = engine_settings()["absence_scale"]
    frameworks = set(ev.context.frameworks)
    out: dict[str, tuple[str, float]] = {}
    for sid, symptom in kb.symptoms.items():
        if sid in ev.present:
            out[sid] = ("present", ev.present[sid])
        elif sid in ev.absent:
            out[sid] = ("absent", ev.absent_strength.get(sid, 1.0))
        elif symptom.source in ev.supplied and symptom.absent_reliability > 0 \
                and not (frameworks and symptom.printed_by and frameworks.isdisjoint(symptom.printed_by)):
            # a message only other frameworks print is not missing from this job's logs
            out[sid] = ("unseen", symptom.absent_reliability * scale)
    return out


def _cause_log_ratio(
    table: _CauseTable, kb: KnowledgeBase, evidence: dict[str, tuple[str, float]], max_exact: int
) -> float:
    """log P(E | c) - log P(E | c0), exact over the states of the relevant mechanisms.

    A symptom reached by one mechanism only depends on that mechanism's state, so its factor folds
    into the mechanism's "on" and "off" products; mechanisms that no multi-mechanism symptom couples
    then sum out independently, and only the coupled ones are enumerated (same value, fewer terms).
    """
    relevant = [sid for sid in table.reach if sid in evidence]
    if not relevant:
        return 0.0
    symptoms = kb.symptoms
    reach = table.reach
    mech_ids = sorted({i for sid in relevant for i, _ in reach[sid]})
    leak_log = sum(math.log(_factor(symptoms[s].leak, *evidence[s])) for s in relevant)
    if len(mech_ids) > max_exact:  # independent-marginal fallback
        total = sum(math.log(_factor(table.marginal[s], *evidence[s])) for s in relevant)
        return total - leak_log
    position = {m: k for k, m in enumerate(mech_ids)}
    on = [1.0] * len(mech_ids)  # product of the single-mechanism symptoms' factors, mechanism active
    off = [1.0] * len(mech_ids)  # ... and inactive
    coupled: list[tuple[float, str, float, list[tuple[int, float]]]] = []
    for sid in relevant:
        kind, strength = evidence[sid]
        leak = symptoms[sid].leak
        links = reach[sid]
        if len(links) == 1:
            k = position[links[0][0]]
            off[k] *= _factor(leak, kind, strength)
            on[k] *= _factor(1.0 - (1.0 - leak) * (1.0 - links[0][1]), kind, strength)
        else:
            coupled.append((1.0 - leak, kind, strength, [(position[i], 1.0 - w) for i, w in links]))
    weights = [table.mechanisms[i][1] for i in mech_ids]
    joint = sorted({k for *_, links in coupled for k, _ in links})
    total = 1.0
    for k, w in enumerate(weights):
        if k not in joint:
            total *= w * on[k] + (1.0 - w) * off[k]
    if joint:
        summed = 0.0
        for state in itertools.product((False, True), repeat=len(joint)):
            active = [False] * len(weights)
            term = 1.0
            for k, is_on in zip(joint, state, strict=True):
                active[k] = is_on
                term *= weights[k] * on[k] if is_on else (1.0 - weights[k]) * off[k]
            if term == 0.0:
                continue
            for no_leak, kind, strength, links in coupled:
                miss = no_leak
                for k, w_miss in links:
                    if active[k]:
                        miss *= w_miss
                term *= _factor(1.0 - miss, kind, strength)
            summed += term
        total *= summed
    return math.log(max(total, 1e-300)) - leak_log


# ---------------------------------------------------------------- priors and context


def gate(cause: Cause, context: JobContext, phase: str, from_words: bool = False) -> tuple[float, str | None]:
    """Context factor for a cause: 0 with the reason when it cannot apply, a soft factor otherwise."""
    ctx = cause.context
    if ctx.precision and context.precision and context.precision not in ctx.precision:
        return 0.0, f"needs {'/'.join(ctx.precision)} but the job runs {context.precision}"
    if ctx.zero_stage is not None and context.zero_stage is not None and context.zero_stage not in ctx.zero_stage:
        return 0.0, f"needs ZeRO stage {ctx.zero_stage} but the job uses stage {context.zero_stage}"
    if ctx.offload and context.offload is False:
        return 0.0, "needs ZeRO offload, which the config does not enable"
    if ctx.min_nodes and context.nodes is not None and context.nodes < ctx.min_nodes:
        return 0.0, f"needs at least {ctx.min_nodes} nodes; the job ran on {context.nodes}"
    if ctx.min_world_size and context.world_size is not None and context.world_size < ctx.min_world_size:
        return 0.0, f"needs at least {ctx.min_world_size} ranks; the job ran {context.world_size}"
    if ctx.phases and phase not in ("unknown", "", None) and phase not in ctx.phases:
        key = "phase_mismatch_factor_words" if from_words else "phase_mismatch_factor"
        return engine_settings()[key], f"usually shows at {', '.join(ctx.phases)}, not {phase}"
    return 1.0, None


def site_priors(kb: KnowledgeBase, site_counts: dict[str, int] | None) -> dict[str, float]:
    """Knowledge-base priors updated with this site's confirmed incidents (Dirichlet posterior mean)."""
    # the knowledge base's priors are mostly estimates: ``prior_temper`` < 1 narrows their spread
    temper = engine_settings().get("prior_temper", 1.0)
    base = {cid: c.prior ** temper for cid, c in kb.causes.items()}
    total = sum(base.values()) or 1.0
    counts = {cid: n for cid, n in (site_counts or {}).items() if cid in base and n > 0}
    strength = engine_settings()["site_prior_strength"]
    n_total = sum(counts.values())
    return {cid: (strength * p / total + counts.get(cid, 0)) / (strength + n_total) for cid, p in base.items()}


# ---------------------------------------------------------------- ranking


def rank(kb: KnowledgeBase, ev: EvidenceState, site_counts: dict[str, int] | None = None,
         explain_top: int = 10) -> Ranking:
    """Posterior over every cause and c0, with the weights for and against the ``explain_top`` first."""
    settings = engine_settings()
    evidence = _evidence_symptoms(kb, ev)
    ctx = ev.context
    key = ("rank", tuple(sorted(evidence.items())), tuple(sorted((site_counts or {}).items())), ev.phase,
           tuple(ev.outcomes), tuple(sorted(ev.outcome_strength.items())), ev.phase_from_words,
           (ctx.precision, ctx.zero_stage, ctx.offload, ctx.nodes, ctx.world_size, ctx.gpu,
            tuple(sorted(ctx.versions.items()))), explain_top, tuple(sorted(settings.items())),
           tuple(sorted(ev.text_factors.items())))
    found = memo(kb.cache, "ranking_memo", RANKING_MEMO_SIZE).get_or_compute(
        key, lambda: _rank(kb, ev, evidence, site_counts, explain_top))
    # the ranked causes are shared with the memo and never changed after ranking; the containers are copies
    return Ranking(list(found.causes), found.unexplained, list(found.ruled_out), dict(found.posterior))


def _rank(kb: KnowledgeBase, ev: EvidenceState, evidence: dict[str, tuple[str, float]],
          site_counts: dict[str, int] | None, explain_top: int) -> Ranking:
    settings = engine_settings()
    tables = _tables(kb)
    priors = site_priors(kb, site_counts)
    temper = settings["temper"]
    max_exact = int(settings["max_exact_mechanisms"])
    remembered = memo(kb.cache, "likelihood_memo", LIKELIHOOD_MEMO_SIZE)
    keys: dict[str, tuple] = {}  # cause -> the evidence about the symptoms it reaches (memo key)

    scores: dict[str, float] = {}
    notes: dict[str, str | None] = {}
    ruled_out: list[tuple[str, str]] = []
    outcome_logs: dict[str, list[tuple[str, float]]] = {}
    for cid, cause in kb.causes.items():
        if getattr(cause, "status", "active") != "active":
            continue
        factor, reason = gate(cause, ev.context, ev.phase, ev.phase_from_words)
        if factor == 0.0 or priors[cid] <= 0.0:
            ruled_out.append((cid, reason or "prior is zero"))
            continue
        notes[cid] = reason
        table = tables[cid]
        # the ratio depends only on the evidence about the symptoms this cause reaches
        keys[cid] = key = (cid, tuple(map(evidence.get, table.reach)))  # reach's keys, in its order
        llr = temper * remembered.get_or_compute(("ratio", max_exact, key),
                                                 lambda t=table: _cause_log_ratio(t, kb, evidence, max_exact))
        outcome_logs[cid] = _outcome_log_ratios(kb, cid, ev.outcomes, ev.outcome_strength)
        llr += ev.text_factors.get(cid, 0.0)
        scores[cid] = math.log(priors[cid] * factor * (1.0 - settings["unexplained_prior"])) + llr
    scores[UNEXPLAINED] = math.log(settings["unexplained_prior"]) + temper * _unexplained_log_ratio(kb, evidence)
    if ev.text_factors:  # words that fit no document better than the average one favour no cause over c0
        scores[UNEXPLAINED] += sum(ev.text_factors.values()) / len(ev.text_factors)

    # the temperature calibrates what the evidence says; experiment outcomes then update it by plain
    # Bayes, exactly as the planner predicts them (kb/planner.py)
    sharpen = 1.0 / settings.get("posterior_temperature", 1.0)
    ratios = {cid: scores[cid] - math.log(priors[cid] * (1.0 - settings["unexplained_prior"]))
              + sum(v for _, v in outcome_logs[cid]) for cid in outcome_logs}
    for cid in scores:
        scores[cid] = sharpen * scores[cid] + sum(v for _, v in outcome_logs.get(cid, ()))
    top = max(scores.values())
    weights = {k: math.exp(v - top) for k, v in scores.items()}
    norm = sum(weights.values())
    posterior = {k: w / norm for k, w in weights.items()}

    ranked = [
        RankedCause(
            id=cid,
            probability=posterior[cid],
            prior=priors[cid],
            log_likelihood_ratio=ratios[cid],
            weights=[],
            unexplained_present=[],
            outcome_factors=outcome_logs[cid],
            phase_note=notes[cid],
        )
        for cid in scores
        if cid != UNEXPLAINED
    ]
    ranked.sort(key=lambda r: (-r.probability, r.id))
    for rc in ranked[:explain_top]:  # explanations only for the causes an answer can show
        rc.weights = list(remembered.get_or_compute(("explain", keys[rc.id]),
                                                    lambda t=tables[rc.id]: _explain(kb, t, evidence)))
        rc.unexplained_present = sorted(s for s in ev.present if s in kb.symptoms and s not in tables[rc.id].reach)
    return Ranking(ranked, posterior[UNEXPLAINED], sorted(ruled_out), posterior)


def _unexplained_log_ratio(kb: KnowledgeBase, evidence: dict[str, tuple[str, float]]) -> float:
    """log P(E | c0) against the leak-only baseline: seen symptoms get the background rate."""
    background = engine_settings()["unexplained_background"]
    total = 0.0
    for sid, (state, strength) in evidence.items():
        leak = kb.symptoms[sid].leak
        if state == "present" and background > leak and kb.symptoms[sid].severity != "info":
            total += math.log(_factor(background, state, strength)) - math.log(_factor(leak, state, strength))
    return total


def _outcome_log_ratios(kb: KnowledgeBase, cause_id: str, outcomes: list[tuple[str, str, bool]],
                        strength: dict[tuple[str, str], float] | None = None) -> list[tuple[str, float]]:
    """(experiment=outcome, log ratio against c0) per outcome; ``strength`` < 1 softens one read from words."""
    out = []
    for exp_id, outcome, happened in outcomes:
        experiment = kb.experiments.get(exp_id)
        if experiment is None:
            continue
        p_c = experiment.outcome_probabilities(cause_id).get(outcome, 0.0)
        p_0 = experiment.default.get(outcome, 0.0)
        if not happened:
            p_c, p_0 = 1.0 - p_c, 1.0 - p_0
        r = (strength or {}).get((exp_id, outcome), 1.0)
        p_c, p_0 = r * p_c + (1.0 - r), r * p_0 + (1.0 - r)
        out.append((f"{exp_id}={outcome}", math.log(max(p_c, 1e-6)) - math.log(max(p_0, 1e-6))))
    return out


def _explain(kb: KnowledgeBase, table: _CauseTable, evidence: dict[str, tuple[str, float]]) -> list[SymptomWeight]:
    out = []
    for sid, (state, strength) in evidence.items():
        if sid not in table.reach:
            continue
        p_c = table.marginal[sid]
        weight = math.log(_factor(p_c, state, strength)) - math.log(_factor(kb.symptoms[sid].leak, state, strength))
        if abs(weight) < 0.05:
            continue
        best = max(table.reach[sid], key=lambda link: table.mechanisms[link[0]][1] * link[1])
        out.append(SymptomWeight(sid, state, weight, p_c, table.mechanisms[best[0]][0]))
    out.sort(key=lambda w: -abs(w.weight))
    return out


def to_jsonable(obj: Any) -> Any:
    """Dataclasses of this module as plain JSON-able values (for debugging and tests)."""
    from dataclasses import asdict, is_dataclass

    return asdict(obj) if is_dataclass(obj) else obj
