"""`dsdoctor kb lint`: every problem of the knowledge base, with file:line and a severity.

Lint = what loading refuses (schema, duplicate keys and IDs, dangling references, cycles,
outcome tables; see kb/loader.py) plus quality checks that do not stop loading. Each check is
a small function in :data:`CHECKS`; errors make ``dsdoctor kb lint`` exit 1, warnings do not.

Quality checks: causes that reach no symptom; causes without fixes, regression, prevention or
references; catalog IDs missing; symptoms no mechanism produces; mechanisms no cause uses
(warning); pairs of causes with the same symptom signature that no experiment separates;
priors far from summing to 1 (warning); rules naming unknown symptoms; log symptoms no rule
asserts (warning); and a few warnings about deprecated references and empty questions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dsdoctor.kb.catalog import CatalogEntry, load_catalog
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.graph import signature
from dsdoctor.kb.loader import Loaded, close_matches, collect, layers_for
from dsdoctor.kb.model import KnowledgeBase
from dsdoctor.kb.yamlload import LineDict, LineList, display_path, load_file

RULES_DIR = Path(__file__).resolve().parent.parent / "rules" / "data"
#: a symptom is part of a cause's signature when P(s | c) >= this
SIGNATURE_THRESHOLD = 0.3
#: two causes look the same when the Jaccard index of their signatures is >= this
SAME_SIGNATURE = 0.8
#: an experiment separates two causes when its outcome distributions differ by >= this (total variation)
SEPARATION = 0.3
#: warn when the priors of the active causes sum outside this range
PRIOR_SUM_RANGE = (0.75, 1.25)


@dataclass(frozen=True)
class RuleRef:
    file: str
    line: int
    rule_id: str
    symptom: str  # "" for a phrase rule that only reports an experiment outcome
    observation: str | None = None  # "x.EXPERIMENT=OUTCOME" a phrase rule reports


@dataclass
class LintContext:
    loaded: Loaded
    catalog: dict[str, CatalogEntry] | None
    rules: list[RuleRef] | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def kb(self) -> KnowledgeBase:
        return self.loaded.kb

    def whole_kb_location(self) -> tuple[str, int]:
        return (self.kb.sources[0] if self.kb.sources else "kb/data", 0)


def _active(table: dict) -> Iterator:
    return (node for node in table.values() if node.status == "active")


# ---------------------------------------------------------------- checks


def check_causes_reach_symptoms(ctx: LintContext) -> Iterable[Problem]:
    for cause in _active(ctx.kb.causes):
        table = ctx.kb.likelihoods.get(cause.id, {})
        if any(mid not in ctx.kb.mechanisms for mid in cause.mechanisms):
            continue  # an undefined mechanism is already reported where it is named
        if not table:
            yield ctx.loaded.problem(cause.id, ("mechanisms",), f"cause {cause.id!r} reaches no symptom: link it to a "
                                     "mechanism (mechanisms: {m.name: P}) that produces symptoms")
        elif not any(p >= SIGNATURE_THRESHOLD for p in table.values()):
            best = max(table.items(), key=lambda kv: kv[1])
            yield ctx.loaded.problem(
                cause.id, ("mechanisms",),
                f"cause {cause.id!r} makes no symptom likely (best {best[0]} at P={best[1]:.2f} < {SIGNATURE_THRESHOLD}): "
                "evidence can hardly point at it; strengthen its links", "warning")


def check_causes_actionable(ctx: LintContext) -> Iterable[Problem]:
    wants = {
        "fixes": "add at least one fix: {title: {en, zh}, kind, snippet}",
        "regression": "add regression: {en, zh}: what to rerun, for how long, which curve to compare",
        "prevention": "add prevention: {en, zh}: what to monitor or gate",
        "references": "add references: a list of URLs of docs, issues or source",
    }
    for cause in _active(ctx.kb.causes):
        present = {"fixes": bool(cause.fixes), "regression": bool(cause.regression.en),
                   "prevention": bool(cause.prevention.en), "references": bool(cause.references)}
        for name, ok in present.items():
            if not ok:
                yield ctx.loaded.problem(cause.id, (), f"cause {cause.id!r} has no {name}: {wants[name]}")


def check_catalog(ctx: LintContext) -> Iterable[Problem]:
    if ctx.catalog is None:
        return
    kb = ctx.kb
    for cid, entry in ctx.catalog.items():
        if cid in ctx.loaded.broken:
            continue
        if cid not in kb.causes:
            yield Problem(entry.file, entry.line, f"catalog cause {cid!r} has no node in the knowledge base: add it to "
                          f"a causes file (domain: {entry.domain}); catalog IDs are never renamed or dropped")
        elif kb.causes[cid].status != "active":
            yield ctx.loaded.problem(cid, ("status",), f"catalog cause {cid!r} is deprecated: catalog causes stay active")
    for cause in _active(kb.causes):
        if cause.parent and cause.parent in kb.causes and cause.parent not in ctx.catalog:
            yield ctx.loaded.problem(cause.id, ("parent",), f"parent {cause.parent!r} is not a catalog cause: a finer "
                                     "cause should refine a catalog cause", "warning")


def check_symptoms_produced(ctx: LintContext) -> Iterable[Problem]:
    graph = ctx.kb.graph
    for symptom in _active(ctx.kb.symptoms):
        if graph.in_degree(symptom.id) == 0:
            yield ctx.loaded.problem(symptom.id, (), f"no mechanism produces symptom {symptom.id!r}: add it to the "
                                     "symptoms of the mechanism(s) that cause it, or deprecate it")


def check_mechanisms_used(ctx: LintContext) -> Iterable[Problem]:
    graph = ctx.kb.graph
    for mechanism in _active(ctx.kb.mechanisms):
        if graph.in_degree(mechanism.id) == 0:
            yield ctx.loaded.problem(mechanism.id, (), f"no cause uses mechanism {mechanism.id!r}", "warning")
        if not mechanism.symptoms:
            yield ctx.loaded.problem(mechanism.id, ("symptoms",), f"mechanism {mechanism.id!r} produces no symptom")


def _total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    return 0.5 * sum(abs(p.get(o, 0.0) - q.get(o, 0.0)) for o in set(p) | set(q))


def best_separation(kb: KnowledgeBase, a: str, b: str) -> tuple[str | None, float]:
    """The experiment whose outcome distributions differ most between causes a and b, and by how much."""
    best: tuple[str | None, float] = (None, 0.0)
    for x in kb.experiments.values():
        if x.status != "active" or (a not in x.expects and b not in x.expects):
            continue
        tv = _total_variation(x.outcome_probabilities(a), x.outcome_probabilities(b))
        if tv > best[1]:
            best = (x.id, tv)
    return best


def check_separable(ctx: LintContext) -> Iterable[Problem]:
    kb = ctx.kb
    causes = sorted(c.id for c in _active(kb.causes))
    signatures = {cid: signature(kb, cid, SIGNATURE_THRESHOLD) for cid in causes}
    for a, b in itertools.combinations(causes, 2):
        sa, sb = signatures[a], signatures[b]
        if not sa or not sb:
            continue
        jaccard = len(sa & sb) / len(sa | sb)
        if jaccard < SAME_SIGNATURE:
            continue
        experiment, tv = best_separation(kb, a, b)
        if tv >= SEPARATION:
            continue
        file_b, line_b = ctx.loaded.locate(b)
        best = f"best is {experiment} with {tv:.2f}" if experiment else "no experiment mentions either"
        shared = ", ".join(sorted(sa & sb))
        yield ctx.loaded.problem(
            a, (), f"causes {a!r} and {b!r} ({file_b}:{line_b}) show the same symptoms (Jaccard {jaccard:.2f}: "
                   f"{shared}) and no experiment separates them ({best}; needs total variation >= {SEPARATION}): "
                   "add an experiment or an expects row whose outcomes differ between them, or a symptom that tells them apart")


def check_priors(ctx: LintContext) -> Iterable[Problem]:
    active = list(_active(ctx.kb.causes))
    if not active:
        return
    total = sum(c.prior for c in active)
    low, high = PRIOR_SUM_RANGE
    if not low <= total <= high:
        file, line = ctx.whole_kb_location()
        yield Problem(file, line, f"the priors of the {len(active)} active causes sum to {total:.2f}, far from 1 "
                      f"(expected {low}..{high}): rescale them so they read as shares of failed jobs", "warning")


def check_rules(ctx: LintContext) -> Iterable[Problem]:
    if ctx.rules is None:
        return
    kb = ctx.kb
    asserted = {r.symptom for r in ctx.rules}
    for rule in ctx.rules:
        if rule.observation:
            yield from _check_observation(kb, rule)
        if not rule.symptom:
            continue
        if rule.symptom not in kb.symptoms and rule.symptom not in ctx.loaded.broken:
            matches = close_matches(rule.symptom, kb.symptoms)
            hint = f" (did you mean {', '.join(matches)}?)" if matches else ""
            yield Problem(rule.file, rule.line, f"rule {rule.rule_id!r} asserts symptom {rule.symptom!r}, which the "
                          f"knowledge base does not define{hint}")
    for symptom in _active(kb.symptoms):
        if symptom.kind == "log" and symptom.id not in asserted:
            yield ctx.loaded.problem(symptom.id, ("kind",), f"no rule asserts log symptom {symptom.id!r}: add a rule "
                                     f"with symptom: {symptom.id} under rules/data", "warning")


def _check_observation(kb: KnowledgeBase, rule: RuleRef) -> Iterable[Problem]:
    exp_id, _, outcome = (rule.observation or "").partition("=")
    experiment = kb.experiments.get(exp_id)
    if experiment is None:
        matches = close_matches(exp_id, kb.experiments)
        hint = f" (did you mean {', '.join(matches)}?)" if matches else ""
        yield Problem(rule.file, rule.line, f"rule {rule.rule_id!r} reports experiment {exp_id!r}, which the "
                      f"knowledge base does not define{hint}")
    elif outcome not in {o.id for o in experiment.outcomes}:
        allowed = ", ".join(o.id for o in experiment.outcomes)
        yield Problem(rule.file, rule.line, f"rule {rule.rule_id!r} reports outcome {outcome!r} of {exp_id}, "
                      f"which has only: {allowed}")


def check_odds_and_ends(ctx: LintContext) -> Iterable[Problem]:
    kb = ctx.kb
    for symptom in _active(kb.symptoms):
        if symptom.kind == "question" and symptom.question is None:
            yield ctx.loaded.problem(symptom.id, ("question",), f"question symptom {symptom.id!r} has no question: "
                                     "write question: {en: '...?', zh: '...？'}", "warning")
    for x in _active(kb.experiments):
        if not x.expects:
            yield ctx.loaded.problem(x.id, (), f"experiment {x.id!r} expects nothing: add expects rows for the causes "
                                     "whose outcomes it changes", "warning")
    deprecated = {n.id for t in (kb.causes, kb.mechanisms, kb.symptoms) for n in t.values() if n.status != "active"}
    if not deprecated:
        return
    for u, v in kb.graph.edges:
        if v in deprecated and u not in deprecated:
            yield ctx.loaded.problem(u, (), f"{u!r} links to deprecated {v!r}: link to its replacement", "warning")


CHECKS: list[Callable[[LintContext], Iterable[Problem]]] = [
    check_causes_reach_symptoms,
    check_causes_actionable,
    check_catalog,
    check_symptoms_produced,
    check_mechanisms_used,
    check_separable,
    check_priors,
    check_rules,
    check_odds_and_ends,
]


# ---------------------------------------------------------------- rules


def read_rule_symptoms(rules_dir: Path) -> tuple[list[RuleRef], list[Problem]]:
    """``(rule id, symptom)`` of every rule under ``rules_dir`` (only ``rules:``/``symptom`` are read)."""
    refs: list[RuleRef] = []
    problems: list[Problem] = []
    paths = sorted(p for pattern in ("*.yaml", "*.yml") for p in rules_dir.rglob(pattern) if p.name != "template.yaml")
    for path in paths:
        data, parse_problems = load_file(path)
        problems.extend(Problem(p.file, p.line, f"rule file unreadable, its symptoms are not checked: {p.message}",
                                "warning") for p in parse_problems if data is None)
        rules = data.get("rules") if isinstance(data, LineDict) else None
        prefix = ""
        if rules is None and isinstance(data, LineDict) and "identifiers" in data:  # rules/identifiers.py
            rules, prefix = data.get("identifiers"), "ident."
        if rules is None and isinstance(data, LineDict):  # the lexicon's compositions (rules/lexicon.py)
            rules = data.get("compositions")
        if not isinstance(rules, LineList):
            continue
        for index, rule in enumerate(rules):
            if not isinstance(rule, LineDict):
                continue
            symptom, observation = rule.get("symptom"), rule.get("observation")
            if isinstance(symptom, str) or isinstance(observation, str):
                key = "symptom" if isinstance(symptom, str) else "observation"
                line = rule.key_lines.get(key, rules.item_lines[index])
                refs.append(RuleRef(display_path(path), line, prefix + str(rule.get("id", f"#{index + 1}")),
                                    symptom if isinstance(symptom, str) else "",
                                    observation if isinstance(observation, str) else None))
    return refs, problems


# ---------------------------------------------------------------- entry point


def lint(kb_dirs: Sequence[Path] | None = None, *, builtin: bool = True, data_dir: Path | None = None,
         catalog: Path | None = None, check_catalog_ids: bool = True,
         rules_dir: Path | None = RULES_DIR) -> list[Problem]:
    """Every problem of the knowledge base (errors and warnings), sorted by file and line.

    ``kb_dirs`` are overlay directories (None: ``DSDOCTOR_KB_PATH``); ``builtin``/``data_dir``
    choose the base as in :func:`kb.loader.load_kb`. ``catalog`` replaces the vendored catalog;
    ``rules_dir=None`` (or a directory that does not exist) skips the rule checks.
    """
    loaded = collect(layers_for(kb_dirs, builtin=builtin, data_dir=data_dir))
    problems = list(loaded.problems)
    catalog_entries = None
    if check_catalog_ids:
        try:
            catalog_entries = load_catalog(catalog)
        except KnowledgeError as exc:
            problems.extend(exc.problems)
    rules = None
    if rules_dir is not None and Path(rules_dir).is_dir():
        rules, rule_problems = read_rule_symptoms(Path(rules_dir))
        problems.extend(rule_problems)
    ctx = LintContext(loaded, catalog_entries, rules)
    for check in CHECKS:
        problems.extend(check(ctx))
    unique = dict.fromkeys(problems)
    return sorted(unique, key=lambda p: (p.file, p.line, p.severity != "error", p.message))


def summary(problems: Sequence[Problem]) -> str:
    """One line: how many errors and warnings."""
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    files = len({p.file for p in problems})
    tail = f" in {files} file(s)" if problems else ""
    return f"{errors} error(s), {warnings} warning(s){tail}"
