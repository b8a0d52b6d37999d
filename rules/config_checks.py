"""Checks of the ds_config the job used (evidence ``config``), with the world size when known.

One small function per concern, registered in :data:`CHECKS`. Each returns
:class:`~rules.model.ConfigFinding` objects with a bilingual message (templates and thresholds in
rules/data/config_checks.yaml, DeepSpeed's keys in rules/data/ds_config_keys.yaml); a finding
that names a symptom also asserts it. The config also yields context facts: ``s.fp16_enabled``,
``s.bf16_enabled``, ``s.offload_enabled`` and the :class:`~rules.model.JobContext` fields.

Batch arithmetic follows DeepSpeed (runtime/config.py ``_set_batch_related_parameters``): a
missing value is derived from the other two by integer division, then
``train_batch_size == micro * gradient_accumulation_steps * world_size`` is asserted.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dsdoctor.rules.collect import Collector
from dsdoctor.rules.model import ConfigFinding, Extraction
from dsdoctor.rules.settings import Settings
from dsdoctor.rules.units import release_key


@dataclass
class CheckContext:
    settings: Settings
    world_size: int | None
    findings: list[ConfigFinding]
    ds_config: bool = True  # shaped like a ds_config (deepspeed_shaped): key checks and absences apply
    deepspeed_version: tuple[int, ...] | None = None  # the release the job ran, when the evidence says

    @property
    def thresholds(self) -> dict[str, Any]:
        return self.settings.config_checks["thresholds"]

    def add(self, finding_id: str, severity: str, message: str, key_path: str, symptom: str | None = None,
            **values: Any) -> None:
        template = self.settings.config_checks["messages"][message]
        text = {}
        for lang in ("en", "zh"):
            try:
                text[lang] = template[lang].format(**values)
            except (KeyError, IndexError, ValueError):
                text[lang] = template[lang]
        self.findings.append(ConfigFinding(finding_id, severity, text, key_path, symptom))


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _is_true(value: Any) -> bool | None:
    """True/False for booleans (and their JSON-ish text), None for "auto" or anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


# ---------------------------------------------------------------------- checks


