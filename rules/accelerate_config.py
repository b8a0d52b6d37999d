"""An Accelerate config (``accelerate config`` YAML) supplied as ``config``, read as what it says.

Accelerate writes DeepSpeed settings flat under ``deepspeed_config`` (``zero_stage``,
``offload_optimizer_device``, ``offload_param_device``, ``zero3_save_16bit_model``) and precision
as ``mixed_precision``; checking that as a ds_config reports every key as unknown and reads it as
fp32 without ZeRO. This module turns it into the ds_config it stands for (batch sizes ``"auto"``:
Accelerate fills them in) plus the job facts it states (``num_processes``, ``num_machines``).
A ``deepspeed_config_file`` means the real ds_config is elsewhere: only precision is kept.
"""

from __future__ import annotations

from typing import Any

#: keys only an Accelerate config has at its top level
_MARKERS = ("distributed_type", "compute_environment", "mixed_precision", "num_processes", "deepspeed_config")
_PRECISION = {"bf16": {"bf16": {"enabled": True}}, "fp16": {"fp16": {"enabled": True}},
              "no": {"bf16": {"enabled": False}, "fp16": {"enabled": False}}}


def is_accelerate(config: Any) -> bool:
    """Whether ``config`` is an Accelerate config rather than a ds_config."""
    if not isinstance(config, dict) or "zero_optimization" in config:
        return False
    nested = config.get("deepspeed_config")
    return "distributed_type" in config or "compute_environment" in config or (
        isinstance(nested, dict) and any(k in nested for k in ("zero_stage", "offload_optimizer_device")))


def translate(config: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the ds_config it stands for, or None when it says nothing DeepSpeed reads; environment facts)."""
    env: dict[str, Any] = {}
    for key, target in (("num_processes", "world_size"), ("num_machines", "nodes")):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            env[target] = value
    precision = _PRECISION.get(str(config.get("mixed_precision", "")).lower(), {})
    ds = config.get("deepspeed_config") if isinstance(config.get("deepspeed_config"), dict) else {}
    kind = str(config.get("distributed_type", "DEEPSPEED" if ds else "")).upper()
    if kind != "DEEPSPEED" or ds.get("deepspeed_config_file"):
        return (dict(precision) or None), env
    out: dict[str, Any] = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", **precision}
    for key in ("gradient_accumulation_steps", "gradient_clipping"):
        if key in ds:
            out[key] = ds[key]
    zero: dict[str, Any] = {}
    if isinstance(ds.get("zero_stage"), int):
        zero["stage"] = ds["zero_stage"]
    for key, section in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_param")):
        device = ds.get(key)
        if isinstance(device, str):
            zero[section] = {"device": device.lower()}
    if "zero3_save_16bit_model" in ds:
        zero["stage3_gather_16bit_weights_on_model_save"] = bool(ds["zero3_save_16bit_model"])
    if zero:
        out["zero_optimization"] = zero
    return out, env
