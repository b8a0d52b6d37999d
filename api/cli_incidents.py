"""`dsdoctor incidents`: record, show, search, import, export and reindex past incidents."""

from __future__ import annotations

import html
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from dsdoctor.kb.errors import DsdoctorError

FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
                      help="Output format.")
LANG = click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True,
                    help="Language of the labels and cause titles.")

LABELS = {
    "en": {"phenomenon": "Phenomenon", "scope": "Scope", "root_cause": "root cause", "root_cause_detail": "Root cause detail",
           "fix": "Fix", "regression": "Regression", "prevention": "Prevention", "evidence_summary": "Evidence",
           "severity": "severity", "status": "status", "occurred_at": "occurred", "author": "author", "job": "job",
           "tags": "tags", "symptoms": "symptoms", "diagnosis_id": "diagnosis", "created": "created", "updated": "updated",
           "ranks": "rank(s)", "nodes": "node(s)"},
    "zh": {"phenomenon": "现象", "scope": "影响范围", "root_cause": "根因", "root_cause_detail": "根因说明",
           "fix": "修复", "regression": "回归验证", "prevention": "预防", "evidence_summary": "证据摘要",
           "severity": "严重度", "status": "状态", "occurred_at": "发生时间", "author": "作者", "job": "作业",
           "tags": "标签", "symptoms": "症状", "diagnosis_id": "诊断", "created": "创建", "updated": "更新",
           "ranks": "个 rank", "nodes": "个节点"},
}


def catalog_cause_ids() -> frozenset[str]:
    """Cause IDs a record may name: the knowledge base's causes, else the vendored catalog."""
    try:
        from dsdoctor.kb.loader import get_kb

        return frozenset(get_kb().causes)
    except (ImportError, DsdoctorError):
        from dsdoctor.kb.catalog import load_catalog

        return frozenset(load_catalog())


def _cause_titles(lang: str) -> dict[str, str]:
    try:
        from dsdoctor.kb.catalog import load_catalog

        return {cid: (entry.zh if lang == "zh" else entry.en) for cid, entry in load_catalog().items()}
    except (ImportError, DsdoctorError):
        return {}


def _store() -> Any:
    from dsdoctor.api.settings import home
    from dsdoctor.kb.incidents.store import IncidentStore

    return IncidentStore(home(), valid_causes=catalog_cause_ids)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _terminal(marked: str) -> str:
    """Highlight HTML (escaped text with <mark>) for the terminal: bold marks, plain text."""
    parts = re.split(r"<mark>(.*?)</mark>", marked)
    out = []
    for i, part in enumerate(parts):
        text = html.unescape(part)
        out.append(click.style(text, bold=True, fg="yellow") if i % 2 else text)
    return "".join(out).replace("\n", " ")


def _job_line(job: dict[str, Any], labels: dict[str, str]) -> str:
    bits = []
    if job.get("cluster"):
        bits.append(job["cluster"])
    if job.get("job_id"):
        bits.append(f"#{job['job_id']}")
    if job.get("world_size"):
        bits.append(f"{job['world_size']} {labels['ranks']}")
    if job.get("node_count"):
        bits.append(f"{job['node_count']} {labels['nodes']}")
    if job.get("model"):
        bits.append(job["model"])
    versions = ", ".join(f"{k} {v}" for k, v in (job.get("versions") or {}).items())
    return ", ".join(bits) + (f"; {versions}" if versions else "")


def render_incident(record: dict[str, Any], lang: str) -> str:
    """A record as readable text with labels in ``lang``."""
    labels = LABELS[lang]
    title = _cause_titles(lang).get(record["root_cause"], "")
    lines = [click.style(f"{record['id']}  {record['title']}", bold=True),
             f"  {labels['root_cause']}: {record['root_cause']}" + (f" — {title}" if title else ""),
             f"  {labels['severity']}: {record['severity']}   {labels['status']}: {record['status']}   "
             f"{labels['occurred_at']}: {record['occurred_at']}"]
    if record.get("author"):
        lines.append(f"  {labels['author']}: {record['author']}")
    if record.get("job"):
        lines.append(f"  {labels['job']}: {_job_line(record['job'], labels)}")
    for key in ("tags", "symptoms"):
        if record.get(key):
            lines.append(f"  {labels[key]}: {', '.join(record[key])}")
    if record.get("diagnosis_id"):
        lines.append(f"  {labels['diagnosis_id']}: {record['diagnosis_id']}")
    for key in ("phenomenon", "scope", "root_cause_detail", "fix", "regression", "prevention", "evidence_summary"):
        if record.get(key):
            lines.append("")
            lines.append(click.style(labels[key], bold=True))
            lines.extend("  " + line for line in record[key].splitlines())
    lines.append("")
    lines.append(f"  {labels['created']}: {record['created_at']}   {labels['updated']}: {record['updated_at']}")
    return "\n".join(lines)


