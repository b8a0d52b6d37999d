"""`dsdoctor rules test | list | explain` through click, with the fixture rules (--dir)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dsdoctor.api.cli import cli, main
from dsdoctor.api.cli_rules import extraction_progress
from tests.rulesfx import FIXTURES, MARKERS

DIRS = ["--dir", str(FIXTURES / "rules"), "--dir", str(MARKERS)]
OOM = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
       "capacity of 79.15 GiB of which 1.02 GiB is free.")


def invoke(*args: str):
    return CliRunner().invoke(cli, ["rules", *args], catch_exceptions=False)


def test_rules_test_passes_and_prints_a_summary() -> None:
    result = invoke("test", *DIRS)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].endswith("passed, 0 failed")


def test_rules_test_one_rule_and_unknown_rule(capsys) -> None:
    result = invoke("test", "--rule", "fx.cuda_oom", *DIRS)
    assert result.exit_code == 0 and result.output.strip() == "2 passed, 0 failed"
    assert main(["rules", "test", "--rule", "fx.cuda_om", *DIRS]) == 2
    assert "did you mean fx.cuda_oom" in capsys.readouterr().err


def test_rules_test_fails_with_exit_1_and_file_line(tmp_path: Path) -> None:
    bad = tmp_path / "rules" / "logs" / "bad.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("""rules:
  - id: t.bad
    title: "bad"
    kind: log
    symptom: s.cuda_oom
    pattern: 'CUDA out of memory'
    examples:
      match: ["CUDA error: out of memory"]
      no_match: ["CUDA out of memory. Tried"]
""", encoding="utf-8")
    result = invoke("test", "--dir", str(tmp_path / "rules"))
    assert result.exit_code == 1
    assert "bad.yaml:2: t.bad [match] does not match" in result.output
    assert "bad.yaml:2: t.bad [no_match] matches but must not" in result.output
    assert result.output.strip().endswith("0 passed, 2 failed")


def test_rules_list_text_and_json() -> None:
    text = invoke("list", *DIRS)
    assert "fx.cuda_oom" in text.output and "s.cuda_oom" in text.output
    data = json.loads(invoke("list", "--format", "json", "--kind", "phrase", *DIRS).output)
    assert {r["id"] for r in data} >= {"fx.phrase_oom_zh"} and all(r["kind"] == "phrase" for r in data)


def test_explain_shows_lines_fields_and_the_three_looks(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(f"[rank{r}]:[2024-05-01 10:00:00,000] [INFO] [t.py:1:f] step 900 | loss=2.1" for r in range(4))
                   + "\n" + OOM + "\n", encoding="utf-8")
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"train_batch_size": 16, "gradient_clip": 1.0}), encoding="utf-8")
    env = tmp_path / "environment.json"
    env.write_text(json.dumps({"world_size": 4, "nodes": 1}), encoding="utf-8")
    result = invoke("explain", str(log), "--config", str(config), "--environment", str(env), *DIRS)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "first error: rank 3" in out and "scope: single-rank    phase: steady" in out
    assert "train:5  rank 3" in out and "requested=2147483648" in out
    assert "Did you mean 'gradient_clipping'?" in out
    data = json.loads(invoke("explain", str(log), "--format", "json", *DIRS).output)
    assert data["first_error"]["rank"] == 3 and data["symptoms"]["s.cuda_oom"]["ranks"] == [3]


def test_explain_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert main(["rules", "explain", str(tmp_path / "missing.log")]) == 2
    assert "log file not found" in capsys.readouterr().err
    assert main(["rules", "explain"]) == 2


def test_explain_description_in_chinese() -> None:
    result = invoke("explain", "--describe", "训练到第二步就爆显存了", *DIRS)
    assert result.exit_code == 0 and "s.cuda_oom" in result.output and "reliability 0.8" in result.output


def test_progress_helper_is_silent_when_not_a_terminal() -> None:
    with extraction_progress(10 * 2**30) as callback:
        assert callback is None
    with extraction_progress(10 * 2**20, enabled=True) as callback:
        assert callback is not None
        callback(2**20)
