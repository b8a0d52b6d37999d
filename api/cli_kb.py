"""`dsdoctor kb`: validate, list, show and draw the knowledge base (causes, mechanisms, symptoms, experiments)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dsdoctor.kb.errors import DsdoctorError

KINDS = ("causes", "mechanisms", "symptoms", "experiments")
LANG = click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
                    help="Language of titles and texts.")


def source_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--data-dir and --overlay: which knowledge directories to read (default: built-in + DSDOCTOR_KB_PATH)."""
    func = click.option("--overlay", "overlays", multiple=True, metavar="DIR", type=click.Path(path_type=Path),
                        help="Also load this overlay directory, after those in DSDOCTOR_KB_PATH (repeatable).")(func)
    return click.option("--data-dir", metavar="DIR", type=click.Path(path_type=Path),
                        help="Read the base knowledge base from DIR instead of the built-in kb/data.")(func)


def _load(data_dir: Path | None, overlays: tuple[Path, ...]) -> Any:
    from dsdoctor.api.settings import kb_overlay_paths
    from dsdoctor.kb.loader import get_kb, load_kb

    if data_dir is None and not overlays:
        return get_kb()
    return load_kb([*kb_overlay_paths(), *overlays], data_dir=data_dir)


def _unknown(node_id: str, kb: Any) -> DsdoctorError:
    from dsdoctor.kb.loader import close_matches

    every = [*kb.causes, *kb.mechanisms, *kb.symptoms, *kb.experiments]
    matches = close_matches(node_id, every)
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; list the IDs with: dsdoctor kb list causes"
    return DsdoctorError(f"unknown knowledge-base ID {node_id!r}{hint}")


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _table(rows: list[list[str]]) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        click.echo("  ".join([*cells, row[-1]]).rstrip())


@click.group()
def kb() -> None:
    """Validate and inspect the knowledge base: root causes -> mechanisms -> symptoms, and experiments.

    The built-in data lives in kb/data; overlay directories listed in DSDOCTOR_KB_PATH
    (':'-separated) add a site's own entries and patches. Every command reads the same layers.

    \b
    Examples:
      dsdoctor kb lint
      dsdoctor kb list causes --lang zh
      dsdoctor kb show compute.fp16_overflow
      dsdoctor kb graph --around s.cuda_oom --depth 2 --format mermaid
    """


# ---------------------------------------------------------------- lint


@kb.command()
@source_options
@click.option("--catalog", type=click.Path(dir_okay=False, path_type=Path),
              help="Check against this catalog file instead of the vendored kb/catalog/root_causes.yaml.")
