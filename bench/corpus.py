"""Accuracy on real public failures: the corpus, first contact per batch, calibration, closed loop.

The corpus (bench/corpus/batch*/*.json) holds real failures from public issue threads, one JSON per
case in the devset format plus ``batch`` and ``language``. Every case goes through the whole
pipeline (rules -> symptoms -> ranking), as ``dsdoctor diagnose --evidence`` would run it.

* accuracy: top-1 / top-3 on all cases, with logs, description only, Chinese, per domain; the
  same slices for ../shared/devset when it is present;
* first contact: the score of each batch taken before anything was changed after reading it,
  kept in bench/corpus/first_contact.json, written once per batch and never rewritten
  (``--record-first-contact N`` refuses a batch that already has its row);
* calibration: the top answer's probability in bins against how often it was right, and the
  expected calibration error;
* closed loop: from each case's real start, the first proposed experiment is answered with the
  knowledge base's own most likely outcome for the labelled cause, up to three experiments; the
  share that ends with the labelled cause on top at p >= 0.9, and how often the first experiment
  bears on the labelled cause at all.

The corpus also ships as read-only public incidents (``--export-incidents`` writes
kb/data/incidents/public.jsonl; a test keeps the two in step).

Retrieval over the public incidents never lets a case find itself: while a case is scored, its own
incident and every incident from its thread are hidden (leave-one-out), and a batch being scored on
first contact, or without its first-contact row yet, is hidden for the whole run.
``--cross-validate`` chooses the incidents' weight on two batches and scores the third.

Usage: python -m bench.corpus [--verbose] [--batch N] [--record-first-contact N] [--cross-validate]
       [--export-incidents]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = ROOT / "bench" / "corpus"
FIRST_CONTACT = CORPUS_DIR / "first_contact.json"
DEVSET_DIR = ROOT.parent / "shared" / "devset" / "cases"
CONFIDENT = 0.9
LOOP_STEPS = 3
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0001)


@dataclass
class Case:
    id: str
    batch: int | None
    language: str
    label: str
    ok: set[str]
    evidence: dict[str, Any]
    threads: tuple[str, ...] = ()  # the case's source thread, as ``source`` and as ``url``

    @property
    def hides(self) -> set[str]:
        """What retrieval must not see while this case is scored: its own public incident (by id)
        and every incident from its thread (kb/retrieval.py ``excluding``)."""
        return {self.id, *self.threads}

    @property
    def has_logs(self) -> bool:
        return bool(self.evidence.get("logs"))


@dataclass
class Outcome:
    case: Case
    ranked: list[str]  # catalog causes, best first
    top_probability: float
    first_experiment: str | None = None
    first_bears: bool = False
    first_discriminates: bool = False  # ... and the label's predicted outcomes differ from the default's
    loop_confident: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def top1(self) -> bool:
        return bool(self.ranked) and self.ranked[0] in self.case.ok

    @property
    def top3(self) -> bool:
        return bool(self.case.ok & set(self.ranked[:3]))


def load_cases(folder: Path, batch: int | None = None) -> list[Case]:
    """Every case under ``folder`` (recursively), optionally only one batch."""
    out = []
    for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        if path.name == FIRST_CONTACT.name:
            continue
        raw = json.loads(path.read_text(encoding="utf-8"))
        if "evidence" not in raw or "label" not in raw:
            continue
        case = Case(id=raw["id"], batch=raw.get("batch"), language=raw.get("language", "en"),
                    label=raw["label"], ok={raw["label"], *raw.get("also_ok", [])}, evidence=raw["evidence"],
                    threads=tuple(t for t in (raw.get("source"), raw.get("url")) if t))
        if batch is None or case.batch == batch:
            out.append(case)
    return out


def evidence_texts(folder: Path | None = None) -> list[str]:
    """The words and log texts of every case's evidence, lower-cased: the strings a check that examples
    are not corpus sentences must search (not the JSON, where quotes and newlines are escaped)."""
    out: list[str] = []
    for case in load_cases(folder or CORPUS_DIR):
        evidence = case.evidence
        out.append(str(evidence.get("description") or "").lower())
        out += [str(log.get("text") or "").lower() for log in evidence.get("logs") or [] if isinstance(log, dict)]
    return [text for text in out if text]


PUBLIC_INCIDENTS = ROOT / "kb" / "data" / "incidents" / "public.jsonl"
#: lines of a case's logs kept in its public incident's phenomenon
INCIDENT_LOG_LINES = 30


def to_incident(raw: dict[str, Any]) -> dict[str, Any]:
    """A corpus case as a read-only public incident: what was seen, the confirmed cause, the thread."""
    evidence = raw["evidence"]
    parts = [evidence.get("description", "").strip()]
    for log in evidence.get("logs") or []:
        lines = str(log.get("text", "")).splitlines()[:INCIDENT_LOG_LINES]
        parts.append(f"[{log.get('source', 'log')}]\n" + "\n".join(lines))
    env = evidence.get("environment") or {}
    scope = ", ".join(f"{k} {env[k]}" for k in ("world_size", "nodes", "gpu") if env.get(k))
    slug = raw["id"].split("-", 1)[1] if "-" in raw["id"] else raw["id"]
    repo = raw["source"].split("#", 1)[0]
    return {
        "id": f"PUB-{raw['id']}", "title": slug.replace("-", " ").capitalize(),
        "phenomenon": "\n\n".join(p for p in parts if p), "scope": scope, "root_cause": raw["label"],
        "root_cause_detail": raw["why"], "fix": raw["why"], "severity": "medium", "status": "resolved",
        "tags": ["public", repo.split("/")[-1].lower()[:40]], "author": f"public thread {raw['source']}",
        "source_url": raw.get("url", ""), "occurred_at": "2026-12-01T00:00:00Z", "created_at": "2026-12-01T00:00:00Z",
        "updated_at": "2026-12-01T00:00:00Z",
    }


def export_incidents(folder: Path = CORPUS_DIR) -> str:
    """The public-incident JSON lines of every corpus case, in id order."""
    lines = []
    for path in sorted(folder.rglob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        if "evidence" in raw and "label" in raw:
            lines.append(json.dumps(to_incident(raw), ensure_ascii=False, sort_keys=True))
    return "\n".join(sorted(lines)) + "\n"


def _catalog_probabilities(kb, diagnosis: dict[str, Any]) -> list[tuple[str, float]]:
    """Catalog causes with the probability of their finer causes summed, best first."""
    from dsdoctor.kb.diagnosis import catalog_cause

    totals: dict[str, float] = {}
    for c in diagnosis["causes"]:
        cid = catalog_cause(kb, c["id"])
        totals[cid] = totals.get(cid, 0.0) + c["probability"]
    return sorted(totals.items(), key=lambda kv: -kv[1])


def _bears_on(kb, experiment_id: str, label: str) -> bool:
    from dsdoctor.kb.diagnosis import catalog_cause

    exp = kb.experiments.get(experiment_id)
    return exp is not None and any(catalog_cause(kb, c) == label for c in exp.expects)


#: total-variation distance from the default above which an experiment's row for a cause says something
DISCRIMINATES = 0.1


def discriminates(kb, step: str | None, label: str) -> bool:
    """Does the first step's outcome depend on the label: its row for the label (or a finer cause of
    it) differs from the experiment's default by at least ``DISCRIMINATES``? A fix step does when it
    is the label's. Stricter than bearing: an experiment may list a cause with the default's odds."""
    from dsdoctor.kb.diagnosis import catalog_cause

    if step is None:
        return False
    if step.startswith("fix:"):
        return catalog_cause(kb, step[4:]) == label
    exp = kb.experiments.get(step)
    if exp is None:
        return False
    rows = [d for c, d in exp.expects.items() if catalog_cause(kb, c) == label]
    return any(sum(abs(d.get(o, 0.0) - exp.default.get(o, 0.0)) for o in {*d, *exp.default}) / 2 >= DISCRIMINATES
               for d in rows)


def first_step(kb, diagnosis: dict[str, Any], label: str) -> tuple[str | None, bool]:
    """The answer's first step and whether it bears on the labelled cause: the first proposed
    experiment (it lists the label among the causes it separates), or, once the leading cause is
    above the confidence threshold, that cause's fix (it bears when that cause is the label)."""
    from dsdoctor.kb.diagnosis import catalog_cause

    step = diagnosis.get("next_step") or {}
    if step.get("cause"):  # a confident answer's next step is its fix; experiments come after
        return f"fix:{step['cause']}", catalog_cause(kb, step["cause"]) == label
    proposals = diagnosis["next_experiments"]
    if proposals:
        return proposals[0]["id"], _bears_on(kb, proposals[0]["id"], label)
    return None, False


