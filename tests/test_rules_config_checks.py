"""ds_config checks: batch arithmetic like DeepSpeed, precision, unknown keys with "did you mean", ZeRO."""

from __future__ import annotations

import pytest

from tests.rulesfx import run


def findings(config: dict, world: int | None = None) -> dict[str, list]:
    env = {"world_size": world} if world else None
    x = run(config=config, environment=env)
    out: dict[str, list] = {}
    for f in x.config_findings:
        out.setdefault(f.id, []).append(f)
    return out


@pytest.mark.parametrize(("config", "world", "bad"), [
    ({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, 8, False),
    ({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, 16, True),
    ({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, None, True),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}, 16, False),  # accumulation 1 is derived
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}, 32, True),   # derived accumulation is 0
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}, 4, True),    # 30 // 4 // 4 = 1 -> 16 != 30
    ({"train_batch_size": 32}, 8, False),
    ({"train_batch_size": 30}, 8, True),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}, 64, False),
    ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}, 8, False),
    ({"gradient_accumulation_steps": 4}, 8, False),  # neither batch size: an excerpt or set by the framework
    ({"train_batch_size": "sixteen"}, 8, True),
])
def test_batch_arithmetic(config: dict, world: int | None, bad: bool) -> None:
    got = findings(config, world)
    flagged = any(f.symptom == "s.batch_arithmetic_mismatch" for fs in got.values() for f in fs)
    assert flagged is bad, got
    if bad:
        x = run(config=config, environment={"world_size": world} if world else None)
        assert "s.batch_arithmetic_mismatch" in x.symptoms


def test_missing_batch_sizes_are_only_mentioned() -> None:
    x = run(config={"gradient_accumulation_steps": 4})
    assert [(f.id, f.severity, f.symptom) for f in x.config_findings] == [("config.batch_missing", "info", None)]


def test_batch_message_explains_the_product_in_both_languages() -> None:
    f = findings({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2},
                 16)["config.batch_arithmetic"][0]
    assert "128" in f.message["en"] and "16" in f.message["en"] and "8 GPUs" in f.message["en"]
    assert "128" in f.message["zh"] and f.severity == "error" and f.key_path == "train_batch_size"


def test_fp16_and_bf16_both_enabled() -> None:
    x = run(config={"fp16": {"enabled": True}, "bf16": {"enabled": True}})
    assert "s.fp16_and_bf16_enabled" in x.symptoms
    assert [f.id for f in x.config_findings] == ["config.fp16_and_bf16"]
    assert x.context.precision is None


def test_unknown_keys_did_you_mean_and_misplaced() -> None:
    got = findings({"zero_optimization": {"stage": 3, "offload_optimzer": {"device": "cpu"}},
                    "gradient_clip": 1.0, "offload_param": {"device": "cpu"},
                    "bf16": {"enabled": True, "loss_scale_window": 100}})
    messages = {f.key_path: f for f in got["config.unknown_key"]}
    assert "Did you mean 'zero_optimization.offload_optimizer'?" in messages["zero_optimization.offload_optimzer"].message["en"]
    assert messages["zero_optimization.offload_optimzer"].severity == "error"  # pydantic-validated section
    assert "Did you mean 'gradient_clipping'?" in messages["gradient_clip"].message["en"]
    assert messages["gradient_clip"].severity == "warning"  # silently ignored at the top level
    assert "belongs under 'zero_optimization'" in messages["offload_param"].message["en"]
    assert "belongs under 'fp16'" in messages["bf16.loss_scale_window"].message["en"]
    assert "是否应为" in messages["gradient_clip"].message["zh"]


def test_free_form_sections_and_known_keys_are_not_flagged() -> None:
    got = findings({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "my_custom": 3}},
                    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7, "offload_optimizer": {"device": "none"}},
                    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16}, "steps_per_print": 10})
    assert "config.unknown_key" not in got


def test_deprecated_keys() -> None:
    got = findings({"zero_optimization": {"stage": 2, "cpu_offload": True}})
    assert got["config.deprecated_key"][0].message["en"].endswith("use 'zero_optimization.offload_optimizer' instead.")


def test_zero_stage_with_offload_and_pipeline() -> None:
    got = findings({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}, "pipeline": {"stages": 4}})
    assert "config.offload_param_needs_stage3" in got and "config.pipeline_zero_stage" in got
    assert "config.offload_needs_zero" in findings({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})