def check_batch(config: dict[str, Any], ctx: CheckContext) -> None:
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    raw = {k: config.get(k) for k in keys}
    if any(isinstance(v, str) and v.lower() == "auto" for v in raw.values()):
        return  # the Hugging Face integration fills these in
    values: dict[str, int | None] = {}
    for key, value in raw.items():
        if value is None:
            values[key] = None
            continue
        number = _positive_int(value)
        if number is None:
            ctx.add("config.batch_value_invalid", "error", "batch_value_invalid", key, "s.batch_arithmetic_mismatch",
                    key=key, value=value)
            return
        values[key] = number
    train, micro, accum = (values[k] for k in keys)
    world = ctx.world_size
    if train is None and micro is None:
        if accum is not None:
            # often a config excerpt, or batch sizes passed by a framework (HF Trainer): say so, assert nothing
            ctx.add("config.batch_missing", "info", "batch_missing", "train_batch_size")
        return
    if world is None:
        if train and micro and accum and train % (micro * accum):
            ctx.add("config.batch_arithmetic", "error", "batch_not_integer", "train_batch_size",
                    "s.batch_arithmetic_mismatch", train=train, micro=micro, accum=accum)
        return
    # derive the missing values the way DeepSpeed does
    if train is not None and micro is not None and accum is None:
        accum = train // micro // world
        if accum == 0:
            ctx.add("config.batch_arithmetic", "error", "batch_derived_bad", "gradient_accumulation_steps",
                    "s.batch_arithmetic_mismatch", key="gradient_accumulation_steps", value=0, train=train, world=world,
                    why="it has to be greater than 0 (the job stops at start-up).")
            return
    elif train is not None and accum is not None and micro is None:
        micro = train // world // accum
        if micro == 0:
            ctx.add("config.batch_arithmetic", "error", "batch_derived_bad", "train_micro_batch_size_per_gpu",
                    "s.batch_arithmetic_mismatch", key="train_micro_batch_size_per_gpu", value=0, train=train,
                    world=world, why="it has to be greater than 0 (the job stops at start-up).")
            return
    elif train is not None and micro is None and accum is None:
        accum, micro = 1, train // world
        if micro == 0:
            ctx.add("config.batch_arithmetic", "error", "batch_derived_bad", "train_micro_batch_size_per_gpu",
                    "s.batch_arithmetic_mismatch", key="train_micro_batch_size_per_gpu", value=0, train=train,
                    world=world, why="it has to be greater than 0 (the job stops at start-up).")
            return
    elif train is None:
        return  # train_batch_size is derived from the others: always consistent
    assert train is not None and micro is not None and accum is not None
    product = micro * accum * world
    if train == product:
        return
    per_replica = micro * accum
    if train % per_replica == 0:
        dp = train // per_replica
        if 0 < dp < world and world % dp == 0:
            ctx.add("config.batch_arithmetic", "error", "batch_mismatch_model_parallel", "train_batch_size",
                    "s.batch_arithmetic_mismatch", train=train, micro=micro, accum=accum, world=world, dp=dp,
                    mp=world // dp, product=product)
            return
    ctx.add("config.batch_arithmetic", "error", "batch_mismatch", "train_batch_size", "s.batch_arithmetic_mismatch",
            train=train, micro=micro, accum=accum, world=world, product=product)


def check_precision(config: dict[str, Any], ctx: CheckContext) -> None:
    fp16 = _is_true(_section(config, "fp16").get("enabled"))
    bf16_section = _section(config, "bf16") or _section(config, "bfloat16")
    bf16 = _is_true(bf16_section.get("enabled"))
    if fp16 and bf16:
        ctx.add("config.fp16_and_bf16", "error", "fp16_and_bf16", "fp16.enabled", "s.fp16_and_bf16_enabled")


def _suggest(key: str, path: str, keys: dict[str, list[str]], ctx: CheckContext) -> tuple[str, str | None]:
    """A hint for an unknown key: the section it belongs to, or a close spelling."""
    elsewhere = [s for s, names in keys.items() if key in names and s != path]
    if elsewhere:
        section = sorted(elsewhere, key=lambda s: (s.count("."), s))[0]
        suggestion = f"{section}.{key}" if section else key
        return "hint_misplaced", suggestion
    close = difflib.get_close_matches(key, keys.get(path, []), n=1, cutoff=ctx.thresholds["did_you_mean_cutoff"])
    if close:
        return "hint_did_you_mean", f"{path}.{close[0]}" if path else close[0]
    return "", None


def deepspeed_shaped(config: dict[str, Any], settings: Settings) -> bool:
    """Is ``config`` a ds_config (whole or a pasted part), not another framework's settings? At least
    ``ds_config_share`` of its top-level keys must be DeepSpeed's: a top-level key, one this close to it
    (``ds_config_likeness_cutoff``: a typo), or a misplaced section; a DeepSpeed section name whose value
    is not a mapping (``"fp16": true``, ``"optimizer": "dict(type='SGD')"``) is a training script's or
    another framework's key of the same name."""
    if not config:
        return False
    known = settings.ds_config_keys
    sections: dict[str, list[str]] = {k: list(v or []) for k, v in known["sections"].items()}
    open_sections = set(known["open_sections"])
    thresholds = settings.config_checks["thresholds"]
    top = sections.get("", [])
    # stricter than a suggestion's: a training script's own keys (batch_size, precision) resemble
    # train_batch_size or prescale_gradients loosely, and that says nothing about being a ds_config
    cutoff = thresholds["ds_config_likeness_cutoff"]
    nested = {path.rsplit(".", 1)[-1] for path in [*sections, *open_sections] if "." in path}

    def deepspeed_like(key: str, value: Any) -> bool:
        if key in sections or key in open_sections:  # a section: DeepSpeed's only when it is one
            return value is None or isinstance(value, dict)
        return key in top or key in nested or bool(difflib.get_close_matches(key, top, n=1, cutoff=cutoff))

    like = sum(deepspeed_like(str(k), v) for k, v in config.items())
    return like > 0 and like >= thresholds["ds_config_share"] * len(config)


def check_keys(config: dict[str, Any], ctx: CheckContext) -> None:
    known = ctx.settings.ds_config_keys
    sections: dict[str, list[str]] = {k: list(v or []) for k, v in known["sections"].items()}
    open_sections = set(known["open_sections"])
    validated = set(known["validated_sections"])
    if ctx.deepspeed_version is not None:  # an older release ignores what a newer one validates
        validated -= {path for path, since in known["validated_since"].items()
                      if ctx.deepspeed_version < (release_key(str(since)) or ())}
    deprecated: dict[str, str] = known["deprecated"]

    def walk(node: dict[str, Any], path: str) -> None:
        allowed = sections.get(path)
        if allowed is None or path in open_sections:
            return
        for key, value in node.items():
            key = str(key)
            full = f"{path}.{key}" if path else key
            if full in deprecated:
                ctx.add("config.deprecated_key", "warning", "deprecated_key", full, "s.deprecated_key_warning",
                        path=full, replacement=deprecated[full])
            elif key not in allowed:
                hint_kind, suggestion = _suggest(key, path, sections, ctx)
                hints = ctx.settings.config_checks["messages"]
                hint = {"en": "", "zh": ""}
                if suggestion:
                    section = suggestion.rsplit(".", 1)[0] if "." in suggestion else "(top level)"
                    for lang in ("en", "zh"):
                        hint[lang] = hints[hint_kind][lang].format(suggestion=suggestion, section=section)
                message = "unknown_key_validated" if path in validated else "unknown_key"
                severity = "error" if path in validated else "warning"
                template = hints[message]
                ctx.findings.append(ConfigFinding(
                    "config.unknown_key", severity,
                    {lang: template[lang].format(path=full, hint=hint[lang]) for lang in ("en", "zh")},
                    full, "s.config_unknown_key"))
                continue
            if full in sections or full in open_sections:
                if isinstance(value, dict):
                    walk(value, full)
                elif value is not None and full in sections and not isinstance(value, (bool, str)):
                    ctx.add("config.not_a_mapping", "error", "not_a_mapping", full, "s.config_unknown_key",
                            path=full, value=value)

    if not ctx.ds_config:
        return  # another framework's config (a detector's `device: {gpu_ids: ...}`), not a ds_config
    walk(config, "")


def check_zero(config: dict[str, Any], ctx: CheckContext) -> None:
    zero = _section(config, "zero_optimization")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int):
        return
    offload_param = zero.get("offload_param")
    if isinstance(offload_param, dict) and offload_param.get("device") in ("cpu", "nvme") and stage != 3:
        ctx.add("config.offload_param_needs_stage3", "warning", "offload_param_needs_stage3",
                "zero_optimization.offload_param", "s.config_unknown_key", stage=stage)
    offload_opt = zero.get("offload_optimizer")
    if isinstance(offload_opt, dict) and offload_opt.get("device") in ("cpu", "nvme") and stage == 0:
        ctx.add("config.offload_needs_zero", "warning", "offload_needs_zero",
                "zero_optimization.offload_optimizer", "s.config_unknown_key", stage=stage)
    pipeline = config.get("pipeline")
    if isinstance(pipeline, dict) and stage >= 2:
        stages = pipeline.get("stages")
        if stages not in (None, 1, "1"):
            ctx.add("config.pipeline_zero_stage", "error", "pipeline_zero_stage", "zero_optimization.stage",
                    "s.zero_pipeline_incompatible", stage=stage)


