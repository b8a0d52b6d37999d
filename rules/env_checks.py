"""Environment checks (evidence ``environment`` and versions printed in the logs).

* versions that differ between nodes (``environment.per_node``) -> ``s.versions_differ_nodes``;
  NCCL versions printed by different nodes' logs -> ``s.nccl_version_differs``
* the GPU model (``environment.gpu``) against rules/data/gpus.yaml -> ``s.pre_ampere_gpu``, and
  bf16 enabled on such a GPU (a known incompatible combination)
* more than one node (environment or node names seen in the logs) -> ``s.multi_node_job``
* a nightly, dev / rc release or source build among the versions -> ``s.prerelease_version``

It also fills the :class:`~rules.model.JobContext` (nodes, world size, GPU, versions).
"""

from __future__ import annotations

from typing import Any

import re2

from dsdoctor.rules.collect import Collector
from dsdoctor.rules.matcher import re2_options
from dsdoctor.rules.model import ConfigFinding, Extraction
from dsdoctor.rules.settings import Settings


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _matches(patterns: list[str], text: str) -> bool:
    options = re2_options(caseless=True, utf8=True)
    return any(re2.compile(p, options).search(text) for p in patterns)


def _versions(environment: dict[str, Any], collector: Collector, extraction: Extraction) -> None:
    base = environment.get("versions") if isinstance(environment.get("versions"), dict) else {}
    per_node = environment.get("per_node") if isinstance(environment.get("per_node"), dict) else {}
    extraction.context.versions.update({str(k): str(v) for k, v in base.items() if v is not None})
    table: dict[str, dict[str, str]] = {}
    for node, info in per_node.items():
        versions = info.get("versions") if isinstance(info, dict) and isinstance(info.get("versions"), dict) else {}
        for name, value in versions.items():
            if value is not None:
                table.setdefault(str(name), {})[str(node)] = str(value)
    differing = []
    for name, values in sorted(table.items()):
        distinct = set(values.values())
        if name in base and len(values) < len(per_node):
            distinct.add(str(base[name]))  # nodes not listed run the common version
        if len(distinct) > 1:
            differing.append(name)
            detail = ", ".join(f"{node}={value}" for node, value in sorted(values.items()))
            message = {
                "en": f"{name} differs between nodes ({detail}; others: {base.get(name, 'unknown')}).",
                "zh": f"各节点的 {name} 版本不一致（{detail}；其他节点：{base.get(name, '未知')}）。",
            }
            extraction.config_findings.append(ConfigFinding("env.versions_differ", "error", message,
                                                            f"environment.per_node.*.versions.{name}",
                                                            "s.versions_differ_nodes"))
            collector.observe("s.versions_differ_nodes", source="environment", text=message["en"],
                              rule="env.versions_differ", fields={"library": name, "values": values})
    if per_node and not differing:
        extraction.absent.add("s.versions_differ_nodes")
    nccl = {node: v for node, v in collector.versions.get("nccl", {}).items()}
    if len(set(nccl.values())) > 1:
        detail = ", ".join(f"{node}: {v}" for node, v in sorted(nccl.items())[:8])
        collector.observe("s.nccl_version_differs", source="logs", text=f"NCCL versions printed differ ({detail})",
                          rule="env.nccl_version_differs", fields={"versions": dict(sorted(nccl.items())[:64])})


def _frameworks(collector: Collector, settings: Settings, extraction: Extraction) -> None:
    """The frameworks the job ran on: named by framework marker lines, or implied by a stated version."""
    found = set(collector.frameworks)
    stated = {name.lower() for name in extraction.context.versions}
    for framework, libraries in settings.environment["frameworks"].items():
        if stated & set(libraries):
            found.add(framework)
    extraction.context.frameworks = tuple(sorted(found))


def _prerelease(versions: dict[str, str], collector: Collector, settings: Settings) -> None:
    """A nightly, dev / rc release or source build among the stated versions -> ``s.prerelease_version``."""
    pattern = settings.environment["prerelease_pattern"]
    libraries = set(settings.environment["prerelease_libraries"])
    found = {name: value for name, value in sorted(versions.items())
             if name.lower() in libraries and _matches([pattern], value)}
    if found:
        detail = ", ".join(f"{name} {value}" for name, value in found.items())
        collector.observe("s.prerelease_version", source="environment", text=f"pre-release build: {detail}",
                          rule="env.prerelease_version", fields={"versions": found})


def _gpu(environment: dict[str, Any], collector: Collector, settings: Settings, extraction: Extraction) -> None:
    gpu = environment.get("gpu")
    if not isinstance(gpu, str) or not gpu.strip():
        return
    extraction.context.gpu = gpu
    gpus = settings.gpus
    if _matches(gpus["pre_ampere"], gpu):
        collector.observe("s.pre_ampere_gpu", source="environment", text=f"GPU {gpu} is pre-Ampere (no bf16 tensor cores)",
                          rule="env.pre_ampere_gpu", fields={"gpu": gpu})
        if extraction.context.precision == "bf16":
            message = {"en": f"bf16 is enabled but the GPU ({gpu}) is older than Ampere: bf16 kernels are missing or "
                             "emulated (CUBLAS_STATUS_NOT_SUPPORTED, 'Type bf16 is not supported').",
                       "zh": f"启用了 bf16，但 GPU（{gpu}）早于 Ampere 架构：缺少或仅模拟 bf16 内核"
                             "（CUBLAS_STATUS_NOT_SUPPORTED、'Type bf16 is not supported'）。"}
            extraction.config_findings.append(ConfigFinding("env.bf16_on_pre_ampere", "error", message, "bf16.enabled",
                                                            "s.pre_ampere_gpu"))
    elif _matches(gpus.get("ampere_or_newer", []), gpu):
        extraction.absent.add("s.pre_ampere_gpu")


def check(environment: Any, collector: Collector, settings: Settings, extraction: Extraction) -> None:
    """Run the environment checks; fill the job context."""
    env = environment if isinstance(environment, dict) else {}
    if environment is not None and not isinstance(environment, dict):
        extraction.warnings.append("'environment' must be an object; ignored")
    if env:
        extraction.supplied_sources.add("environment")
    world = _int(env.get("world_size"))
    nodes = _int(env.get("nodes"))
    if world is not None:
        extraction.context.world_size = world
    elif collector.world_sizes:
        extraction.context.world_size = max(collector.world_sizes)
    real_nodes = {n for n in collector.nodes_seen if not n.startswith("source:")}
    if nodes is None and collector.node_counts:
        nodes = max(collector.node_counts)  # NCCL printed nNodes
    extraction.context.nodes = nodes if nodes is not None else (len(real_nodes) or None)
    _versions(env, collector, extraction)
    _frameworks(collector, settings, extraction)
    _prerelease(extraction.context.versions, collector, settings)
    _gpu(env, collector, settings, extraction)
    node_count = extraction.context.nodes
    if node_count is not None:
        collector.decided.add("s.multi_node_job")
    if node_count is not None and node_count > 1:
        collector.observe("s.multi_node_job", source="environment" if nodes else "logs",
                          text=f"{node_count} nodes", rule="env.multi_node_job", fields={"nodes": node_count})
    elif nodes == 1:
        extraction.absent.add("s.multi_node_job")
