"""The README's tutorial runs as written: every `$` line, in order, on a fresh data directory.

Each output line the README shows under a command must appear in what the command printed, and
an `--observe` line a step uses must have been printed by an earlier step.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
MARK = "@@dsdoctor-tutorial@@"


def tutorial_steps(text: str = README) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$` line of the README's tutorial section."""
    section = re.search(r"^## Tutorial.*?$(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert section, "README.md has no '## Tutorial' section"
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif line.strip() and steps:
                steps[-1][1].append(line.strip())
    return steps


STEPS = tutorial_steps()


def _script(steps: list[tuple[str, list[str]]]) -> str:
    lines = ["set +e"]
    for i, (command, _) in enumerate(steps):
        if command == ". .venv/bin/activate" and not (ROOT / ".venv/bin/activate").is_file():
            command = f'export PATH="{Path(sys.executable).parent}:$PATH"'  # tests run from another venv
        lines += [f"echo '{MARK} {i}'", command, f"echo '{MARK} rc' $?"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cold user cache for the module: the first command builds it, as on a fresh machine."""
    return tmp_path_factory.mktemp("user-cache")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, user_cache: Path) -> list[tuple[str, int]]:
    """Run the whole tutorial in one shell, as a user would, with no dsdoctor on PATH at first."""
    tmp = tmp_path_factory.mktemp("tutorial")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8",
           "DSDOCTOR_HOME": str(tmp / "data"), "XDG_CACHE_HOME": str(user_cache), "COLUMNS": "200"}
    done = subprocess.run(["bash", "-c", _script(STEPS)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    parts = done.stdout.split(f"{MARK} ")[1:]
    runs = []
    for body, rc in zip(parts[0::2], parts[1::2], strict=True):
        runs.append((body.split("\n", 1)[1] if "\n" in body else "", int(rc.split()[1])))
    assert len(runs) == len(STEPS), done.stderr
    return runs


def test_the_tutorial_has_three_steps_that_diagnose_observe_and_record() -> None:
    commands = [c for c, _ in STEPS]
    assert commands[0] == ". .venv/bin/activate"
    assert commands[1].startswith("dsdoctor diagnose examples/")
    assert any("--observe" in c for c in commands)
    assert any(c.startswith("dsdoctor incidents add --file examples/") for c in commands)
    assert any(c.startswith("dsdoctor incidents search") for c in commands)


def test_no_tutorial_command_deletes_or_invents_data() -> None:
    for command, _ in STEPS:
        assert not re.search(r"\b(rm|delete|DELETE|reindex|import)\b", command), command
        assert "<" not in command and "..." not in command, f"placeholder in {command!r}"


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[c for c, _ in STEPS])
def test_each_command_succeeds_and_prints_what_the_readme_shows(outputs, index: int) -> None:
    command, expected = STEPS[index]
    out, rc = outputs[index]
    assert rc == 0, f"{command!r} exited {rc}:\n{out}"
    printed = {line.strip() for line in out.splitlines()}
    for line in expected:
        assert line in printed, f"{command!r} did not print {line!r}; it printed:\n{out}"


def test_the_observe_line_used_is_the_one_printed_before(outputs) -> None:
    for index, (command, _) in enumerate(STEPS):
        for fact in re.findall(r"--observe (\S+)", command):
            earlier = "".join(out for out, _ in outputs[:index])
            assert f"record with --observe {fact}" in earlier, fact


def test_the_readme_is_short_and_says_how_to_get_dsdoctor_on_path() -> None:
    assert len(README.splitlines()) <= 250
    assert ". .venv/bin/activate" in README and ".venv/bin/dsdoctor" in README
    assert "make run" in README and "make test" in README


def test_the_shipped_examples_are_what_the_readme_says() -> None:
    import json

    evidence = json.loads((ROOT / "examples/evidence.json").read_text(encoding="utf-8"))
    assert {"description", "logs", "environment", "job"} <= set(evidence)
    assert [log["source"] for log in evidence["logs"]] == ["node-a", "node-b"]
    incident = json.loads((ROOT / "examples/incident.json").read_text(encoding="utf-8"))
    assert incident["root_cause"] == "config.version_mismatch" and incident["status"] == "resolved"
    assert sorted(p.name for p in (ROOT / "examples/logs").iterdir()) == ["node-a.log", "node-b.log"]


def test_the_evidence_example_diagnoses_like_the_logs(tmp_path: Path, user_cache: Path, outputs) -> None:
    env = {**os.environ, "DSDOCTOR_HOME": str(tmp_path), "XDG_CACHE_HOME": str(user_cache)}
    done = subprocess.run([str(Path(sys.executable).parent / "dsdoctor"), "diagnose", "--evidence",
                           "examples/evidence.json"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Job: 48213 llama-sft @ a100-east" in done.stdout
    assert "Most likely config.version_mismatch" in done.stdout
