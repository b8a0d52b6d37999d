"""Scope (rules/scope.py): one test per value, on hand-written logs read with the real rules."""

from __future__ import annotations

from typing import Any

from dsdoctor.rules.extract import extract
from dsdoctor.rules.model import Extraction

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a total capacity of "
       "79.15 GiB of which 2.44 GiB is free. Of the allocated memory 71.02 GiB is allocated by PyTorch, "
       "and 2.11 GiB is reserved by PyTorch but unallocated.")


def _run(logs: dict[str, list[str]], **environment: Any) -> Extraction:
    doc = {"logs": [{"source": name, "text": "\n".join(text) + "\n"} for name, text in logs.items()],
           "environment": environment}
    return extract(doc)


def _step(rank: int, step: int = 20) -> str:
    return (f"[rank{rank}]:[2024-07-02 14:10:{rank:02d},000] [INFO] [engine.py:2156:_report_progress] "
            f"[Rank {rank}] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)] loss=2.31")


def _timeout(rank: int) -> str:
    return (f"[rank{rank}]:[E702 14:40:12.551877012 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=1800000) ran for 1800051 milliseconds before timing out.")


def _nccl(host: str, text: str) -> str:
    return f"{host}:20932:21101 [0] {text}"


def test_two_nodes_that_both_time_out_are_multi_node_not_single_rank() -> None:
    # issue 15: reported "single-rank" with world_size 16 and 2 nodes stated
    x = _run({
        "trn-01": [_nccl("trn-01", "NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>"), _timeout(0)],
        "trn-02": [_nccl("trn-02", "NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>"), "",
                   _nccl("trn-02", "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<47209> "
                                   "failed : Connection refused"), _timeout(8)],
    }, world_size=16, nodes=2)
    assert x.scope == "multi-node"
    assert x.scope_detail["origin"] == {"ranks": [8], "nodes": ["trn-02"]}
    assert x.scope_detail["victims"] == {"ranks": [0], "nodes": ["trn-01"]}
    assert (x.scope_detail["world_size"], x.scope_detail["nodes"]) == (16, 2)


def test_single_rank_origin_with_victims_kept_apart() -> None:
    x = _run({"torchrun": [*(_step(r) for r in range(8)), f"[rank3]:{OOM}",
                           *(_timeout(r) for r in range(8) if r != 3)]}, world_size=8, nodes=1)
    assert x.scope == "single-rank"
    assert x.scope_detail["origin"]["ranks"] == [3]
    assert x.scope_detail["victims"]["ranks"] == [0, 1, 2, 4, 5, 6, 7]


def test_single_node_from_the_ranks_per_node_the_evidence_states() -> None:
    x = _run({"job": [*(_step(r) for r in range(16)), f"[rank9]:{OOM}", f"[rank12]:{OOM}"]}, world_size=16, nodes=2)
    assert x.scope == "single-node"
    assert x.scope_detail["origin"] == {"ranks": [9, 12], "nodes": ["node#1"]}


def test_multi_node_from_the_ranks_per_node_the_evidence_states() -> None:
    x = _run({"job": [*(_step(r) for r in range(16)), f"[rank2]:{OOM}", f"[rank12]:{OOM}"]}, world_size=16, nodes=2)
    assert x.scope == "multi-node"
    assert x.scope_detail["origin"]["nodes"] == ["node#0", "node#1"]


def test_global_when_every_rank_of_the_stated_world_shows_it() -> None:
    x = _run({"job": [f"[rank{r}]:{OOM}" for r in range(8)]}, world_size=8, nodes=1)
    assert x.scope == "global"


def test_unknown_when_one_rank_is_all_the_evidence_shows() -> None:
    x = _run({"rank3": [OOM]}, world_size=8)
    assert x.scope == "unknown"
    assert x.scope_detail["origin"]["ranks"] == [3]


def test_a_per_node_log_puts_its_unprefixed_rank_lines_on_its_node() -> None:
    x = _run({"gpu-a": [_nccl("gpu-a", "NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>"), f"[rank0]:{OOM}"],
              "gpu-b": [_nccl("gpu-b", "NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"), _step(8)]},
             world_size=16, nodes=2)
    assert x.first_error is not None and (x.first_error.rank, x.first_error.node) == (0, "gpu-a")


def test_one_failing_rank_whose_node_left_no_other_lines_is_single_node_not_single_rank() -> None:
    # node-b's other seven ranks printed nothing: they may have failed the same way
    x = _run({
        "node-a": [_nccl("node-a", "NCCL INFO Bootstrap : Using ens5:10.1.0.11<0>")],
        "node-b": [_nccl("node-b", "NCCL INFO Bootstrap : Using ens5:10.1.0.12<0>"), f"[rank8]:{OOM}"],
    }, world_size=16, nodes=2)
    assert x.scope == "single-node"
    assert x.scope_detail["origin"] == {"ranks": [8], "nodes": ["node-b"]}
