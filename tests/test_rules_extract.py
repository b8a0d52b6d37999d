"""Extraction end to end: streaming in chunks, bad input, sources, attribution line by line."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import itertools
from pathlib import Path

import pytest

from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.rules.extract import extract, extract_text
from dsdoctor.rules.settings import load_settings
from tests.rulesfx import fixture_rules, lines, run

ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


def small_chunks(chunk: int = 4096, max_line: int = 65536):
    settings = load_settings()
    derive = copy.deepcopy(settings.derive)
    derive["limits"]["chunk_bytes"] = chunk
    derive["limits"]["max_line_bytes"] = max_line
    return dataclasses.replace(settings, derive=derive)


def test_streaming_a_file_much_bigger_than_the_chunk_size(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    filler = "".join(f"[rank{i % 8}]:[2024-05-01 10:00:00,000] [INFO] [d.py:1:f] fetched shard {i:06d}\n" for i in range(5000))
    path.write_text(filler + f"[rank6]: {ILLEGAL}\n" + filler, encoding="utf-8")
    seen: list[int] = []
    x = extract({}, log_files=[("train", path)], progress=seen.append, rules=fixture_rules(), settings=small_chunks())
    assert x.bytes_processed == path.stat().st_size == sum(seen)
    assert len(seen) > 50  # many chunks
    assert x.lines_processed == 10001
    line = x.symptoms["s.illegal_memory_access"].lines[0]
    assert (line.lineno, line.rank, line.source) == (5001, 6, "train")
    assert x.first_error is not None and x.first_error.lineno == 5001


def test_line_numbers_match_with_the_default_chunking(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("a\n" * 1000 + ILLEGAL + "\n" + "b\n" * 10, encoding="utf-8")
    x = extract({}, log_files=[("a", path)], rules=fixture_rules())
    assert x.symptoms["s.illegal_memory_access"].lines[0].lineno == 1001 and x.lines_processed == 1011


def test_invalid_utf8_is_decoded_with_replacement(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(b"\xff\xfe\xfa garbage \xc3\x28\n[rank1]: \xff" + ILLEGAL.encode() + b" \xe2\x82\n")
    x = extract({}, log_files=[("bad", path)], rules=fixture_rules())
    text = x.symptoms["s.illegal_memory_access"].lines[0].text
    assert "\ufffd" in text and x.first_error is not None and x.first_error.rank == 1


def test_gzip_logs_are_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "train.log.gz"
    path.write_bytes(gzip.compress((ILLEGAL + "\n").encode()))
    assert "s.illegal_memory_access" in extract({}, log_files=[("t", path)], rules=fixture_rules()).symptoms


@pytest.mark.parametrize(("head", "what"), [(b"\x89PNG\r\n\x1a\n", "PNG image"), (b"PK\x03\x04", "ZIP archive"),
                                            (b"\x7fELF\x02\x01", "ELF binary")])
def test_wrong_file_types_are_skipped_with_a_warning(tmp_path: Path, head: bytes, what: str) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(head + b"\x00" * 100 + ILLEGAL.encode())
    x = extract({}, log_files=[("x", path)], rules=fixture_rules())
    assert not x.symptoms and any(what in w for w in x.warnings)


def test_binary_data_is_scanned_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "core"
    path.write_bytes(bytes(range(256)) * 64 + b"\n" + ILLEGAL.encode() + b"\x00\x00\n")
    x = extract({}, log_files=[("core", path)], rules=fixture_rules())
    assert "s.illegal_memory_access" in x.symptoms and any("binary" in w for w in x.warnings)


def test_empty_file_and_empty_text(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    x = extract({"logs": [{"source": "s", "text": ""}]}, log_files=[("e", path)], rules=fixture_rules())
    assert not x.symptoms and x.bytes_processed == 0 and "logs" not in x.supplied_sources


def test_a_line_without_newline_at_the_end_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.log"
    path.write_bytes(b"x\r\n" * 3 + ILLEGAL.encode())
    x = extract({}, log_files=[("c", path)], rules=fixture_rules(), settings=small_chunks(chunk=7))
    ref = x.symptoms["s.illegal_memory_access"].lines[0]
    assert ref.lineno == 4 and not ref.text.endswith("\r")


def test_a_10mb_single_line_is_cut_not_crashing(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    path.write_bytes(b"y" * (10 * 2**20) + b" " + ILLEGAL.encode() + b"\n" + ILLEGAL.encode() + b"\n")
    x = extract({}, log_files=[("l", path)], rules=fixture_rules(), settings=small_chunks(chunk=2**20, max_line=2**20))
    assert "s.illegal_memory_access" in x.symptoms
    assert all(len(ref.text) <= 401 for ref in x.symptoms["s.illegal_memory_access"].lines)


def test_missing_file_and_directory_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DsdoctorError, match="log file not found"):
        extract({}, log_files=[("m", tmp_path / "nope.log")], rules=fixture_rules())
    with pytest.raises(DsdoctorError, match="is a directory"):
        extract({}, log_files=[("d", tmp_path)], rules=fixture_rules())


def test_bad_evidence_shapes_become_warnings() -> None:
    x = extract({"logs": "not a list", "metrics": {"a": 1}, "config": [1], "environment": 3, "description": 5},
                rules=fixture_rules())
    assert len(x.warnings) == 5 and not x.symptoms


def test_one_text_mixing_ranks_is_attributed_line_by_line() -> None:
    text = lines("node0: [rank0]: fine", f"node1: [rank9]: {ILLEGAL}", "node2:18:19 [3] NCCL INFO x",
                 f"[default2]:{ILLEGAL}")
    x = run({"node9": text})
    refs = x.symptoms["s.illegal_memory_access"].lines
    assert [(r.rank, r.local_rank, r.node) for r in refs] == [(9, None, "node1"), (None, 2, "node9")]
    assert x.ranks_seen >= {9} and {"node1", "node9"} <= x.nodes_seen


def test_source_name_is_only_a_hint() -> None:
    x = run({"rank37": lines(ILLEGAL, f"[rank5]: {ILLEGAL}")})
    assert x.symptoms["s.illegal_memory_access"].ranks == {37, 5}


def test_supplied_sources_detect_dmesg_by_content_and_name() -> None:
    xid = "[1204551.220401] NVRM: Xid (PCI:0000:4e:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    by_content = run({"node3": lines(xid)})
    assert by_content.supplied_sources == {"dmesg"}
    assert by_content.symptoms["s.xid_fallen_off_bus"].nodes == {"node3"}
    by_name = run({"dmesg": lines("nothing special")})
    assert by_name.supplied_sources == {"dmesg"}
    mixed = run({"train": lines(ILLEGAL), "smi": lines("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05 |")},
                description="it crashed", metrics=[{"name": "loss", "step": 1, "value": 1.0}], config={}, environment={"nodes": 1})
    assert mixed.supplied_sources == {"logs", "nvidia-smi", "description", "metrics", "config", "environment"}


def test_bounded_samples_per_symptom() -> None:
    x = run(lines(*(f"[rank{r}]: {ILLEGAL}" for r in range(100) for _ in range(3))))
    obs = x.symptoms["s.illegal_memory_access"]
    assert obs.count == 300 and obs.ranks == set(range(100))
    assert 5 <= len(obs.lines) <= 20


def test_repeated_lines_are_counted_and_new_ranks_still_attributed() -> None:
    many = [f"[rank{r % 4}]: {ILLEGAL}" for r in range(400)] + [f"[rank77]: {ILLEGAL}"]
    x = run(lines(*many))
    obs = x.symptoms["s.illegal_memory_access"]
    assert obs.count == 401 and obs.ranks == {0, 1, 2, 3, 77}


def test_extract_text_convenience() -> None:
    x = extract_text(ILLEGAL, source="rank2", rules=fixture_rules())
    assert x.symptoms["s.illegal_memory_access"].ranks == {2}


def test_bytes_text_is_accepted() -> None:
    x = extract({"logs": [{"source": "a", "text": b"\xff" + ILLEGAL.encode()}]}, rules=fixture_rules())
    assert "s.illegal_memory_access" in x.symptoms


def _progress(step: int, rank: int = 0, minute: int = 0) -> str:
    return (f"[rank{rank}]:[2024-05-01 10:{minute:02d}:{step % 60:02d},000] [INFO] [engine.py:2156:_report_progress] "
            f"[Rank {rank}] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)] loss={2.0 + step % 7 / 10:.4f}\n")


def _read_lines(monkeypatch) -> list[int]:
    """Line numbers the collector reads in full (a spy on Collector.on_line)."""
    from dsdoctor.rules.collect import Collector

    read: list[int] = []
    original = Collector.on_line

    def spy(self, src, line, lineno, *args, **kwargs):
        read.append(lineno)
        return original(self, src, line, lineno, *args, **kwargs)

    monkeypatch.setattr(Collector, "on_line", spy)
    return read


def test_progress_lines_past_the_full_reads_are_sampled_by_window_and_the_end_is_read(monkeypatch) -> None:
    limits = load_settings().derive["limits"]
    full, stride = limits["context_full_lines"], limits["context_stride"]
    n = 6000
    text = "".join(_progress(step) for step in range(1, n + 1)) + f"[rank0]: {ILLEGAL}\n"
    read = _read_lines(monkeypatch)
    x = extract({"logs": [{"source": "job.log", "text": text}]})
    assert read[:full] == list(range(1, full + 1))  # the first ones, every one
    middle = [n_ for n_ in read if full < n_ <= n - 200]
    assert 0.6 / stride < len(middle) / (n - 200 - full) < 1.6 / stride  # about one line in `stride`
    runs = sum(1 for a, b in itertools.pairwise(middle) if b != a + 1)
    assert runs < len(middle) / 4  # read in windows of consecutive lines, not one line here and there
    assert set(range(n - 5, n + 2)) <= set(read)  # the lines just before the end, and the error itself
    assert x.first_error is not None and x.first_error.lineno == n + 1 and x.lines_processed == n + 1
    assert x.phase == "steady"


def test_symptom_lines_between_sampled_windows_are_all_read_with_their_times(monkeypatch) -> None:
    parts = []
    for step in range(1, 4001):
        parts.append(_progress(step, rank=step % 4))
        if step % 250 == 0:  # between sampled windows: read whole, with its own stamp
            parts.append(f"[rank{step % 4}]:[2024-05-01 11:00:{step // 250:02d},000] [ERROR] [a.py:1:f] {ILLEGAL}\n")
    x = extract({"logs": [{"source": "job.log", "text": "".join(parts)}]})
    observed = x.symptoms["s.illegal_memory_access"]
    assert observed.count == 16
    assert [line.time for line in observed.lines][:2] == ["2024-05-01T11:00:01", "2024-05-01T11:00:02"]
    assert x.lines_processed == 4016


def test_a_file_source_reads_its_last_window_too(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "train.log"
    n = 3000
    path.write_text("".join(_progress(step) for step in range(1, n + 1)), encoding="utf-8")
    read = _read_lines(monkeypatch)
    x = extract({}, log_files=[("train", path)])
    assert n in read and n - 3 in read
    assert x.lines_processed == n


# ---------------------------------------------------------------------- issue 15


def test_a_one_line_log_without_a_trailing_newline_counts_one_line() -> None:
    assert extract_text(ILLEGAL).lines_processed == 1
    assert extract_text(f"a\n{ILLEGAL}").lines_processed == 2
    assert extract_text(f"a\n{ILLEGAL}\n").lines_processed == 2


def test_the_first_error_line_is_kept_whole() -> None:
    long_line = ILLEGAL + " " + " ".join(f"word{i}" for i in range(120))
    x = extract_text(long_line)
    assert x.first_error is not None and x.first_error.line == long_line


def test_a_watchdog_exception_line_is_not_an_abort() -> None:
    line = ("[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Exception (either an error or timeout) detected by "
            "watchdog at work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1.")
    x = extract_text(line)
    assert "s.exit_sigabrt" not in x.symptoms
    assert x.symptoms["s.nccl_watchdog_timeout"].secondary  # a victim's watchdog report, not a SIGABRT
