"""Experiment commands as the job runs them (kb/commands.py) and as the renderings show them."""

from __future__ import annotations

from dsdoctor.api.render import render_markdown, render_text
from dsdoctor.kb.commands import personalise, steps
from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.rules.model import JobContext

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 5 has a total capacity of "
       "79.15 GiB of which 2.44 GiB is free. Of the allocated memory 71.02 GiB is allocated by PyTorch, "
       "and 2.11 GiB is reserved by PyTorch but unallocated.")


def torchrun_log() -> str:
    """A hand-written 8-rank torchrun log: the launch line, steps, rank 5 OOMs in forward."""
    lines = ["+ torchrun --nproc_per_node 8 /workspace/sft/train.py --deepspeed configs/ds_z3.json"]
    lines += [f"[rank{r}]:[2024-12-01 11:00:0{r},000] [INFO] [engine.py:2156:_report_progress] [Rank {r}] step=12, "
              "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)] loss=2.31" for r in range(8)]
    lines += ["[rank5]:Traceback (most recent call last):",
              '[rank5]:  File "/workspace/sft/train.py", line 88, in <module>',
              '[rank5]:  File "/workspace/sft/train.py", line 61, in main',
              '[rank5]:  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1553, in forward',
              f"[rank5]:{OOM}"]
    return "\n".join(lines) + "\n"


def test_generic_names_give_way_to_the_jobs_own() -> None:
    job = JobContext(script="/workspace/sft/train.py", config_file="configs/ds_z3.json", launcher="torchrun")
    assert personalise("deepspeed train.py --deepspeed --deepspeed_config ds_config.json", "shell", job) == \
        "deepspeed /workspace/sft/train.py --deepspeed --deepspeed_config configs/ds_z3.json"
    assert personalise("grep -n local_rank train.py", "shell", JobContext()) == "grep -n local_rank train.py"
    assert personalise('torch.save(x, "train.py")', "python", job) == 'torch.save(x, "train.py")'
    (step,) = steps(["NCCL_DEBUG=INFO deepspeed train.py"], ["shell"], job)
    assert "torchrun" in step["note"]


def test_a_diagnosis_names_the_script_and_config_of_the_evidence(real_kb) -> None:
    d = diagnose({"logs": [{"source": "torchrun.log", "text": torchrun_log()}],
                  "environment": {"world_size": 8, "nodes": 1}}, kb=real_kb)
    assert (d["context"]["script"], d["context"]["launcher"], d["context"]["config_file"]) == \
        ("/workspace/sft/train.py", "torchrun", "configs/ds_z3.json")
    assert d["first_error"]["rank"] == 5 and d["scope"] == "single-rank"
    commands = [c for x in d["next_experiments"] for c in x["commands"]]
    assert commands and not any(" train.py" in c or "ds_config.json" in c for c in commands)


def test_python_is_shown_as_python_not_as_shell_lines(real_kb) -> None:
    d = diagnose({"logs": [{"source": "torchrun.log", "text": torchrun_log()}],
                  "environment": {"world_size": 8, "nodes": 1}}, kb=real_kb)
    snapshot = {"id": "x.memory_snapshot", "title": "Record a CUDA memory snapshot", "cost": "25 min, 1 GPU",
                "why": "", "commands": ["torch.cuda.memory._record_memory_history(max_entries=100000)"],
                "steps": [{"kind": "python", "text": "torch.cuda.memory._record_memory_history(max_entries=100000)"},
                          {"kind": "shell", "text": "nvidia-smi"}],
                "outcomes": []}
    d["next_experiments"] = [snapshot]
    text = render_text(d)
    assert "$ torch.cuda" not in text and "Python:" in text and "$ nvidia-smi" in text
    markdown = render_markdown(d)
    assert "```python\ntorch.cuda.memory._record_memory_history(max_entries=100000)\n```" in markdown
    assert "```sh\nnvidia-smi\n```" in markdown


def test_every_experiment_command_of_the_knowledge_base_has_a_kind(real_kb) -> None:
    for experiment in real_kb.experiments.values():
        assert len(experiment.command_kinds) == len(experiment.commands)
        for text, kind in zip(experiment.commands, experiment.command_kinds, strict=True):
            if kind == "shell":
                assert not text.startswith(("torch.", "model.", "print(", "{", "--")), (experiment.id, text)


def test_the_deepspeed_launchers_spawned_command_names_script_and_config() -> None:
    from dsdoctor.rules.jobfacts import JobFacts, read_command

    facts = JobFacts()
    read_command("['/usr/bin/python3', '-u', 'sft.py', '--local_rank=0', '--deepspeed', 'ds_z3_offload.json']", facts)
    assert (facts.script, facts.config_file) == ("sft.py", "ds_z3_offload.json")
