"""kb.lint and kb.catalog: quality checks on the fixture knowledge base, and on the real one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from dsdoctor.kb.catalog import CATALOG_PATH, load_catalog
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.lint import lint, summary
from tests.kbfiles import FIXTURE, _fresh_cache, edit, kbdir  # noqa: F401

SHARED_CATALOG = Path(__file__).resolve().parents[2] / "shared" / "catalog" / "root_causes.yaml"








def run(data_dir: Path, overlays: list[Path] | None = None, **kwargs) -> list[Problem]:
    kwargs.setdefault("catalog", FIXTURE / "catalog.yaml")
    kwargs.setdefault("rules_dir", FIXTURE / "rules")
    return lint(overlays or [], data_dir=data_dir, **kwargs)


def only(found: list[Problem], needle: str, severity: str = "error") -> Problem:
    matching = [p for p in found if needle in p.message]
    assert len(matching) == 1, f"{needle!r} in {[str(p) for p in found]}"
    assert matching[0].severity == severity
    return matching[0]


def test_fixture_lints_clean():
    assert run(FIXTURE / "data") == []
    assert run(FIXTURE / "data", [FIXTURE / "overlays" / "site"]) == []


def test_lint_reports_load_errors_instead_of_raising(kbdir):
    edit(kbdir / "causes.yaml", "domain: compute", "domain: maths")
    found = run(kbdir)
    assert "must be one of config, memory, comm" in only(found, "field 'domain'").message


def test_cause_without_fix_regression_prevention_or_references(kbdir):
    edit(kbdir / "causes.yaml", """    fixes:
      - title: {en: "Use expandable segments", zh: "使用 expandable segments"}
        kind: env
        snippet: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    regression: {en: "Rerun and compare reserved vs allocated.", zh: "重跑并对比 reserved 与 allocated。"}
""", "")
    found = run(kbdir)
    fixes = only(found, "'memory.fragmentation' has no fixes")
    assert "add at least one fix" in fixes.message and fixes.file.endswith("causes.yaml") and fixes.line > 0
    only(found, "'memory.fragmentation' has no regression")
    assert not [p for p in found if "has no prevention" in p.message or "has no references" in p.message]


def test_catalog_id_missing_points_at_the_catalog(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text((FIXTURE / "catalog.yaml").read_text(encoding="utf-8")
                       + "data:\n  data.loader_hang:\n    en: the data pipeline hangs\n    zh: 数据管道卡死\n",
                       encoding="utf-8")
    found = run(FIXTURE / "data", catalog=catalog)
    missing = only(found, "catalog cause 'data.loader_hang' has no node")
    lines = catalog.read_text(encoding="utf-8").splitlines()
    assert missing.file.endswith("catalog.yaml") and lines[missing.line - 1] == "  data.loader_hang:"
    assert run(FIXTURE / "data", catalog=catalog, check_catalog_ids=False) == []


def test_unseparated_pair_is_an_error_until_an_experiment_separates_it(tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "causes.yaml").write_text("""causes:
  - id: memory.activation_memory.long_sequences
    domain: memory
    parent: memory.activation_memory
    title: {en: "Long sequences", zh: "序列过长"}
    description: {en: "A few very long samples.", zh: "少数样本特别长。"}
    prior: {value: 0.02, basis: "estimate: test"}
    mechanisms:
      m.activation_peak_exceeds: 0.9
    fixes:
      - {title: {en: "Cap sequence length", zh: "限制序列长度"}, kind: code, snippet: "max_length=4096"}
    regression: {en: "Rerun.", zh: "重跑。"}
    prevention: {en: "Gate lengths.", zh: "限制长度。"}
    references: ["https://huggingface.co/docs/transformers/pad_truncation"]
""", encoding="utf-8")
    (overlay / "patches.yaml").write_text("""patches:
  - target: x.lower_micro_batch
    expects:
      memory.activation_memory.long_sequences: {fits: 0.8, still_oom: 0.2}
""", encoding="utf-8")
    found = run(FIXTURE / "data", [overlay])
    pair = only(found, "show the same symptoms")
    assert "'memory.activation_memory' and 'memory.activation_memory.long_sequences'" in pair.message
    assert "s.cuda_oom, s.oom_in_forward" in pair.message
    assert "best is x.lower_micro_batch with 0.05" in pair.message

    (overlay / "experiments.yaml").write_text("""experiments:
  - id: x.sequence_length_histogram
    title: {en: "Histogram of sequence lengths", zh: "序列长度直方图"}
    how: {en: "Plot token counts per sample.", zh: "统计每个样本的 token 数。"}
    cost: {minutes: 5, gpus: 0}
    outcomes:
      - {id: long_tail, title: {en: "A long tail", zh: "长尾"}}
      - {id: uniform, title: {en: "Uniform", zh: "均匀"}}
    default: {long_tail: 0.2, uniform: 0.8}
    expects:
      memory.activation_memory.long_sequences: {long_tail: 0.9, uniform: 0.1}
