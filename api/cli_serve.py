"""`dsdoctor serve`: run the REST API."""

from __future__ import annotations

import click


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port to listen on.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Number of server worker processes (each loads the knowledge base once).")
@click.option("--insecure", is_flag=True, help="Allow a non-loopback bind with no API tokens configured.")
def serve(host: str, port: int, workers: int, insecure: bool) -> None:
    """Serve the REST API (health, diagnoses, knowledge base, incidents) with gunicorn.

    Data (diagnoses, incidents, tokens, metrics files) lives in DSDOCTOR_HOME. With no API
    tokens the API is open: allowed on a loopback address only, unless --insecure. SIGTERM
    stops the server gracefully.

    Example: dsdoctor serve --host 127.0.0.1 --port 8000 --workers 2
    """
    from api.server import run_server

    run_server(host=host, port=port, workers=workers, insecure=insecure)
