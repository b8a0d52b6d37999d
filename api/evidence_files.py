"""Evidence from files: what `dsdoctor diagnose` reads, and the seed-case folders.

Log files are never read here: they are handed on as (source, path) pairs so the rules layer
can stream them. Everything else (config, metrics, description, environment) is small.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dsdoctor.kb.errors import DsdoctorError

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        raise DsdoctorError(f"{what} file not found: {path}") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise DsdoctorError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise DsdoctorError(f"{what} file {path} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def load_metrics(path: str) -> list[dict[str, Any]]:
    """Metrics as a JSON array, JSON Lines, or CSV with columns name,rank,step,value."""
    p = Path(path)
    if not p.is_file():
        raise DsdoctorError(f"metrics file not found: {path}")
    text = p.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = _read_json(path, "metrics")
        if not isinstance(data, list):
            raise DsdoctorError(f"metrics file {path} must hold a JSON array of objects")
        return data
    if stripped.startswith("{"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DsdoctorError(f"metrics file {path} line {n}: not JSON ({exc.msg})") from None
        return rows
    import csv

    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or not {"name", "value"} <= set(reader.fieldnames):
        raise DsdoctorError(f"metrics file {path}: expected JSON, JSON Lines or CSV with columns name,rank,step,value")
    return [dict(row) for row in reader]


def parse_observe(items: tuple[str, ...]) -> dict[str, bool]:
    """--observe x.exp=outcome | s.symptom | !s.symptom  ->  observations dict."""
    out: dict[str, bool] = {}
    for item in items:
        item = item.strip()
        if not item:
            continue
        negate = item.startswith("!")
        key = item[1:] if negate else item
        if not (key.startswith(("x.", "s."))):
            raise DsdoctorError(f"--observe {item!r}: write EXPERIMENT=OUTCOME (x.name=outcome), SYMPTOM (s.name) or !SYMPTOM")
        out[key] = not negate
    return out


def build_evidence(logs, evidence_path, config_path, metrics_path, description) -> tuple[dict[str, Any], list]:
    """The evidence document plus the log files to stream (never read whole)."""
    evidence: dict[str, Any] = {}
    if evidence_path:
        evidence = _read_json(evidence_path, "evidence")
        if not isinstance(evidence, dict):
            raise DsdoctorError(f"evidence file {evidence_path} must hold a JSON object")
    log_files = []
    for name in logs:
        p = Path(name)
        if name == "-":
            evidence.setdefault("logs", []).append({"source": "stdin", "text": sys.stdin.read()})
            continue
        if not p.is_file():
            raise DsdoctorError(f"log file not found: {name}")
        log_files.append((p.stem, p))
    if config_path:
        config = _read_json(config_path, "config")
        if not isinstance(config, dict):
            raise DsdoctorError(f"config file {config_path} must hold a JSON object (the ds_config)")
        evidence["config"] = config
    if metrics_path:
        evidence["metrics"] = load_metrics(metrics_path)
    if description:
        evidence["description"] = description
    if not (evidence.get("description") or evidence.get("logs") or log_files):
        raise DsdoctorError("nothing to diagnose: give LOG files, --evidence FILE.json or --describe TEXT")
    return evidence, log_files


def load_case_dir(folder: Path) -> tuple[dict[str, Any], list[tuple[str, Path]], dict[str, Any]]:
    """A seed case: raw ``*.log`` files, optional ds_config.json, metrics.*, description.txt,
    environment.json, observations.json, and ``expected.yaml``."""
    logs = sorted(str(p) for p in folder.iterdir() if p.suffix in LOG_SUFFIXES and p.name != "description.txt")
    metrics = next((str(p) for p in sorted(folder.glob("metrics.*"))), None)
    config = folder / "ds_config.json"
    description = folder / "description.txt"
    evidence, log_files = build_evidence(
        logs, None, str(config) if config.is_file() else None, metrics,
        description.read_text(encoding="utf-8").strip() if description.is_file() else None,
    )
    environment = folder / "environment.json"
    if environment.is_file():
        evidence["environment"] = _read_json(str(environment), "environment")
    observations = folder / "observations.json"
    if observations.is_file():
        evidence["observations"] = _read_json(str(observations), "observations")
    expected_file = folder / "expected.yaml"
    import yaml  # seed cases only: not on the path of every diagnosis

    expected = yaml.safe_load(expected_file.read_text(encoding="utf-8")) if expected_file.is_file() else {}
    return evidence, log_files, expected or {}
