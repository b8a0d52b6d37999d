"""Phrases by meaning (rules/lexicon.py, rules/data/lexicon.yaml): concepts composed into symptoms.

Every sentence here is written for this test (none is a corpus case's sentence).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.kb.errors import KnowledgeError
from dsdoctor.kb.loader import load_kb
from dsdoctor.rules.extract import extract
from dsdoctor.rules.lexicon import _load, load_lexicon
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.testing import ExampleRunner


def test_every_composition_paraphrase_runs_and_passes():
    runner = ExampleRunner(default_rules())
    results = [r for comp in load_lexicon().compositions for r in runner.run_composition(comp)]
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]
    assert {r.kind for r in results} == {"match", "no_match"}


def test_rules_test_runs_one_composition_by_id():
    results = ExampleRunner(default_rules(), lexicon=load_lexicon()).run("lexicon.loss_nan")
    assert results and {r.rule for r in results} == {"lexicon.loss_nan"}


def test_composed_symptoms_and_outcomes_are_in_the_knowledge_base():
    kb = load_kb()
    compositions = load_lexicon().compositions
    assert {c.symptom for c in compositions if c.symptom} <= set(kb.symptoms)
    observed = [c.observation.split("=") for c in compositions if c.observation]
    assert observed and all(o in {x.id for x in kb.experiments[e].outcomes} for e, o in observed)


@pytest.mark.parametrize(("text", "symptom"), [
    ("our loss quite often just turns into NaN after a restart", "s.loss_nan"),  # adverbs between
    ("inf suddenly appears in the eval loss", "s.loss_nan"),  # the other word order
    ("the perplexity curve jumps up sharply near step 12k", "s.loss_diverging"),  # 'the X curve' as subject
    ("our job keeps freezing after the first evaluation", "s.hang"),  # -ing form
    ("cuda memory slowly creeping up across epochs", "s.mem_allocated_rising"),  # growth verb
    ("we run it over three A100 servers", "s.multi_node_job"),  # machine count
    ("在 2 台 8 卡 H100 上训练", "s.multi_node_job"),  # a node count without 个
])
def test_concepts_compose_whatever_the_word_order(text: str, symptom: str):
    x = extract({"description": text})
    assert symptom in x.symptoms, sorted(x.symptoms)
    assert any(rule.startswith("lexicon.") for rule in x.symptoms[symptom].rules)


def test_an_oom_said_of_the_save_step_is_an_oom_at_checkpoint():
    x = extract({"description": "we only see it at the very end: while saving the merged adapter it runs out of memory"})
    assert {"s.cuda_oom", "s.oom_at_checkpoint", "s.phase_checkpoint"} <= set(x.symptoms)
    host = extract({"description": "while saving the weights the host ran out of CPU memory"})
    assert "s.cuda_oom" not in host.symptoms and "s.oom_at_checkpoint" not in host.symptoms


def test_a_chinese_scope_cue_spans_an_english_message_and_keeps_the_rank():
    text = "只有 6 号卡在加载权重以后 报 RuntimeError: CUDA error: unspecified launch failure，接着进程报错退出"
    x = extract({"description": text})
    obs = x.symptoms["s.scope_single_rank"]
    assert "lexicon.only_device_fails" in obs.rules
    assert any(line.fields.get("rank") == "6" for line in obs.lines)


def test_reliability_comes_from_the_composition():
    x = extract({"description": "all eight cards look underutilized during the epoch"})
    assert x.symptoms["s.low_gpu_util"].rules == {"lexicon.gpus_idle"}
    assert x.symptoms["s.low_gpu_util"].reliability == pytest.approx(0.6)


def test_a_negated_composition_is_a_soft_no():
    x = extract({"description": "with bf16 our loss never ends up as NaN"})
    assert "s.loss_nan" not in x.symptoms
    assert "s.loss_nan" in x.absent
    assert x.absent_strength["s.loss_nan"] == pytest.approx(0.6)


def test_a_negative_shaped_cue_is_not_a_negation():
    x = extract({"description": "配置里开了 fp16，命令行又要 bf16，启动时提示两者不能同时开启"})
    assert "lexicon.precision_conflict" in x.symptoms["s.fp16_and_bf16_enabled"].rules


def test_an_exclusion_concept_stops_the_composition():
    x = extract({"description": "the script freezes most of the vision layers and trains the adapter"})
    assert "s.hang" not in x.symptoms


def test_a_cue_for_the_opposite_says_no_unless_something_says_yes():
    one = extract({"description": "this is one workstation with a pair of 4090s"})
    assert "s.multi_node_job" in one.absent and "s.multi_node_job" not in one.symptoms
    both = extract({"description": "fine on one workstation, broken across all nodes of the cluster"})
    assert "s.multi_node_job" in both.symptoms and "s.multi_node_job" not in both.absent


def test_problems_in_the_lexicon_file_are_reported_with_their_line(tmp_path: Path):
    bad = tmp_path / "lexicon.yaml"
    bad.write_text(
        "sentence_breaks: '[.\\n]'\n"
        "concepts:\n"
        "  loss:\n"
        "    en: ['loss(']\n"
        "compositions:\n"
        "  - id: lexicon.broken\n"
        "    title: broken\n"
        "    symptom: s.loss_nan\n"
        "    all: [loss, nowhere]\n"
        "    window: 10\n"
        "    reliability: 1.5\n"
        "    examples: {match: ['loss nan'], no_match: []}\n", encoding="utf-8")
    lexicon, problems = _load(bad)
    text = "\n".join(str(p) for p in problems)
    assert "does not compile" in text and "unknown concept 'nowhere'" in text
    assert "between 0 and 1" in text and "no_match" in text
    assert any(p.line == 6 for p in problems)
    assert lexicon is not None and not lexicon.compositions
    with pytest.raises(KnowledgeError):
        load_lexicon.__wrapped__(bad)


def test_the_composer_reads_the_words_at_the_top_and_skips_blobs():
    lexicon = load_lexicon()
    filler = "INFO step 10 done\n" * (lexicon.max_chars // 18 + 10)
    x = extract({"description": "our run keeps freezing near step 40k\n" + filler + "the gpu memory keeps growing"})
    assert "lexicon.hang_subject_verb" in x.symptoms["s.hang"].rules
    late = x.symptoms.get("s.mem_allocated_rising")
    assert late is None or not any(r.startswith("lexicon.") for r in late.rules)  # past max_chars
    blob = extract({"description": "x" * lexicon.max_line_chars + " the loss turns into NaN"})
    assert "s.loss_nan" not in blob.symptoms or "lexicon.loss_nan" not in blob.symptoms["s.loss_nan"].rules


def test_a_yes_in_one_span_of_a_line_wins_over_a_no_in_another():
    text = "we assumed the card never got above 90 C; the monitoring log shows it touched 99 C later on"
    x = extract({"description": text})
    assert "lexicon.gpu_hot_reading" in x.symptoms["s.thermal_throttle"].rules
    only_no = extract({"description": "the card never got above 90 C during the whole run"})
    assert "s.thermal_throttle" not in only_no.symptoms and "s.thermal_throttle" in only_no.absent


@pytest.mark.parametrize(("text", "symptom"), [
    ("the trainer refuses to start: a global batch of 12 is not divisible by the 8 devices", "s.batch_size_assert"),
    ("它说 batch_size 必须能被 GPU 数量整除", "s.batch_size_assert"),
    ("one card overheats and throttles after twenty minutes", "s.thermal_throttle"),
    ("两张卡温度都到了 96 度", "s.thermal_throttle"),
    ("the replicas seem to train completely independently, gradients are never averaged", "s.ranks_out_of_sync"),
    ("各卡参数不一致，看起来没有做梯度同步", "s.ranks_out_of_sync"),
])
def test_batch_divisibility_heat_and_unsynchronised_replicas_are_read(text: str, symptom: str):
    x = extract({"description": text})
    assert symptom in x.symptoms, sorted(x.symptoms)


@pytest.mark.parametrize("text", [
    "the sequence length must be divisible by the tensor-parallel size",
    "GPU temperature target is set to 92 C in the BIOS",
    "gradients are all-reduced across ranks and the replicas stay identical",
])
def test_near_misses_of_those_phrases_stay_silent(text: str):
    x = extract({"description": text})
    assert not {"s.batch_size_assert", "s.thermal_throttle", "s.ranks_out_of_sync"} & set(x.symptoms)


@pytest.mark.parametrize(("text", "symptom"), [
    ("nvidia-smi lists a second process of another user holding most of the VRAM", "s.oom_other_process_on_gpu"),
    ("查了一下，有个陌生的服务进程把显存几乎全占了", "s.oom_other_process_on_gpu"),
    ("now and then the log shows the OVERFLOW! skipping step message and training goes on",
     "s.fp16_overflow_periodic"),
    ("训练过程中偶尔打印跳过这一步的提示，loss 正常下降", "s.fp16_overflow_periodic"),
    ("GPU utilisation keeps dipping to 0% between batches", "s.low_gpu_util"),
    ("显卡利用率时常掉到 0，过几秒又回来", "s.low_gpu_util"),
    ("any tips to speed up the data loading? the images are large", "s.slow_data_loading"),
    ("we see a gradual rise of GPU memory usage every epoch", "s.mem_allocated_rising"),
    ("the job never makes it past three epochs before it runs out of GPU memory", "s.oom_after_many_steps"),
    ("the train loss is logged as 0 for every step", "s.loss_zero"),
    ("on eight GPUs the job freezes towards the end of each epoch", "s.uneven_batches"),
])
def test_the_batch5_families_are_read(text: str, symptom: str):
    x = extract({"description": text})
    assert symptom in x.symptoms, sorted(x.symptoms)


@pytest.mark.parametrize(("text", "symptom"), [
    ("our own training process holds 30 GB of GPU memory, nothing else runs", "s.oom_other_process_on_gpu"),
    ("the skipped-step overflow message appears on every single step", "s.fp16_overflow_early_only"),
    ("GPU memory drops to 0 once the job exits", "s.low_gpu_util"),
    ("a steady increase in throughput after the warm-up", "s.mem_allocated_rising"),
    ("at the end of each epoch the eval loss goes down", "s.uneven_batches"),
])
def test_near_misses_of_the_batch5_families_stay_silent(text: str, symptom: str):
    x = extract({"description": text})
    assert symptom not in x.symptoms, sorted(x.symptoms)


def test_a_frequency_word_with_a_negation_character_is_no_negation():
    x = extract({"description": "训练时不时会卡住"})
    assert "s.hang" in x.symptoms and "s.hang" not in x.absent


def _outcomes(text: str) -> dict[str, bool]:
    return {f"{o.experiment}={o.outcome}": o.happened for o in extract({"description": text}).outcomes}


@pytest.mark.parametrize(("text", "outcome"), [
    ("we pulled the flaky node out of the hostfile and it has been running fine since", "x.swap_suspect_gpu=issue_follows_gpu"),
    ("把坏的那张卡换掉之后就没有再出现 nan 了", "x.swap_suspect_gpu=issue_follows_gpu"),
    ("swapped the card already, the same error comes back", "x.swap_suspect_gpu=issue_stays"),
    ("dropping the empty conversations from the dataset fixed it", "x.scan_failing_rank_data=bad_sample_found"),
])
def test_an_experiment_told_in_words_composes_into_its_outcome(text: str, outcome: str):
    assert _outcomes(text).get(outcome) is True, _outcomes(text)


def test_a_denied_outcome_composition_says_the_outcome_did_not_happen():
    said = _outcomes("replacing the suspect GPU didn't fix it")
    assert said == {"x.swap_suspect_gpu=issue_follows_gpu": False}


def test_a_motive_word_denies_a_symptom_but_not_a_composed_outcome():
    said = _outcomes("to avoid the NaN we swapped out the node, and that worked")
    assert said.get("x.swap_suspect_gpu=issue_follows_gpu") is True


def test_the_classic_one_rank_nan_with_the_machine_swapped_ranks_the_gpu_first():
    from dsdoctor import diagnose
    only = "只有 rank 37 出现 loss=nan 和 grad_norm=inf，其他 rank 都正常"
    before = diagnose({"description": only}, history=False).data["causes"]
    after = diagnose({"description": only + "，换掉那台机器就好了"}, history=False).data["causes"]
    assert {c["id"] for c in before[:2]} == {"hardware.silent_data_corruption", "data.corrupt_sample"}
    assert after[0]["id"] == "hardware.silent_data_corruption"
    prob = {c["id"]: c["probability"] for c in after}
    assert prob["hardware.silent_data_corruption"] > {c["id"]: c["probability"] for c in before}[
        "hardware.silent_data_corruption"]


def test_a_composition_names_a_symptom_or_an_observation(tmp_path: Path):
    bad = tmp_path / "lexicon.yaml"
    entry = ("  - id: lexicon.{name}\n    title: t\n{target}    all: [loss]\n    window: 10\n    reliability: 0.7\n"
             "    examples: {{match: ['loss'], no_match: ['x']}}\n")
    bad.write_text(
        "sentence_breaks: '[.\\n]'\nconcepts:\n  loss:\n    en: ['loss']\ncompositions:\n"
        + entry.format(name="both", target="    symptom: s.loss_nan\n    observation: x.a=b\n")
        + entry.format(name="neither", target="")
        + entry.format(name="shape", target="    observation: x.a\n"), encoding="utf-8")
    _, problems = _load(bad)
    text = "\n".join(str(p) for p in problems)
    assert text.count("one 'symptom' (s.ID) or one 'observation'") == 2
    assert "must look like 'x.nccl_p2p_disable=issue_gone'" in text
