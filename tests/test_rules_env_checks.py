"""Environment checks: versions across nodes, pre-Ampere GPUs with bf16, multi-node jobs."""

from __future__ import annotations

import pytest

from tests.rulesfx import lines, run


def test_versions_differ_between_nodes() -> None:
    x = run(environment={"versions": {"nccl": "2.20.5", "torch": "2.3.0"},
                         "per_node": {"node1": {"versions": {"nccl": "2.18.1"}}, "node2": {"versions": {"torch": "2.3.0"}}}})
    assert "s.versions_differ_nodes" in x.symptoms
    finding = next(f for f in x.config_findings if f.id == "env.versions_differ")
    assert "nccl" in finding.message["en"] and "node1=2.18.1" in finding.message["en"]
    same = run(environment={"versions": {"nccl": "2.20.5"}, "per_node": {"n1": {"versions": {"nccl": "2.20.5"}}}})
    assert "s.versions_differ_nodes" in same.absent


def test_nccl_versions_printed_by_different_nodes() -> None:
    x = run(lines("node1:1:2 [0] NCCL INFO NCCL version 2.20.5+cuda12.4", "node2:1:2 [0] NCCL INFO NCCL version 2.18.1+cuda12.1"))
    assert "s.nccl_version_differs" in x.symptoms


@pytest.mark.parametrize(("gpu", "pre_ampere"), [
    ("Tesla V100-SXM2-32GB", True), ("TITAN X", True), ("GeForce RTX 2080 Ti", True), ("GTX 1080 Ti", True), ("T4", True),
    ("A100-SXM4-80GB", False), ("H100-80GB", False), ("NVIDIA B200 (183 GiB)", False), ("RTX 5880 Ada 48GB", False),
    ("GeForce RTX 4090", False),
])
def test_pre_ampere_gpu_names(gpu: str, pre_ampere: bool) -> None:
    x = run(environment={"gpu": gpu})
    assert ("s.pre_ampere_gpu" in x.symptoms) is pre_ampere
    assert ("s.pre_ampere_gpu" in x.absent) is not pre_ampere


def test_bf16_on_pre_ampere_is_a_finding() -> None:
    x = run(config={"bf16": {"enabled": True}}, environment={"gpu": "Tesla V100-PCIE-32GB"})
    assert any(f.id == "env.bf16_on_pre_ampere" and f.severity == "error" for f in x.config_findings)


def test_multi_node_from_environment_or_logs() -> None:
    assert "s.multi_node_job" in run(environment={"nodes": 4}).symptoms
    assert "s.multi_node_job" in run(environment={"nodes": 1}).absent
    seen = run(lines("node1: [rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
                     "node2: [rank8]: step 5 | loss=2.1"))
    assert "s.multi_node_job" in seen.symptoms and seen.context.nodes == 2


@pytest.mark.parametrize(("versions", "prerelease"), [
    ({"torch": "2.1.0.dev20230801+cu121"}, True), ({"transformers": "4.29.0-dev"}, True),
    ({"transformers": "4.31.0.dev0"}, True), ({"deepspeed": "0.14.1+c9d7b5f"}, True), ({"torch": "2.0 (nightly)"}, True),
    ({"accelerate": "1.0.0rc1"}, True), ({"torch": "2.3.0+cu121"}, False), ({"deepspeed": "0.14.2", "nccl": "2.20.5"}, False),
    ({"driver": "535.104.05", "cuda": "12.1"}, False), ({"torch": "2.4.0+rocm6.1"}, False),
])
def test_a_pre_release_build_among_the_versions(versions: dict[str, str], prerelease: bool) -> None:
    x = run(environment={"versions": versions})
    assert ("s.prerelease_version" in x.symptoms) is prerelease
    assert "s.prerelease_version" not in x.absent  # a release is no evidence against a library defect


def test_an_application_installed_from_its_repository_is_no_pre_release_of_the_stack() -> None:
    x = run(environment={"versions": {"llamafactory": "0.9.1.dev0", "vllm": "0.6.3.post2.dev172+gd087bf86",
                                      "torch": "2.5.0+cu124"}})
    assert "s.prerelease_version" not in x.symptoms