@click.option("--no-catalog", is_flag=True, help="Skip the check that every catalog cause ID exists.")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Rule directory whose `symptom:` fields are cross-checked (default: rules/data).")
@click.option("--no-rules", is_flag=True, help="Skip the cross-check between rules and symptoms.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="Show errors only, not warnings.")
def lint(data_dir: Path | None, overlays: tuple[Path, ...], catalog: Path | None,
         no_catalog: bool, rules_dir: Path | None, no_rules: bool, fmt: str, quiet: bool) -> None:
    """Check every knowledge file; print each problem as FILE:LINE: SEVERITY: MESSAGE.

    Checks the schema of every entry (unknown fields, enums, probabilities in (0, 1), en+zh
    texts), duplicate keys and IDs, dangling references, cycles, outcome tables, catalog
    coverage, causes no symptom can reach, causes without fixes/regression/prevention/
    references, symptoms no mechanism produces, causes with the same symptoms that no
    experiment separates, and rules that name unknown symptoms. Exits 1 if there is an error;
    warnings alone exit 0.

    \b
    Examples:
      dsdoctor kb lint
      dsdoctor kb lint --overlay /etc/dsdoctor/kb -q
      dsdoctor kb lint --data-dir tests/fixtures/kb/data --catalog tests/fixtures/kb/catalog.yaml --no-rules
    """
    from dsdoctor.api.settings import kb_overlay_paths
    from dsdoctor.kb.lint import RULES_DIR, summary
    from dsdoctor.kb.lint import lint as run_lint

    if rules_dir is not None and not rules_dir.is_dir():
        raise DsdoctorError(f"rule directory {str(rules_dir)!r} does not exist")
    problems = run_lint(
        [*kb_overlay_paths(), *overlays], data_dir=data_dir, catalog=catalog, check_catalog_ids=not no_catalog,
        rules_dir=None if no_rules else (rules_dir or RULES_DIR),
    )
    shown = [p for p in problems if p.severity == "error"] if quiet else problems
    errors = sum(p.severity == "error" for p in problems)
    if fmt == "json":
        _emit({"problems": [{"file": p.file, "line": p.line, "severity": p.severity, "message": p.message}
                            for p in shown],
               "errors": errors, "warnings": len(problems) - errors})
    else:
        for p in shown:
            click.echo(f"{p.file}:{p.line}: {p.severity}: {p.message}")
        click.echo(f"kb lint: {summary(problems)}")
    if errors:
        # SystemExit, not ctx.exit: api.cli.main ignores the code click returns with standalone_mode=False
        sys.exit(1)


# ---------------------------------------------------------------- list


def _list_row(kind: str, node: Any, lang: str) -> dict[str, Any]:
    row: dict[str, Any] = {"id": node.id, "title": node.title.get(lang)}
    if kind == "causes":
        row.update(domain=node.domain, prior=node.prior, parent=node.parent)
    elif kind == "mechanisms":
        row.update(pillar=node.pillar)
    elif kind == "symptoms":
        row.update(kind=node.kind, source=node.source, severity=node.severity)
    else:
        row.update(outcomes=[o.id for o in node.outcomes], cost_minutes=node.cost_minutes, cost_gpus=node.cost_gpus)
    row.update(status=node.status, file=node.file, line=node.line)
    return row


@kb.command(name="list")
@click.argument("kind", type=click.Choice(KINDS))
@source_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@LANG
def list_(kind: str, data_dir: Path | None, overlays: tuple[Path, ...], fmt: str, lang: str) -> None:
    """List the causes, mechanisms, symptoms or experiments, sorted by ID.

    JSON gives an array of objects with id and title, plus domain and prior for causes,
    pillar for mechanisms, kind/source/severity for symptoms, outcomes and cost for experiments.

    \b
    Examples:
      dsdoctor kb list causes
      dsdoctor kb list symptoms --lang zh
      dsdoctor kb list experiments --format json
    """
    knowledge = _load(data_dir, overlays)
    table = getattr(knowledge, kind)
    rows = [_list_row(kind, table[nid], lang) for nid in sorted(table)]
    if fmt == "json":
        _emit(rows)
        return
    extra = {
        "causes": lambda r: [r["domain"], f"{r['prior']:.3f}"],
        "mechanisms": lambda r: [r["pillar"]],
        "symptoms": lambda r: [r["kind"], r["source"]],
        "experiments": lambda r: ["/".join(r["outcomes"])],
    }[kind]
    _table([[r["id"] + (" (deprecated)" if r["status"] != "active" else ""), *extra(r), r["title"]] for r in rows])
    click.echo(f"{len(rows)} {kind}")


# ---------------------------------------------------------------- show


@kb.command()
@click.argument("node_id", metavar="ID")
@source_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@LANG
def show(node_id: str, data_dir: Path | None, overlays: tuple[Path, ...], fmt: str, lang: str) -> None:
    """Show one cause, mechanism, symptom or experiment with its neighbours.

    A cause shows its mechanisms, the symptoms it makes likely with P(symptom | cause), fixes,
    regression, prevention, references and the experiments that bear on it. An experiment
    shows the full outcome x cause probability table.

    \b
    Examples:
      dsdoctor kb show compute.fp16_overflow
      dsdoctor kb show x.nccl_p2p_disable --lang zh
      dsdoctor kb show s.cuda_oom --format json
    """
    from dsdoctor.kb.graph import describe

    knowledge = _load(data_dir, overlays)
    if knowledge.node(node_id) is None:
        raise _unknown(node_id, knowledge)
    view = describe(knowledge, node_id, lang)
    if fmt == "json":
        _emit(view)
    else:
        click.echo(render_text(view, lang))


_HEADINGS = {
    "en": {"cause": "cause", "mechanism": "mechanism", "symptom": "symptom", "experiment": "experiment",
           "prior": "prior", "parent": "refines", "children": "finer causes", "context": "applies when",
           "mechanisms": "mechanisms  P(mechanism | cause)", "symptoms": "symptoms  P(symptom | cause)  [leak]  via",
           "fixes": "fixes", "regression": "regression check", "prevention": "prevention", "references": "references",
           "experiments": "experiments that bear on it  P(outcome | this cause) vs default",
           "causes_m": "causes using it  P(mechanism | cause)", "symptoms_m": "symptoms  P(symptom | mechanism)",
           "mechanisms_s": "produced by  P(symptom | mechanism)", "causes_s": "causes  P(symptom | cause)",
           "leak": "leak", "question": "question", "how": "how", "commands": "commands", "cost": "cost",
           "table": "P(outcome | cause)", "outcomes": "outcomes", "absent": "absent reliability", "source": "source"},
    "zh": {"cause": "根因", "mechanism": "机制", "symptom": "症状", "experiment": "实验",
           "prior": "先验", "parent": "细化自", "children": "更细的根因", "context": "适用条件",
           "mechanisms": "机制  P(机制 | 根因)", "symptoms": "症状  P(症状 | 根因)  [泄漏]  经由",
           "fixes": "修复", "regression": "回归验证", "prevention": "预防", "references": "参考",
           "experiments": "相关实验  P(结果 | 该根因) 对比默认", "causes_m": "使用它的根因  P(机制 | 根因)",
           "symptoms_m": "症状  P(症状 | 机制)", "mechanisms_s": "产生它的机制  P(症状 | 机制)",
           "causes_s": "根因  P(症状 | 根因)", "leak": "泄漏概率", "question": "问题", "how": "做法",
           "commands": "命令", "cost": "代价", "table": "P(结果 | 根因)", "outcomes": "结果", "absent": "缺失可信度", "source": "来源"},
}


def render_text(view: dict[str, Any], lang: str) -> str:
    """A node view from kb.graph.describe as readable text."""
    h = _HEADINGS[lang]
    kind = view["type"]
    lines = [f"{view['id']}  ({h[kind]}{', ' + view['status'] if view['status'] != 'active' else ''})",
             f"  {view['title']}", f"  {view.get('file', '')}:{view.get('line', 0)}"]

    def section(title: str, items: list[str]) -> None:
        if items:
            lines.extend(["", title + ":", *(f"  {item}" for item in items)])

    for key in ("description", "how"):
        if view.get(key):
            lines.extend(["", view[key]])
    if kind == "cause":
        lines.extend(["", f"{h['prior']}: {view['prior']:.3f} ({view['prior_basis']})"])
        if view["parent"]:
            lines.append(f"{h['parent']}: {view['parent']}")
        if view["context"]:
            lines.append(f"{h['context']}: " + ", ".join(f"{k}={v}" for k, v in view["context"].items()))
        section(h["children"], view["children"])
        section(h["mechanisms"], [f"{m['id']:<40} {m['strength']:.2f}  {m['title']}" for m in view["mechanisms"]])
        section(h["symptoms"], [f"{s['id']:<40} {s['likelihood']:.2f}  [{s['leak']:g}]  "
                                + ", ".join(v["mechanism"] for v in s["via"]) for s in view["symptoms"]])
        section(h["fixes"], [f"[{f['kind']}] {f['title']}" + "".join(f"\n      {ln}" for ln in f["snippet"].splitlines())
                             for f in view["fixes"]])
        section(h["regression"], [view["regression"]] if view["regression"] else [])
        section(h["prevention"], [view["prevention"]] if view["prevention"] else [])
        section(h["experiments"], [
            f"{x['id']:<32} " + ", ".join(f"{o}={p:g}" for o, p in x["outcomes"].items())
            + "  vs  " + ", ".join(f"{o}={p:g}" for o, p in x["default"].items()) for x in view["experiments"]])
    elif kind == "mechanism":
        section(h["causes_m"], [f"{c['id']:<40} {c['strength']:.2f}  {c['title']}" for c in view["causes"]])
        section(h["symptoms_m"], [f"{s['id']:<40} {s['strength']:.2f}  {s['title']}" for s in view["symptoms"]])
    elif kind == "symptom":
        lines.extend(["", f"{h['source']}: {view['kind']} / {view['source']}  {h['leak']}: {view['leak']:g}  "
                      f"{h['absent']}: {view['absent_reliability']:g}"])
        if view["question"]:
            lines.append(f"{h['question']}: {view['question']}")
        section(h["mechanisms_s"], [f"{m['id']:<40} {m['strength']:.2f}  {m['title']}" for m in view["mechanisms"]])
        section(h["causes_s"], [f"{c['id']:<40} {c['likelihood']:.2f}  {c['title']}" for c in view["causes"]])
    else:
        lines.append(f"{h['cost']}: {view['cost']['minutes']:g} min x {view['cost']['gpus']} GPU")
        section(h["commands"], view["commands"])
        outcomes = [o["id"] for o in view["outcomes"]]
        width = max([len(r["cause"]) for r in view["table"]] + [10])
        cols = [max(14, len(o)) for o in outcomes]
        header = " " * width + "  " + "  ".join(f"{o:>{w}}" for o, w in zip(outcomes, cols, strict=True))
        section(h["table"], [header] + [
            f"{r['cause']:<{width}}  " + "  ".join(f"{r['outcomes'].get(o, 0):>{w}.2f}"
                                                   for o, w in zip(outcomes, cols, strict=True))
            for r in view["table"]])
        section(h["outcomes"], [f"{o['id']}: {o['title']}" for o in view["outcomes"]])
    section(h["references"], view.get("references", []))
    return "\n".join(lines)


# ---------------------------------------------------------------- graph


@kb.command()
@source_options
@click.option("--around", metavar="ID", help="Only the neighbourhood of this node (both directions).")
@click.option("--depth", default=1, show_default=True, type=click.IntRange(0, 20), help="Hops from --around.")
@click.option("--format", "fmt", type=click.Choice(["dot", "mermaid", "json"]), default="dot", show_default=True)
@click.option("--experiments", is_flag=True, help="Add experiments (dotted 'tests' edges to the causes they bear on).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE instead of stdout.")
@LANG
def graph(data_dir: Path | None, overlays: tuple[Path, ...], around: str | None, depth: int, fmt: str,
          experiments: bool, output: Path | None, lang: str) -> None:
    """Export the causal graph (or the neighbourhood of one node) as Graphviz DOT, Mermaid or JSON.

    Edges carry their strength: P(mechanism | cause) and P(symptom | mechanism). Dashed edges
    link a finer cause to the catalog cause it refines. Mermaid output is a `flowchart LR`; put it
    in a ```mermaid fence to render it in Markdown.

    \b
    Examples:
      dsdoctor kb graph --around compute.fp16_overflow --depth 2 | dot -Tsvg > fp16.svg
      dsdoctor kb graph --around s.nccl_watchdog_timeout --depth 2 --format mermaid
      dsdoctor kb graph --around x.nccl_p2p_disable --format json
    """
    from dsdoctor.kb.graph import MERMAID_MAX_EDGES, export_graph, neighbourhood, to_dot, to_json, to_mermaid

    knowledge = _load(data_dir, overlays)
    include_experiments = experiments or bool(around and around in knowledge.experiments)
    full = export_graph(knowledge, experiments=include_experiments, lang=lang)
    if around is not None:
        if around not in full:
            raise _unknown(around, knowledge)
        full = neighbourhood(full, around, depth)
    if fmt == "mermaid" and full.number_of_edges() > MERMAID_MAX_EDGES:
        click.echo(f"dsdoctor: warning: {full.number_of_edges()} edges; Mermaid renders at most {MERMAID_MAX_EDGES} "
                   "by default: use --around ID --depth N, or --format dot", err=True)
    text = {"dot": to_dot, "mermaid": to_mermaid, "json": to_json}[fmt](full)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise DsdoctorError(f"cannot write {output}: {exc.strerror or exc}") from exc
        click.echo(f"wrote {output} ({full.number_of_nodes()} nodes, {full.number_of_edges()} edges)", err=True)
    else:
        click.echo(text, nl=False)