@click.group()
def incidents() -> None:
    """Record, search, import and export past incidents (Chinese and English).

    Incidents live in SQLite in DSDOCTOR_HOME (incidents.db); a Whoosh full-text index
    (incidents-index/) is derived from it and can be rebuilt at any time. The first use of an
    empty store loads the seed incidents shipped with dsdoctor.

    \b
    Examples:
      dsdoctor incidents search 显存碎片
      dsdoctor incidents search "watchdog timeout" --domain comm --since 2024-01-01
      dsdoctor incidents show INC-SEED-02 --lang zh
      dsdoctor incidents add --file incident.json
      dsdoctor incidents export incidents.jsonl
    """


@incidents.command()
@click.option("--file", "file", type=click.File("r", encoding="utf-8"),
              help="Read the whole record from a JSON file ('-' for stdin); other options are then not allowed.")
@click.option("--id", "incident_id", help="Incident id (generated when omitted), e.g. INC-2024-0042.")
@click.option("--title", help="One-line summary.")
@click.option("--phenomenon", help="What was seen: messages, ranks, timing.")
@click.option("--root-cause", help="Root-cause ID of the knowledge base, e.g. memory.fragmentation.")
@click.option("--detail", "root_cause_detail", help="The root cause in your own words.")
@click.option("--scope", help="Which ranks, nodes or jobs were affected.")
@click.option("--fix", help="What fixed it (required with --status resolved).")
@click.option("--regression", help="How the fix was verified.")
@click.option("--prevention", help="What prevents a recurrence.")
@click.option("--severity", type=click.Choice(["critical", "high", "medium", "low"]), help="Default: medium.")
@click.option("--status", type=click.Choice(["open", "resolved"]), help="Default: open.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--symptom", "symptoms", multiple=True, help="An observed symptom ID such as s.cuda_oom (repeatable).")
@click.option("--occurred-at", help="When it happened: 2024-05-01 or 2024-05-01T13:45:00Z (default: now).")
@click.option("--author", help="Who recorded it.")
@click.option("--cluster", help="Cluster or site name.")
@click.option("--job-id", help="Scheduler job id.")
@click.option("--world-size", type=int, help="Number of ranks.")
@click.option("--node-count", type=int, help="Number of nodes.")
@click.option("--model", help="Model trained, e.g. llama-70b.")
@click.option("--diagnosis-id", help="The dsdoctor diagnosis this incident came from.")
@FORMAT
def add(file, incident_id, title, phenomenon, root_cause, root_cause_detail, scope, fix, regression, prevention,
        severity, status, tags, symptoms, occurred_at, author, cluster, job_id, world_size, node_count, model,
        diagnosis_id, fmt) -> None:
    """Record a new incident, from options or from a JSON file.

    \b
    Examples:
      dsdoctor incidents add --title "只有 rank 3 OOM" --root-cause memory.foreign_process_on_gpu \\
          --phenomenon "rank 3: CUDA out of memory; Process 48213 has 20.31 GiB memory in use" \\
          --status resolved --fix "killed the leftover inference process" --tag oom
      dsdoctor incidents add --file incident.json --format json
    """
    fields = {
        "id": incident_id, "title": title, "phenomenon": phenomenon, "root_cause": root_cause,
        "root_cause_detail": root_cause_detail, "scope": scope, "fix": fix, "regression": regression,
        "prevention": prevention, "severity": severity, "status": status, "occurred_at": occurred_at,
        "author": author, "diagnosis_id": diagnosis_id,
    }
    record: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    if tags:
        record["tags"] = list(tags)
    if symptoms:
        record["symptoms"] = list(symptoms)
    job = {k: v for k, v in {"cluster": cluster, "job_id": job_id, "world_size": world_size,
                             "node_count": node_count, "model": model}.items() if v is not None}
    if job:
        record["job"] = job
    if file is not None:
        if record:
            raise click.UsageError(f"--file cannot be combined with other record options ({', '.join(sorted(record))})")
        try:
            record = json.load(file)
        except json.JSONDecodeError as exc:
            raise DsdoctorError(f"{file.name}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    elif not record:
        raise click.UsageError("give --file F.json or at least --title, --phenomenon and --root-cause")
    with _store() as store:
        saved = store.add(record)
    if fmt == "json":
        _emit_json(saved)
    else:
        click.echo(f"added {saved['id']}: {saved['title']}")


@incidents.command()
@click.argument("incident_id", metavar="ID")
@FORMAT
@LANG
def show(incident_id: str, fmt: str, lang: str) -> None:
    """Show one incident.

    \b
    Examples:
      dsdoctor incidents show INC-SEED-01
      dsdoctor incidents show INC-SEED-02 --lang zh
      dsdoctor incidents show INC-SEED-02 --format json
    """
    with _store() as store:
        record = store.get(incident_id)
    if fmt == "json":
        _emit_json(record)
    else:
        click.echo(render_incident(record, lang))


@incidents.command()
@click.argument("query", required=False, default="")
@click.option("--cause", multiple=True, help="Only this root-cause ID (repeatable: any of them).")
@click.option("--domain", multiple=True, help="Only this domain: config, memory, comm, compute, data, hardware, none.")
@click.option("--severity", multiple=True, help="Only this severity: critical, high, medium, low.")
@click.option("--tag", multiple=True, help="Only incidents with this tag (repeatable: any of them).")
@click.option("--since", help="Occurred on or after this date/time, e.g. 2024-01-01.")
@click.option("--until", help="Occurred on or before this date/time (a date includes the whole day).")
@click.option("--limit", type=click.IntRange(1, 200), default=10, show_default=True, help="Results per page.")
@click.option("--cursor", help="Continue after the page that printed this cursor.")
@FORMAT
def search(query: str, cause, domain, severity, tag, since, until, limit: int, cursor, fmt: str) -> None:
    """Search incidents by text (Chinese and English) with filters; no QUERY lists the newest.

    QUERY uses Whoosh syntax: words must all match (AND), OR and NOT, "exact phrases",
    prefix*, and field:word for title:, phenomenon:, cause:, fix: (and the rest of the text),
    root_cause:, tag:, severity: (Chinese aliases 标题: 现象: 根因: 修复: 标签: work too).

    \b
    Examples:
      dsdoctor incidents search 显存碎片
      dsdoctor incidents search checkpoints --domain comm
      dsdoctor incidents search '"fallen off the bus" OR ECC' --severity critical --severity high
      dsdoctor incidents search --cause memory.fragmentation --since 2024-01-01 --format json
    """
    with _store() as store:
        found = store.search(query, cause=list(cause) or None, domain=list(domain) or None,
                             severity=list(severity) or None, tag=list(tag) or None, since=since, until=until,
                             limit=limit, cursor=cursor)
    if fmt == "json":
        _emit_json(found)
        return
    items = found["items"]
    click.echo(f"{len(items)} of {found['total']} incident(s)")
    for name, counts in found["facets"].items():
        if counts:
            click.echo(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for item in items:
        score = f"  score {item['score']:.1f}" if item["score"] is not None else ""
        click.echo("")
        click.echo(click.style(item["id"], bold=True) + f"  {item['occurred_at'][:10]}  {item['root_cause']}  "
                   f"{item['severity']}  {item['status']}{score}")
        title = item["highlights"].get("title")
        click.echo("  " + (_terminal(title) if title else item["title"]))
        for field, marked in item["highlights"].items():
            if field != "title":
                click.echo(f"    {field}: {_terminal(marked)}")
    if found["next_cursor"]:
        click.echo("")
        click.echo(f"more: add --cursor {found['next_cursor']}")


@incidents.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def import_(file: Path) -> None:
    """Import incidents from a JSON-lines file (one record per line); safe to repeat.

    A line whose id is already stored replaces that incident when its content differs and is
    skipped when it is the same; a line without an id gets one derived from its content. Any
    invalid line rejects the whole file, naming every bad line.

    \b
    Examples:
      dsdoctor incidents import incidents.jsonl
      dsdoctor incidents export - | ssh other-host dsdoctor incidents import /dev/stdin
    """
    with _store() as store:
        counts = store.import_jsonl(file)
    click.echo(f"imported {file}: {counts['added']} added, {counts['updated']} updated, "
               f"{counts['unchanged']} unchanged")


@incidents.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
def export(file: Path | None) -> None:
    """Write every incident as JSON lines to FILE (default: standard output).

    \b
    Examples:
      dsdoctor incidents export incidents.jsonl
      dsdoctor incidents export | jq -r .title
    """
    with _store() as store:
        if file is None or str(file) == "-":
            count = store.export_jsonl(sys.stdout)
            return
        tmp = file.with_name(file.name + ".part")
        try:
            with tmp.open("w", encoding="utf-8") as fp:
                count = store.export_jsonl(fp)
            tmp.replace(file)
        except OSError as exc:
            raise DsdoctorError(f"cannot write {file}: {exc.strerror}") from None
    click.echo(f"exported {count} incident(s) to {file}", err=True)


@incidents.command()
@click.option("--procs", type=click.IntRange(1, 64), help="Indexing processes for large stores (default: CPU count).")
def reindex(procs: int | None) -> None:
    """Rebuild the full-text index from SQLite (safe while the server runs).

    Use it after restoring incidents.db from a backup, or when search results look stale;
    normally the index catches up by itself.

    \b
    Examples:
      dsdoctor incidents reindex
      dsdoctor incidents reindex --procs 2
    """
    started = time.perf_counter()
    with _store() as store:
        count = store.reindex(procs=procs)
    click.echo(f"indexed {count} incident(s) in {time.perf_counter() - started:.1f} s")
