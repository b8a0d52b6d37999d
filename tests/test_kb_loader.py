"""kb.loader / kb.schema / kb.yamlload: loading the fixture knowledge base and every way to break it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsdoctor.kb import loader
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.loader import get_kb, load_kb
from dsdoctor.kb.yamlload import load_text
from tests.kbfiles import FIXTURE, _fresh_cache, edit, kbdir  # noqa: F401


def line_number(path: Path, needle: str, occurrence: int = 1) -> int:
    """The line of the n-th line equal to ``needle`` (stripped) or, failing that, containing it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    exact = [n for n, line in enumerate(lines, start=1) if line.strip() == needle]
    if len(exact) >= occurrence:
        return exact[occurrence - 1]
    seen = 0
    for number, line in enumerate(lines, start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not found")


def problems(data_dir: Path, overlays: list[Path] | None = ()) -> list[Problem]:
    with pytest.raises(KnowledgeError) as info:
        load_kb(overlays, data_dir=data_dir)
    assert info.value.problems, "KnowledgeError without problems"
    return info.value.problems


def only(found: list[Problem], needle: str) -> Problem:
    matching = [p for p in found if needle in p.message]
    assert len(matching) == 1, f"{needle!r} in {[str(p) for p in found]}"
    return matching[0]


# ---------------------------------------------------------------- valid data


def test_fixture_loads_with_graph_and_likelihoods():
    kb = load_kb([], data_dir=FIXTURE / "data")
    assert set(kb.causes) == {"memory.activation_memory", "memory.fragmentation", "compute.fp16_overflow",
                              "comm.network_interface"}
    assert len(kb.mechanisms) == 4 and len(kb.symptoms) == 9 and len(kb.experiments) == 3
    assert kb.graph.nodes["memory.fragmentation"]["kind"] == "cause"
    assert kb.graph.nodes["m.fp16_grad_overflow"]["kind"] == "mechanism"
    assert kb.graph.nodes["s.cuda_oom"]["kind"] == "symptom"
    assert kb.graph.edges["memory.fragmentation", "m.allocator_no_contiguous_block"]["strength"] == 0.9
    assert kb.graph.edges["m.allocator_no_contiguous_block", "s.oom_fragmented"]["strength"] == 0.8
    # noisy-OR with leak: 1 - (1 - 0.01) * (1 - 0.9 * 0.9)
    assert kb.likelihoods["memory.fragmentation"]["s.cuda_oom"] == pytest.approx(1 - 0.99 * (1 - 0.81))
    assert "s.fp16_overflow_repeated" not in kb.likelihoods["memory.fragmentation"]
    cause = kb.causes["compute.fp16_overflow"]
    assert cause.context.precision == ["fp16"] and cause.context.zero_stage == [0, 1, 2, 3]
    assert cause.file.endswith("causes.yaml")
    assert cause.line == line_number(FIXTURE / "data" / "causes.yaml", "- id: compute.fp16_overflow")
    assert kb.symptoms["s.single_node_ok"].question.get("zh").startswith("同样")
    assert kb.experiments["x.lower_micro_batch"].outcome_probabilities("compute.fp16_overflow") == {
        "fits": 0.3, "still_oom": 0.7}


def test_template_files_are_skipped():
    assert (FIXTURE / "data" / "template.yaml").exists()  # it is invalid on purpose
    kb = load_kb([], data_dir=FIXTURE / "data")
    assert "not.a_valid_entry" not in kb.causes


def test_a_changed_file_is_read_again(kbdir):
    assert load_kb([], data_dir=kbdir).causes["memory.fragmentation"].prior == 0.2
    edit(kbdir / "causes.yaml", "value: 0.2, basis", "value: 0.25, basis")
    assert load_kb([], data_dir=kbdir).causes["memory.fragmentation"].prior == 0.25


# ---------------------------------------------------------------- YAML level


def test_duplicate_key_is_reported_with_both_lines(kbdir):
    path = kbdir / "causes.yaml"
    edit(path, "    domain: memory\n    title: {en: \"Allocator", "    domain: memory\n    domain: memory\n    title: {en: \"Allocator")
    found = only(problems(kbdir), "duplicate key 'domain'")
    first = line_number(path, "domain: memory", 2)
    assert found.file.endswith("causes.yaml") and found.line == first + 1
    assert f"first at line {first}" in found.message


def test_yaml_syntax_error_is_a_problem_with_file_and_line(kbdir):
    path = kbdir / "symptoms.yaml"
    edit(path, "    leak: 0.005\n", "    leak: [0.005\n")
    found = problems(kbdir)
    assert len(found) == 1  # references to the symptoms of the unreadable file are not reported again
    assert found[0].file.endswith("symptoms.yaml")
    assert found[0].message.startswith("YAML syntax error:")
    assert abs(found[0].line - line_number(path, "leak: [0.005")) <= 2


def test_tab_indentation_gets_a_hint():
    _, found = load_text("causes:\n\t- id: x\n", "f.yaml")
    assert found[0].line == 2 and "spaces, not tabs" in found[0].message


@pytest.mark.parametrize(("text", "needle"), [
    ("", "the file is empty"),
    ("- id: x\n", "a knowledge file is a mapping"),
    ("cause:\n  - id: x\n", "unknown file kind 'cause' (did you mean 'causes'?)"),
    ("causes: []\nsymptoms: []\n", "move 'symptoms' to a file of its own"),
    ("causes: {id: x}\n", "'causes' must be a list of entries"),
    ("patches:\n  - target: memory.fragmentation\n", "patches are for overlay directories"),
])
def test_file_level_problems(kbdir, text, needle):
    (kbdir / "extra.yaml").write_text(text, encoding="utf-8")
    found = only(problems(kbdir), needle)
    assert found.file.endswith("extra.yaml")


# ---------------------------------------------------------------- schema


def test_unknown_field_lists_the_allowed_ones(kbdir):
    path = kbdir / "causes.yaml"
    edit(path, "    parent: null\n", "    parent: null\n    colour: red\n")
    found = only(problems(kbdir), "unknown field 'colour'")
    assert found.line == line_number(path, "colour: red")
    assert "allowed: id, domain, parent, title, description, prior" in found.message


def test_unknown_nested_field_names_its_path(kbdir):
    edit(kbdir / "causes.yaml", 'prior: {value: 0.2, basis: "estimate: fixture"}',
         'prior: {value: 0.2, basis: "estimate: fixture", sources: 3}')
    found = only(problems(kbdir), "unknown field 'prior.sources'")
    assert "allowed: value, basis" in found.message


def test_bad_enum_names_the_choices(kbdir):
    path = kbdir / "mechanisms.yaml"
    edit(path, "pillar: numerics", "pillar: numeric")
    found = only(problems(kbdir), "field 'pillar'")
    assert found.line == line_number(path, "pillar: numeric")
    assert "must be one of shard, comm, numerics, resources; got 'numeric'" in found.message


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("s.oom_fragmented: 0.8", "s.oom_fragmented: 1.0", "field 'symptoms[s.oom_fragmented]'"),
    ("leak: 0.005\n", "leak: 0.0\n", "field 'leak'"),
    ("value: 0.35,", "value: -0.1,", "field 'prior.value'"),
])
def test_probability_outside_open_interval(kbdir, old, new, needle):
    path = next(p for p in kbdir.glob("*.yaml") if old in p.read_text(encoding="utf-8"))
    edit(path, old, new)
    found = only(problems(kbdir), needle)
    assert "strictly between 0 and 1" in found.message
    assert found.line == line_number(path, new.strip())


