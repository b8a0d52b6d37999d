"""Line-prefix parsing: every launcher / logger form gives rank, node, pid, time and the message start."""

from __future__ import annotations

import pytest

from dsdoctor.rules.context import parse_prefix, source_hint

# line, expected (rank, local_rank, node, pid, time ISO or None, year known, message starts with)
CASES = [
    ("[rank3]: Traceback (most recent call last):", (3, None, None, None, None, True, "Traceback")),
    ("[default3]:  File \"/x.py\", line 1, in f", (None, 3, None, None, None, True, " File")),
    ("[trainer12]:hello", (None, 12, None, None, None, True, "hello")),
    ("[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught",
     (1, None, None, None, "2000-10-03T18:37:01.832146", False, "[Rank 1] Watchdog")),
    ("[E1210 02:06:33.321131 12345 ProcessGroupNCCL.cpp:607] msg", (None, None, None, None, "2000-12-10T02:06:33.321131", False, "msg")),
    ("[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog caught", (2, None, None, None, None, True, "[Rank 2] Watchdog")),
    ("[rank2]:[E611 04:32:11.569125961 ProcessGroupNCCL.cpp:607] x", (2, None, None, None, "2000-06-11T04:32:11.569125", False, "x")),
    ("W0709 11:43:22.529000 139874869561152 torch/distributed/run.py:757] warn",
     (None, None, None, None, "2000-07-09T11:43:22.529000", False, "warn")),
    ("gpu-host:62236:62931 [1] NCCL INFO Ring 00 : 1[1] -> 0[0] via P2P/IPC", (None, 1, "gpu-host", 62236, None, True, "NCCL INFO")),
    ("[2025-01-01 12:00:00] gpu-host:62236:62931 [1] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr",
     (None, 1, "gpu-host", 62236, "2025-01-01T12:00:00", True, "misc/ibvwrap.cc")),
    ("[2024-05-01 10:00:00,123] [INFO] [engine.py:3656:_report_progress] [Rank 3] step=10, skipped=0",
     (3, None, None, None, "2024-05-01T10:00:00.123000", True, "[Rank 3] step")),
    ("[2024-09-03 02:37:24,139] [INFO] [RANK 0] arguments:", (0, None, None, None, "2024-09-03T02:37:24.139000", True, "[RANK 0]")),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 7] Timeout at NCCL work", (7, None, None, None, None, True, "[PG ID 0")),
    ("[INFO 2020-05-26 20:08:20] Creating fp16 ZeRO stage 2 optimizer", (None, None, None, None, "2020-05-26T20:08:20", True, "Creating")),
    ("2024-05-01T10:00:00.123456Z ERROR something", (None, None, None, None, "2024-05-01T10:00:00.123456", True, "ERROR something")),
    ("2024-05-01 10:00:00,123 - root - INFO - msg", (None, None, None, None, "2024-05-01T10:00:00.123000", True, "root")),
    ("INFO:root:hello", (None, None, None, None, None, True, "hello")),
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2)", (None, None, None, None, None, True, "failed")),
    ("node3: [rank27]: RuntimeError: boom", (27, None, "node3", None, None, True, "RuntimeError")),
    ("10.0.0.2: [2024-05-01 10:00:00,123] [INFO] [launch.py:1:main] hi", (None, None, "10.0.0.2", None, "2024-05-01T10:00:00.123000", True, "hi")),
    ("node1: [rank8]: [2024-06-11 03:12:40,632] [INFO] [train.py:412:train_step] step 1180",
     (8, None, "node1", None, "2024-06-11T03:12:40.632000", True, "step 1180")),
    ("[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234", (None, None, None, None, None, True, "NVRM")),
    ("[  +0.000844] nvidia 0000:03:00.0: AER: can't recover", (None, None, None, None, None, True, "nvidia")),
    ("[Wed May  1 10:00:00 2024] NVRM: Xid", (None, None, None, None, "2024-05-01T10:00:00", True, "NVRM")),
    ("May  1 10:00:00 gpu07 kernel: Out of memory: Killed process 1234 (python)",
     (None, None, "gpu07", None, "2000-05-01T10:00:00", False, "Out of memory")),
    ("main.py: error: unrecognized arguments: --local-rank=0", (None, None, None, None, None, True, "main.py")),
    ("RuntimeError: CUDA error: out of memory", (None, None, None, None, None, True, "RuntimeError")),
    ("Traceback (most recent call last):", (None, None, None, None, None, True, "Traceback")),
]


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_prefix_forms(line: str, expected: tuple) -> None:
    data = line.encode()
    ctx = parse_prefix(data)
    rank, local_rank, node, pid, time, year_known, message = expected
    assert (ctx.rank, ctx.local_rank, ctx.node, ctx.pid) == (rank, local_rank, node, pid)
    assert (ctx.time.isoformat() if ctx.time else None) == time
    if time is not None:
        assert ctx.year_known is year_known
    assert data[ctx.message_start:].decode().startswith(message)


def test_kernel_lines_are_flagged() -> None:
    assert parse_prefix(b"[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79").kernel
    assert parse_prefix(b"May  1 10:00:00 gpu07 kernel: Out of memory").kernel
    assert not parse_prefix(b"[rank0]: hello").kernel


def test_rank_minus_one_before_init_is_unknown() -> None:
    assert parse_prefix(b"[2024-05-01 10:00:00,123] [INFO] [comm.py:1:x] [Rank -1] init").rank is None


def test_bad_dates_do_not_raise() -> None:
    ctx = parse_prefix(b"[2024-13-45 99:99:99,000] [INFO] [x.py:1:f] text")
    assert ctx.time is None


@pytest.mark.parametrize("junk", [b"", b"\x00" * 500, b"[" * 400, b"\xff\xfe" * 300, b"a: " * 200,
                                  b"[rank" + b"9" * 400 + b"]:"])
def test_junk_prefixes_are_safe(junk: bytes) -> None:
    ctx = parse_prefix(junk)
    assert 0 <= ctx.message_start <= len(junk)


@pytest.mark.parametrize(("name", "rank", "node", "kind"), [
    ("rank37", 37, None, "logs"), ("rank-5.log", 5, None, "logs"), ("node2", None, "node2", "logs"),
    ("worker-3.log", None, "worker-3", "logs"), ("dmesg", None, None, "dmesg"), ("node4-kern.log", None, "node4", "dmesg"),
    ("nvidia-smi", None, None, "nvidia-smi"), ("stdout", None, None, "logs"), ("stderr-4gpu", None, None, "logs"),
])
def test_source_hints(name: str, rank: int | None, node: str | None, kind: str) -> None:
    hint = source_hint(name)
    assert (hint.rank, hint.node, hint.kind) == (rank, node, kind)
