"""`dsdoctor rules`: test and explain evidence rules."""

from __future__ import annotations

import click


@click.group()
def rules() -> None:
    """Test the evidence rules against their examples, or explain which rules fire on a log."""
