"""Words read in general (issue 13): negation-shaped words that negate nothing, two releases compared
in words, and the phrase families added for the misses of batches 1-3.

Every sentence here is written for this test (none is a corpus case's sentence; tests/test_examples_independent.py
checks it).
"""

from __future__ import annotations

import pytest

from dsdoctor.rules import version_outcomes
from dsdoctor.rules.extract import extract
from dsdoctor.rules.testing import run_version_examples


def _seen(text: str) -> tuple[set[str], set[str]]:
    x = extract({"description": text})
    return set(x.symptoms), set(x.absent)


@pytest.mark.parametrize("text", [
    "还不到半个 epoch，loss 就变成了 nan",           # 不到 = less than
    "不知道为什么 loss 突然变成 nan",                 # the speaker's doubt
    "没几步 loss 就 nan 了",                          # within a few steps
    "not sure why, but the loss turns into NaN after warmup",
    "I have no idea why the loss becomes NaN at step 40",
])
def test_a_pseudo_negation_does_not_deny_the_symptom(text: str) -> None:
    seen, absent = _seen(text)
    assert "s.loss_nan" in seen and "s.loss_nan" not in absent


@pytest.mark.parametrize("text", ["loss 没有出现 nan", "the loss never turns into NaN", "训练中不会出现 nan"])
def test_a_real_negation_still_denies(text: str) -> None:
    seen, absent = _seen(text)
    assert "s.loss_nan" not in seen and "s.loss_nan" in absent


@pytest.mark.parametrize("text", [
    "to avoid OOM we turned on CPU offload and now the run hangs at the first all_reduce",
    "为了防止 OOM 开了 offload，结果每一步都特别慢",
])
def test_a_symptom_named_as_the_motive_of_a_change_is_not_observed(text: str) -> None:
    seen, absent = _seen(text)
    assert "s.cuda_oom" not in seen and "s.cuda_oom" in absent


def test_a_motive_does_not_hide_the_same_symptom_stated_later() -> None:
    seen, _ = _seen("I enabled gradient checkpointing to avoid OOM, but it still runs out of memory at step 3")
    assert "s.cuda_oom" in seen


def test_a_motive_does_not_deny_an_experiment_the_reporter_ran() -> None:
    x = extract({"description": "to avoid it, disabling p2p works"})
    assert [(o.experiment, o.outcome, o.happened) for o in x.outcomes] == [("x.nccl_p2p_disable", "issue_gone", True)]


def test_an_aside_that_denies_another_noun_negates_nothing() -> None:
    seen, absent = _seen("加载模型的时候主机内存（不是显存）被吃满，CPU内存超出，进程被杀")
    assert "s.host_ram_high" in seen and "s.host_ram_high" not in absent


@pytest.mark.parametrize("text", ["还没开始训练就 OOM 了", "第一个 epoch 还没跑完就 OOM 了", "连 100 步都没训到就报 OOM"])
def test_a_failure_before_training_starts_is_not_denied_by_its_time_clause(text: str) -> None:
    seen, absent = _seen(text)
    assert "s.cuda_oom" in seen and "s.cuda_oom" not in absent


def test_a_time_clause_leaves_a_real_denial_of_the_symptom_standing() -> None:
    seen, absent = _seen("第一个 epoch 还没跑完就停了，不过没有 OOM")
    assert "s.cuda_oom" not in seen and "s.cuda_oom" in absent


@pytest.mark.parametrize(("text", "outcome"), [
    ("it errors at init with deepspeed 0.12.6, the same script runs with deepspeed 0.12.3", "older_works"),
    ("works on torch 2.1.2 but fails on 2.2.0", "older_works"),
    ("fails on accelerate 0.25.0 while it passes on accelerate 0.27.2", "newer_works"),
    ("after bumping peft from 0.6.2 to 0.7.0 the loss is worse", "older_works"),
    ("vllm 0.4.0 正常，换到 vllm 0.4.1 就报错", "older_works"),
])
def test_two_releases_compared_are_an_other_release_outcome(text: str, outcome: str) -> None:
    assert [s.outcome for s in version_outcomes.read(text)] == [outcome]
    x = extract({"description": text})
    assert [(o.experiment, o.outcome) for o in x.outcomes] == [("x.other_release", outcome)]


