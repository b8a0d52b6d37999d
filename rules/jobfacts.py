"""The job's own script, launcher and config file, from its launch command line and tracebacks.

Experiment commands are written for a generic ``deepspeed train.py --deepspeed_config
ds_config.json``; a diagnosis shows them with what this job ran instead, where the evidence names it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

_LAUNCHERS = (("deepspeed.launcher", "deepspeed"), ("torch.distributed.run", "torchrun"),
              ("torch.distributed.launch", "torch.distributed.launch"), ("torchrun", "torchrun"),
              ("accelerate", "accelerate launch"), ("deepspeed", "deepspeed"))
_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed", "--ds_config", "--config_file")


@dataclass
class JobFacts:
    script: str | None = None
    launcher: str | None = None
    config_file: str | None = None


def read_command(command: str, facts: JobFacts) -> None:
    """Fill ``facts`` from a launch command line (``cmd = ...`` of the DeepSpeed runner, ``+ torchrun ...``,
    or the launcher's ``spawned with command: ['python', '-u', 'sft.py', ...]``)."""
    if command.startswith("["):  # the DeepSpeed launcher prints the command as a Python list
        tokens = [t.strip(" '\"") for t in command.strip("[]").split(",")]
    else:
        try:
            tokens = shlex.split(command)
        except ValueError:
            tokens = command.split()
    for needle, name in _LAUNCHERS:
        if any(needle in t for t in tokens[:6]):
            facts.launcher = facts.launcher or name
            break
    for i, token in enumerate(tokens):
        if facts.script is None and token.endswith(".py") and not token.startswith("-"):
            facts.script = token
        flag, _, value = token.partition("=")
        if flag in _CONFIG_FLAGS:
            value = value or (tokens[i + 1] if i + 1 < len(tokens) else "")
            if value.endswith((".json", ".yaml", ".yml")) and facts.config_file is None:
                facts.config_file = value


def read_frame(file: str, func: str, facts: JobFacts) -> None:
    """The outermost ``<module>`` frame outside installed packages is the job's script."""
    if facts.script is None and func == "<module>" and file.endswith(".py") \
            and "-packages/" not in file and not file.startswith("<"):
        facts.script = file