def check_loss_scale(config: dict[str, Any], ctx: CheckContext) -> None:
    fp16 = _section(config, "fp16")
    if _is_true(fp16.get("enabled")) is not True:
        return
    t = ctx.thresholds
    static = _number(fp16.get("loss_scale"))
    if static is not None and static > 0:
        ctx.add("config.static_loss_scale", "info", "static_loss_scale", "fp16.loss_scale", "s.static_loss_scale",
                value=fp16.get("loss_scale"))
    if static is not None and static >= t["static_loss_scale_large"]:
        ctx.add("config.static_loss_scale_large", "warning", "static_loss_scale_large", "fp16.loss_scale",
                value=fp16.get("loss_scale"))
    power = _number(fp16.get("initial_scale_power"))
    if power is not None and power > t["initial_scale_power_max"]:
        ctx.add("config.initial_scale_power_large", "warning", "initial_scale_power_large", "fp16.initial_scale_power",
                value=int(power), excess=int(power - 16))
    minimum = _number(fp16.get("min_loss_scale"))
    if minimum is not None and (static is None or static == 0):
        initial = 2 ** (16 if power is None else power)
        if minimum >= initial:
            ctx.add("config.min_loss_scale_above_initial", "warning", "min_loss_scale_above_initial",
                    "fp16.min_loss_scale", min=fp16.get("min_loss_scale"), power=16 if power is None else int(power),
                    initial=initial)
    window = _number(fp16.get("loss_scale_window"))
    if window is not None and 0 < window < t["loss_scale_window_min"]:
        ctx.add("config.loss_scale_window_small", "warning", "loss_scale_window_small", "fp16.loss_scale_window",
                value=int(window))


