"""Normalise a free-form ``environment`` (``gpus: 8``, ``nodes: "2x DGX A100"``, top-level ``nccl``
or ``torch`` versions, ``gpu_count``, ``num_nodes``) into the evidence format's own keys.

Keys the format defines win over aliases; an alias never overwrites a value given in the format's
own words. The world size is gpus per node x nodes when both are said (one node when only GPUs are).
"""

from __future__ import annotations

from typing import Any

import re2

from dsdoctor.rules.matcher import re2_options
from dsdoctor.rules.settings import Settings

_OWN = ("world_size", "nodes", "gpu", "versions", "per_node")


def _count(value: Any, pattern: Any) -> tuple[int | None, str | None]:
    """``8`` -> (8, None); ``"2x DGX A100"`` -> (2, "DGX A100"); ``"A100"`` -> (None, "A100")."""
    if isinstance(value, bool):
        return None, None
    if isinstance(value, int):
        return (value if value > 0 else None), None
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value), None
    if not isinstance(value, str) or not value.strip():
        return None, None
    text = value.strip()
    if text.isdigit():
        return int(text) or None, None
    m = pattern.search(text)
    if m:
        return int(m.group("count")) or None, m.group("name").strip()
    return None, text


def normalize(environment: Any, settings: Settings) -> Any:
    """A copy of ``environment`` with its aliases mapped to the format's keys (non-dicts unchanged)."""
    if not isinstance(environment, dict):
        return environment
    cfg = settings.environment
    options = re2_options(caseless=True, utf8=True)
    pattern = re2.compile(cfg["count_pattern"], options)
    lowered = {str(k).strip().lower().replace("-", "_").replace(" ", "_"): v for k, v in environment.items()}
    out = dict(environment)
    found: dict[str, tuple[int | None, str | None]] = {}
    for target, names in cfg["aliases"].items():
        for name in names:
            if name in lowered and lowered[name] not in (None, ""):
                found[target] = _count(lowered[name], pattern)
                break
    nodes, machine = found.get("nodes", (None, None))
    per_node, gpu_name = found.get("gpus_per_node", (None, None))
    world, world_gpu = found.get("world_size", (None, None))
    gpu_count, gpu_text = found.get("gpu", (None, None))
    if per_node is None and machine:
        per_node = next((int(m["gpus"]) for m in cfg["machines"] if re2.compile(m["pattern"], options).search(machine)),
                        None)
    if not isinstance(out.get("nodes"), int) and nodes is not None:
        out["nodes"] = nodes
    if not isinstance(out.get("world_size"), int) or isinstance(out.get("world_size"), bool):
        per_node = per_node or gpu_count
        if world is not None:
            out["world_size"] = world
        elif per_node is not None:
            out["world_size"] = per_node * (out["nodes"] if isinstance(out.get("nodes"), int) else 1)
    if not (isinstance(out.get("gpu"), str) and out["gpu"].strip()):
        name = gpu_text or gpu_name or world_gpu or machine
        if name:
            out["gpu"] = name
    versions = dict(out["versions"]) if isinstance(out.get("versions"), dict) else {}
    renames = cfg["version_renames"]
    for key, value in lowered.items():
        base = key.removesuffix("_version")
        if base in cfg["versions"] and key not in _OWN and value is not None and not isinstance(value, (dict, list)):
            versions.setdefault(renames.get(base, base), str(value))
    if versions:
        out["versions"] = versions
    return out
