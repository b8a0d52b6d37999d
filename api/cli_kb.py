"""`dsdoctor kb`: inspect and validate the knowledge base."""

from __future__ import annotations

import click


@click.group()
def kb() -> None:
    """Inspect and validate the causal graph (causes, mechanisms, symptoms, experiments)."""