""", encoding="utf-8")
    assert run(FIXTURE / "data", [overlay]) == []


def test_symptom_no_mechanism_produces_and_mechanism_no_cause_uses(kbdir):
    edit(kbdir / "causes.yaml", "      m.fp16_grad_overflow: 0.95\n", "      m.activation_peak_exceeds: 0.2\n")
    edit(kbdir / "mechanisms.yaml", "      s.mem_reserved_far_above_allocated: 0.7\n", "")
    found = run(kbdir)
    only(found, "no mechanism produces symptom 's.mem_reserved_far_above_allocated'")
    only(found, "no cause uses mechanism 'm.fp16_grad_overflow'", "warning")


def test_cause_that_reaches_no_symptom(kbdir):
    edit(kbdir / "mechanisms.yaml", """    symptoms:
      s.fp16_overflow_repeated: 0.9
      s.loss_scale_at_minimum: 0.6
""", "    symptoms: {}\n")
    found = run(kbdir)
    only(found, "cause 'compute.fp16_overflow' reaches no symptom")
    only(found, "mechanism 'm.fp16_grad_overflow' produces no symptom")


def test_priors_far_from_one_warn(kbdir):
    edit(kbdir / "causes.yaml", "value: 0.35,", "value: 0.95,")
    found = run(kbdir)
    warning = only(found, "sum to 1.60, far from 1", "warning")
    assert warning.line == 0
    assert "0 error(s), 1 warning(s)" in summary(found)


def test_rules_cross_check(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURE / "rules", rules)
    edit(rules / "other.yaml", "symptom: s.nccl_watchdog_timeout", "symptom: s.nccl_watchdog_timout")
    found = run(FIXTURE / "data", rules_dir=rules)
    unknown = only(found, "rule 'nccl.watchdog' asserts symptom 's.nccl_watchdog_timout'")
    assert unknown.file.endswith("other.yaml") and unknown.line == 9
    assert "did you mean s.nccl_watchdog_timeout?" in unknown.message
    only(found, "no rule asserts log symptom 's.nccl_watchdog_timeout'", "warning")
    assert run(FIXTURE / "data", rules_dir=None) == []


def test_a_lexicon_composition_reporting_an_unknown_outcome_is_a_problem(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURE / "rules", rules)
    (rules / "lexicon.yaml").write_text(
        "compositions:\n  - id: lexicon.swap\n    observation: x.swap_gpu=gone\n    all: [a]\n", encoding="utf-8")
    found = run(FIXTURE / "data", rules_dir=rules)
    problem = only(found, "rule 'lexicon.swap' reports experiment 'x.swap_gpu'")
    assert problem.file.endswith("lexicon.yaml") and problem.line == 3


def test_problems_are_sorted_and_errors_come_first_on_a_line(kbdir):
    edit(kbdir / "causes.yaml", "m.fp16_grad_overflow: 0.95", "m.unknown: 0.95")
    found = run(kbdir)
    keys = [(p.file, p.line) for p in found]
    assert keys == sorted(keys)


# ---------------------------------------------------------------- catalog


def test_vendored_catalog_loads_every_id():
    catalog = load_catalog()
    id_lines = [ln for ln in CATALOG_PATH.read_text(encoding="utf-8").splitlines()
                if re.match(r"^  [a-z]+\.[a-z0-9_]+:", ln)]
    assert len(catalog) == len(id_lines) >= 40
    assert all(cid.startswith(entry.domain + ".") and entry.en and entry.zh for cid, entry in catalog.items())
    assert catalog["none.no_fault"].line > 0


@pytest.mark.skipif(not SHARED_CATALOG.exists(), reason="shared catalog not present")
def test_vendored_catalog_equals_the_shared_one():
    assert CATALOG_PATH.read_bytes() == SHARED_CATALOG.read_bytes()


def test_bad_catalog_is_reported(tmp_path):
    bad = tmp_path / "catalog.yaml"
    bad.write_text("memory:\n  comm.x: {en: a, zh: b}\n", encoding="utf-8")
    with pytest.raises(KnowledgeError) as info:
        load_catalog(bad)
    assert info.value.problems[0].line == 2
    found = run(FIXTURE / "data", catalog=bad)
    only(found, "must start with its domain 'memory.'")


# ---------------------------------------------------------------- the real knowledge base


def test_builtin_kb_lints_clean():
    """The real kb/data against the vendored catalog and rules/data: no errors (warnings allowed)."""
    errors = [str(p) for p in lint([]) if p.severity == "error"]
    assert errors == [], f"{len(errors)} error(s), first ones:\n" + "\n".join(errors[:20])