def test_missing_field_says_what_to_write(kbdir):
    edit(kbdir / "causes.yaml", 'prior: {value: 0.2, basis: "estimate: fixture"}', "prior: {value: 0.2}")
    found = only(problems(kbdir), "field 'prior.basis' is missing")
    assert "write the basis of the prior, e.g. 'estimate:" in found.message


def test_both_languages_are_required(kbdir):
    edit(kbdir / "symptoms.yaml", 'title: {en: "Works on one node", zh: "单节点正常"}',
         'title: {en: "Works on one node", zh: " "}')
    found = only(problems(kbdir), "field 'title.zh' must not be empty")
    assert "Chinese" in found.message


def test_quoted_numbers_and_yaml_booleans_are_refused(kbdir):
    edit(kbdir / "mechanisms.yaml", "s.oom_in_forward: 0.7", "s.oom_in_forward: '0.7'")
    edit(kbdir / "experiments.yaml", "default: {fits: 0.3, still_oom: 0.7}", "default: {fits: 0.3, yes: 0.7}")
    found = problems(kbdir)
    assert "written without quotes" in only(found, "symptoms[s.oom_in_forward]").message
    assert "quote the key" in only(found, "key True in 'default'").message


def test_cause_id_must_start_with_its_domain(kbdir):
    edit(kbdir / "causes.yaml", "  - id: memory.fragmentation\n    domain: memory", "  - id: memory.fragmentation\n    domain: data")
    found = only(problems(kbdir), "must start with its domain 'data.'")
    assert "memory.fragmentation" in found.message


