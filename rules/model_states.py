"""Model-state memory estimate: does the model's training state alone fit one GPU?

Parameters x bytes per parameter (full training with Adam: 2 weights + 2 gradients + 12 optimizer
bytes, split by ZeRO stage over the GPUs; LoRA/QLoRA: the frozen base weights) against the GPU's
memory. Run only when the evidence states the model size, the training mode, the GPU count and the
GPU memory; what it does not state (stage, offload) is taken over every value it allows, so the
answer is only given when all of them agree. Asserts ``s.model_states_exceed_gpu`` (or its "no"),
which separates memory.model_states_exceed_stage from memory.activation_memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdoctor.rules import datafile
from dsdoctor.rules.collect import Collector
from dsdoctor.rules.model import Extraction

DATA = Path(__file__).resolve().parent / "data" / "model_states.yaml"
SYMPTOM = "s.model_states_exceed_gpu"
#: characters of each text read (sizes and modes are said early: a title, a command line)
MAX_CHARS = 65536


def _data() -> dict[str, Any]:
    return datafile.load(DATA)


_re = datafile.caseless


@dataclass
class Estimate:
    params: float  # parameters
    mode: str  # full | adapter
    gpus: int
    gpu_memory: tuple[float, float]  # GB, smallest and largest variant
    low: float  # GB per GPU in the most favourable setup the evidence allows
    high: float  # GB per GPU in the least favourable one
    offload_possible: bool  # offload is said or not ruled out


def _groups(pattern: str, text: str) -> list[str]:
    return [g for m in _re(pattern).finditer(text) for g in m.groups() if g]


def _size(text: str, data: dict[str, Any]) -> float | None:
    """The one model size the text states (in parameters); None if none or several differ."""
    sizes = {float(g) * 1e9 for g in _groups(data["patterns"]["size_billions"], text)}
    sizes |= {float(g) * 1e8 for g in _groups(data["patterns"]["size_yi"], text)}
    sizes = {s for s in sizes if 1e8 <= s <= 2e12}
    return sizes.pop() if len(sizes) == 1 else None


def _per_gpu(params: float, mode: str, weight_bytes: float, gpus: int, stage: int, offload: bool,
             data: dict[str, Any]) -> float:
    """GB of model state on one GPU."""
    if mode == "adapter":
        base = params * weight_bytes * (1 + data["adapter_overhead"])
        return base / (gpus if stage == 3 else 1) / 1e9
    full = data["full"]
    w, g, o = float(full["weights"]), float(full["grads"]), float(full["optimizer"])
    if offload and stage >= 1:
        o = 0.0
        if stage == 3:
            w = 0.0  # offload_param (the most favourable case)
    shard = {0: (1, 1, 1), 1: (1, 1, gpus), 2: (1, gpus, gpus), 3: (gpus, gpus, gpus)}[stage]
    return params * (w / shard[0] + g / shard[1] + o / shard[2]) / 1e9


def estimate(texts: list[str], extraction: Extraction) -> Estimate | None:
    """The estimate when the evidence states enough for one, else None."""
    data = _data()
    pats = data["patterns"]
    text = "\n".join(t[:MAX_CHARS] for t in texts)
    params = _size(text, data)
    if params is None:
        return None
    adapter = bool(_re(pats["adapter"]).search(text))
    full = bool(_re(pats["full"]).search(text))
    if adapter == full:
        return None  # the mode is unknown (or both are said)
    mode = "adapter" if adapter else "full"
    weight_bytes = float(data["adapter_weight_bytes"]["default"])
    if _re(pats["int4"]).search(text):
        weight_bytes = float(data["adapter_weight_bytes"]["int4"])
    elif _re(pats["int8"]).search(text):
        weight_bytes = float(data["adapter_weight_bytes"]["int8"])
    ctx = extraction.context
    gpus = ctx.world_size
    if gpus is None:
        counts = {int(g) for g in _groups(pats["gpu_count"], text) if 0 < int(g) <= 4096}
        if not counts and _re(pats["single_gpu"]).search(text):
            counts = {1}
        gpus = counts.pop() if len(counts) == 1 else None
    memory = _gpu_memory(ctx.gpu, text, data)
    if gpus is None or memory is None:
        return None
    said = {int(g) for g in _groups(pats["stage"], text)}
    stages = [ctx.zero_stage] if ctx.zero_stage is not None else (sorted(said) if len(said) == 1 else [0, 1, 2, 3])
    offloads = [ctx.offload] if ctx.offload is not None else (
        [True] if _re(pats["offload"]).search(text) else [False, True] if len(stages) > 1 else [False])
    values = [_per_gpu(params, mode, weight_bytes, gpus, s, o, data) for s in stages for o in offloads]
    return Estimate(params, mode, gpus, memory, min(values), max(values), True in offloads)


def _gpu_memory(gpu: str | None, text: str, data: dict[str, Any]) -> tuple[float, float] | None:
    """GB of one GPU: a size said next to the GPU (``A800-80GB``, ``80G``), else the model's range."""
    for source in (gpu or "", text):
        said = {float(g) for g in _groups(data["patterns"]["gpu_memory"], source) if 8 <= float(g) <= 256}
        if len(said) == 1:
            value = said.pop()
            return value, value
        if gpu and source is gpu:
            for entry in data["gpus"]:
                if _re(entry["pattern"]).search(gpu):
                    low, high = entry["memory"]
                    return float(low), float(high)
    for entry in data["gpus"]:
        if _re(entry["pattern"]).search(text):
            low, high = entry["memory"]
            return float(low), float(high)
    return None


def check(texts: list[str], collector: Collector, extraction: Extraction) -> None:
    """Assert whether the model states exceed one GPU, when the evidence allows an estimate."""
    found = estimate(texts, extraction)
    if found is None:
        return
    data = _data()
    rel = data["reliability"]
    smallest, largest = found.gpu_memory
    fields = {"params_billion": round(found.params / 1e9, 2), "mode": found.mode, "gpus": found.gpus,
              "states_gb_low": round(found.low, 1), "states_gb_high": round(found.high, 1),
              "gpu_memory_gb": largest}
    text = (f"model states ~{found.low:.0f}-{found.high:.0f} GB per GPU ({fields['params_billion']}B params, "
            f"{found.mode}, {found.gpus} GPU(s)) against {largest:.0f} GB")
    collector.decided.add(SYMPTOM)
    if found.low >= data["exceeds_ratio"] * largest:
        collector.observe(SYMPTOM, source="derived", text=text, rule="derive.model_states", fields=fields,
                          reliability=rel["exceeds"])
    elif found.high < data["fits_ratio"] * smallest:
        extraction.absent.add(SYMPTOM)
        extraction.absent_strength[SYMPTOM] = rel["fits"]
    elif found.mode == "full" and extraction.context.zero_stage is None and extraction.context.offload is not True \
            and not _re(data["patterns"]["offload"]).search("\n".join(t[:MAX_CHARS] for t in texts)):
        below3 = [_per_gpu(found.params, "full", 2, found.gpus, s, False, data) for s in (0, 1, 2)]
        if min(below3) >= data["exceeds_ratio"] * largest:
            collector.observe(SYMPTOM, source="derived", text=text + " unless ZeRO-3 or offload is used",
                              rule="derive.model_states", fields=fields, reliability=rel["exceeds_below_stage3"])