def _predicted_outcome(kb, experiment_id: str, label: str) -> str:
    """The knowledge base's most likely outcome of an experiment under the labelled cause."""
    from dsdoctor.kb.diagnosis import catalog_cause

    exp = kb.experiments[experiment_id]
    dist = exp.expects.get(label)
    if dist is None:  # a finer cause of the label may be the one the experiment lists
        dist = next((d for c, d in exp.expects.items() if catalog_cause(kb, c) == label), exp.default)
    return max(dist, key=dist.get)


def hidden_keys(cases: list[Case]) -> set[str]:
    """Every id and thread of ``cases``: hidden from retrieval for a whole run (a batch scored on
    first contact, or one without its first-contact row, is never a document for anything)."""
    return set().union(*(c.hides for c in cases)) if cases else set()


def evaluate(cases: list[Case], kb, loop: bool = True, hidden: set[str] | frozenset[str] = frozenset(),
             own_batch_hidden: bool = False) -> list[Outcome]:
    """Score every case; its own documents (leave-one-out) and ``hidden`` are invisible to retrieval,
    and with ``own_batch_hidden`` every document of its batch, as on that batch's first contact."""
    from dsdoctor.kb.retrieval import excluding

    batches = {b: hidden_keys([c for c in cases if c.batch == b]) for b in {c.batch for c in cases}}
    out = []
    for case in cases:
        mates = batches[case.batch] if own_batch_hidden and case.batch is not None else set()
        with excluding(set(hidden) | case.hides | mates):
            out.append(_evaluate_one(case, kb, loop))
    return out