def test_ids_need_their_prefix(kbdir):
    edit(kbdir / "mechanisms.yaml", "- id: m.fp16_grad_overflow", "- id: fp16_grad_overflow")
    found = problems(kbdir)
    assert "write it like 'm.fp16_grad_overflow'" in only(found, "field 'id'").message


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("default: {fits: 0.3, still_oom: 0.7}", "default: {fits: 0.3, still_oom: 0.6}", "sum to 0.900"),
    ("default: {fits: 0.3, still_oom: 0.7}", "default: {fits: 0.3, oom: 0.7}", "outcome 'oom' in 'default'"),
    ("memory.activation_memory: {fits: 0.85, still_oom: 0.15}", "memory.activation_memory: {fits: 0.99}",
     "gives no probability for outcome(s) still_oom"),
])
def test_outcome_tables(kbdir, old, new, needle):
    path = kbdir / "experiments.yaml"
    edit(path, old, new)
    found = only(problems(kbdir), needle)
    assert found.line == line_number(path, new.split(":")[0].strip())


def test_every_problem_is_collected_not_only_the_first(kbdir):
    edit(kbdir / "causes.yaml", "domain: compute", "domain: computer")
    edit(kbdir / "symptoms.yaml", "kind: metric", "kind: metrics")
    edit(kbdir / "experiments.yaml", "gpus: 16", "gpus: sixteen")
    found = problems(kbdir)
    assert {Path(p.file).name for p in found} == {"causes.yaml", "symptoms.yaml", "experiments.yaml"}
    assert all(p.line > 0 for p in found)


# ---------------------------------------------------------------- references


def test_dangling_mechanism_reference_points_at_the_key(kbdir):
    path = kbdir / "causes.yaml"
    edit(path, "m.fp16_grad_overflow: 0.95", "m.fp16_grad_overflw: 0.95")
    found = only(problems(kbdir), "'m.fp16_grad_overflw', which is not defined")
    assert found.line == line_number(path, "m.fp16_grad_overflw")
    assert "did you mean m.fp16_grad_overflow?" in found.message


def test_dangling_symptom_and_expects_references(kbdir):
    edit(kbdir / "mechanisms.yaml", "s.single_node_ok: 0.8", "s.single_node_okay: 0.8")
    edit(kbdir / "experiments.yaml", "comm.network_interface: {issue_gone", "comm.network_iface: {issue_gone")
    found = problems(kbdir)
    only(found, "names symptom 's.single_node_okay'")
    only(found, "names cause 'comm.network_iface'")


def test_duplicate_id_across_files(kbdir):
    (kbdir / "more.yaml").write_text((kbdir / "mechanisms.yaml").read_text(encoding="utf-8").split("\n\n")[0] + "\n",
                                     encoding="utf-8")
    found = only(problems(kbdir), "ID 'm.activation_peak_exceeds' is already defined at")
    assert found.file.endswith("more.yaml") and "mechanisms.yaml:2" in found.message


def test_parent_cycle_is_refused(kbdir):
    edit(kbdir / "causes.yaml", "    parent: null\n", "    parent: memory.fragmentation\n")
    edit(kbdir / "causes.yaml", "  - id: memory.fragmentation\n    domain: memory\n",
         "  - id: memory.fragmentation\n    domain: memory\n    parent: memory.activation_memory\n")
    found = only(problems(kbdir), "cycle of parents")
    assert "memory.activation_memory -> memory.fragmentation -> memory.activation_memory" in found.message \
        or "memory.fragmentation -> memory.activation_memory -> memory.fragmentation" in found.message


