"""`dsdoctor kb ...` through click (api.cli.cli / api.cli.main) and one real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.api.cli import cli, main
from dsdoctor.kb import loader

FIXTURE = Path(__file__).parent / "fixtures" / "kb"
DATA = ["--data-dir", str(FIXTURE / "data")]
LINT = [*DATA, "--catalog", str(FIXTURE / "catalog.yaml"), "--rules", str(FIXTURE / "rules")]


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("DSDOCTOR_KB_PATH", raising=False)
    loader.clear_cache()


def invoke(*args: str):
    return CliRunner().invoke(cli, ["kb", *args], catch_exceptions=False)


def test_lint_clean_fixture():
    result = invoke("lint", *LINT)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "kb lint: 0 error(s), 0 warning(s)"


def test_lint_errors_print_file_line_severity_and_exit_1(tmp_path):
    overlay = FIXTURE / "overlays" / "breaks_graph"
    result = CliRunner().invoke(cli, ["kb", "lint", *LINT, "--overlay", str(overlay)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert any(ln.endswith("breaks_graph/causes.yaml:8: error: cause 'hardware.site_psu' names mechanism "
                           "'m.psu_brownout', which is not defined: define it in a mechanisms file or fix the ID")
               for ln in lines)
    assert lines[-1].startswith("kb lint: 6 error(s), 0 warning(s) in 2 file(s)")


def test_lint_warnings_only_exit_0_and_quiet_hides_them(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "few.yaml").write_text("rules:\n  - id: oom.cuda\n    symptom: s.cuda_oom\n", encoding="utf-8")
    args = [*DATA, "--catalog", str(FIXTURE / "catalog.yaml"), "--rules", str(rules)]
    result = invoke("lint", *args)
    assert result.exit_code == 0
    assert ": warning: no rule asserts log symptom 's.oom_fragmented'" in result.output
    quiet = invoke("lint", *args, "-q")
    assert "warning:" not in quiet.output.splitlines()[0] and quiet.output.count("\n") == 1


def test_lint_json():
    result = CliRunner().invoke(cli, ["kb", "lint", *DATA, "--no-catalog", "--no-rules", "--format", "json",
                                      "--overlay", str(FIXTURE / "overlays" / "breaks_graph")])
    doc = json.loads(result.output)
    assert result.exit_code == 1 and doc["errors"] == 6 and doc["warnings"] == 0
    assert {"file", "line", "severity", "message"} == set(doc["problems"][0])


def test_list_causes_text_and_json():
    text = invoke("list", "causes", *DATA)
    assert text.exit_code == 0
    assert "memory.fragmentation      memory   0.200  Allocator fragmentation" in text.output
    assert text.output.strip().endswith("4 causes")
    rows = json.loads(invoke("list", "causes", *DATA, "--format", "json", "--lang", "zh").output)
    assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    frag = next(r for r in rows if r["id"] == "memory.fragmentation")
    assert frag["title"] == "显存碎片化" and frag["domain"] == "memory" and frag["prior"] == 0.2


@pytest.mark.parametrize("kind", ["mechanisms", "symptoms", "experiments"])
def test_list_other_kinds(kind):
    rows = json.loads(invoke("list", kind, *DATA, "--format", "json").output)
    assert rows and all(r["id"] and r["title"] for r in rows)


def test_list_with_overlay_from_environment(monkeypatch):
    monkeypatch.setenv("DSDOCTOR_KB_PATH", str(FIXTURE / "overlays" / "site"))
    assert "comm.network_interface.docker_bridge" in invoke("list", "causes", *DATA).output


def test_show_cause():
    result = invoke("show", "memory.fragmentation", *DATA)
    assert result.exit_code == 0
    out = result.output
    assert "m.allocator_no_contiguous_block          0.90" in out
    assert "s.cuda_oom                               0.81  [0.01]  m.allocator_no_contiguous_block" in out
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert "x.expandable_segments            fits=0.85, still_oom=0.15  vs  fits=0.2, still_oom=0.8" in out


def test_show_experiment_table_in_chinese():
    out = invoke("show", "x.lower_micro_batch", *DATA, "--lang", "zh").output
    assert "P(结果 | 根因)" in out
    assert "memory.activation_memory            0.85            0.15" in out
    assert "(default)                           0.30            0.70" in out


def test_show_json():
    view = json.loads(invoke("show", "s.cuda_oom", *DATA, "--format", "json").output)
    assert view["type"] == "symptom"
    assert [c["id"] for c in view["causes"]] == ["memory.activation_memory", "memory.fragmentation"]


def test_unknown_id_is_one_line_with_close_matches(capsys):
    code = main(["kb", "show", "memory.fragmentaton", *DATA])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == ("dsdoctor: error: unknown knowledge-base ID 'memory.fragmentaton'; "
                      "did you mean memory.fragmentation, memory.activation_memory?")
    assert main(["kb", "graph", "--around", "s.cuda_oomm", *DATA]) == 2
    assert "did you mean s.cuda_oom" in capsys.readouterr().err


def test_broken_kb_lists_every_problem_without_traceback(capsys, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", data)
    text = (data / "symptoms.yaml").read_text(encoding="utf-8").replace("kind: metric", "kind: metrics")
    (data / "symptoms.yaml").write_text(text, encoding="utf-8")
    code = main(["kb", "list", "causes", "--data-dir", str(data)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "symptoms.yaml:" in err and "field 'kind': must be one of log, metric" in err


@pytest.mark.parametrize(("fmt", "start"), [("dot", 'digraph "kb" {'), ("mermaid", "flowchart LR"), ("json", "{")])
def test_graph_formats(fmt, start):
    result = invoke("graph", *DATA, "--around", "memory.fragmentation", "--depth", "2", "--format", fmt)
    assert result.exit_code == 0 and result.output.startswith(start)
    assert "s.oom_fragmented" in result.output and "compute.fp16_overflow" not in result.output


def test_graph_around_experiment_includes_it_and_writes_a_file(tmp_path):
    target = tmp_path / "g.json"
    result = invoke("graph", *DATA, "--around", "x.expandable_segments", "--format", "json", "-o", str(target))
    assert result.exit_code == 0
    doc = json.loads(target.read_text(encoding="utf-8"))
    assert {n["id"] for n in doc["nodes"]} == {"x.expandable_segments", "memory.fragmentation"}


def test_help_texts_have_examples():
    for command in ("lint", "list", "show", "graph"):
        out = invoke(command, "--help").output
        assert "Examples:" in out and f"dsdoctor kb {command}" in out


def test_real_process_exit_code(tmp_path):
    """The console script exits 1 on lint errors (not only under CliRunner)."""
    exe = Path(sys.executable).parent / "dsdoctor"
    if not exe.exists():
        pytest.skip("dsdoctor console script not installed")
    env = {k: v for k, v in os.environ.items() if k != "DSDOCTOR_KB_PATH"}
    run = subprocess.run([str(exe), "kb", "lint", *DATA, "--no-catalog", "--no-rules", "-q",
                          "--overlay", str(FIXTURE / "overlays" / "breaks_graph")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "error: patch target 'comm.network_interfaces' is not defined" in run.stdout


def test_mermaid_warns_when_too_big_to_render(monkeypatch):
    import dsdoctor.kb.graph

    monkeypatch.setattr(dsdoctor.kb.graph, "MERMAID_MAX_EDGES", 5)
    result = CliRunner().invoke(cli, ["kb", "graph", *DATA, "--format", "mermaid"])
    assert result.exit_code == 0 and result.stdout.startswith("flowchart LR")
    assert "Mermaid renders at most 5 by default: use --around ID --depth N" in result.stderr