def _evaluate_one(case: Case, kb, loop: bool) -> Outcome:
    from dsdoctor.kb.diagnosis import diagnose

    evidence = dict(case.evidence)
    diagnosis = diagnose(evidence, kb=kb, top=10, lang="zh" if case.language == "zh" else "en")
    ranked = _catalog_probabilities(kb, diagnosis)
    result = Outcome(case, [c for c, _ in ranked], ranked[0][1] if ranked else 0.0)
    result.first_experiment, result.first_bears = first_step(kb, diagnosis, case.label)
    result.first_discriminates = discriminates(kb, result.first_experiment, case.label)
    if loop:
        result.loop_confident = _closed_loop(kb, evidence, diagnosis, case.label)
    return result


def _closed_loop(kb, evidence: dict[str, Any], diagnosis: dict[str, Any], label: str) -> bool:
    from dsdoctor.kb.diagnosis import diagnose

    observations = dict(evidence.get("observations") or {})
    for _ in range(LOOP_STEPS):
        ranked = _catalog_probabilities(kb, diagnosis)
        if ranked and ranked[0][1] >= CONFIDENT:
            break
        proposals = [p for p in diagnosis["next_experiments"] if p["id"] in kb.experiments]
        if not proposals:
            break
        exp_id = proposals[0]["id"]
        observations[f"{exp_id}={_predicted_outcome(kb, exp_id, label)}"] = True
        diagnosis = diagnose({**evidence, "observations": observations}, kb=kb, top=10)
    ranked = _catalog_probabilities(kb, diagnosis)
    return bool(ranked) and ranked[0][0] == label and ranked[0][1] >= CONFIDENT


# ---------------------------------------------------------------- figures


def _share(rows: list[Outcome], attr: str) -> float | None:
    return sum(getattr(r, attr) for r in rows) / len(rows) if rows else None


def slices(rows: list[Outcome]) -> dict[str, list[Outcome]]:
    out = {"all": rows, "with logs": [r for r in rows if r.case.has_logs],
           "description only": [r for r in rows if not r.case.has_logs],
           "Chinese": [r for r in rows if r.case.language == "zh"]}
    for domain in sorted({r.case.label.split(".")[0] for r in rows}):
        out[f"  {domain}"] = [r for r in rows if r.case.label.split(".")[0] == domain]
    return out