@pytest.mark.parametrize("text", [
    "deepspeed 0.12.6 with torch 2.1.2 on 16 GPUs",       # versions, nothing said about them
    "the loss goes from 2.31 to 1.05 and training works",  # numbers that are not releases
    "torch 2.1.2 fails, torch 2.2.0 fails too",           # both fail: not a regression
    "it is 1.5x slower with 2.5 GB more memory, works otherwise",
])
def test_versions_without_a_working_and_a_failing_release_say_nothing(text: str) -> None:
    assert version_outcomes.read(text) == []


def test_the_version_file_examples_pass() -> None:
    results = run_version_examples()
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]


def test_memory_held_after_the_process_is_gone_is_another_process_not_a_leak() -> None:
    seen, _ = _seen("after killing the training job with ctrl-c, the GPU memory is still occupied")
    assert "s.oom_other_process_on_gpu" in seen and "s.mem_allocated_rising" not in seen
    seen, _ = _seen("after deleting the engine the GPU memory is still held by the process")
    assert "s.mem_allocated_rising" in seen and "s.oom_other_process_on_gpu" not in seen


def test_a_lower_zero_stage_mentioned_is_not_an_experiment() -> None:
    x = extract({"description": "after a ZeRO stage-2 run finishes the memory is still allocated"})
    assert not [o for o in x.outcomes if o.experiment == "x.lower_zero_stage"]


def test_lower_lr_still_diverging_is_read_in_both_languages() -> None:
    for text in ("even with a smaller learning rate the loss still goes to NaN", "学习率调小以后也一样出现 nan"):
        x = extract({"description": text})
        assert ("x.lower_lr_warmup_clip", "still_diverges") in [(o.experiment, o.outcome) for o in x.outcomes]


def test_a_progressive_slowdown_reaches_throttled_clocks() -> None:
    from dsdoctor.kb.diagnosis import diagnose

    said = "On our one workstation the images/sec start at full speed and drift lower over time, no errors."
    x = extract({"description": said})
    assert "s.slowdown_over_time" in x.symptoms
    top = [c["id"] for c in diagnose({"description": said})["causes"][:3]]
    assert "hardware.thermal_power_throttle" in top


def test_a_machine_fragment_quoted_in_words_does_not_say_when_it_failed() -> None:
    quoted = extract({"description": "rank 5 alone reports loss=nan grad_norm=inf, the others look healthy"})
    assert quoted.phase == "unknown" and "s.phase_first_step" not in quoted.symptoms
    numbered = extract({"description": "step 1: loss=nan grad_norm=inf on every rank"})
    assert numbered.phase == "first-step"
    logged = extract({"logs": [{"source": "rank5", "text": "loss=nan grad_norm=inf\n"}]})
    assert logged.phase == "first-step"


def _top(said: str, n: int = 3) -> list[str]:
    from dsdoctor.kb.diagnosis import diagnose

    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in said) else "en"
    return [c["id"] for c in diagnose({"description": said}, lang=lang)["causes"][:n]]


def test_an_overflow_now_and_then_at_a_steady_scale_is_read_as_normal() -> None:
    said = ("fp16 with dynamic loss scaling: every 1000 steps or so one grad overflow is reported and the step is "
            "skipped, the scale comes back to 65536 each time. Do I need to do anything about it?")
    assert "s.fp16_overflow_periodic" in extract({"description": said}).symptoms
    assert _top(said, 1) == ["none.no_fault"]
    alarming = "after 3000 steps the log reports a grad overflow on every step and the loss scale is cut down to 1"
    assert "s.fp16_overflow_periodic" not in extract({"description": alarming}).symptoms


def test_versions_said_to_differ_between_the_machines_reach_version_mismatch() -> None:
    for said in ("两台机器的 NCCL 版本不一样，单机都能跑，两机一起跑第一次 all_reduce 就报错",
                 "each box trains alone, together they crash at the first collective; the cuda versions differ "
                 "between the two hosts"):
        assert "s.versions_differ_nodes" in extract({"description": said}).symptoms
        assert "config.version_mismatch" in _top(said, 2)


def test_other_ranks_holding_memory_on_gpu_zero_reach_a_foreign_process() -> None:
    said = "with 8 ranks on one node, nvidia-smi lists every other rank's process on GPU 0 too, each with ~700 MB"
    assert "s.oom_other_process_on_gpu" in extract({"description": said}).symptoms
    assert _top(said, 1) == ["memory.foreign_process_on_gpu"]


