"""The vocabulary of identifiers (rules/data/identifiers.yaml) and per-rule phrase reliability.

Every sentence here is written for this test; none is a corpus case's sentence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.errors import KnowledgeError
from dsdoctor.kb.lint import lint
from dsdoctor.rules.extract import extract
from dsdoctor.rules.identifiers import compile_vocabulary, names_pattern
from dsdoctor.rules.loader import default_rules, load_rules, load_rules_with_problems
from dsdoctor.rules.schema import validate_rule
from dsdoctor.rules.testing import run_examples

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = ROOT / "rules" / "data" / "identifiers.yaml"


def _seen(text: str) -> dict[str, float]:
    return {sid: obs.reliability for sid, obs in extract({"description": text}).symptoms.items()}


@pytest.mark.parametrize(("text", "symptom"), [
    ("the fine-tune dies with cudaErrorIllegalAddress after 300 steps", "s.illegal_memory_access"),
    ("we get CUDA_ERROR_ASSERT in the loss kernel", "s.device_side_assert"),
    ("two workers hit ncclSystemError during init", "s.nccl_system_error"),
    ("ncclInvalidUsage on every rank of the new cluster", "s.nccl_invalid_usage"),
    ("the second host raises RendezvousTimeoutError", "s.rendezvous_timeout"),
    ("it shows exitcode: -7 for local rank 1", "s.bus_error"),
    ("the launcher says return code = -11", "s.exit_sigsegv"),
    ("our container exits with exit status 137", "s.exit_sigkill"),
    ("dmesg lists Xid 43 and then Xid 45", "s.xid_app_fault"),
    ("the node had an Xid 95 at 3 am", "s.xid_ecc"),
    ("building the op: nvcc fatal : Unsupported gpu architecture 'compute_89'", "s.op_build_error"),
    ("installing from source fails, error: command 'x86_64-linux-gnu-gcc' failed", "s.op_build_error"),
    ("some pods fail with cudaErrorNoDevice", "s.no_cuda_device"),
    ("训练到一半报 ncclRemoteError", "s.nccl_remote_error"),
    ("多卡启动后返回码 -7，单卡没事", "s.bus_error"),
])
def test_an_identifier_in_prose_is_read_at_identifier_reliability(text: str, symptom: str) -> None:
    seen = _seen(text)
    assert seen.get(symptom) == pytest.approx(0.95)


def test_a_vague_word_is_weaker_than_an_identifier() -> None:
    vague, exact = _seen("training got slower"), _seen("rank 2 failed with ncclUnhandledCudaError")
    assert vague["s.slowdown_reported"] < 0.8 < exact["s.nccl_unhandled_cuda_error"]


def test_a_negated_identifier_is_a_soft_no() -> None:
    x = extract({"description": "it hangs, but there is no ncclSystemError anywhere"})
    assert "s.nccl_system_error" in x.absent and "s.nccl_system_error" not in x.symptoms


@pytest.mark.parametrize("text", [
    "exit code 1 after the assertion",         # not a signal
    "return code -90 from the wrapper",        # a different number
    "Xid 130 is not in the catalog",           # not a listed Xid
    "java.lang.OutOfMemoryError in the converter",
    "we use 31 GPUs",
])
def test_near_misses_are_not_identifiers(text: str) -> None:
    seen = _seen(text)
    assert not {"s.exit_sigkill", "s.bus_error", "s.xid_app_fault", "s.cuda_oom"} & set(seen)


def test_every_vocabulary_entry_becomes_a_phrase_rule_with_passing_examples() -> None:
    rules = default_rules()
    ident = [r for r in rules.phrase_rules if r.id.startswith("ident.")]
    assert len(ident) >= 30 and all(r.reliability and r.reliability >= 0.85 for r in ident)
    failed = [r for r in run_examples(rules) if r.rule.startswith("ident.") and not r.ok]
    assert failed == []


def test_vocabulary_examples_are_our_own_words() -> None:
    """No example sentence is contained verbatim in a batch-1 corpus case (the only batch open for study)."""
    texts = [json.dumps(json.loads(p.read_text()), ensure_ascii=False).lower()
             for p in sorted((ROOT / "bench" / "corpus" / "batch1").glob("*.json"))]
    rules = [r for r in default_rules().phrase_rules if r.id.startswith("ident.")]
    examples = [e["line"] for r in rules for e in r.match_examples] + [s for r in rules for s in r.no_match_examples]
    assert examples and not [e for e in examples if any(e.lower() in t for t in texts)]


def test_an_identifier_moves_the_diagnosis() -> None:
    said = "After a few hours the multi-node job died; the only line we kept says Xid 79 on one GPU."
    top = [c["id"] for c in diagnose({"description": said})["causes"][:3]]
    assert "hardware.gpu_lost" in top


def test_the_new_symptom_is_in_the_knowledge_base_and_linted_clean() -> None:
    problems = [p for p in lint() if p.severity == "error"]
    assert problems == []
    x = extract({"logs": [{"source": "stdout", "text": "RuntimeError: CUDA error: no CUDA-capable device is detected\n"}]})
    assert "s.no_cuda_device" in x.symptoms


def test_names_are_escaped_whole_words() -> None:
    import re
    pattern = re.compile(names_pattern(["torch.cuda.OutOfMemoryError"]), re.I)
    assert pattern.search("raised torch.cuda.OutOfMemoryError here")
    assert not pattern.search("torchXcudaXOutOfMemoryError") and not pattern.search("torch.cuda.OutOfMemoryErrors")


def _vocab(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "rules"
    (folder / "phrases").mkdir(parents=True, exist_ok=True)
    (folder / "identifiers.yaml").write_text(body)
    return folder


GOOD_ENTRY = """
  - id: nccl.system_error
    title: "ncclSystemError"
    symptom: s.nccl_system_error
    names: [ncclSystemError]
    meaning: "2: a system call failed"
    references: ["https://github.com/NVIDIA/nccl/blob/master/src/nccl.h.in"]
    examples:
      match: ["it failed with ncclSystemError"]
      no_match: ["the system is fine"]