def summary(rows: list[Outcome]) -> dict[str, Any]:
    """The figures a first-contact row keeps."""
    parts = slices(rows)
    return {"n": len(rows), "top1": _share(rows, "top1"), "top3": _share(rows, "top3"),
            "description_only_top3": _share(parts["description only"], "top3"),
            "chinese_top3": _share(parts["Chinese"], "top3"),
            "loop_confident": _share(rows, "loop_confident"), "first_bears": _share(rows, "first_bears")}


def calibration(rows: list[Outcome]) -> tuple[list[tuple[str, int, float, float]], float]:
    """(bin, n, mean confidence, accuracy) per bin, and the expected calibration error."""
    table, ece = [], 0.0
    for lo, hi in itertools.pairwise(BINS):
        inside = [r for r in rows if lo <= r.top_probability < hi]
        if not inside:
            continue
        conf = sum(r.top_probability for r in inside) / len(inside)
        acc = sum(r.top1 for r in inside) / len(inside)
        table.append((f"{lo:.1f}-{min(hi, 1.0):.1f}", len(inside), conf, acc))
        ece += len(inside) / len(rows) * abs(conf - acc)
    return table, ece


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{x:6.1%}"


def print_accuracy(name: str, rows: list[Outcome]) -> None:
    print(f"   {name}: {'slice':<18} {'n':>4} {'top-1':>7} {'top-3':>7}")
    for label, part in slices(rows).items():
        print(f"   {'':<{len(name)}}  {label:<18} {len(part):>4} {_pct(_share(part, 'top1')):>7} "
              f"{_pct(_share(part, 'top3')):>7}")


def print_calibration(rows: list[Outcome]) -> None:
    table, ece = calibration(rows)
    print(f"   calibration (top answer's probability vs right): {'bin':<9} {'n':>4} {'conf':>7} {'right':>7}")
    for label, n, conf, acc in table:
        print(f"   {'':<49} {label:<9} {n:>4} {conf:>7.1%} {acc:>7.1%}")
    print(f"   expected calibration error: {ece:.3f}")


def print_loop(rows: list[Outcome]) -> None:
    print(f"   closed loop (<= {LOOP_STEPS} experiments, KB's most likely outcome for the label): "
          f"ends on the label at p >= {CONFIDENT}: {_pct(_share(rows, 'loop_confident'))}; "
          f"first experiment bears on the label: {_pct(_share(rows, 'first_bears'))} "
          f"(its outcome depends on the label: {_pct(_share(rows, 'first_discriminates'))})")


#: the values of ``incident_weight`` cross-validation tries (0 = the public incidents say nothing)
CV_GRID = (0.0, 0.125, 0.25, 0.5, 1.0)


#: settings that only move the probabilities, not the order: chosen by calibration, not accuracy
CALIBRATION_SETTINGS = frozenset({"posterior_temperature"})


def _fit(rows: list[Outcome], setting: str = "incident_weight") -> float:
    """What cross-validation maximises: top-1 + top-3, or minus the expected calibration error for a
    setting that only moves the probabilities (``CALIBRATION_SETTINGS``)."""
    if setting in CALIBRATION_SETTINGS:
        return -calibration(rows)[1] if rows else 0.0
    return (_share(rows, "top1") or 0.0) + (_share(rows, "top3") or 0.0)


def cross_validate(cases: list[Case], kb, setting: str = "incident_weight",
                   grid: tuple[float, ...] = CV_GRID) -> list[dict[str, Any]]:
    """Per batch: choose ``setting`` on the other batches (best top-1 + top-3, or lowest calibration
    error for a calibration setting; the smaller value on a tie) and score the held-out batch with it. The held-out batch's documents are hidden throughout,
    and every case is scored as on its own batch's first contact: without any document of its batch
    (a batch holds each cause about once, so batch-mates would only ever be distractors)."""
    from dsdoctor.kb.inference import engine_settings_replaced

    folds = []
    for test in sorted({c.batch for c in cases if c.batch is not None}):
        hidden = hidden_keys([c for c in cases if c.batch == test])
        runs = {}
        for value in grid:
            with engine_settings_replaced({setting: value}):
                runs[value] = evaluate(cases, kb, loop=False, hidden=hidden, own_batch_hidden=True)
        train = {v: _fit([r for r in rows if r.case.batch != test], setting) for v, rows in runs.items()}
        best = max(grid, key=lambda v: (round(train[v], 9), -v))
        held = {v: [r for r in rows if r.case.batch == test] for v, rows in runs.items()}
        folds.append({"test": test, "chosen": best, "train_fit": train, **summary(held[best]),
                      "ece": calibration(held[best])[1],
                      "without": summary(held[min(grid)]),
                      "held_out": {v: {**summary(rows), "ece": calibration(rows)[1]} for v, rows in held.items()}})
    return folds


