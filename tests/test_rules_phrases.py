"""Descriptions through phrase rules, English and Chinese, with negation."""

from __future__ import annotations

from tests.rulesfx import run


def test_english_and_chinese_phrases_are_soft_evidence() -> None:
    x = run(description="Rank 3 goes OOM after a few steps.\n两台机器就卡住")
    assert x.symptoms["s.cuda_oom"].reliability < 1 and "s.hang" in x.symptoms
    assert x.symptoms["s.hang"].lines[0].source == "description" and x.symptoms["s.hang"].lines[0].lineno == 2
    assert "description" in x.supplied_sources


def test_negated_phrases_are_known_absent() -> None:
    x = run(description="There is no OOM at all, it just hangs. 没有爆显存。")
    assert "s.cuda_oom" in x.absent and "s.cuda_oom" not in x.symptoms


def test_negation_is_per_clause() -> None:
    x = run(description="Not on one node; on two nodes it goes OOM.")
    assert "s.cuda_oom" in x.symptoms and "s.cuda_oom" not in x.absent


def test_logs_beat_a_negated_phrase() -> None:
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
           "79.15 GiB of which 1.02 GiB is free.")
    x = run(oom, description="no OOM as far as I can tell")
    assert x.symptoms["s.cuda_oom"].reliability == 1.0 and "s.cuda_oom" not in x.absent


def test_case_insensitive_and_blank_descriptions() -> None:
    assert "s.single_gpu_ok" in run(description="WORKS ON ONE GPU, hangs on four").symptoms
    assert run(description="   ").supplied_sources == set()
