"""`dsdoctor token`: manage API bearer tokens."""

from __future__ import annotations

import click


@click.group()
def token() -> None:
    """Create, list and revoke API bearer tokens (only their hashes are stored)."""
