"""Assemble a diagnosis: evidence -> rules -> symptoms -> ranked causes + next experiments.

This is the one function the CLI, the REST API and chat-ops call. It returns the diagnosis
object of the evidence contract (plain JSON-able dict) with each cause's explanation.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dsdoctor.kb.commands import steps as command_steps
from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.kb.inference import EvidenceState, Ranking, engine_settings, rank
from dsdoctor.kb.model import KnowledgeBase, Text
from dsdoctor.kb.planner import plan
from dsdoctor.rules.model import Extraction, ReportedOutcome

#: how many evidence lines of each symptom a diagnosis carries
LINES_PER_SYMPTOM = 5


def new_id() -> str:
    """A sortable, unguessable diagnosis id: UTC time then randomness."""
    return dt.datetime.now(dt.UTC).strftime("d%Y%m%d%H%M%S") + secrets.token_hex(4)


def parse_observations(raw: dict[str, Any] | None, kb: KnowledgeBase) -> tuple[EvidenceState, list[str]]:
    """Turn `observations` ({"x.exp=outcome": true, "s.sym": false}) into evidence; unknown keys warn."""
    state = EvidenceState()
    warnings: list[str] = []
    for key, value in (raw or {}).items():
        happened = bool(value)
        if "=" in key:
            exp_id, outcome = key.split("=", 1)
            experiment = kb.experiments.get(exp_id)
            if experiment is None:
                warnings.append(f"unknown experiment in observations: {exp_id!r}")
            elif outcome not in {o.id for o in experiment.outcomes}:
                allowed = ", ".join(o.id for o in experiment.outcomes)
                warnings.append(f"unknown outcome {outcome!r} of {exp_id}; allowed: {allowed}")
            else:
                state.outcomes.append((exp_id, outcome, happened))
        elif key in kb.symptoms and happened:
            state.present[key] = 1.0
        elif key in kb.symptoms:
            state.absent.add(key)
        else:
            warnings.append(f"unknown observation key: {key!r} (not a symptom or experiment=outcome)")
    return state, warnings


def diagnose(
    evidence: dict[str, Any],
    *,
    kb: KnowledgeBase | None = None,
    log_files: Sequence[tuple[str, Path]] = (),
    site_counts: dict[str, int] | None = None,
    similar: Callable[[list[str], str], list[dict[str, Any]]] | None = None,
    lang: str = "en",
    top: int = 5,
    progress: Callable[[int], None] | None = None,
    diagnosis_id: str | None = None,
) -> dict[str, Any]:
    """Diagnose one evidence document (plus log files streamed from disk) into a diagnosis dict."""
    from dsdoctor.rules.extract import extract

    if kb is None:
        from dsdoctor.kb.loader import get_kb

        kb = get_kb()
    if not (evidence.get("description") or evidence.get("logs") or log_files):
        raise DsdoctorError("evidence needs at least one of 'description' or 'logs'")
    extraction = extract(evidence, log_files=log_files, progress=progress)
    result = diagnose_extraction(
        extraction, evidence.get("observations"), kb=kb, site_counts=site_counts, similar=similar,
        lang=lang, top=top, diagnosis_id=diagnosis_id, description=evidence.get("description") or "",
    )
    return with_job(result, evidence)


def with_job(result: dict[str, Any], evidence: dict[str, Any]) -> dict[str, Any]:
    """Carry the evidence's ``job`` identity (id, name, cluster, run_url, labels) into the diagnosis."""
    if evidence.get("job"):
        result["job"] = dict(evidence["job"])
    return result


