"""Run the API under gunicorn (a production WSGI server) from `dsdoctor serve`."""

from __future__ import annotations

import ipaddress
import socket

import click


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


def run_server(host: str, port: int, workers: int, insecure: bool) -> None:
    """Start gunicorn with ``workers`` processes serving ``api.app:create_app()``."""
    from gunicorn.app.base import BaseApplication

    from api.app import create_app

    class _Server(BaseApplication):
        def load_config(self) -> None:
            self.cfg.set("bind", f"{host}:{port}")
            self.cfg.set("workers", max(1, workers))
            self.cfg.set("graceful_timeout", 20)
            self.cfg.set("control_socket_disable", True)  # gunicorn 27 opens ~/.gunicorn/ otherwise

        def load(self):
            return create_app()

    click.echo(f"dsdoctor listening on http://{host}:{port}  (workers: {workers})")
    click.echo(f"try: curl -s http://{host}:{port}/healthz")
    _Server().run()
