"""`dsdoctor token`: manage API bearer tokens."""

from __future__ import annotations

import click

from dsdoctor.kb.storage.scopes import SCOPES


def _store():
    from dsdoctor.api.settings import home
    from dsdoctor.kb.storage.tokens import TokenStore

    return TokenStore(home())


@click.group()
def token() -> None:
    """Create, list and revoke API bearer tokens (only their SHA-256 hashes are stored).

    Scopes: diagnose (diagnoses and knowledge base), incidents:read, incidents:write,
    admin (everything, including deleting incidents).
    """


@token.command("create")
@click.option("--name", required=True, help="A name to recognise and revoke the token by, e.g. ci-pipeline.")
@click.option("--scope", "scopes", required=True, multiple=True,
              help=f"Scope(s), comma-separated or repeated: {', '.join(SCOPES)}.")
@click.option("--expires", default=None, metavar="DURATION",
              help="Refuse the token after this long: 90m, 12h, 30d, 2w (default: valid until revoked).")
def create(name: str, scopes: tuple[str, ...], expires: str | None) -> None:
    """Create a token and print it once (on the last line); it cannot be shown again.

    Example: dsdoctor token create --name ci-pipeline --scope diagnose,incidents:read --expires 30d
    """
    from dsdoctor.kb.storage.tokens import parse_duration

    secret, info = _store().create(name, scopes, expires_in=parse_duration(expires) if expires else None)
    until = f", valid until {info.expires_at}" if info.expires_at else ""
    click.echo(f"created token {info.name!r} with scopes {','.join(info.scopes)}{until}; "
               "store it now, it is not shown again:", err=False)
    click.echo(secret)


@token.command("list")
def list_tokens() -> None:
    """List tokens: name, scopes, creation time and the first characters (never the secret)."""
    tokens = _store().list()
    if not tokens:
        click.echo("no tokens: the API is open on loopback addresses (create one: dsdoctor token create)")
        return
    width = max(len(t.name) for t in tokens)
    for t in tokens:
        until = f"  expires {t.expires_at}" if t.expires_at else ""
        click.echo(f"{t.name:<{width}}  {','.join(t.scopes):<40}  {t.created_at}  {t.prefix}…{until}")


@token.command("revoke")
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke (delete) the token NAME; requests using it get 401 from then on."""
    _store().revoke(name)
    click.echo(f"revoked token {name!r}")
