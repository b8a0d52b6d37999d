"""`dsdoctor diagnose`: diagnose evidence from files."""

from __future__ import annotations

import click


@click.command()
@click.argument("logs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--evidence", type=click.Path(dir_okay=False), help="An evidence document (JSON).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="The ds_config.json the job used.")
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), help="Per-step metrics (JSON, JSON Lines or CSV).")
@click.option("--describe", "description", help="Free-text description of what happened (English or Chinese).")
@click.option("--observe", multiple=True, help="A known fact: EXPERIMENT=OUTCOME, SYMPTOM or !SYMPTOM (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en", show_default=True)
@click.option("--top", default=5, show_default=True, type=int, help="How many causes to show.")
def diagnose(logs, evidence, config_path, metrics_path, description, observe, fmt, lang, top) -> None:
    """Rank the root causes of a failed job and propose the next isolation experiment.

    Example: dsdoctor diagnose rank*.log --config ds_config.json --lang en
    """
    raise click.ClickException("diagnose is not available yet")
