"""NCCL / Gloo variables set for the failing run, read from a supplied log or launch command.

``NCCL_P2P_DISABLE=1 torchrun ...`` says P2P was off in the run that failed (so a broken P2P path
is not its cause); ``NCCL_IB_DISABLE=1`` that IB was off; ``NCCL_SOCKET_IFNAME=docker0`` that an
unreachable interface was chosen. The table lives in rules/data/launch_env.yaml. Descriptions are
not read: there such a variable is as often the fix that was tried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsdoctor.rules import datafile
from dsdoctor.rules.collect import Collector
from dsdoctor.rules.model import Extraction

DATA = Path(__file__).resolve().parent / "data" / "launch_env.yaml"
MAX_CHARS = 1 << 20


def _data() -> dict[str, Any]:
    return datafile.load(DATA)


_re = datafile.caseless


def variables(texts: list[str]) -> dict[str, str]:
    """NCCL_* / GLOO_SOCKET_IFNAME assignments in the texts (the last one of each wins)."""
    found: dict[str, str] = {}
    pattern = _re(_data()["assignment"])
    for text in texts:
        for m in pattern.finditer(text[:MAX_CHARS]):
            found[m.group("name").upper()] = m.group("value")
    return found


def check(evidence: dict[str, Any], collector: Collector, extraction: Extraction) -> None:
    """Record the variables as context and assert what their values say."""
    logs = evidence.get("logs") if isinstance(evidence.get("logs"), list) else []
    texts = [e["text"] for e in logs if isinstance(e, dict) and isinstance(e.get("text"), str)]
    found = variables(texts)
    if not found:
        return
    extraction.context.launch_env.update(found)
    for setting in _data()["settings"]:
        value = found.get(setting["variable"])
        if value is None or not _re(f"^(?:{setting['value']})$").search(value):
            continue
        sid = setting["symptom"]
        if setting["state"] == "present":
            collector.observe(sid, source="logs", text=f"{setting['variable']}={value}: {setting['why']}",
                              rule="launch_env", fields={"variable": setting["variable"], "value": value})
        elif sid not in collector.symptoms:
            extraction.absent.add(sid)
