"""`dsdoctor diagnoses list|show|observe` and `dsdoctor diagnose --server`: the CLI as a client of a
running server (api/client.py), so diagnoses made at the terminal are stored and shared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dsdoctor.kb.errors import DsdoctorError


def server_options(func):
    """--server URL and --token T (also from DSDOCTOR_SERVER and DSDOCTOR_TOKEN)."""
    func = click.option("--token", envvar="DSDOCTOR_TOKEN", metavar="T",
                        help="API bearer token (env DSDOCTOR_TOKEN).")(func)
    return click.option("--server", envvar="DSDOCTOR_SERVER", metavar="URL",
                        help="A running dsdoctor server, e.g. http://127.0.0.1:8000 (env DSDOCTOR_SERVER).")(func)


def job_options(job_id, job_name, cluster, run_url, labels) -> dict[str, Any]:
    """The job object from the command-line options (only those given)."""
    job: dict[str, Any] = {k: v for k, v in (("id", job_id), ("name", job_name), ("cluster", cluster),
                                             ("run_url", run_url)) if v}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DsdoctorError(f"--label {item!r}: write KEY=VALUE, e.g. --label team=pretrain")
        job.setdefault("labels", {})[key.strip()] = value.strip()
    return job


def validate_job(job: Any) -> dict[str, Any]:
    """The job object checked by the API's own schema; a one-line error naming the bad field."""
    from marshmallow import ValidationError

    from dsdoctor.api.schemas import EvidenceJobSchema

    if not isinstance(job, dict):
        raise DsdoctorError(f"job must be an object with id, name, cluster, run_url, labels; got {type(job).__name__}")
    try:
        return EvidenceJobSchema().load(job)
    except ValidationError as exc:
        problems = "; ".join(f"job.{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                             for field, msgs in exc.messages.items())
        raise DsdoctorError(problems) from None


def _client(server: str | None, token: str | None):
    from dsdoctor.api.client import Client

    if not server:
        raise click.UsageError("give --server URL (or set DSDOCTOR_SERVER), e.g. --server http://127.0.0.1:8000")
    return Client(server, token)


def _emit(result: dict[str, Any], fmt: str, lang: str, page: str) -> None:
    from dsdoctor.api.render import render_markdown, render_text

    if fmt == "json":
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    click.echo((render_markdown if fmt == "markdown" else render_text)(result, lang), nl=False)
    label = "页面" if lang == "zh" else "page"
    click.echo(f"\nstored as {result['id']}\n{label}: {page}")


def send_evidence(server: str, token: str | None, evidence: dict[str, Any], log_files: list[tuple[str, Path]],
                  *, fmt: str, lang: str, top: int) -> None:
    """POST the evidence (log files read into it) to the server and print the stored diagnosis."""
    client = _client(server, token)
    body = dict(evidence)
    body["logs"] = [*(evidence.get("logs") or []),
                    *({"source": source, "text": path.read_text(encoding="utf-8", errors="replace")}
                      for source, path in log_files)]
    if not body["logs"]:
        body.pop("logs")
    result = client.request("POST", "/v1/diagnoses", body, {"lang": lang, "top": top})
    _emit(result, fmt, lang, client.page_url(result["id"]))


_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
                       show_default=True)
_LANG = click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)


@click.group()
def diagnoses() -> None:
    """Diagnoses stored on a running server: list them (by job or cluster), show one, add observations.

    \b
    Examples:
      dsdoctor diagnoses list --server http://127.0.0.1:8000 --cluster a100-east
      dsdoctor diagnoses show ID --server http://127.0.0.1:8000 --format markdown
      dsdoctor diagnoses observe ID x.single_gpu_repro=does_not_reproduce --server http://127.0.0.1:8000
    """


@diagnoses.command("list")
@server_options
@click.option("--job-id", help="Only diagnoses of this job id.")
@click.option("--cluster", help="Only diagnoses of jobs on this cluster.")
@click.option("--since", help="Only diagnoses created at or after this ISO date/datetime (UTC).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@click.option("--cursor", help="next_cursor printed by the previous page.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_diagnoses(server, token, job_id, cluster, since, limit, cursor, fmt) -> None:
    """Stored diagnoses, newest first: id, time, top cause, job."""
    from dsdoctor.api.render import job_line

    client = _client(server, token)
    page = client.request("GET", "/v1/diagnoses", query={"job_id": job_id, "cluster": cluster, "since": since,
                                                         "limit": limit, "cursor": cursor})
    if fmt == "json":
        click.echo(json.dumps(page, ensure_ascii=False, indent=2))
        return
    if not page["items"]:
        click.echo("no diagnoses match")
    for item in page["items"]:
        top = f"{item['top_cause']} {item['top_probability']:.0%}" if item.get("top_cause") else "no cause"
        job = job_line(item.get("job"))
        click.echo(f"{item['id']}  {item['created_at']}  {top}" + (f"  [{job}]" if job else ""))
    if page.get("next_cursor"):
        click.echo(f"more: --cursor {page['next_cursor']}")


@diagnoses.command("show")
@click.argument("diagnosis_id")
@server_options
@_FORMAT
@_LANG
def show(diagnosis_id, server, token, fmt, lang) -> None:
    """One stored diagnosis, as last computed."""
    from urllib.parse import quote

    client = _client(server, token)
    result = client.request("GET", f"/v1/diagnoses/{quote(diagnosis_id, safe='')}")
    _emit(result, fmt, lang, client.page_url(result["id"]))


@diagnoses.command("observe")
@click.argument("diagnosis_id")
@click.argument("facts", nargs=-1, required=True)
@server_options
@_FORMAT
@_LANG
def observe(diagnosis_id, facts, server, token, fmt, lang) -> None:
    """Record what was observed (x.EXPERIMENT=OUTCOME, s.SYMPTOM, !s.SYMPTOM) and show the re-ranked diagnosis."""
    from urllib.parse import quote

    from dsdoctor.api.evidence_files import parse_observe

    observations = parse_observe(facts)
    client = _client(server, token)
    result = client.request("POST", f"/v1/diagnoses/{quote(diagnosis_id, safe='')}/observations",
                            {"observations": observations}, {"lang": lang})
    _emit(result, fmt, lang, client.page_url(result["id"]))
