"""Engine settings as data: the YAML files directly in rules/data (thresholds, key lists, GPU lists).

* ``derive.yaml``: limits, traceback association, OOM / overflow / NaN / phase thresholds
* ``metrics.yaml``: thresholds of the metric checks
* ``config_checks.yaml``: thresholds and bilingual message templates of the ds_config checks
* ``ds_config_keys.yaml``: DeepSpeed's documented config keys, per section
* ``gpus.yaml``: GPU families (pre-Ampere names)
* ``environment.yaml``: free-form environment keys and what they mean

Each file is checked against the shape the code expects; problems are ``file:line: message``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdoctor.kb import snapshot
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.yamlload import display_path, line_of, load_file

DATA_DIR = Path(__file__).resolve().parent / "data"
NUMBER = (int, float)

# The shape each file must have: key -> type, or a nested dict for a mapping.
_SHAPES: dict[str, dict[str, Any]] = {
    "derive.yaml": {
        "limits": {"sample_lines": int, "sample_lines_per_rank": int, "line_chars": int, "max_rules_per_line": int,
                   "lookback_bytes": int, "lookback_lines": int, "chunk_bytes": int, "max_line_bytes": int,
                   "context_full_lines": int, "context_stride": int, "context_stride_after": int,
                   "context_stride_late": int, "context_full_chunks": int, "context_chunk_stride": int,
                   "repeat_after": int, "progress_window_bytes": int, "first_error_chars": int},
        "traceback": {"max_frames": int, "max_gap_lines": int},
        "frame_stages": list, "oom_stage_symptoms": list, "oom_symptoms": list, "overflow_symptoms": list,
        "fields": {"step": list, "world_size": list, "nodes": list, "overflow_attempted": list, "overflow_new": list,
                   "series": dict},
        "oom": {"other_process_pattern": str, "other_process_min_bytes": int, "other_process_min_fraction": NUMBER,
                "fragmented_min_fraction_of_total": NUMBER, "capacity_full_min_fraction": NUMBER},
        "overflow": {"warmup_steps": int, "late_min": int, "low_scale": NUMBER, "falling_min_reductions": int},
        "numerics": {"first_step_max": int, "first_epoch_max": NUMBER, "loss_zero_min": int},
        "phase": {"first_step_max_steps": int, "steady_min_steps": int, "oom_after_many_steps": int},
        "symptom_phases": dict, "derived_only": list, "multi_node_only": list,
        "phrases": {"reliability": NUMBER, "pasted_reliability": NUMBER, "negated_reliability": NUMBER,
                    "outcome_reliability": NUMBER, "outcome_span_negations": dict, "outcome_span_breaks": str,
                    "negation_window_chars": int, "negations": dict, "motives": dict, "pseudo_negations": list,
                    "clause_breaks": str},
        "scope": {"min_known_ranks_for_global": int, "global_by_nature": list, "anomalies": list,
                  "between_peers": list},
        "error_lines": {"ignored_facts": list, "ignored_markers": list},
        "supplied": {"logs_min_lines": int},
    },
    "metrics.yaml": {
        "step_time": {"baseline_points": int, "recent_points": int, "up_factor": NUMBER, "util_drop_fraction": NUMBER,
                      "util_steady_fraction": NUMBER},
        "straggler": {"min_ranks": int, "robust_z": NUMBER, "min_ratio": NUMBER},
        "gpu_util": {"low_percent": NUMBER, "min_points": int},
        "memory": {"rising_min_points": int, "rising_min_fraction": NUMBER, "rising_min_increase_gb": NUMBER,
                   "reserved_ratio": NUMBER, "reserved_min_gap_gb": NUMBER},
        "loss": {"diverge_factor": NUMBER, "diverge_min_increase": NUMBER, "recent_points": int, "min_points": int},
        "loss_scale": {"warmup_steps": int, "falling_min_reductions": int},
        "step_breakdown": {"min_points": int, "allreduce_share": NUMBER, "optimizer_share": NUMBER},
    },
    "config_checks.yaml": {"thresholds": dict, "messages": dict},
    "ds_config_keys.yaml": {"sources": list, "sections": dict, "open_sections": list, "validated_sections": list,
                            "validated_since": dict, "deprecated": dict},
    "gpus.yaml": {"pre_ampere": list, "ampere_or_newer": list, "sources": list},
    "environment.yaml": {"aliases": dict, "versions": list, "version_renames": dict, "count_pattern": str,
                         "machines": list, "prerelease_pattern": str, "prerelease_libraries": list,
                         "frameworks": dict},
}


@dataclass(frozen=True)
class Settings:
    derive: dict[str, Any]
    metrics: dict[str, Any]
    config_checks: dict[str, Any]
    ds_config_keys: dict[str, Any]
    gpus: dict[str, Any]
    environment: dict[str, Any]


def _check_shape(data: Any, shape: dict[str, Any], file: str, root: Any, path: list[Any],
                 problems: list[Problem]) -> None:
    if not isinstance(data, dict):
        problems.append(Problem(file, line_of(root, path), f"'{'.'.join(map(str, path)) or 'the file'}' must be a mapping"))
        return
    for key, kind in shape.items():
        where = ".".join(map(str, [*path, key]))
        if key not in data:
            problems.append(Problem(file, line_of(root, path), f"setting '{where}' is missing"))
            continue
        value = data[key]
        if isinstance(kind, dict):
            _check_shape(value, kind, file, root, [*path, key], problems)
        elif isinstance(value, bool) or not isinstance(value, kind):
            want = "a number" if kind is NUMBER else f"a {kind.__name__}"
            problems.append(Problem(file, line_of(root, [*path, key]), f"setting '{where}' must be {want}, got {value!r}"))


def load_settings_with_problems(data_dir: Path = DATA_DIR) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    problems: list[Problem] = []
    out: dict[str, dict[str, Any]] = {}
    for name, shape in _SHAPES.items():
        path = Path(data_dir) / name
        if not path.exists():
            problems.append(Problem(display_path(path), 0, "engine settings file is missing"))
            continue
        data, file_problems = load_file(path)
        problems.extend(file_problems)
        if data is None:
            continue
        _check_shape(data, shape, display_path(path), data, [], problems)
        out[name] = data
    return out, problems


@functools.lru_cache(maxsize=4)
def load_settings(data_dir: Path = DATA_DIR) -> Settings:
    """Load and check the engine settings (once per process); raise :class:`KnowledgeError` on problems."""
    return snapshot.cached("settings", lambda: [Path(data_dir) / name for name in _SHAPES],
                           ("dsdoctor.rules.settings", "dsdoctor.kb.yamlload"), lambda: _load_settings(data_dir))


def _load_settings(data_dir: Path) -> Settings:
    files, problems = load_settings_with_problems(data_dir)
    if problems:
        raise KnowledgeError(problems)
    return Settings(
        derive=files["derive.yaml"], metrics=files["metrics.yaml"], config_checks=files["config_checks.yaml"],
        ds_config_keys=files["ds_config_keys.yaml"], gpus=files["gpus.yaml"],
        environment=files["environment.yaml"],
    )