def diagnose_extraction(
    extraction: Extraction,
    observations: dict[str, Any] | None,
    *,
    kb: KnowledgeBase,
    site_counts: dict[str, int] | None = None,
    similar: Callable[[list[str], str], list[dict[str, Any]]] | None = None,
    lang: str = "en",
    top: int = 5,
    diagnosis_id: str | None = None,
    description: str = "",
) -> dict[str, Any]:
    """Rank causes and plan experiments for an extraction plus explicit observations."""
    state = EvidenceState.from_extraction(extraction)
    asked, warnings = parse_observations(observations, kb)
    state.present.update(asked.present)
    for sid in asked.absent:
        state.present.pop(sid, None)
        state.absent_strength.pop(sid, None)  # a person's explicit "no" counts in full
    state.absent |= asked.absent
    # an explicit observation about an experiment wins over what the words said about it
    told = {exp for exp, _, _ in asked.outcomes}
    reported = [o for o in extraction.outcomes if o.experiment not in told and o.experiment in kb.experiments
                and o.outcome in {x.id for x in kb.experiments[o.experiment].outcomes}]
    state.outcomes = [(o.experiment, o.outcome, o.happened) for o in reported] + asked.outcomes
    state.outcome_strength = {(o.experiment, o.outcome): o.reliability for o in reported}
    if description:
        from dsdoctor.kb.retrieval import log_factors

        state.text_factors = log_factors(kb, description, engine_settings()["text_weight"])
        _no_fault_asked(kb, state)
    unknown = sorted(s for s in state.present if s not in kb.symptoms)
    warnings += [f"rules asserted a symptom the knowledge base lacks: {s}" for s in unknown]

    ranking = rank(kb, state, site_counts)
    done = {exp for exp, _, _ in state.outcomes}
    steps = plan(kb, ranking.posterior, state.present, done, top=3)
    observed_ids = sorted(s for s in state.present if s in kb.symptoms)
    similar_items: list[dict[str, Any]] = []
    if similar:
        from dsdoctor.kb.incidents.similar import (
            for_diagnosis,  # the index's modules; only when a store answers
        )

        similar_items = for_diagnosis(similar(observed_ids, description), observed_ids, _mechanisms_of(kb))
    return {
        "id": diagnosis_id or new_id(),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "lang": lang,
        "summary": _summary(kb, ranking, lang, bool(steps.proposals), _faulty_verdict(kb, state, ranking)),
        "causes": [_cause(kb, rc, extraction, lang, site_counts) for rc in ranking.causes[:top]],
        "unexplained": round(ranking.unexplained, 4),
        "ruled_out": [{"id": cid, "reason": reason} for cid, reason in ranking.ruled_out],
        "symptoms": _symptoms(kb, extraction, state, lang),
        "first_error": _first_error(extraction),
        "scope": extraction.scope,
        "scope_detail": dict(extraction.scope_detail),
        "phase": extraction.phase,
        "context": _context(extraction),
        "config_findings": [
            {"id": f.id, "severity": f.severity, "message": f.message.get(lang) or f.message.get("en", ""),
             "key_path": f.key_path, "symptom": f.symptom}
            for f in extraction.config_findings
        ],
        "next_step": _fix_step(kb, steps.fix_cause, lang) if steps.fix_cause else None,
        "next_experiments": [_proposal(kb, p, lang, extraction) for p in steps.proposals],
        "settled_experiments": [{"id": x.experiment, "outcome": x.outcome, "by": x.symptom,
                                 "observe": f"{x.experiment}={x.outcome}"} for x in steps.settled],
        "observations": dict(observations or {}),
        "reported_experiments": [_reported(kb, o, lang) for o in reported],
        "similar_incidents": similar_items,
        "warnings": warnings + list(extraction.warnings),
        "stats": {"bytes": extraction.bytes_processed, "lines": extraction.lines_processed},
    }


# ---------------------------------------------------------------- pieces


def _t(text: Text | None, lang: str) -> str:
    return text.get(lang) if text else ""


#: what to send when the evidence shows no fault: the sources that locate most failures
NEXT_EVIDENCE = Text(
    en="the log of the first failing rank from its start to its end (not only the last lines), the launcher's "
       "output, dmesg and `nvidia-smi -q` of the failing node, the ds_config, and a sentence on what went wrong "
       "(hang, crash, NaN, slow, OOM) and when",
    zh="最先出错的 rank 从启动到结束的完整日志（不只是最后几行）、启动器输出、出错节点的 dmesg 与 `nvidia-smi -q`、"
       "ds_config，以及一句话说明出了什么问题（卡住、崩溃、NaN、变慢、OOM）和发生的时间",
)


#: the catalog's cause for evidence that shows no fault
NO_FAULT = "none.no_fault"
#: the reporter asking whether a line is normal (rules/data/lexicon.yaml ``asks_if_normal``)
ASKS_IF_NORMAL = "s.asks_if_output_normal"


def shows_a_fault(kb: KnowledgeBase, state: EvidenceState) -> bool:
    """Does the evidence say anything is wrong: a symptom above info level, an experiment's outcome
    or a "no" about such a symptom? Retrieval's resemblance of the words to a cause's texts is not a
    fault: every text resembles some cause, and a healthy printout resembles the causes it mentions."""
    def fault(sid: str) -> bool:
        return sid in kb.symptoms and kb.symptoms[sid].severity != "info"

    return bool(state.outcomes or any(map(fault, state.absent)) or any(map(fault, state.present)))


