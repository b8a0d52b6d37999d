"""The Python API: diagnose evidence, apply what an experiment showed, search past incidents.

The same engine as ``dsdoctor diagnose`` without ``--server``: nothing is stored, and the site's
incident history (``DSDOCTOR_HOME``) is read only when a store already exists there.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dsdoctor.kb.errors import DsdoctorError

PathLike = str | os.PathLike[str]
Observations = Mapping[str, bool] | Iterable[str]
LANGS = ("en", "zh")


class EvidenceError(DsdoctorError):
    """The evidence (or an observation) given to the Python API is unusable; the message says what."""


# ---------------------------------------------------------------- evidence


def load_evidence(path: PathLike) -> dict[str, Any]:
    """The evidence document in a JSON or YAML file (``.json``, ``.yaml``, ``.yml``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvidenceError(f"evidence file not found: {p}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"cannot read evidence file {p}: {getattr(exc, 'strerror', None) or exc}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            raise EvidenceError(f"evidence file {p} is not valid YAML{where}: "
                                f"{getattr(exc, 'problem', None) or exc}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EvidenceError(f"evidence file {p} is not valid JSON: line {exc.lineno} column {exc.colno}: "
                                f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise EvidenceError(f"evidence file {p} must hold an object (mapping), not {type(data).__name__}")
    return data


def _validate(evidence: dict[str, Any], has_log_files: bool) -> None:
    """The REST API's evidence schema: every problem named by its field."""
    from dsdoctor.api.schemas import EvidenceSchema

    probe = evidence
    if has_log_files and not str(evidence.get("description") or "").strip():
        probe = {**evidence, "description": "(log files)"}  # the log files are the something to diagnose
    errors = EvidenceSchema().validate(probe)
    if errors:
        raise EvidenceError("invalid evidence: " + "; ".join(_flatten(errors)))


def _flatten(errors: Any, prefix: str = "") -> list[str]:
    if isinstance(errors, dict):
        out: list[str] = []
        for key, value in errors.items():
            name = "" if key == "_schema" else f"{prefix}.{key}" if prefix else str(key)
            out += _flatten(value, name)
        return out
    if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
        return [f"{prefix}: {e}" if prefix else e for e in errors]
    return [f"{prefix}: {errors}"]


def _observations(given: Observations | None) -> dict[str, bool]:
    """``{"x.exp=outcome": True, "s.sym": False}`` from a mapping or ``"x.exp=outcome"``/``"!s.sym"`` items."""
    if given is None:
        return {}
    if isinstance(given, str):
        given = [given]
    if isinstance(given, Mapping):
        bad = [k for k, v in given.items() if not isinstance(k, str) or not isinstance(v, bool)]
        if bad:
            raise EvidenceError(f"observations map keys (text) to true/false; got {bad[0]!r}: {given[bad[0]]!r}")
        items = dict(given)
    else:
        items = {}
        for item in given:
            if not isinstance(item, str) or not item.strip():
                raise EvidenceError(f"an observation is text such as 'x.experiment=outcome' or '!s.symptom', "
                                    f"got {item!r}")
            item = item.strip()
            items[item.lstrip("!")] = not item.startswith("!")
    from dsdoctor.kb.loader import get_kb

    kb = get_kb()
    for key in items:
        if "=" in key:
            exp_id, outcome = key.split("=", 1)
            experiment = kb.experiments.get(exp_id)
            if experiment is None:
                raise EvidenceError(f"unknown experiment {exp_id!r} in observation {key!r}")
            allowed = [o.id for o in experiment.outcomes]
            if outcome not in allowed:
                raise EvidenceError(f"unknown outcome {outcome!r} of {exp_id}; allowed: {', '.join(allowed)}")
        elif key not in kb.symptoms:
            raise EvidenceError(f"unknown observation {key!r}: write a symptom id (s.cuda_oom) or "
                                f"experiment=outcome (x.single_gpu_repro=reproduces)")
    return items


# ---------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class Diagnosis:
    """One diagnosis: the object ``dsdoctor diagnose --format json`` prints, plus what produced it."""

    data: dict[str, Any]
    evidence: dict[str, Any] = field(repr=False)
    log_files: tuple[Path, ...] = ()
    lang: str = "en"
    top: int = 5
    history: bool = True

    @property
    def id(self) -> str:
        """The diagnosis id (not stored anywhere: a local diagnosis)."""
        return self.data["id"]

    @property
    def causes(self) -> list[dict[str, Any]]:
        """Ranked root causes, most probable first (``id``, ``title``, ``probability``, ``fixes``...)."""
        return self.data["causes"]

    @property
    def top_cause(self) -> dict[str, Any] | None:
        """The most probable cause, or None when none is ranked."""
        return self.causes[0] if self.causes else None

    @property
    def next_experiments(self) -> list[dict[str, Any]]:
        """The proposed isolation experiments, best first; each has the ``observe`` keys of its outcomes."""
        return self.data["next_experiments"]

    @property
    def warnings(self) -> list[str]:
        return self.data["warnings"]

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the diagnosis object (JSON-able)."""
        return copy.deepcopy(self.data)

    def observe(self, observations: Observations) -> Diagnosis:
        """A new diagnosis of the same evidence plus what was observed (an experiment's outcome,
        a symptom seen or ruled out): ``d.observe("x.single_gpu_repro=reproduces")``."""
        evidence = copy.deepcopy(self.evidence)
        evidence["observations"] = {**(evidence.get("observations") or {}), **_observations(observations)}
        return _run(evidence, self.log_files, lang=self.lang, top=self.top, history=self.history)

    def render(self, format: Literal["text", "markdown"] = "text") -> str:
        """The diagnosis as the command line prints it (``markdown`` for a ticket)."""
        from dsdoctor.api.render import render_markdown, render_text

        if format not in ("text", "markdown"):
            raise EvidenceError(f"format must be 'text' or 'markdown', got {format!r}")
        render = render_markdown if format == "markdown" else render_text
        return render(self.data, self.lang, stored=False)


def diagnose(evidence: Mapping[str, Any] | PathLike | None = None, *, text: str | None = None,
             logs: Iterable[PathLike] = (), observations: Observations | None = None, lang: str = "en",
             top: int = 5, history: bool = True) -> Diagnosis:
    """Rank the root causes of a failed job and propose the next isolation experiment.

    ``evidence`` is an evidence document (a dict) or the path of one (JSON or YAML); ``text`` is a
    log text or a description in English or Chinese (added as one log); ``logs`` are log files,
    streamed from disk. ``observations`` are known facts: ``{"x.exp=outcome": True}`` or items
    such as ``"x.exp=outcome"``, ``"s.symptom"``, ``"!s.symptom"``. With ``history`` the resolved
    incidents of ``DSDOCTOR_HOME`` (when a store exists there) weigh the ranking, as in the CLI.
    Raises :class:`EvidenceError` (a :class:`DsdoctorError`) naming what is wrong.
    """
    if lang not in LANGS:
        raise EvidenceError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 50:
        raise EvidenceError(f"top must be a whole number from 1 to 50, got {top!r}")
    if evidence is None:
        doc: dict[str, Any] = {}
    elif isinstance(evidence, Mapping):
        doc = copy.deepcopy(dict(evidence))
    elif isinstance(evidence, str | os.PathLike):
        doc = load_evidence(evidence)
    else:
        raise EvidenceError(f"evidence must be a mapping or the path of a JSON/YAML file, "
                            f"got {type(evidence).__name__}")
    if text is not None:
        if not isinstance(text, str):
            raise EvidenceError(f"text must be text (a log or a description), got {type(text).__name__}")
        doc["logs"] = [*(doc.get("logs") or []), {"source": "text", "text": text}]
    if isinstance(logs, str | os.PathLike):
        logs = [logs]
    files = tuple(Path(p) for p in logs)
    for p in files:
        if not p.is_file():
            raise EvidenceError(f"log file not found: {p}")
    if observations is not None:
        doc["observations"] = {**(doc.get("observations") or {}), **_observations(observations)}
    _validate(doc, bool(files))
    return _run(doc, files, lang=lang, top=top, history=history)


def _run(evidence: dict[str, Any], files: tuple[Path, ...], *, lang: str, top: int, history: bool) -> Diagnosis:
    from dsdoctor.api.cli_diagnose import site_history
    from dsdoctor.api.cli_rules import use_disk_cache
    from dsdoctor.kb.diagnosis import diagnose as run_diagnosis

    use_disk_cache()
    site_counts, similar = site_history() if history else (None, None)
    result = run_diagnosis(evidence, log_files=[(p.stem, p) for p in files], lang=lang, top=top,
                           site_counts=site_counts, similar=similar)
    return Diagnosis(result, evidence, files, lang, top, history)


# ---------------------------------------------------------------- incidents


def search_incidents(query: str = "", *, cause: str | Iterable[str] | None = None, limit: int = 10,
                     home: PathLike | None = None) -> list[dict[str, Any]]:
    """Past incidents matching ``query`` (Chinese and English, Whoosh syntax), best first.

    Reads the incident store of ``home`` (default ``DSDOCTOR_HOME``, as ``dsdoctor incidents
    search``; a new store starts with the shipped seed incidents). Each item is an incident record
    plus ``score`` and ``highlights``.
    """
    from dsdoctor.api.cli_incidents import catalog_cause_ids
    from dsdoctor.kb.incidents.store import IncidentStore
    from dsdoctor.kb.storage.settings import home as default_home

    where = Path(home) if home is not None else default_home()
    with IncidentStore(where, valid_causes=catalog_cause_ids) as store:
        return store.search(query, cause=cause, limit=limit)["items"]
