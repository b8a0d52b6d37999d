"""Experiment commands as this job would run them: its own script, config file and launcher.

The knowledge base writes commands for a generic ``deepspeed train.py --deepspeed_config
ds_config.json``. Where the evidence names the job's script (a ``<module>`` traceback frame, the
launch command line) or its config file, those replace the generic names; a command that starts
another launcher than the job's says so in a note rather than being rewritten.
"""

from __future__ import annotations

import re
from typing import Any

from dsdoctor.rules.model import JobContext

_SCRIPT = re.compile(r"(?<![\w/.-])train\.py\b")
_CONFIG = re.compile(r"(?<![\w/.-])ds_config\.json\b")
_LAUNCH = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(deepspeed|torchrun)\b")


def personalise(text: str, kind: str, job: JobContext) -> str:
    """``text`` with the job's script and config file in place of the generic names."""
    if kind not in ("shell", "args"):
        return text
    if job.script:
        text = _SCRIPT.sub(lambda _m: job.script or "", text)
    if job.config_file:
        text = _CONFIG.sub(lambda _m: job.config_file or "", text)
    return text


def steps(commands: list[str], kinds: list[str], job: JobContext) -> list[dict[str, Any]]:
    """``[{kind, text, note?}]``: each command personalised, with a note when its launcher is not the job's."""
    out = []
    for i, text in enumerate(commands):
        kind = kinds[i] if i < len(kinds) else "shell"
        step: dict[str, Any] = {"kind": kind, "text": personalise(text, kind, job)}
        launch = _LAUNCH.match(text) if kind == "shell" else None
        if launch and job.launcher and not job.launcher.startswith(launch.group(1)):
            step["note"] = f"this job was launched with {job.launcher}: start it the same way"
        out.append(step)
    return out
