"""`dsdoctor diagnose`: diagnose evidence from files."""

from __future__ import annotations

import json
import sys

import click

from dsdoctor.api.cli_diagnoses import job_options, send_evidence, server_options, validate_job
from dsdoctor.api.evidence_files import build_evidence, parse_observe

PROGRESS_THRESHOLD = 4 * 1024 * 1024  # show a progress bar for inputs above this size


@click.command()
@click.argument("logs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--evidence", "evidence_path", type=click.Path(dir_okay=False), help="An evidence document (JSON, see the README).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="The ds_config.json the job used.")
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), help="Per-step metrics: JSON array, JSON Lines or CSV (name,rank,step,value).")
@click.option("--describe", "description", help="Free-text description of what happened (English or Chinese).")
@click.option("--observe", multiple=True, help="A known fact: x.EXPERIMENT=OUTCOME, s.SYMPTOM or !s.SYMPTOM (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True, help="Language of human output.")
@click.option("--top", default=5, show_default=True, type=click.IntRange(1, 50), help="How many causes to show.")
@click.option("--job-id", help="The job's scheduler id (stored with the diagnosis as job.id).")
@click.option("--job-name", help="The job's name (job.name).")
@click.option("--cluster", help="The cluster it ran on (job.cluster).")
@click.option("--run-url", help="Link to the run in the tracker or scheduler (job.run_url).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="A job label (repeatable).")
@server_options
def diagnose(logs, evidence_path, config_path, metrics_path, description, observe, fmt, lang, top,
             job_id, job_name, cluster, run_url, labels, server, token) -> None:
    """Rank the root causes of a failed job and propose the next isolation experiment.

    LOG files are streamed (any size); '-' reads standard input. Each line's rank, node and time
    are parsed from its prefix, so one file may mix many ranks.

    \b
    Examples:
      dsdoctor diagnose seed_cases/only-rank-3-ooms-on-an-8-gpu-node-while-a-stale-process-holds-its-gpu/*.log
      dsdoctor diagnose seed_cases/every-rank-ooms-in-attention-forward-after-raising-sequence-length-to-16k/train.log \\
        --config seed_cases/every-rank-ooms-in-attention-forward-after-raising-sequence-length-to-16k/ds_config.json \\
        --describe "序列长度改成 16k 后每张卡都 OOM" --lang zh
      dsdoctor diagnose seed_cases/rank-0-ooms-while-consolidating-16-bit-weights-of-a-zero-3-model-at-save/rank0.log \\
        --format json
      dsdoctor diagnose seed_cases/only-rank-3-ooms-on-an-8-gpu-node-while-a-stale-process-holds-its-gpu/torchrun.log \\
        --observe x.list_gpu_processes=foreign_process

    One case per command: logs of unrelated jobs given together are read as one job.

    Without --server the diagnosis is computed here and not stored anywhere; with --server URL
    (or DSDOCTOR_SERVER) the evidence is sent to that server, which stores it and answers with
    its id and page.
    """
    evidence, log_files = build_evidence(logs, evidence_path, config_path, metrics_path, description)
    if observe:
        evidence.setdefault("observations", {}).update(parse_observe(observe))
    given = job_options(job_id, job_name, cluster, run_url, labels)
    job = {**evidence["job"], **given} if isinstance(evidence.get("job"), dict) else evidence.get("job", given)
    if job or "job" in evidence:
        evidence["job"] = validate_job(job)
    if server:
        send_evidence(server, token, evidence, log_files, fmt=fmt, lang=lang, top=top)
        return
    _diagnose_here(evidence, log_files, fmt=fmt, lang=lang, top=top)


def _diagnose_here(evidence, log_files, *, fmt: str, lang: str, top: int) -> None:
    from dsdoctor.api.cli_rules import use_disk_cache
    from dsdoctor.api.render import render_markdown, render_text
    from dsdoctor.kb.diagnosis import diagnose as run_diagnosis

    use_disk_cache()
    site_counts, similar = site_history()
    total = sum(p.stat().st_size for _, p in log_files)
    with _progress(total) as advance:
        result = run_diagnosis(evidence, log_files=log_files, lang=lang, top=top, progress=advance,
                               site_counts=site_counts, similar=similar)
    if fmt == "json":
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
    elif fmt == "markdown":
        click.echo(render_markdown(result, lang, stored=False), nl=False)
    else:
        click.echo(render_text(result, lang, stored=False), nl=False)


def site_history():
    """Site priors and similar incidents from an incident store that already exists.

    The command line never creates or seeds a store (that would index Chinese seed text and pay
    for loading jieba on a diagnosis that has no Chinese in it).
    """
    from dsdoctor.api.settings import home
    from dsdoctor.kb.storage.settings import database_url

    # the store's DB_FILE; importing the store costs ~0.4 s (on PostgreSQL the incidents are always there)
    if database_url() is None and not (home(create=False) / "incidents.db").exists():
        return None, None
    from dsdoctor.kb.incidents.store import IncidentStore

    store = IncidentStore.open_existing(home(create=False))
    if store is None:
        return None, None

    def similar(symptoms: list[str], text: str) -> list[dict]:
        return store.similar(symptoms=symptoms, text=text, limit=10) if (symptoms or text) else []

    return store.site_cause_counts(), similar


class _progress:
    """A rich progress bar on stderr for big inputs on a terminal; a no-op otherwise."""

    def __init__(self, total: int):
        self.total = total
        self.bar = None

    def __enter__(self):
        if self.total < PROGRESS_THRESHOLD or not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        # on stderr, so that the bar shows while stdout goes to a file or a pipe
        self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), transient=True, console=Console(stderr=True))
        self.bar.start()
        task = self.bar.add_task("reading logs", total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
