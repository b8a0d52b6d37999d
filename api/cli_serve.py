"""`dsdoctor serve`: run the REST API."""

from __future__ import annotations

import click


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="TCP port to listen on.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Number of server worker processes (each loads the knowledge base once).")
@click.option("--insecure", is_flag=True, help="Allow a non-loopback bind with no API tokens configured.")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, workers: int, insecure: bool) -> None:
    """Serve the REST API (health, diagnoses, knowledge base, incidents) with gunicorn.

    Data (diagnoses, incidents, tokens, metrics files) lives in DSDOCTOR_HOME. With no API
    tokens the API is open: allowed on a loopback address only, unless --insecure. SIGTERM
    stops the server gracefully.

    Settings also come from a TOML file (DSDOCTOR_CONFIG, or DSDOCTOR_HOME/dsdoctor.toml): its
    keys fill unset environment variables and its [serve] table gives defaults for these flags;
    the environment and the flags win.

    Example: dsdoctor serve --host 127.0.0.1 --port 8000 --workers 2
    """
    from click.core import ParameterSource

    from dsdoctor.api import config
    from dsdoctor.api.server import run_server

    defaults = config.apply()
    chosen = {"host": host, "port": port, "workers": workers}
    for name in chosen:
        if name in defaults and ctx.get_parameter_source(name) is ParameterSource.DEFAULT:
            chosen[name] = defaults[name]
    run_server(**chosen, insecure=insecure)