def fit_all(cases: list[Case], kb, setting: str = "incident_weight",
            grid: tuple[float, ...] = CV_GRID) -> tuple[float, dict[float, float]]:
    """The value the same procedure chooses on every batch (each case without its batch's documents):
    the one to ship; the folds of :func:`cross_validate` say how well choosing this way generalises."""
    from dsdoctor.kb.inference import engine_settings_replaced

    fits = {}
    for value in grid:
        with engine_settings_replaced({setting: value}):
            fits[value] = _fit(evaluate(cases, kb, loop=False, own_batch_hidden=True), setting)
    return max(grid, key=lambda v: (round(fits[v], 9), -v)), fits


def print_cross_validation(folds: list[dict[str, Any]], setting: str = "incident_weight") -> None:
    aim = "lowest calibration error" if setting in CALIBRATION_SETTINGS else "top-1 + top-3"
    print(f"   cross-validation of {setting} (fit {aim} on the other batches, score the held-out one):")
    for f in folds:
        fits = ", ".join(f"{v:g}: {x:.3f}" for v, x in f["train_fit"].items())
        w = f["without"]
        print(f"   held-out batch {f['test']}: chosen {f['chosen']:g} (train fit {fits})")
        print(f"      held-out n {f['n']}: top-1 {_pct(f['top1'])} top-3 {_pct(f['top3'])} "
              f"desc-only top-3 {_pct(f['description_only_top3'])} zh top-3 {_pct(f['chinese_top3'])} "
              f"calibration error {f['ece']:.3f}"
              f"   | at {min(f['train_fit']):g}: top-1 {_pct(w['top1'])} top-3 {_pct(w['top3'])}")
        every = ", ".join(f"{v:g}: {_pct(x['top1']).strip()}/{_pct(x['top3']).strip()}/{x['ece']:.3f}"
                          for v, x in f["held_out"].items())
        print(f"      held-out top-1/top-3/calibration error at every value (not used for the choice): {every}")


def read_first_contact() -> list[dict[str, Any]]:
    return json.loads(FIRST_CONTACT.read_text(encoding="utf-8")) if FIRST_CONTACT.exists() else []


def print_first_contact() -> None:
    rows = read_first_contact()
    print("   first contact (each batch scored once, before any change made after reading it):")
    print(f"   {'batch':>5} {'date':<10} {'commit':<9} {'n':>4} {'top-1':>7} {'top-3':>7} {'desc-only top-3':>15} "
          f"{'zh top-3':>8} {'loop p>=.9':>10} {'1st bears':>9}")
    for r in rows:
        print(f"   {r['batch']:>5} {r['date']:<10} {r['commit']:<9} {r['n']:>4} {_pct(r['top1']):>7} "
              f"{_pct(r['top3']):>7} {_pct(r['description_only_top3']):>15} {_pct(r['chinese_top3']):>8} "
              f"{_pct(r.get('loop_confident')):>10} {_pct(r.get('first_bears')):>9}")
    if not rows:
        print("   (no batch recorded yet)")


def record_first_contact(batch: int, rows: list[Outcome]) -> dict[str, Any]:
    """Append the batch's first-contact row; a batch already recorded is never rewritten."""
    recorded = read_first_contact()
    if any(r["batch"] == batch for r in recorded):
        raise SystemExit(f"batch {batch} already has its first-contact row; it is never rewritten")
    if not rows:
        raise SystemExit(f"batch {batch} has no cases under {CORPUS_DIR}")
    commit = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    row = {"batch": batch, "date": dt.date.today().isoformat(), "commit": commit, **summary(rows)}
    FIRST_CONTACT.write_text(json.dumps([*recorded, row], indent=1) + "\n", encoding="utf-8")
    return row


