"""Rule files: every problem is reported as file:line: message; rules must compile in RE2 and Hyperscan."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.kb.errors import KnowledgeError
from dsdoctor.rules.loader import load_rules, load_rules_with_problems, rule_files
from dsdoctor.rules.settings import load_settings_with_problems

GOOD = """\
rules:
  - id: t.good
    title: "good"
    kind: log
    symptom: s.cuda_oom
    severity: error
    pattern: 'CUDA out of memory'
    examples:
      match: ["CUDA out of memory. Tried"]
      no_match: ["CUDA error"]
"""


def write(tmp_path: Path, text: str, name: str = "logs/a.yaml") -> Path:
    path = tmp_path / "rules" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return tmp_path / "rules"


def problems(tmp_path: Path, text: str) -> list[str]:
    _, found = load_rules_with_problems([write(tmp_path, text)])
    return [str(p) for p in found]


def test_good_file_loads(tmp_path: Path) -> None:
    rules = load_rules([write(tmp_path, GOOD)])
    assert [r.id for r in rules.rules] == ["t.good"]
    assert rules.rules[0].line == 2


def test_unknown_field_is_reported_with_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("    severity: error\n", "    severity: error\n    colour: red\n")
    found = problems(tmp_path, text)
    assert len(found) == 1
    assert found[0].endswith("unknown field 'colour'; allowed: id, title, kind, marker, symptom, observation, severity, "
                             "lang, pattern, caseless, reliability, fields, secondary, references, examples")
    assert ":7:" in found[0]


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    text = GOOD.replace("    severity: error\n", "    severity: error\n    severity: warning\n")
    found = problems(tmp_path, text)
    assert any("duplicate key 'severity'" in p and ":7:" in p for p in found)


@pytest.mark.parametrize(("change", "message"), [
    (('      no_match: ["CUDA error"]\n', ""), "no no_match example"),
    (('      match: ["CUDA out of memory. Tried"]\n', ""), "no match example"),
    (("    symptom: s.cuda_oom\n", ""), "field 'symptom' is missing"),
    (("pattern: 'CUDA out of memory'", "pattern: 'a(?=b)'"), "does not compile in RE2"),
    (("pattern: 'CUDA out of memory'", "pattern: 'x*'"), "pattern matches empty text"),
    (("pattern: 'CUDA out of memory'", "pattern: 'a\\b\\B'"), "does not compile in Hyperscan"),
    (("severity: error", "severity: fatal"), "must be one of error, warning, info"),
    (("id: t.good", "id: Good"), "is not valid here"),
    (("kind: log", "kind: phrase"), "field 'lang' is missing"),
])
def test_schema_problems(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    found = problems(tmp_path, GOOD.replace(*change))
    assert found, "a problem must be reported"
    assert any(message in p for p in found), found
    assert all(p.split(":")[1].isdigit() for p in found)  # file:line: message


def test_example_field_must_be_a_named_group(tmp_path: Path) -> None:
    text = GOOD.replace('      match: ["CUDA out of memory. Tried"]\n',
                        '      match: [{line: "CUDA out of memory. Tried", fields: {requested: 1}}]\n')
    assert any("capture it with (?P<requested>...)" in p for p in problems(tmp_path, text))


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    root = write(tmp_path, GOOD, "logs/a.yaml")
    write(tmp_path, GOOD, "logs/b.yaml")
    _, found = load_rules_with_problems([root])
    assert any("duplicate rule id 't.good'" in str(p) for p in found)


def test_top_level_must_be_rules(tmp_path: Path) -> None:
    assert any("exactly one top-level key 'rules:'" in p for p in problems(tmp_path, "symptoms: []\n"))


def test_yaml_syntax_error_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    found = problems(tmp_path, "rules:\n  - id: x\n   title: [unclosed\n")
    assert found and "YAML syntax error" in found[0]


def test_load_rules_raises_with_every_problem(tmp_path: Path) -> None:
    text = GOOD.replace("severity: error", "severity: fatal") + GOOD.replace("t.good", "t.other").split("rules:\n", 1)[1]\
        .replace("kind: log", "kind: nope")
    with pytest.raises(KnowledgeError) as err:
        load_rules([write(tmp_path, text)])
    assert len(err.value.problems) == 2


def test_settings_files_directly_in_data_are_not_rules(tmp_path: Path) -> None:
    root = write(tmp_path, GOOD)
    (root / "derive.yaml").write_text("limits: {}\n", encoding="utf-8")
    assert [p.name for p in rule_files([root])] == ["a.yaml"]


def test_real_rule_data_loads_without_problems() -> None:
    ruleset, found = load_rules_with_problems()
    assert not found, "\n".join(map(str, found))
    assert ruleset.line_rules


def test_real_settings_are_valid() -> None:
    _, found = load_settings_with_problems()
    assert not found, "\n".join(map(str, found))


def test_bad_settings_are_reported(tmp_path: Path) -> None:
    from dsdoctor.rules.settings import DATA_DIR

    for name in ("derive.yaml", "metrics.yaml", "config_checks.yaml", "ds_config_keys.yaml", "gpus.yaml",
                 "environment.yaml"):
        (tmp_path / name).write_text((DATA_DIR / name).read_text(encoding="utf-8"), encoding="utf-8")
    text = (tmp_path / "metrics.yaml").read_text(encoding="utf-8").replace("up_factor: 1.5", "up_factor: fast")
    (tmp_path / "metrics.yaml").write_text(text, encoding="utf-8")
    _, found = load_settings_with_problems(tmp_path)
    assert len(found) == 1 and "setting 'step_time.up_factor' must be a number" in str(found[0])
