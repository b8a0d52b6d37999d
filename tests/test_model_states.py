"""Model-state memory estimate (rules/model_states.py): separates state OOM from activation OOM."""

from __future__ import annotations

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.rules.extract import extract

SID = "s.model_states_exceed_gpu"


def test_full_training_that_cannot_fit_is_asserted() -> None:
    x = extract({"description": "Full-parameter SFT of a 34B model on 8 H100 80GB with ZeRO stage 1 dies "
                                "with CUDA out of memory before the first step.",
                 "config": {"zero_optimization": {"stage": 1}}})
    obs = x.symptoms[SID]
    assert obs.reliability >= 0.9 and obs.fields["gpus"] == 8


def test_unknown_stage_gives_a_softer_yes_only_when_stages_below_three_exceed() -> None:
    x = extract({"description": "全参数训练一个 30B 的模型，8 张 A100 80G，开训就显存不足。"})
    assert SID in x.symptoms and x.symptoms[SID].reliability < 0.9
    with_offload = extract({"description": "全参数训练一个 30B 的模型，8 张 A100 80G，开了 offload，开训就显存不足。"})
    assert SID not in with_offload.symptoms


def test_small_adapter_training_fits_and_says_no() -> None:
    x = extract({"description": "QLoRA on a 7B model, one RTX 4090, OOM after a few hundred steps with long "
                                "sequences."})
    assert SID in x.absent and SID not in x.symptoms


def test_nothing_is_guessed_without_mode_or_memory() -> None:
    assert SID not in extract({"description": "Fine-tuning a 13B model on 4 GPUs runs out of memory."}).symptoms
    unknown_mode = extract({"description": "Training a 70B model on 8x A100 80GB goes OOM."})
    assert SID not in unknown_mode.symptoms and SID not in unknown_mode.absent
    two_sizes = extract({"description": "Full fine-tuning: the 7B fits, the 70B goes OOM on 8x A100 80GB."})
    assert SID not in two_sizes.symptoms


def test_the_estimate_moves_the_ranking_between_state_and_activation_memory() -> None:
    states = diagnose({"description": "Full fine-tuning of a 65B model with ZeRO-2 on 8 A100 80GB: CUDA out of "
                                      "memory while the optimizer is created.",
                       "config": {"zero_optimization": {"stage": 2}}})
    top = [c["id"] for c in states["causes"][:1]]
    assert top == ["memory.model_states_exceed_stage"]