def check_buckets(config: dict[str, Any], ctx: CheckContext) -> None:
    zero = _section(config, "zero_optimization")
    t = ctx.thresholds
    overlap = _is_true(zero.get("overlap_comm"))
    for key in ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "prefetch_bucket_size"):
        value = _number(zero.get(key))
        if value is None or value <= 0:
            continue
        if value >= t["bucket_large_elements"]:
            ctx.add("config.bucket_large", "warning", "bucket_large", f"zero_optimization.{key}", key=key, value=value)
        elif value < t["bucket_small_elements"]:
            ctx.add("config.bucket_small", "warning", "bucket_small", f"zero_optimization.{key}", key=key, value=value)
        elif overlap and key != "stage3_prefetch_bucket_size" and value >= t["overlap_comm_bucket_elements"]:
            ctx.add("config.overlap_comm_memory", "info", "overlap_comm_memory", f"zero_optimization.{key}",
                    key=key, value=value)


#: every config check, by name (run in this order)
CHECKS: dict[str, Callable[[dict[str, Any], CheckContext], None]] = {
    "batch": check_batch,
    "precision": check_precision,
    "keys": check_keys,
    "zero": check_zero,
    "loss_scale": check_loss_scale,
    "buckets": check_buckets,
}


# ---------------------------------------------------------------------- context facts


#: top-level keys that make a config a whole ds_config (not a pasted section): DeepSpeed's defaults apply
_WHOLE_CONFIG_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer")
_PRECISION_SECTIONS = ("fp16", "bf16", "bfloat16", "amp")


