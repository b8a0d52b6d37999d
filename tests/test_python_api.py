"""The Python API: ``from dsdoctor import diagnose`` on every kind of input, re-ranking, errors, search."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
import yaml

import dsdoctor
from dsdoctor import Diagnosis, DsdoctorError, EvidenceError, diagnose, load_evidence, search_incidents
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
LOGS = [EXAMPLES / "logs" / "node-a.log", EXAMPLES / "logs" / "node-b.log"]
OOM = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _without_volatile(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("id", "created_at")}


def test_version_and_public_names():
    assert dsdoctor.__version__ == version("dsdoctor")
    assert set(dsdoctor.__all__) <= set(dir(dsdoctor))
    assert issubclass(EvidenceError, DsdoctorError)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = dsdoctor.nope


def test_an_evidence_file_gives_the_diagnosis_the_command_line_prints():
    result = diagnose(EXAMPLES / "evidence.json", history=False)
    assert isinstance(result, Diagnosis)
    assert result.top_cause["id"] == "config.version_mismatch" and result.top_cause["probability"] > 0.9
    assert result.data["job"]["id"] == "48213"
    cli = subprocess.run([sys.executable, "-m", "dsdoctor.api.cli", "diagnose", "--evidence",
                          str(EXAMPLES / "evidence.json"), "--format", "json"], capture_output=True, text=True,
                         timeout=120, check=True)
    assert _without_volatile(json.loads(cli.stdout)) == _without_volatile(result.to_dict())


def test_a_dict_a_yaml_file_and_a_str_path_are_the_same_evidence(tmp_path):
    evidence = json.loads((EXAMPLES / "evidence.json").read_text())
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(evidence, allow_unicode=True))
    from_dict = diagnose(evidence, history=False)
    from_yaml = diagnose(str(tmp_path / "e.yaml"), history=False)
    assert _without_volatile(from_dict.to_dict()) == _without_volatile(from_yaml.to_dict())
    assert evidence == json.loads((EXAMPLES / "evidence.json").read_text())  # the caller's dict is not changed


def test_log_text_and_log_files():
    assert diagnose(text=OOM, history=False).top_cause["id"].startswith("memory.")
    assert diagnose(text="训练时每张卡都显存不足 (CUDA out of memory)", lang="zh", history=False).data["lang"] == "zh"
    from_files = diagnose(logs=LOGS, history=False)
    assert from_files.top_cause["id"] == "config.version_mismatch"
    assert from_files.data["stats"]["lines"] > 0


def test_observing_an_experiment_outcome_re_ranks():
    first = diagnose(logs=LOGS, history=False)
    outcome = first.next_experiments[0]["outcomes"][0]["observe"]
    assert outcome == "x.collect_env_versions=incompatible"
    again = first.observe(outcome)
    assert again.data["observations"] == {outcome: True}
    assert again.top_cause["id"] == first.top_cause["id"]
    assert again.top_cause["probability"] > first.top_cause["probability"]
    assert first.data["observations"] == {}  # the first diagnosis is unchanged
    ruled_out = first.observe({"x.collect_env_versions=compatible": True})
    assert ruled_out.top_cause["probability"] < first.top_cause["probability"]


def test_to_dict_is_a_copy_and_render_is_the_cli_text():
    result = diagnose(text=OOM, history=False)
    copy = result.to_dict()
    copy["causes"].clear()
    assert result.causes
    assert "local only, not stored" in result.render()
    assert result.render("markdown").startswith("#")
    with pytest.raises(EvidenceError, match="format must be 'text' or 'markdown'"):
        result.render("html")  # type: ignore[arg-type]


def test_the_site_history_weighs_in_when_a_store_exists(dsdoctor_home):
    evidence = EXAMPLES / "evidence.json"
    assert diagnose(evidence).data["similar_incidents"] == []  # no store: none is created
    assert not (dsdoctor_home / "incidents.db").exists()
    assert search_incidents("out of memory", limit=3)  # opens (and seeds) the store
    assert diagnose(evidence).data["similar_incidents"]
    assert diagnose(evidence, history=False).data["similar_incidents"] == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"evidence": "nope.json"}, "evidence file not found: nope.json"),
    ({"evidence": {"description": "x", "colour": "red"}}, "invalid evidence: colour: Unknown field"),
    ({"evidence": {"logs": "text"}}, "invalid evidence: logs: Not a valid list"),
    ({"evidence": {}}, "give at least one of 'description'"),
    ({"evidence": 42}, "evidence must be a mapping or the path of a JSON/YAML file, got int"),
    ({"text": b"bytes"}, "text must be text"),
    ({"logs": ["missing.log"]}, "log file not found: missing.log"),
    ({"text": OOM, "observations": ["x.nope=yes"]}, "unknown experiment 'x.nope'"),
    ({"text": OOM, "observations": ["x.collect_env_versions=maybe"]},
     "unknown outcome 'maybe' of x.collect_env_versions; allowed: incompatible, compatible"),
    ({"text": OOM, "observations": {"s.cuda_oom": "yes"}}, "observations map keys"),
    ({"text": OOM, "observations": ["cuda_oom"]}, "unknown observation 'cuda_oom'"),
    ({"text": OOM, "lang": "fr"}, "lang must be one of en, zh"),
    ({"text": OOM, "top": 0}, "top must be a whole number from 1 to 50"),
])
def test_bad_input_is_a_dsdoctor_error_naming_what_is_wrong(kwargs, message):
    with pytest.raises(EvidenceError) as caught:
        diagnose(**kwargs)
    assert message in str(caught.value)


def test_evidence_files_that_are_not_evidence(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(EvidenceError, match=r"bad.json is not valid JSON: line 1 column 2"):
        load_evidence(tmp_path / "bad.json")
    with pytest.raises(EvidenceError, match=r"bad.yaml is not valid YAML line \d"):
        load_evidence(tmp_path / "bad.yaml")
    with pytest.raises(EvidenceError, match=r"must hold an object \(mapping\), not list"):
        load_evidence(tmp_path / "list.json")
    with pytest.raises(EvidenceError, match="cannot read evidence file"):
        load_evidence(tmp_path)


def test_search_incidents_in_a_given_home(tmp_path):
    found = search_incidents("out of memory", limit=5, home=tmp_path / "h")
    assert 0 < len(found) <= 5 and all({"id", "root_cause", "score"} <= set(item) for item in found)
    only = search_incidents("", cause="memory.fragmentation", limit=50, home=tmp_path / "h")
    assert only and {item["root_cause"] for item in only} == {"memory.fragmentation"}
    with pytest.raises(DsdoctorError, match="limit"):
        search_incidents("x", limit=0, home=tmp_path / "h")


def test_the_code_blocks_of_the_python_api_page_run_as_written(tmp_path):
    """Each block of docs/python-api.md, run from the clone, prints the `# ` lines shown under it."""
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 4
    for block in blocks:
        done = subprocess.run([sys.executable, "-c", block], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, block + done.stderr
        shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
        assert done.stdout.splitlines()[:len(shown)] == shown, block