def _no_fault_asked(kb: KnowledgeBase, state: EvidenceState) -> None:
    """Nothing shows a fault and the reporter asks whether the output is normal: retrieval may not
    rank a fault above the no-fault cause, so the no-fault cause gets the best text factor."""
    if (NO_FAULT in kb.causes and state.text_factors and ASKS_IF_NORMAL in state.present
            and not shows_a_fault(kb, state)):
        state.text_factors[NO_FAULT] = max(state.text_factors.values())


def _faulty_verdict(kb: KnowledgeBase, state: EvidenceState, ranking: Ranking) -> bool:
    """False (the no-fault verdict) when nothing shows a fault and retrieval did not rank one either."""
    if shows_a_fault(kb, state):
        return True
    return bool(state.text_factors) and bool(ranking.causes) and ranking.causes[0].id != NO_FAULT


def _summary(kb: KnowledgeBase, ranking: Ranking, lang: str, experiments_left: bool = True,
             faulty: bool = True) -> dict[str, Any]:
    settings = engine_settings()
    best = ranking.causes[0] if ranking.causes else None
    if not faulty:
        verdict = "no_fault_found"
        text = {
            "en": f"No fault found in what was supplied: no error line, no anomaly, nothing described. Send {NEXT_EVIDENCE.en}.",
            "zh": f"所提供的材料中没有发现故障：没有报错行、没有异常、也没有文字描述。请补充{NEXT_EVIDENCE.zh}。",
        }
    elif ranking.unexplained >= settings["unexplained_dominates"] or best is None:
        verdict = "unexplained"
        text = {
            "en": f"No modelled root cause explains this evidence well ({ranking.unexplained:.0%} unexplained); "
            "add logs from the first failing rank, dmesg or a description, or record it as a new incident.",
            "zh": f"知识库中没有能很好解释这些证据的根因（{ranking.unexplained:.0%} 无法解释）；"
            "请补充最先出错 rank 的日志、dmesg 或文字描述，或记录为新事故。",
        }
    elif best.probability >= settings["confident"]:
        verdict = "confident"
        title = kb.causes[best.id].title
        text = {
            "en": f"Most likely {best.id} — {title.en} ({best.probability:.0%}).",
            "zh": f"最可能的根因：{best.id} — {title.zh}（{best.probability:.0%}）。",
        }
    else:
        verdict = "uncertain"
        title = kb.causes[best.id].title
        text = {
            "en": f"Leading candidate {best.id} — {title.en} ({best.probability:.0%}); "
            "run the next experiment to separate the candidates.",
            "zh": f"首要候选：{best.id} — {title.zh}（{best.probability:.0%}）；请执行下一步隔离实验以区分候选根因。",
        }
        if not experiments_left:  # nothing above the information floor: say what would help instead
            text = {
                "en": f"Leading candidate {best.id} — {title.en} ({best.probability:.0%}); no experiment left "
                "would change that much: add evidence (logs of other ranks, dmesg) or record what you know with --observe.",
                "zh": f"首要候选：{best.id} — {title.zh}（{best.probability:.0%}）；已没有能明显改变排序的实验："
                "请补充证据（其他 rank 的日志、dmesg）或用 --observe 记录已知事实。",
            }
    return {"verdict": verdict, "text": text[lang if lang in text else "en"]}


def _cause(kb, rc, extraction: Extraction, lang: str, site_counts) -> dict[str, Any]:
    cause = kb.causes[rc.id]
    supporting, contradicting, paths = [], [], []
    for w in rc.weights:
        symptom = kb.symptoms[w.symptom]
        where = _where(extraction, w.symptom)
        label = f"{_t(symptom.title, lang)} [{w.symptom}]{where} ({w.weight:+.1f})"
        if w.weight > 0:
            supporting.append(label)
            if w.mechanism:
                paths.append([w.symptom, w.mechanism, rc.id])
        else:
            contradicting.append(label)
    for sid in rc.unexplained_present:
        if sid in extraction.symptoms and extraction.symptoms[sid].secondary:
            continue
        contradicting.append(f"{_t(kb.symptoms[sid].title, lang)} [{sid}] " + ("不由此根因解释" if lang == "zh" else "is not explained by this cause"))
    for key, value in rc.outcome_factors:
        (supporting if value > 0 else contradicting).append(f"{key} ({value:+.1f})")
    if rc.phase_note:
        contradicting.append(rc.phase_note)
    n_site = (site_counts or {}).get(rc.id, 0)
    return {
        "id": rc.id,
        "probability": round(rc.probability, 4),
        "domain": cause.domain,
        "parent": cause.parent,
        "title": _t(cause.title, lang),
        "description": _t(cause.description, lang),
        "prior": round(rc.prior, 4),
        "site_incidents": n_site,
        "supporting": supporting,
        "contradicting": contradicting,
        "path": paths[0] if paths else [],
        "paths": paths[:5],
        "weights": [
            {"symptom": w.symptom, "state": w.state, "weight": round(w.weight, 3),
             "likelihood": round(w.likelihood, 3), "mechanism": w.mechanism}
            for w in rc.weights
        ],
        "fixes": [{"title": _t(f.title, lang), "kind": f.kind, "snippet": f.snippet} for f in cause.fixes],
        "regression": _t(cause.regression, lang),
        "prevention": _t(cause.prevention, lang),
        "references": list(cause.references),
    }


