"""`dsdoctor rules`: test the evidence rules against their examples, list them, explain what fires on a log."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

#: inputs smaller than this get no progress bar (the bar would only flicker)
PROGRESS_MIN_BYTES = 4 * 2**20


@contextlib.contextmanager
def extraction_progress(total_bytes: int, label: str = "reading logs",
                        enabled: bool | None = None) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar for ``extract(progress=...)`` on a terminal, for inputs over a few MB.

    Yields the callback to pass as ``progress`` (called with the bytes just processed), or ``None``
    when stderr is not a terminal or the input is small. ``dsdoctor diagnose`` uses it too.
    """
    if enabled is None:
        enabled = sys.stderr.isatty() and total_bytes >= PROGRESS_MIN_BYTES
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), transient=True, console=_stderr_console()) as bar:
        task = bar.add_task(label, total=total_bytes)
        yield lambda n: bar.advance(task, n)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def use_disk_cache() -> None:
    """Compiled Hyperscan databases, the loaded rules and knowledge base (kb/snapshot.py) and jieba's
    dictionary go to the user cache directory, so the next command starts fast (the server keeps its
    own under DSDOCTOR_HOME)."""
    from dsdoctor.kb import snapshot
    from dsdoctor.kb.storage.settings import cli_cache_dir, set_jieba_cache_dir
    from dsdoctor.rules.matcher import configure_disk_cache

    cache = cli_cache_dir()
    with contextlib.suppress(OSError):
        configure_disk_cache(cache / "rules")
        snapshot.configure(cache)
    set_jieba_cache_dir(cache)  # not analyzer.configure: importing the analyzer imports whoosh


def _ruleset(dirs: tuple[Path, ...]) -> tuple[Any, list[Any]]:
    from dsdoctor.rules.loader import load_rules_with_problems

    return load_rules_with_problems(list(dirs) or None)


@click.group()
def rules() -> None:
    """Test the evidence rules against their examples, or explain which rules fire on a log.

    Rules live in rules/data (logs/, phrases/, context/): each carries match and no_match examples.

    \b
    Examples:
      dsdoctor rules test
      dsdoctor rules test --rule oom.cuda_allocator_v22
      dsdoctor rules list --format json
      dsdoctor rules explain rank3.log node2.log --config ds_config.json --metrics metrics.jsonl
    """


_DIR = click.option("--dir", "dirs", multiple=True, metavar="DIR", type=click.Path(exists=True, path_type=Path),
                    help="Read rules from DIR instead of the built-in rules/data (repeatable).")


