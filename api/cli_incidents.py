"""`dsdoctor incidents`: record and search past incidents."""

from __future__ import annotations

import click


@click.group()
def incidents() -> None:
    """Record, import, export and search past incidents (Chinese and English)."""