def test_a_host_that_powers_off_under_load_reaches_a_lost_gpu() -> None:
    said = "as soon as all four GPUs are at full load the whole server shuts down, and the journal is empty"
    assert "s.host_reboots_under_load" in extract({"description": said}).symptoms
    assert "hardware.gpu_lost" in _top(said)


def test_a_stalled_multi_process_preprocessing_reaches_the_data_pipeline() -> None:
    said = "with num_proc=8 the tokenization progress bar sits at 0% forever, so training never starts"
    x = extract({"description": said})
    assert "s.stuck_in_data_iterator" in x.symptoms
    assert "data.loader_hang" in _top(said)


@pytest.mark.parametrize("text", [
    "the job dies while loading the model, DeepSpeed's batch check says 32 != 4 * 2 * 2",
    "初始化时报 AssertionError: Check batch related parameters.",
])
def test_the_batch_assertion_retold_in_words_points_at_the_batch_settings(text: str) -> None:
    assert "s.batch_size_assert" in _seen(text)[0]
    assert _top(text)[0] == "config.batch_size_mismatch"


def test_a_reboot_that_restores_the_network_adapter_is_not_a_gpu_that_needs_one() -> None:
    assert "s.gpu_needs_reboot" in _seen("the GPUs are gone until we reboot the host")[0]
    for text in ("the RoCE port stays down until we reboot the host", "GID 表乱了，只有重启机器才能恢复"):
        assert "s.gpu_needs_reboot" not in _seen(text)[0]


@pytest.mark.parametrize("text", [
    "we reran it on four separate servers and every one of them shows the same hang",
    "试了好几台服务器都有这个问题，训练几个小时后卡住",
])
def test_the_same_failure_on_separate_machines_is_a_reproduction_not_a_multi_node_job(text: str) -> None:
    x = extract({"description": text})
    assert "s.multi_node_job" not in x.symptoms
    assert ("x.other_hardware_repro", "same_failure", True) in [(o.experiment, o.outcome, o.happened) for o in x.outcomes]


def test_a_failure_on_one_machine_only_is_not_told_as_a_reproduction_elsewhere() -> None:
    x = extract({"description": "it fails on node 3 only, the other machines work fine"})
    assert not [o for o in x.outcomes if o.outcome == "same_failure"]


@pytest.mark.parametrize("text", [
    "we went from ZeRO-2 to ZeRO-3 on 16 GPUs and each card still uses the same memory",
    "开了 offload 以后每张卡的显存基本没变化，是不是配置没生效",
])
def test_memory_that_a_saving_change_did_not_lower_asks_whether_the_setting_took_effect(text: str) -> None:
    assert "s.memory_not_reduced_as_expected" in _seen(text)[0]
    top = _top(text)
    assert "config.ignored_or_invalid_key" in top or "none.no_fault" in top


@pytest.mark.parametrize("text", ["是不是 loss 变成 nan 了就会卡住", "有没有人遇到过 loss 变成 nan"])
def test_an_a_not_a_question_does_not_deny_what_it_asks_about(text: str) -> None:
    seen, absent = _seen(text)
    assert "s.loss_nan" in seen and "s.loss_nan" not in absent


@pytest.mark.parametrize("text", [
    "the merge script runs for a while and then the shell just says Killed",
    "合并权重的脚本跑到一半终端只显示 Killed",
])
def test_a_bare_killed_told_in_words_is_a_sigkill(text: str) -> None:
    assert "s.exit_sigkill" in _seen(text)[0]


def test_replica_parameters_that_differ_are_ranks_out_of_sync_but_a_changing_slow_rank_is_not() -> None:
    assert "s.ranks_out_of_sync" in _seen("训练完对比发现两张卡上的权重竟然不一样")[0]
    assert "s.ranks_out_of_sync" not in _seen("拖慢整体的那个 rank 每次都不一样")[0]


def test_asking_whether_lines_count_as_an_error_asks_if_output_is_normal() -> None:
    assert "s.asks_if_output_normal" in _seen("NCCL INFO 打印了一大堆，训练照常在跑，这些算报错吗")[0]