def test_parent_must_be_a_cause(kbdir):
    edit(kbdir / "causes.yaml", "    parent: null\n", "    parent: m.activation_peak_exceeds\n")
    only(problems(kbdir), "names 'm.activation_peak_exceeds', which is a mechanism, not a cause")


# ---------------------------------------------------------------- overlays


def test_overlay_adds_a_cause_and_patches(tmp_path):
    kb = load_kb([FIXTURE / "overlays" / "site"], data_dir=FIXTURE / "data")
    child = kb.causes["comm.network_interface.docker_bridge"]
    assert child.parent == "comm.network_interface" and child.file.endswith("site/causes.yaml")
    assert kb.causes["comm.network_interface"].prior == 0.15
    assert kb.causes["comm.network_interface"].prior_basis.startswith("site:")
    assert kb.experiments["x.set_socket_ifname"].expects["comm.network_interface.docker_bridge"]["issue_gone"] == 0.95
    assert kb.likelihoods[child.id]["s.container_default_bridge"] == pytest.approx(1 - 0.9 * (1 - 0.95 * 0.9))
    assert kb.sources[-1].endswith("site")
    # the base alone is unchanged
    assert load_kb([], data_dir=FIXTURE / "data").causes["comm.network_interface"].prior == 0.2


def test_overlay_that_breaks_the_graph_is_refused():
    found = problems(FIXTURE / "data", [FIXTURE / "overlays" / "site", FIXTURE / "overlays" / "breaks_graph"])
    dangling = only(found, "names mechanism 'm.psu_brownout', which is not defined")
    assert dangling.file.endswith("breaks_graph/causes.yaml") and dangling.line == 8
    target = only(found, "patch target 'comm.network_interfaces' is not defined")
    assert "did you mean comm.network_interface" in target.message


def test_overlay_cannot_redefine_an_id_without_a_patch(tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(FIXTURE / "data" / "symptoms.yaml", overlay / "symptoms.yaml")
    found = problems(FIXTURE / "data", [overlay])
    assert len(found) == 9
    assert "write a 'patches:' entry with target: s.cuda_oom" in only(found, "'s.cuda_oom' is already defined").message


def test_patch_fields_must_fit_the_target_kind(tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "patches.yaml").write_text(
        "patches:\n  - target: m.fp16_grad_overflow\n    prior: {value: 0.1, basis: site}\n", encoding="utf-8")
    found = only(problems(FIXTURE / "data", [overlay]), "a patch of a mechanism may set symptoms")
    assert found.line == 3


def test_patch_edge_to_unknown_symptom_points_at_the_patch(tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "patches.yaml").write_text(
        "patches:\n  - target: m.fp16_grad_overflow\n    symptoms:\n      s.loss_nan: 0.3\n", encoding="utf-8")
    found = only(problems(FIXTURE / "data", [overlay]), "names symptom 's.loss_nan'")
    assert found.file.endswith("overlay/patches.yaml") and found.line == 4


def test_overlays_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DSDOCTOR_KB_PATH", str(FIXTURE / "overlays" / "site"))
    assert "comm.network_interface.docker_bridge" in load_kb(data_dir=FIXTURE / "data").causes
    monkeypatch.setenv("DSDOCTOR_KB_PATH", str(tmp_path / "missing"))
    found = only(problems(FIXTURE / "data", None), "knowledge directory does not exist")
    assert found.file.endswith("missing")


def test_get_kb_is_cached_and_reloadable(monkeypatch):
    monkeypatch.setattr(loader, "DATA_DIR", FIXTURE / "data")
    first = get_kb()
    assert get_kb() is first
    assert get_kb(reload=True) is not first
    monkeypatch.setenv("DSDOCTOR_KB_PATH", str(FIXTURE / "overlays" / "site"))
    assert "comm.network_interface.docker_bridge" in get_kb().causes


def test_references_of_an_invalid_entry_are_still_checked(kbdir):
    edit(kbdir / "causes.yaml", "value: 0.25,", "value: 2.5,")
    edit(kbdir / "causes.yaml", "m.fp16_grad_overflow: 0.95", "m.fp16_grad_overflw: 0.95")
    found = problems(kbdir)
    only(found, "field 'prior.value'")
    only(found, "names mechanism 'm.fp16_grad_overflw'")
