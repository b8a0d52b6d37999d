"""`dsdoctor db`: move the embedded store to PostgreSQL."""

from __future__ import annotations

import json

import click


@click.group()
def db() -> None:
    """The database: the embedded SQLite files of DSDOCTOR_HOME, or PostgreSQL (DSDOCTOR_DATABASE_URL)."""


@db.command("copy")
@click.option("--from", "source", required=True, metavar="sqlite:PATH",
              help="The data directory to copy from, e.g. sqlite:/var/lib/dsdoctor.")
@click.option("--to", "dest", envvar="DSDOCTOR_DATABASE_URL", required=True, metavar="postgresql://...",
              help="The PostgreSQL database to copy into (default: DSDOCTOR_DATABASE_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def copy(source: str, dest: str, as_json: bool) -> None:
    """Copy diagnoses (with their evidence and history) and tokens into PostgreSQL, then read every
    row back and compare. Safe to run again: rows already there are left alone."""
    from kb.storage import copy as store_copy
    from kb.storage.backend import redact_url

    report = store_copy.copy(store_copy.parse_source(source), dest)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
        return
    click.echo(f"copied {source} -> {redact_url(dest)}")
    for table, c in report.items():
        click.echo(f"  {table}: {c['source']} in the source, {c['copied']} copied, {c['already_there']} already there, "
                   f"{c['verified']} verified identical")
    click.echo("  incidents: not copied; the incident store and its search index stay in DSDOCTOR_HOME "
               "(see docs/deployment.md)")