def _context(config: dict[str, Any], collector: Collector, extraction: Extraction, shaped: bool = True) -> None:
    """Precision, ZeRO stage and offload as far as the config says them. A pasted part (only
    ``zero_optimization``) says nothing of precision: that stays unknown, not fp32; without a
    ``zero_optimization`` section offload and stage are unknown unless the config is a whole one.
    Another framework's settings (not ``shaped`` like a ds_config) say what they turn on
    (``"fp16": true``), never what is off."""
    if not shaped:
        for key, sid in (("fp16", "s.fp16_enabled"), ("bf16", "s.bf16_enabled")):
            if _is_true(config.get(key)) is True:
                collector.observe(sid, source="config", text=f"{key}: true", rule="config.context")
        return
    whole = any(k in config for k in _WHOLE_CONFIG_KEYS)
    # with "auto" batch keys the Hugging Face Trainer fills precision in from its own arguments
    filled_by_trainer = any(isinstance(config.get(k), str) and config[k].lower() == "auto" for k in _WHOLE_CONFIG_KEYS)
    precision_said = (whole and not filled_by_trainer) or any(k in config for k in _PRECISION_SECTIONS)
    fp16 = _is_true(_section(config, "fp16").get("enabled"))
    bf16 = _is_true((_section(config, "bf16") or _section(config, "bfloat16")).get("enabled"))
    amp = _is_true(_section(config, "amp").get("enabled"))
    fp16_value = _section(config, "fp16").get("enabled")
    bf16_value = (_section(config, "bf16") or _section(config, "bfloat16")).get("enabled")
    auto = any(isinstance(v, str) and v.lower() == "auto" for v in (fp16_value, bf16_value))
    for sid, on in (("s.fp16_enabled", fp16 or amp), ("s.bf16_enabled", bf16)):
        if on:
            collector.observe(sid, source="config", text=f"{sid.removeprefix('s.')}: true", rule="config.context")
        elif not auto and precision_said:
            extraction.absent.add(sid)
    if fp16 and bf16:
        precision = None
    elif fp16 or amp:
        precision = "fp16"
    elif bf16:
        precision = "bf16"
    else:
        precision = None if auto or not precision_said else "fp32"
    extraction.context.precision = precision
    zero_said = "zero_optimization" in config
    zero = _section(config, "zero_optimization")
    stage = zero.get("stage", 0 if zero_said or whole else None)
    if isinstance(stage, int) and not isinstance(stage, bool):
        extraction.context.zero_stage = stage
    devices = [(_section(zero, k).get("device")) for k in ("offload_optimizer", "offload_param")]
    offload = any(d in ("cpu", "nvme") for d in devices) or _is_true(zero.get("cpu_offload")) is True \
        or _is_true(zero.get("cpu_offload_param")) is True
    if offload:
        extraction.context.offload = True
        where = [k for k, d in zip(("offload_optimizer", "offload_param"), devices, strict=True) if d in ("cpu", "nvme")]
        collector.observe("s.offload_enabled", source="config", text="offload: " + (", ".join(where) or "cpu_offload"),
                          rule="config.context")
    elif zero_said or whole:
        extraction.context.offload = False
        extraction.absent.add("s.offload_enabled")


def _deepspeed_version(environment: dict[str, Any]) -> tuple[int, ...] | None:
    """The DeepSpeed release the environment names (``versions.deepspeed``, free-form keys normalised)."""
    versions = environment.get("versions")
    said = versions.get("deepspeed") if isinstance(versions, dict) else None
    return release_key(str(said)) if said is not None else None


def check(config: Any, environment: Any, collector: Collector, settings: Settings, extraction: Extraction) -> None:
    """Run every config check and record the config facts."""
    if config is None:
        return
    if not isinstance(config, dict):
        extraction.warnings.append("'config' must be the ds_config object; ignored")
        return
    extraction.supplied_sources.add("config")
    env = environment if isinstance(environment, dict) else {}
    world = _positive_int(env.get("world_size"))
    if world is None and collector.world_sizes:
        world = max(collector.world_sizes)
    ctx = CheckContext(settings, world, [], deepspeed_shaped(config, settings), _deepspeed_version(env))
    for check_fn in CHECKS.values():
        check_fn(config, ctx)
    extraction.config_findings.extend(ctx.findings)
    quiet = ctx.thresholds["ignored_key_reliability"]
    for finding in ctx.findings:
        if finding.symptom:
            # a key DeepSpeed does not validate is ignored, not refused: it is there for certain, but
            # whether the run depended on it is not (many working configs carry a stray key)
            ignored = finding.id == "config.unknown_key" and finding.severity == "warning"
            collector.observe(finding.symptom, source="config", text=finding.message["en"], rule=finding.id,
                              fields={"key_path": finding.key_path}, reliability=quiet if ignored else 1.0)
    _context(config, collector, extraction, ctx.ds_config)