def test_loss_scale_settings() -> None:
    got = findings({"fp16": {"enabled": True, "loss_scale": 65536, "loss_scale_window": 10}})
    assert {"config.static_loss_scale_large", "config.loss_scale_window_small"} <= set(got)
    got = findings({"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 40, "min_loss_scale": 2 ** 41}})
    assert {"config.initial_scale_power_large", "config.min_loss_scale_above_initial"} <= set(got)
    assert not findings({"fp16": {"enabled": False, "loss_scale": 65536}})


def test_bucket_sizes() -> None:
    got = findings({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e9, "allgather_bucket_size": 1e5}})
    assert {f.key_path for f in got["config.bucket_large"]} == {"zero_optimization.reduce_bucket_size"}
    assert {f.key_path for f in got["config.bucket_small"]} == {"zero_optimization.allgather_bucket_size"}


def test_context_facts_and_job_context() -> None:
    x = run(config={"fp16": {"enabled": True}, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}},
            environment={"world_size": 16, "nodes": 2, "gpu": "A100-SXM4-80GB", "versions": {"torch": "2.3.0"}})
    assert {"s.fp16_enabled", "s.offload_enabled", "s.multi_node_job"} <= set(x.symptoms)
    assert "s.bf16_enabled" in x.absent
    c = x.context
    assert (c.precision, c.zero_stage, c.offload, c.nodes, c.world_size, c.gpu) == ("fp16", 3, True, 2, 16, "A100-SXM4-80GB")
    assert c.versions == {"torch": "2.3.0"}
    plain = run(config={"train_batch_size": 8})
    assert plain.context.precision == "fp32" and {"s.fp16_enabled", "s.bf16_enabled", "s.offload_enabled"} <= plain.absent
    auto = run(config={"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})
    assert auto.context.precision is None and "s.fp16_enabled" not in auto.absent


def test_world_size_from_logs_when_not_given() -> None:
    x = run("[2024-05-01 10:00:00,123] [INFO] [launch.py:164:main] dist_world_size=16\n",
            config={"train_batch_size": 128, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2})
    assert any(f.id == "config.batch_arithmetic" for f in x.config_findings)


def test_another_frameworks_config_is_not_checked_key_by_key() -> None:
    got = findings({"model": {"arch": "resnet18"}, "device": {"gpu_ids": [0, 1]}, "runner": {"max_epochs": 12}})
    assert "config.unknown_key" not in got
    # one DeepSpeed-like key (a near miss or a misplaced section) keeps the check on
    assert "config.unknown_key" in findings({"zero_optimisation": {"stage": 2}})
    assert "config.unknown_key" in findings({"offload_param": {"device": "cpu"}})
    # a training script's settings, or a summary of them, are not a ds_config either
    assert "config.unknown_key" not in findings({"batch_size": 8, "workers": 4, "precision": "amp"})
    assert "config.unknown_key" not in findings({"zero_stage": 3, "lora": True, "lr": 2e-5})
    assert "config.unknown_key" in findings({"train_batch_size": 8, "zero_stage": 3})


def test_a_config_mostly_of_other_keys_is_not_a_ds_config() -> None:
    # a script's arguments that share one name with DeepSpeed (fp16, optimizer) but not its shape
    hf_args = {"model": "t5-base", "fp16": True, "script": "run_summarization.py"}
    assert "config.unknown_key" not in findings(hf_args)
    x = run(config=hf_args)
    assert "s.fp16_enabled" in x.symptoms and "s.config_unknown_key" not in x.symptoms
    detector = {"optimizer": "dict(type='Adam', lr=1e-3)", "lr_config": "dict(policy='step')", "total_epochs": 24}
    y = run(config=detector)
    assert "s.config_unknown_key" not in y.symptoms
    # says nothing about what is off: precision and offload stay unknown, not fp32 / no offload
    assert y.context.precision is None and not {"s.fp16_enabled", "s.offload_enabled"} & y.absent
    # a ds_config with one stray key is still checked key by key
    assert "config.unknown_key" in findings({"train_batch_size": 16, "fp16": {"enabled": True}, "my_note": "x"})


def test_an_ignored_key_is_softer_evidence_than_a_refused_one() -> None:
    # top level is not validated: DeepSpeed ignores the key, the run may not depend on it
    ignored = run(config={"train_batch_size": 8, "gradient_accumulation_steps": 1, "my_note": "x"})
    refused = run(config={"train_batch_size": 8, "zero_optimization": {"stage": 2, "stagee": 3}})
    assert ignored.symptoms["s.config_unknown_key"].reliability == pytest.approx(0.6)
    assert refused.symptoms["s.config_unknown_key"].reliability == 1.0


@pytest.mark.parametrize(("versions", "refused"), [
    ({"deepspeed": "0.14.2"}, False),          # fp16 / bf16 read single keys before v0.17.1, the rest ignored
    ({"deepspeed": "v0.16.9+cu121"}, False),
    ({"deepspeed": "0.17.1"}, True),           # DeepSpeedBF16Config forbids extra keys from v0.17.1 on
    ({"deepspeed": "0.18.0rc1"}, True),
    (None, True),                              # release unknown: validated, as in current releases
    ({"deepspeed": "master"}, True),
])
def test_precision_sections_are_validated_only_from_the_release_that_validates_them(versions, refused) -> None:
    env = {"versions": versions} if versions else None
    x = run(config={"train_batch_size": 8, "bf16": {"enabled": True, "loss_scale_window": 1000}}, environment=env)
    (finding,) = [f for f in x.config_findings if f.id == "config.unknown_key"]
    assert finding.severity == ("error" if refused else "warning")
    assert x.symptoms["s.config_unknown_key"].reliability == pytest.approx(1.0 if refused else 0.6)


def test_a_top_level_deepspeed_version_counts_like_versions_deepspeed() -> None:
    x = run(config={"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale_windw": 500}},
            environment={"deepspeed": "0.12.6"})
    assert x.symptoms["s.config_unknown_key"].reliability == pytest.approx(0.6)
