"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl on a loopback port in a temporary
directory (Debian's postgresql package). initdb refuses to run as root, so as root the cluster runs
as the ``postgres`` user. ``unavailable()`` says why a cluster cannot start here (the tests skip)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

DEB_BINDIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def bindir() -> Path | None:
    """The folder of initdb and pg_ctl (pg_config --bindir, else Debian's /usr/lib/postgresql/N/bin)."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout
            candidates.append(Path(out.strip()))
    candidates += DEB_BINDIRS
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).resolve().parent)
    return next((c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """One PostgreSQL server: ``start()``, ``url(dbname)``, ``create_database()``, ``stop()``."""

    def __init__(self) -> None:
        self.bin = bindir()
        self.root = Path()
        self.data = Path()
        self.port = _free_port()
        self.user: str | None = "postgres" if os.geteuid() == 0 else None

    def unavailable(self) -> str | None:
        if self.bin is None:
            return "PostgreSQL is not installed (apt-get install postgresql; `make test` does it as root)"
        if self.user is not None:
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                return "running as root and there is no 'postgres' user to run initdb as"
        return None

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        # a folder of its own under /tmp: pytest's temporary folders are closed to the postgres user
        self.root = Path(tempfile.mkdtemp(prefix="dsdoctor-pg-"))
        self.data = self.root / "data"
        if self.user is not None:
            shutil.chown(self.root, self.user)
            self.root.chmod(0o700)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=200 -c synchronous_commit=on")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-o", options, "start")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)