"""


def test_a_vocabulary_in_any_rules_directory_is_compiled(tmp_path: Path) -> None:
    rules = load_rules([_vocab(tmp_path, "reliability: 0.9\nidentifiers:" + GOOD_ENTRY)])
    (rule,) = rules.phrase_rules
    assert rule.id == "ident.nccl.system_error" and rule.reliability == 0.9 and rule.kind == "phrase"


@pytest.mark.parametrize(("body", "message"), [
    ("reliability: 1.5\nidentifiers:" + GOOD_ENTRY, "(0, 1]"),
    ("identifiers:" + GOOD_ENTRY, "exactly the keys"),
    ("reliability: 0.9\nidentifiers:" + GOOD_ENTRY.replace("    names: [ncclSystemError]\n", ""),
     "either 'names' or 'pattern'"),
    ("reliability: 0.9\nidentifiers:" + GOOD_ENTRY.replace('      no_match: ["the system is fine"]\n', ""),
     "no_match"),
    ("reliability: 0.9\nidentifiers:" + GOOD_ENTRY.replace("s.nccl_system_error", "nccl_system_error"),
     "s.cuda_oom"),
])
def test_vocabulary_problems_name_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    _, problems = load_rules_with_problems([_vocab(tmp_path, body)])
    assert problems and any(message in p.message for p in problems)
    assert all(p.file.endswith("identifiers.yaml") and p.line >= 1 for p in problems)
    with pytest.raises(KnowledgeError):
        load_rules([_vocab(tmp_path, body)])


def test_compile_vocabulary_of_the_shipped_file_has_no_problem() -> None:
    problems: list = []
    assert compile_vocabulary(VOCABULARY, problems) and problems == []


def test_reliability_is_only_for_phrase_rules() -> None:
    base = {"id": "x.y", "title": "t", "kind": "log", "symptom": "s.hang", "pattern": "hang",
            "examples": {"match": ["hang"], "no_match": ["ok"]}}
    _, issues = validate_rule({**base, "reliability": 0.9})
    assert any("only for phrase rules" in m for _, m in issues)
    data, issues = validate_rule({**base, "kind": "phrase", "lang": "en", "reliability": 0.6})
    assert issues == [] and data["reliability"] == 0.6
    _, issues = validate_rule({**base, "kind": "phrase", "lang": "en", "reliability": 0})
    assert issues


def test_kb_lint_checks_the_symptoms_of_the_vocabulary(tmp_path: Path) -> None:
    folder = _vocab(tmp_path, "reliability: 0.9\nidentifiers:" + GOOD_ENTRY.replace("s.nccl_system_error",
                                                                                       "s.nccl_sytem_error"))
    found = [p for p in lint(rules_dir=folder) if "ident.nccl.system_error" in p.message]
    assert found and "does not define" in found[0].message and found[0].file.endswith("identifiers.yaml")
