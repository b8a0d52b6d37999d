"""Words as evidence: machine lines pasted into prose, negation by the text's language, retrieval.

Every example here is written for this test (none is a corpus case's sentence).
"""

from __future__ import annotations

import pytest

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.inference import EvidenceState, rank
from dsdoctor.kb.retrieval import log_factors, scores
from dsdoctor.rules.extract import extract


def test_a_machine_line_pasted_into_a_description_is_read_by_the_log_rules():
    text = ("Since the driver update one box keeps dying; the kernel log had "
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.")
    x = extract({"description": text})
    assert "s.xid_fallen_off_bus" in x.symptoms
    obs = x.symptoms["s.xid_fallen_off_bus"]
    assert "dmesg.xid_fallen_off_bus" in obs.rules
    # at least the pasted reliability (0.9); the quoted words "fallen off the bus" are an identifier (0.95)
    assert 0.9 <= obs.reliability < 1.0
    # prose is no log: nothing counts as absent from it
    assert x.supplied_sources == {"description"}


def test_a_pasted_oom_line_keeps_its_figures():
    text = ("my run stops with torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 2 has a "
            "total capacity of 79.15 GiB of which 3.10 GiB is free. Process 777 has 40.00 GiB memory in use.")
    x = extract({"description": text})
    assert "s.cuda_oom" in x.symptoms
    assert "s.other_process_memory" in x.symptoms or any("process" in s for s in x.symptoms)


def test_log_lines_keep_full_reliability_when_the_same_line_is_also_pasted():
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
    x = extract({"description": f"see {line}", "logs": [{"source": "dmesg", "text": line}]})
    assert x.symptoms["s.xid_fallen_off_bus"].reliability == 1.0


@pytest.mark.parametrize("text", ["现在不 OOM 了，就是慢", "改了 batch 之后就不再 OOM 了"])
def test_an_english_term_in_a_chinese_clause_is_negated_by_chinese_words(text):
    x = extract({"description": text})
    assert "s.cuda_oom" not in x.symptoms
    assert "s.cuda_oom" in x.absent
    assert x.absent_strength["s.cuda_oom"] < 1.0  # a "no" read from words is soft


def test_a_comma_ends_the_clause_of_a_negation():
    x = extract({"description": "no error, no further log output once step 40 is reached"})
    assert "s.hang" in x.symptoms and "s.hang" not in x.absent


def test_a_soft_no_weighs_less_than_a_persons_explicit_no(real_kb):
    soft = EvidenceState(absent={"s.cuda_oom"}, absent_strength={"s.cuda_oom": 0.6})
    hard = EvidenceState(absent={"s.cuda_oom"})
    p_soft = rank(real_kb, soft).posterior["memory.activation_memory"]
    p_hard = rank(real_kb, hard).posterior["memory.activation_memory"]
    assert p_hard < p_soft


def test_retrieval_orders_causes_by_the_words_of_their_own_texts(real_kb):
    english = scores(real_kb, "allocator fragmentation: reserved memory far above allocated, still out of memory")
    assert max(english, key=english.get) == "memory.fragmentation"
    chinese = scores(real_kb, "显存碎片化，reserved 远大于 allocated")
    assert max(chinese, key=chinese.get) == "memory.fragmentation"


def test_retrieval_says_nothing_about_a_text_with_too_few_known_words(real_kb):
    assert scores(real_kb, "hello") == {}
    assert log_factors(real_kb, "", 3.0) == {}
    factors = log_factors(real_kb, "the kernel OOM killer ended every rank while loading the model into RAM", 3.0)
    assert max(factors.values()) == 0.0 and min(factors.values()) >= -3.0


def test_words_no_rule_reads_still_order_the_causes(real_kb):
    # no phrase rule names this; the knowledge base's own texts do
    text = "We think the pinned host memory of the CPU offload ran out, and the node swapped to death"
    result = diagnose({"description": text}, kb=real_kb, top=5)
    assert result["causes"][0]["id"].startswith("memory.host_ram_exhausted")


def test_healthy_evidence_gets_its_own_verdict_and_what_to_send(real_kb):
    healthy = ("[2026-11-30 10:00:01,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05]\n"
               "[2026-11-30 10:00:09,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=0, lr=[1e-05]\n")
    result = diagnose({"logs": [{"source": "rank0", "text": healthy}]}, kb=real_kb)
    assert result["summary"]["verdict"] == "no_fault_found"
    assert "dmesg" in result["summary"]["text"] and "first failing rank" in result["summary"]["text"]
    zh = diagnose({"logs": [{"source": "rank0", "text": healthy}]}, kb=real_kb, lang="zh")
    assert "未发现故障" in zh["summary"]["text"] or "没有发现故障" in zh["summary"]["text"]


def test_a_described_fault_is_never_no_fault_found(real_kb):
    result = diagnose({"description": "the loss turns NaN after a few hundred steps on every rank"}, kb=real_kb)
    assert result["summary"]["verdict"] != "no_fault_found"


def test_retrieval_alone_is_no_fault_and_a_question_about_healthy_output_gets_the_no_fault_verdict(real_kb):
    from dsdoctor.kb.diagnosis import shows_a_fault
    from dsdoctor.kb.inference import EvidenceState

    state = EvidenceState(text_factors={"comm.p2p_topology": 0.0, "memory.activation_memory": -2.0})
    assert not shows_a_fault(real_kb, state)
    printout = ("#  Rank  0 Group  0 Pid   4242 on     boxA device  0 [0x1b] NVIDIA A100-SXM4-80GB\n"
                "boxA:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>\n"
                "boxA:4242:4242 [0] NCCL INFO NET/IB : No device found.\n")
    evidence = {"description": "I ran the all_reduce benchmark on one server with four cards and NCCL_DEBUG=INFO; "
                               "the output mentions no IB device. Is this expected, or is the P2P path broken?",
                "logs": [{"source": "stdout", "text": printout}], "environment": {"nodes": 1}}
    result = diagnose(evidence, kb=real_kb)
    assert result["summary"]["verdict"] == "no_fault_found"
    assert result["causes"][0]["id"] == "none.no_fault"


def test_a_fault_asked_about_is_still_a_fault(real_kb):
    result = diagnose({"description": "the loss turns NaN at step 40 on every rank, is this normal?"}, kb=real_kb)
    assert result["summary"]["verdict"] != "no_fault_found"
    assert result["causes"][0]["id"] != "none.no_fault"