def _reported(kb: KnowledgeBase, o: ReportedOutcome, lang: str) -> dict[str, Any]:
    """An experiment the reporter already ran, as read from their words (the planner skips it)."""
    experiment = kb.experiments[o.experiment]
    titles = {x.id: _t(x.title, lang) for x in experiment.outcomes}
    return {"observe": o.key, "experiment": o.experiment, "title": _t(experiment.title, lang),
            "outcome": o.outcome, "outcome_title": titles.get(o.outcome, o.outcome), "happened": o.happened,
            "reliability": round(o.reliability, 3), "rule": o.rule, "source": o.source, "lineno": o.lineno,
            "text": o.text}


def _where(extraction: Extraction, sid: str) -> str:
    obs = extraction.symptoms.get(sid)
    if obs is None or not obs.ranks:
        return ""
    ranks = sorted(obs.ranks)
    shown = ", ".join(str(r) for r in ranks[:6]) + (" …" if len(ranks) > 6 else "")
    return f" on rank{'s' if len(ranks) > 1 else ''} {shown}"


def _symptoms(kb, extraction: Extraction, state: EvidenceState, lang: str) -> list[dict[str, Any]]:
    out = []
    for sid, reliability in sorted(state.present.items(), key=lambda kv: _order(extraction, kv[0])):
        obs = extraction.symptoms.get(sid)
        symptom = kb.symptoms.get(sid)
        refs = obs.lines[:LINES_PER_SYMPTOM] if obs else []
        out.append({
            "id": sid,
            "title": _t(symptom.title, lang) if symptom else sid,
            "severity": symptom.severity if symptom else "info",
            "ranks": sorted(obs.ranks) if obs else [],
            "nodes": sorted(obs.nodes) if obs else [],
            "count": obs.count if obs else 1,
            "first_seen": obs.first_seen if obs else None,
            "secondary": bool(obs and obs.secondary),
            "reliability": round(reliability, 3),
            "rules": sorted(obs.rules) if obs else ["observation"],
            "lines": [ref.text for ref in refs],
            "line_refs": [
                {"source": r.source, "lineno": r.lineno, "rank": r.rank, "node": r.node, "time": r.time,
                 "rule": r.rule, "text": r.text, "fields": r.fields}
                for r in refs
            ],
        })
    return out


def _order(extraction: Extraction, sid: str) -> tuple[int, str]:
    obs = extraction.symptoms.get(sid)
    return (obs.first_order if obs else 1 << 60, sid)


def _first_error(extraction: Extraction) -> dict[str, Any] | None:
    fe = extraction.first_error
    if fe is None:
        return None
    year = "unknown" if fe.time and fe.time.startswith("--") else "borrowed" if fe.year_from else "stated"
    return {"rank": fe.rank, "node": fe.node, "time": fe.time, "time_shown": shown_time(fe.time, fe.year_from),
            "year": year if fe.time else None, "line": fe.line, "source": fe.source,
            "lineno": fe.lineno, "symptom": fe.symptom, "rule": fe.rule}


def shown_time(iso: str | None, year_from: str | None = None) -> str | None:
    """An ISO stamp for people: ``2024-07-02 13:20:41.220``; a year-less one (``--07-02T...``) as
    ``07-02 13:20:41.220 (year unknown)``; a year taken from other lines says where it came from."""
    if not iso:
        return None
    unknown = iso.startswith("--")
    text = iso[2:] if unknown else iso
    date, _, clock = text.partition("T")
    if "." in clock:
        whole, _, frac = clock.partition(".")
        clock = f"{whole}.{frac[:3]}"
    shown = f"{date} {clock}".strip()
    if unknown:
        return f"{shown} (year unknown)"
    if year_from:
        return f"{shown} (year from other lines of {year_from})"
    return shown


