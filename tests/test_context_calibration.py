"""Context and absence calibration: what a source does not cover stays unknown (issue 13, C.5)."""

from __future__ import annotations

from dsdoctor.rules.env_normalize import normalize
from dsdoctor.rules.extract import extract
from dsdoctor.rules.settings import load_settings


def test_a_command_line_is_not_logs_supplied() -> None:
    launch = "torchrun --nproc_per_node 4 train.py --bf16 --deepspeed ds.json\nNCCL_DEBUG=INFO set"
    x = extract({"logs": [{"source": "stdout", "text": launch}]})
    assert "logs" not in x.supplied_sources


def test_an_error_line_or_traceback_makes_logs_supplied() -> None:
    text = ("Traceback (most recent call last):\n  File \"run.py\", line 3, in <module>\n    main()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered")
    x = extract({"logs": [{"source": "stdout", "text": text}]})
    assert "logs" in x.supplied_sources


def test_a_long_run_log_is_logs_supplied() -> None:
    lines = "\n".join(f"{{'loss': {2.0 - i / 100:.3f}, 'learning_rate': 1e-05, 'epoch': {i / 100:.2f}}}" for i in range(60))
    x = extract({"logs": [{"source": "stdout", "text": lines}]})
    assert "logs" in x.supplied_sources


def test_partial_config_leaves_precision_and_offload_unknown() -> None:
    x = extract({"config": {"zero_optimization": {"stage": 2}}})
    assert x.context.precision is None
    assert "s.fp16_enabled" not in x.absent and "s.bf16_enabled" not in x.absent
    assert x.context.zero_stage == 2 and x.context.offload is False
    only_precision = extract({"config": {"bf16": {"enabled": True}}})
    assert only_precision.context.precision == "bf16"
    assert only_precision.context.offload is None and only_precision.context.zero_stage is None


def test_whole_config_keeps_deepspeed_defaults() -> None:
    x = extract({"config": {"train_batch_size": 64, "optimizer": {"type": "AdamW"}}})
    assert x.context.precision == "fp32" and x.context.zero_stage == 0 and x.context.offload is False


def test_trainer_filled_config_leaves_precision_unknown() -> None:
    x = extract({"config": {"train_batch_size": "auto", "zero_optimization": {"stage": 3}}})
    assert x.context.precision is None


def test_free_form_environment_keys_are_normalised() -> None:
    settings = load_settings()
    env = normalize({"gpus": 8, "nodes": "2x DGX A100", "nccl": "2.19.3", "pytorch": "2.2.0"}, settings)
    assert env["nodes"] == 2 and env["world_size"] == 16 and "A100" in env["gpu"]
    assert env["versions"] == {"nccl": "2.19.3", "torch": "2.2.0"}
    assert normalize({"gpu_count": "4", "num_nodes": 1, "gpu": "H100 80GB"}, settings)["world_size"] == 4
    assert normalize({"world_size": 2, "gpus": 8}, settings)["world_size"] == 2  # the format's own key wins
    x = extract({"environment": {"num_nodes": "3", "gpu_model": "Tesla V100-SXM2-32GB"}})
    assert x.context.nodes == 3 and "s.multi_node_job" in x.symptoms and "s.pre_ampere_gpu" in x.symptoms


def test_no_world_size_from_a_failed_assertion() -> None:
    line = ("AssertionError: Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 48 != 3 * 2 * 4")
    x = extract({"logs": [{"source": "stdout", "text": line}]})
    assert x.context.world_size is None


def test_nccl_variables_of_the_failing_command_are_context() -> None:
    launch = "export NCCL_IB_DISABLE=1\nNCCL_P2P_DISABLE=1 NCCL_SOCKET_IFNAME=docker0 torchrun --nnodes 2 train.py"
    x = extract({"logs": [{"source": "launcher", "text": launch}]})
    assert x.context.launch_env == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "docker0"}
    assert "s.ib_not_used" in x.symptoms and "s.suspicious_interface" in x.symptoms
    assert "s.intra_node_p2p_used" in x.absent


def test_a_variable_in_the_description_is_not_the_failing_run() -> None:
    x = extract({"description": "It hangs; once I set NCCL_P2P_DISABLE=1 the same job finishes."})
    assert "s.intra_node_p2p_used" not in x.absent and not x.context.launch_env


def test_an_accelerate_config_is_read_as_the_ds_config_it_stands_for() -> None:
    accel = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "mixed_precision": "fp16",
             "num_machines": 2, "num_processes": 16,
             "deepspeed_config": {"zero_stage": 2, "offload_optimizer_device": "cpu", "offload_param_device": "none",
                                  "gradient_accumulation_steps": 4}}
    x = extract({"config": accel})
    assert (x.context.precision, x.context.zero_stage, x.context.offload) == ("fp16", 2, True)
    assert x.context.world_size == 16 and x.context.nodes == 2
    assert not [f for f in x.config_findings if f.id.startswith("config.unknown_key")]
    fsdp = extract({"config": {"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 8}})
    assert fsdp.context.precision == "bf16" and fsdp.context.zero_stage is None


def test_a_benchmark_printout_is_not_logs_supplied() -> None:
    rows = "\n".join(f"   {2 ** i:>10}   {2 ** i // 4:>8}   float     sum      -1   {10 + i:6.1f}   {0.5 * i:6.2f}"
                     f"   {0.9 * i:6.2f}      0" for i in range(50))
    bench = "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20\n" + rows
    x = extract({"logs": [{"source": "stdout", "text": bench + "\n# Avg bus bandwidth    : 61.2"}]})
    assert "logs" not in x.supplied_sources


def test_an_init_marker_on_the_error_line_gives_no_phase() -> None:
    error = ("node3:881:990 [2] NCCL INFO comm 0x7f01 rank 2 nranks 16 - Init COMPLETE ... "
             "RuntimeError: NCCL error: unhandled system error")
    assert extract({"logs": [{"source": "stdout", "text": error}]}).phase == "unknown"
    init_then_error = "node3:881:990 [2] NCCL INFO Bootstrap : Using ib0:10.1.0.3<0>\n" + error
    assert extract({"logs": [{"source": "stdout", "text": init_then_error}]}).phase == "launch"
