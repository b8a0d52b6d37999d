"""The server's TOML config file, beside the environment variables (the environment wins).

The file is ``DSDOCTOR_CONFIG`` if set, else ``DSDOCTOR_HOME/dsdoctor.toml`` if present. Its
top-level keys stand for environment variables and fill those that are unset, so every later
reader (and each gunicorn worker) sees one set of values; its ``[serve]`` table gives defaults
for the ``dsdoctor serve`` flags (a flag on the command line wins)::

    home = "/var/lib/dsdoctor"
    kb_path = ["/etc/dsdoctor/kb"]
    max_body_mb = 32
    slack_signing_secret = "..."

    [serve]
    host = "0.0.0.0"
    port = 8000
    workers = 4
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from dsdoctor.kb.errors import DsdoctorError

CONFIG_ENV = "DSDOCTOR_CONFIG"
FILE_NAME = "dsdoctor.toml"
#: top-level key -> (environment variable, accepted TOML types)
KEYS: dict[str, tuple[str, tuple[type, ...]]] = {
    "home": ("DSDOCTOR_HOME", (str,)),
    "kb_path": ("DSDOCTOR_KB_PATH", (str, list)),
    "max_body_mb": ("DSDOCTOR_MAX_BODY_MB", (int, float)),
    "slack_signing_secret": ("DSDOCTOR_SLACK_SIGNING_SECRET", (str,)),
}
SERVE_KEYS: dict[str, type] = {"host": str, "port": int, "workers": int}
SERVE_RANGES = {"port": (0, 65535), "workers": (1, 64)}


def config_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The config file in force, or None when there is none."""
    named = environ.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise DsdoctorError(f"{CONFIG_ENV}={named}: no such file")
        return path
    home = environ.get("DSDOCTOR_HOME") or "var"
    path = Path(home).expanduser() / FILE_NAME
    return path if path.is_file() else None


def _type_error(path: Path, key: str, value: Any, types: tuple[type, ...]) -> DsdoctorError:
    names = " or ".join({str: "a string", list: "a list of strings", int: "an integer", float: "a number"}[t]
                        for t in types)
    return DsdoctorError(f"{path}: {key} must be {names}, got {value!r}")


def load(path: Path) -> dict[str, Any]:
    """The file's content, checked: unknown keys and wrong types are errors naming the file and key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DsdoctorError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise DsdoctorError(f"{path}: cannot read: {exc.strerror}") from None
    for key, value in data.items():
        if key == "serve":
            if not isinstance(value, dict):
                raise DsdoctorError(f"{path}: [serve] must be a table")
            for name, item in value.items():
                if name not in SERVE_KEYS:
                    raise DsdoctorError(f"{path}: unknown key serve.{name}; allowed: {', '.join(SERVE_KEYS)}")
                wanted = SERVE_KEYS[name]
                if not isinstance(item, wanted) or isinstance(item, bool):
                    raise _type_error(path, f"serve.{name}", item, (wanted,))
                low, high = SERVE_RANGES.get(name, (item, item))
                if not low <= item <= high:
                    raise DsdoctorError(f"{path}: serve.{name} must be between {low} and {high}, got {item}")
            continue
        if key not in KEYS:
            raise DsdoctorError(f"{path}: unknown key {key!r}; allowed: {', '.join([*KEYS, '[serve]'])}")
        types = KEYS[key][1]
        if not isinstance(value, types) or isinstance(value, bool) or (
                isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise _type_error(path, key, value, types)
    return data


def apply(environ: MutableMapping[str, str] = os.environ) -> dict[str, Any]:
    """Fill unset environment variables from the config file; return its ``[serve]`` table."""
    path = config_path(environ)
    if path is None:
        return {}
    data = load(path)
    for key, (variable, _types) in KEYS.items():
        if key in data and not environ.get(variable):
            value = data[key]
            environ[variable] = os.pathsep.join(value) if isinstance(value, list) else str(value)
    return dict(data.get("serve") or {})