@rules.command("test")
@click.option("--rule", "rule_id", metavar="ID", help="Run the examples of this rule only.")
@_DIR
def test_command(rule_id: str | None, dirs: tuple[Path, ...]) -> None:
    """Run every rule's match / no_match examples through the real matcher; exit 1 on any failure."""
    from dsdoctor.kb.errors import DsdoctorError
    from dsdoctor.rules.testing import VERSION_RULE, ExampleRunner

    use_disk_cache()
    ruleset, problems = _ruleset(dirs)
    for problem in problems:
        click.echo(str(problem), err=True)
    from dsdoctor.rules.lexicon import load_lexicon

    if rule_id and rule_id != VERSION_RULE and ruleset.get(rule_id) is None and load_lexicon().get(rule_id) is None:
        from difflib import get_close_matches

        close = get_close_matches(rule_id, [r.id for r in ruleset.rules], n=3)
        raise DsdoctorError(f"unknown rule {rule_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    results = ExampleRunner(ruleset, lexicon=None if dirs else load_lexicon()).run(rule_id)
    failed = [r for r in results if not r.ok]
    for r in failed:
        click.echo(f"{r.where}: {r.rule} [{r.kind}] {r.message}: {r.line[:200]!r}")
    todo = [r for r in results if r.kind == "todo_match"]
    for r in todo:
        if r.message.startswith("now matches"):
            click.echo(f"{r.where}: {r.rule} [todo_match] {r.message}: {r.line[:200]!r}")
    passed = sum(1 for r in results if r.ok and r.kind != "todo_match")
    summary = f"{passed} passed, {len(failed)} failed"
    if todo:
        summary += f", {len(todo)} known miss(es) recorded as todo_match"
    if problems:
        summary += f"; {len(problems)} rule file problem(s)"
    click.echo(summary)
    if failed or problems:
        raise click.exceptions.Exit(1)


@rules.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--kind", type=click.Choice(["log", "phrase", "marker"]), help="Only rules of this kind.")
@_DIR
def list_command(fmt: str, kind: str | None, dirs: tuple[Path, ...]) -> None:
    """List the rules: ID, kind, what they assert (symptom or marker), severity and title."""
    ruleset, problems = _ruleset(dirs)
    for problem in problems:
        click.echo(str(problem), err=True)
    chosen = [r for r in ruleset.rules if kind is None or r.kind == kind]
    if fmt == "json":
        rows = [{"id": r.id, "kind": r.kind, "symptom": r.symptom, "marker": r.marker, "severity": r.severity,
                 "secondary": r.secondary, "lang": r.lang, "title": r.title, "pattern": r.pattern,
                 "fields": r.fields, "file": r.file, "line": r.line} for r in chosen]
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    widths = [max([len(r.id) for r in chosen] + [2]), 6, max([len(r.symptom or r.marker or "") for r in chosen] + [7])]
    for r in chosen:
        what = r.symptom or f"({r.marker})"
        flag = " victim" if r.secondary else ""
        click.echo(f"{r.id:<{widths[0]}}  {r.kind:<6}  {what:<{widths[2]}}  {r.severity:<7}  {r.title}{flag}")
    click.echo(f"{len(chosen)} rule(s)")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _where(ref: Any) -> str:
    parts = [f"{ref.source}:{ref.lineno}" if ref.lineno else ref.source]
    if ref.rank is not None:
        parts.append(f"rank {ref.rank}")
    elif ref.local_rank is not None:
        parts.append(f"local rank {ref.local_rank}")
    if ref.node:
        parts.append(f"node {ref.node}")
    if ref.time:
        parts.append(ref.time)
    return "  ".join(parts)


def _ranks(ranks: set[int]) -> str:
    values = sorted(ranks)
    if not values:
        return "-"
    text = ", ".join(map(str, values[:12]))
    return text + (f", … ({len(values)} ranks)" if len(values) > 12 else "")


def _render_text(x: Any, elapsed: float, lang: str) -> None:
    click.echo(f"read {_size(x.bytes_processed)}, {x.lines_processed:,} lines in {elapsed:.2f} s; "
               f"sources: {', '.join(sorted(x.supplied_sources)) or '-'}")
    fe = x.first_error
    if fe is not None:
        who = f"rank {fe.rank}" if fe.rank is not None else "rank ?"
        if fe.node:
            who += f" on {fe.node}"
        click.echo(f"first error: {who}{' at ' + fe.time if fe.time else ''}: {fe.symptom} [{fe.rule}]")
        click.echo(f"  {fe.source}:{fe.lineno}  {fe.line}")
    else:
        click.echo("first error: none")
    click.echo(f"scope: {x.scope}    phase: {x.phase}")
    ctx = x.context
    facts = {k: v for k, v in asdict(ctx).items() if v not in (None, {}, [])}
    if facts:
        click.echo("context: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    click.echo(f"symptoms ({len(x.symptoms)}):")
    for sid, obs in sorted(x.symptoms.items(), key=lambda kv: kv[1].first_order):
        tags = [f"{obs.count} line(s)" if obs.count != 1 else "1 line", f"ranks {_ranks(obs.ranks)}"]
        if obs.nodes:
            tags.append("nodes " + ", ".join(sorted(obs.nodes)[:6]))
        if obs.secondary:
            tags.append("victim")
        if obs.reliability < 1:
            tags.append(f"reliability {obs.reliability:g}")
        click.echo(f"  {sid}  ({'; '.join(tags)})  rules: {', '.join(sorted(obs.rules))}")
        for ref in obs.lines[:5]:
            click.echo(f"    {_where(ref)}")
            click.echo(f"      {ref.text}")
            if ref.fields:
                click.echo("      fields: " + ", ".join(f"{k}={v!r}" for k, v in ref.fields.items()))
    if x.absent:
        click.echo("known absent: " + ", ".join(sorted(x.absent)))
    for f in x.config_findings:
        click.echo(f"config [{f.severity}] {f.key_path}: {f.message.get(lang) or f.message['en']}"
                   + (f"  -> {f.symptom}" if f.symptom else ""))
    for w in x.warnings:
        click.echo(f"warning: {w}", err=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, set):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


@rules.command("explain")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="The ds_config.json the job used.")
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False),
              help="Per-step metrics (JSON array, JSON Lines or CSV name,rank,step,value).")
@click.option("--environment", "environment_path", type=click.Path(dir_okay=False),
              help="environment.json: world_size, nodes, gpu, versions, per_node.")
@click.option("--describe", "description", help="Free-text description (English or Chinese).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
              help="Language of config findings.")
@_DIR
def explain_command(files: tuple[Path, ...], config_path: str | None, metrics_path: str | None,
                    environment_path: str | None, description: str | None, fmt: str, lang: str,
                    dirs: tuple[Path, ...]) -> None:
    """Show, for each rule that fired, the lines (rank, node, time) and captured fields, and the derived
    first error, scope and phase. FILE may be a log, a gzip'ed log, or '-' for stdin."""
    from dsdoctor.api.evidence_files import build_evidence
    from dsdoctor.kb.errors import DsdoctorError, KnowledgeError
    from dsdoctor.rules.extract import extract

    if not files and not (description or config_path or metrics_path):
        raise DsdoctorError("nothing to explain: give log FILEs, --config, --metrics or --describe")
    use_disk_cache()
    evidence, log_files = build_evidence([str(f) for f in files], None, config_path, metrics_path, description or None) \
        if files or description else ({}, [])
    if not (files or description):
        from dsdoctor.api.evidence_files import load_metrics

        if config_path:
            evidence["config"] = json.loads(Path(config_path).read_text(encoding="utf-8"))
        if metrics_path:
            evidence["metrics"] = load_metrics(metrics_path)
    if environment_path:
        try:
            evidence["environment"] = json.loads(Path(environment_path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DsdoctorError(f"cannot read environment file {environment_path}: {exc}") from None
    ruleset, problems = _ruleset(dirs)
    if problems and dirs:
        raise KnowledgeError(problems)
    for problem in problems:
        click.echo(f"warning: rule skipped: {problem}", err=True)
    total = sum(p.stat().st_size for _, p in log_files)
    start = time.perf_counter()
    with extraction_progress(total) as progress:
        x = extract(evidence, log_files=log_files, progress=progress, rules=ruleset)
    elapsed = time.perf_counter() - start
    if fmt == "json":
        data = _jsonable(asdict(x))
        data["elapsed_s"] = round(elapsed, 3)
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    _render_text(x, elapsed, lang)