def _context(extraction: Extraction) -> dict[str, Any]:
    c = extraction.context
    return {"precision": c.precision, "zero_stage": c.zero_stage, "offload": c.offload, "nodes": c.nodes,
            "world_size": c.world_size, "gpu": c.gpu, "versions": dict(c.versions), "script": c.script,
            "launcher": c.launcher, "config_file": c.config_file, "frameworks": list(c.frameworks)}


def _proposal(kb: KnowledgeBase, p, lang: str, extraction: Extraction) -> dict[str, Any]:
    e = p.experiment
    runs = command_steps(e.commands, e.command_kinds, extraction.context)
    titles = {o.id: _t(o.title, lang) for o in e.outcomes}
    gpus = f"{e.cost_gpus} GPU{'s' if e.cost_gpus != 1 else ''}" if e.cost_gpus else "no GPU"
    cost = f"{e.cost_minutes:g} min, {gpus}" if lang != "zh" else f"{e.cost_minutes:g} 分钟，{e.cost_gpus} 张 GPU"
    if p.separates:
        why_en = f"separates {', '.join(p.separates[:4])}; expected gain {p.information_gain:.2f} bits for {cost}"
        why_zh = f"可区分 {', '.join(p.separates[:4])}；预期信息增益 {p.information_gain:.2f} bit，代价 {cost}"
    else:
        why_en = f"expected gain {p.information_gain:.2f} bits for {cost}"
        why_zh = f"预期信息增益 {p.information_gain:.2f} bit，代价 {cost}"
    return {
        "id": e.id,
        "title": _t(e.title, lang),
        "how": _t(e.how, lang),
        "commands": [step["text"] for step in runs],
        "steps": runs,
        "cost": cost,
        "cost_minutes": e.cost_minutes,
        "cost_gpus": e.cost_gpus,
        "information_gain": round(p.information_gain, 4),
        "score": round(p.score, 2),
        "worth_it": p.score > 0,
        "why": why_zh if lang == "zh" else why_en,
        "separates": list(p.separates),
        "outcomes": [
            {"id": f.id, "observe": f"{e.id}={f.id}", "title": titles.get(f.id, f.id),
             "probability": round(f.probability, 4), "leading_cause": f.leading_cause,
             "leading_probability": round(f.leading_probability, 4)}
            for f in p.outcomes
        ],
    }


#: a symptom produced by more mechanisms than this (a CUDA OOM, a non-zero exit) names no mechanism
SPECIFIC_MECHANISMS = 3


def _mechanisms_of(kb: KnowledgeBase) -> dict[str, set[str]]:
    """symptom -> the mechanisms it points at, for symptoms specific enough (built once per knowledge base)."""
    table = kb.cache.get("mechanisms_of")
    if table is None:
        table = {}
        for mechanism in kb.mechanisms.values():
            for sid in mechanism.symptoms:
                table.setdefault(sid, set()).add(mechanism.id)
        table = {sid: ms for sid, ms in table.items() if len(ms) <= SPECIFIC_MECHANISMS}
        kb.cache["mechanisms_of"] = table
    return table


def _fix_step(kb: KnowledgeBase, cause_id: str, lang: str) -> dict[str, Any]:
    """The next step once the leading cause is above the confidence threshold: its fix, then its regression check."""
    cause = kb.causes[cause_id]
    fix = cause.fixes[0] if cause.fixes else None
    title = {"en": f"Apply the fix for {cause_id} and run its regression check",
             "zh": f"应用 {cause_id} 的修复并执行回归检查"}
    return {
        "kind": "fix", "cause": cause_id, "title": title.get(lang, title["en"]),
        "fix": {"title": _t(fix.title, lang), "kind": fix.kind, "snippet": fix.snippet} if fix else None,
        "regression": _t(cause.regression, lang),
    }


def catalog_cause(kb: KnowledgeBase, cause_id: str) -> str:
    """The catalog cause a (possibly finer) cause belongs to: follow `parent` to the top."""
    seen = set()
    while cause_id in kb.causes and kb.causes[cause_id].parent and cause_id not in seen:
        seen.add(cause_id)
        cause_id = kb.causes[cause_id].parent or cause_id
    return cause_id


def ranked_catalog_causes(kb: KnowledgeBase, diagnosis: dict[str, Any]) -> list[str]:
    """The diagnosis' causes mapped to catalog IDs, best first, without repeats."""
    out: list[str] = []
    for c in diagnosis["causes"]:
        cid = catalog_cause(kb, c["id"])
        if cid not in out:
            out.append(cid)
    return out
