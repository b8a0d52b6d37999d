"""The framework a job ran on: read from its logs and stated versions, and what it changes.

A message only PyTorch prints (the NCCL watchdog, the DeepSpeed batch assert) is not missing from
the logs of a PaddlePaddle job, and Paddle's own error formats (its allocator OOM, CUDA error 719
from a kernel check) are read for what they mean on Paddle.
"""

from __future__ import annotations

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.inference import EvidenceState, rank
from dsdoctor.kb.loader import get_kb
from dsdoctor.rules.extract import extract
from dsdoctor.rules.model import JobContext
from tests.kbfactory import build, cause, symptom
from tests.rulesfx import lines

PADDLE_719 = lines(
    "Traceback (most recent call last):",
    '  File "tools/train.py", line 120, in <module>',
    "    main(args)",
    '  File "/opt/seg/core/train.py", line 170, in train',
    "    avg_loss += float(loss)",
    "OSError: (External) CUDA error(719), unspecified launch failure.",
    "  [Hint: Please search for the error code(719) on website.] (at /paddle/paddle/phi/backends/gpu/cuda/cuda_info.cc:259)",
)
TORCH_719 = lines(
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl',
    "    return forward_call(*args, **kwargs)",
    "RuntimeError: CUDA error: unspecified launch failure",
)


def _frameworks(**evidence) -> set[str]:
    return set(extract(evidence).context.frameworks)


def test_paddle_is_read_from_its_source_paths_error_types_and_versions() -> None:
    assert _frameworks(logs=[{"source": "rank0", "text": PADDLE_719}]) == {"paddle"}
    oom = "Out of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, 7.2GB memory has been allocated and available memory is only 300.000000MB.\n"
    summary = lines("Error Message Summary:", "ResourceExhaustedError: ", "1. If yes, please stop them, or start PaddlePaddle on another GPU.")
    assert _frameworks(logs=[{"source": "rank0", "text": oom + summary}]) == {"paddle"}
    assert _frameworks(environment={"paddlepaddle": "2.5.2"}) == {"paddle"}
    assert _frameworks(environment={"versions": {"torch": "2.3.0", "cuda": "12.1"}}) == {"pytorch"}
    assert _frameworks(logs=[{"source": "rank0", "text": TORCH_719}]) == set()  # torch paths mark nothing


def test_paddle_allocator_oom_is_a_cuda_oom_with_its_figures() -> None:
    text = ("ResourceExhaustedError: \n\nOut of memory error on GPU 3. Cannot allocate 2.000000GB memory on GPU 3, "
            "30.500000GB memory has been allocated and available memory is only 1.250000GB.\n")
    line = extract({"logs": [{"source": "rank3", "text": text}]}).symptoms["s.cuda_oom"].lines[0]
    assert line.rule == "oom.paddle_allocator"
    assert line.fields == {"gpu": 3, "requested": 2 * 1024**3, "allocated": round(30.5 * 1024**3),
                           "free": round(1.25 * 1024**3)}


def test_a_message_only_other_frameworks_print_is_not_missing() -> None:
    kb = build([cause("c.watchdog", 0.5, {"m.a": 0.9}), cause("c.other", 0.5, {"m.b": 0.9})],
               {"m.a": {"s.seen": 0.5, "s.torch_only": 0.9}, "m.b": {"s.seen": 0.5}},
               [symptom("s.seen"), symptom("s.torch_only", absent_reliability=0.8)])
    kb.symptoms["s.torch_only"].printed_by = ("pytorch",)

    def posterior(frameworks: tuple[str, ...]) -> float:
        ev = EvidenceState(present={"s.seen": 1.0}, supplied={"logs"}, context=JobContext(frameworks=frameworks))
        return rank(kb, ev).posterior["c.watchdog"]

    assert posterior(()) < 0.3  # unknown framework: the missing watchdog line counts
    assert posterior(("pytorch",)) == posterior(())
    assert abs(posterior(("paddle",)) - 0.5) < 0.01  # a Paddle job never prints it


def test_paddle_error_719_points_at_the_ops_input_and_torchs_at_the_gpu() -> None:
    kb = get_kb()
    paddle = diagnose({"logs": [{"source": "rank0", "text": PADDLE_719}]}, kb=kb, top=3)
    torch = diagnose({"logs": [{"source": "rank0", "text": TORCH_719}]}, kb=kb, top=3)
    assert paddle["causes"][0]["id"] == "data.label_or_index_out_of_range"
    assert torch["causes"][0]["domain"] == "hardware"


def test_the_diagnosis_shows_the_framework_it_read() -> None:
    shown = diagnose({"logs": [{"source": "rank0", "text": PADDLE_719}]}, kb=get_kb(), top=1)["context"]
    assert shown["frameworks"] == ["paddle"]
    assert diagnose({"logs": [{"source": "rank0", "text": TORCH_719}]}, kb=get_kb(), top=1)["context"]["frameworks"] == []


def test_kb_show_says_which_frameworks_print_a_symptom() -> None:
    from dsdoctor.kb.graph import describe

    kb = get_kb()
    assert describe(kb, "s.nccl_watchdog_timeout")["printed_by"] == ["pytorch"]
    assert describe(kb, "s.cuda_oom")["printed_by"] == []