def main() -> None:
    from dsdoctor.kb.loader import get_kb

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="print every miss with what the engine ranked")
    parser.add_argument("--batch", type=int, help="only this batch")
    parser.add_argument("--record-first-contact", type=int, metavar="N",
                        help="score batch N and record it as its first contact (once, never rewritten)")
    parser.add_argument("--devset", type=Path, default=DEVSET_DIR)
    parser.add_argument("--no-loop", action="store_true", help="skip the closed-loop run")
    parser.add_argument("--cross-validate", action="store_true",
                        help="choose a setting on the other batches, score the held-out one, per fold (no loop)")
    parser.add_argument("--setting", default="incident_weight",
                        help="the kb/engine.yaml setting --cross-validate chooses (default incident_weight; "
                             "posterior_temperature is chosen by calibration error)")
    parser.add_argument("--grid", help="comma-separated values to try (default: 0, 0.125, 0.25, 0.5, 1)")
    parser.add_argument("--export-incidents", action="store_true",
                        help=f"write the corpus as public incidents to {PUBLIC_INCIDENTS.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.export_incidents:
        PUBLIC_INCIDENTS.write_text(export_incidents(), encoding="utf-8")
        print(f"   wrote {PUBLIC_INCIDENTS.relative_to(ROOT)}")
        return
    kb = get_kb()
    if args.record_first_contact is not None:
        fresh = load_cases(CORPUS_DIR, args.record_first_contact)
        rows = evaluate(fresh, kb, hidden=hidden_keys(fresh))  # the batch's own documents do not exist yet
        print(json.dumps(record_first_contact(args.record_first_contact, rows), indent=1))
        return
    started = time.perf_counter()
    cases = load_cases(CORPUS_DIR, args.batch)
    recorded = {r["batch"] for r in read_first_contact()}
    unscored = sorted({c.batch for c in cases if c.batch is not None and c.batch not in recorded})
    if unscored and args.batch is None:  # a new batch is seen first by its first-contact run, nothing else
        print(f"   batch(es) {unscored} have no first-contact row yet: left out (score them with "
              f"--record-first-contact N before anything else reads them)")
        cases = [c for c in cases if c.batch is None or c.batch in recorded]
    # nor is an unscored batch a document for anything
    hidden = hidden_keys([c for c in load_cases(CORPUS_DIR) if c.batch is not None and c.batch not in recorded])
    if args.cross_validate:
        grid = tuple(float(v) for v in args.grid.split(",")) if args.grid else CV_GRID
        print_cross_validation(cross_validate(cases, kb, args.setting, grid), args.setting)
        chosen, fits = fit_all(cases, kb, args.setting, grid)
        print(f"   on all batches: chosen {chosen:g} (fit {', '.join(f'{v:g}: {x:.3f}' for v, x in fits.items())})")
        return
    rows = evaluate(cases, kb, loop=not args.no_loop, hidden=hidden)
    if args.verbose:
        for r in rows:
            if not r.top1:
                print(f"   {'MISS3' if not r.top3 else 'miss1'} {r.case.id}: want {r.case.label}; "
                      f"got {r.ranked[:3]} p={r.top_probability:.2f}")
    print_accuracy("corpus", rows)
    for batch in sorted({r.case.batch for r in rows if r.case.batch is not None}):
        part = [r for r in rows if r.case.batch == batch]
        s = summary(part)
        print(f"   batch {batch}: n {s['n']}, top-1 {_pct(s['top1'])}, top-3 {_pct(s['top3'])}, "
              f"description-only top-3 {_pct(s['description_only_top3'])}, Chinese top-3 {_pct(s['chinese_top3'])}")
    print_calibration(rows)
    print_loop(rows)
    print_first_contact()
    devset = evaluate(load_cases(args.devset), kb, loop=not args.no_loop, hidden=hidden)
    if devset:
        print_accuracy("devset", devset)
        print_calibration(devset)
        print_loop(devset)
    print(f"   ({1000 * (time.perf_counter() - started) / max(1, len(rows) + len(devset)):.1f} ms per case)")


if __name__ == "__main__":
    main()
