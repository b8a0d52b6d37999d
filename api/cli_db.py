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
    """Copy diagnoses (with their evidence and history), tokens and incidents (with their versions) into
    PostgreSQL, then read every row back and compare, and search for a sample of the incidents.
    Safe to run again: rows already there are left alone."""
    from dsdoctor.kb.incidents.copy import copy_incidents
    from dsdoctor.kb.storage import copy as store_copy
    from dsdoctor.kb.storage.backend import redact_url

    home = store_copy.parse_source(source)
    report: dict[str, dict[str, int]] = store_copy.copy(home, dest)
    report["incidents"] = copy_incidents(home, dest)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
        return
    click.echo(f"copied {source} -> {redact_url(dest)}")
    for table, c in report.items():
        click.echo(f"  {table}: {c['source']} in the source, {c['copied']} copied, {c['already_there']} already there, "
                   f"{c['verified']} verified identical")
    searched = report["incidents"]
    click.echo(f"  incidents searched for by their title: {searched['searchable']} of {searched['searched']} found")
