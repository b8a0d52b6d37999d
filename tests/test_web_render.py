"""Pieces of the web pages that need no app: highlights, the SVG drawing, UI strings, small helpers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from dsdoctor.api.web.highlight import safe_highlight
from dsdoctor.api.web.i18n import PHASE_NAMES, SCOPE_NAMES, STRINGS, translate
from dsdoctor.api.web.security import safe_next
from dsdoctor.api.web.svg import (
    Drawing,
    Edge,
    Node,
    diagnosis_drawing,
    fit,
    neighbourhood_drawing,
    render,
    wrap,
)

SVG_NS = "{http://www.w3.org/2000/svg}"
EVIL = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


# ---------------------------------------------------------------- highlights


@pytest.mark.parametrize(("fragment", "expected"), [
    ("rank 5 先 <mark>OOM</mark>", "rank 5 先 <mark>OOM</mark>"),
    ("a &lt;b&gt; <mark>c</mark>", "a &lt;b&gt; <mark>c</mark>"),
    ("<mark>x</mark> <script>alert(1)</script>", "<mark>x</mark> &lt;script&gt;alert(1)&lt;/script&gt;"),
    ('<mark onclick="x">y</mark>', "&lt;mark onclick=&#34;x&#34;&gt;y"),
    ("<mark>open", "<mark>open</mark>"),
    ("close</mark> then", "close then"),
    ("&amp;lt;mark&amp;gt; typed literally", "&amp;lt;mark&amp;gt; typed literally"),
    ("", ""),
    (None, ""),
])
def test_safe_highlight_keeps_only_balanced_marks(fragment, expected):
    assert str(safe_highlight(fragment)) == expected


def test_safe_highlight_output_has_no_other_tags():
    out = str(safe_highlight(f"<mark>nccl</mark> {EVIL} <b>bold</b> <mark>timeout</mark>"))
    tags = re.findall(r"<(/?[a-zA-Z]+)", out)
    assert tags == ["mark", "/mark", "mark", "/mark"]


# ---------------------------------------------------------------- SVG


def _drawing(label: str = "label") -> Drawing:
    return Drawing(
        nodes=[Node("s.a", "symptom", label), Node("s.b", "symptom", "B"), Node("m.x", "mechanism", "X"),
               Node("c.one", "cause", "One", href="/kb/causes/c.one", emphasis=True)],
        edges=[Edge("c.one", "m.x", 0.9), Edge("m.x", "s.a", 0.2), Edge("m.x", "s.b", 0.7)],
        title="paths", description="symptoms left", column_titles={"symptom": "S", "mechanism": "M", "cause": "C"},
    )


def test_svg_is_well_formed_and_escapes_every_label():
    drawing = _drawing(EVIL)
    drawing.title = EVIL
    drawing.nodes.append(Node(EVIL, "cause", EVIL, href=f"/kb/causes/{EVIL}"))
    svg = str(render(drawing, prefix='p"x'))
    root = ET.fromstring(svg)  # parses: nothing broke out of an attribute or element
    assert root.tag == f"{SVG_NS}svg"
    assert not root.findall(f".//{SVG_NS}script") and "<img" not in svg and "<script" not in svg
    assert all(not name.startswith("on") and name != "style" for el in root.iter() for name in el.attrib)
    texts = "".join(root.itertext())
    assert "<script>alert(1)</script>" in texts  # shown as text


def test_svg_places_columns_and_weights_edges():
    root = ET.fromstring(str(render(_drawing())))
    x_of = {}
    for group in root.iter(f"{SVG_NS}g"):
        rect = next(group.iter(f"{SVG_NS}rect"))
        x_of[group.get("data-node")] = float(rect.get("x"))
    assert x_of["s.a"] == x_of["s.b"] < x_of["m.x"] < x_of["c.one"]  # symptoms | mechanisms | causes
    widths = {(p.get("data-from"), p.get("data-to")): float(p.get("stroke-width")) for p in root.iter(f"{SVG_NS}path")
              if p.get("data-from")}
    assert widths[("c.one", "m.x")] > widths[("m.x", "s.b")] > widths[("m.x", "s.a")]
    links = [a.get("href") for a in root.iter(f"{SVG_NS}a")]
    assert links == ["/kb/causes/c.one"]
    assert root.get("role") == "img" and root.get("aria-labelledby")


def test_svg_of_nothing_is_empty():
    assert str(render(Drawing([], [], "t", "d"))) == ""


@pytest.mark.parametrize(("text", "units", "expected"), [
    ("short", 10, "short"),
    ("a much longer label", 8, "a much…"),
    ("显存碎片导致的 OOM", 8, "显存碎…"),
])
def test_fit_counts_wide_characters_double(text, units, expected):
    assert fit(text, units) == expected


def test_wrap_breaks_at_spaces_into_two_lines():
    assert wrap("Parameters + gradients + optimizer states do not fit", 24) == [
        "Parameters + gradients +", "optimizer states do not…"]
    assert wrap("short", 24) == ["short"]


def test_diagnosis_drawing_follows_the_paths_of_the_top_causes(real_kb):
    cause = next(c for c in real_kb.causes.values() if c.mechanisms)
    mechanism = next(m for m in cause.mechanisms if real_kb.mechanisms.get(m) and real_kb.mechanisms[m].symptoms)
    symptom = next(iter(real_kb.mechanisms[mechanism].symptoms))
    diagnosis = {"causes": [{"id": cause.id, "title": "t", "paths": [[symptom, mechanism, cause.id]]},
                            {"id": "config.unknown_thing", "title": EVIL, "paths": []}],
                 "symptoms": [{"id": symptom, "title": "seen"}]}
    drawing = diagnosis_drawing(diagnosis, real_kb, "zh")
    kinds = {n.id: n.kind for n in drawing.nodes}
    assert kinds == {cause.id: "cause", mechanism: "mechanism", symptom: "symptom", "config.unknown_thing": "cause"}
    strengths = {(e.source, e.target): e.strength for e in drawing.edges}
    assert strengths[(cause.id, mechanism)] == cause.mechanisms[mechanism]
    assert strengths[(mechanism, symptom)] == real_kb.mechanisms[mechanism].symptoms[symptom]
    assert next(n for n in drawing.nodes if n.id == cause.id).label == cause.title.zh


def test_neighbourhood_drawing_shows_mechanisms_symptoms_and_rivals(real_kb):
    drawing = neighbourhood_drawing(real_kb, "memory.foreign_process_on_gpu", "en", max_symptoms=5)
    kinds = [n.kind for n in drawing.nodes]
    assert kinds.count("symptom") == 5
    mechanisms = set(real_kb.causes["memory.foreign_process_on_gpu"].mechanisms)
    assert {n.id for n in drawing.nodes if n.kind == "mechanism"} == mechanisms
    rivals = [n for n in drawing.nodes if n.kind == "cause" and not n.emphasis]
    assert rivals and all(mechanisms & set(real_kb.causes[n.id].mechanisms) for n in rivals)


# ---------------------------------------------------------------- strings and helpers


def test_every_ui_string_exists_in_both_languages():
    assert set(STRINGS["en"]) == set(STRINGS["zh"])
    assert set(SCOPE_NAMES["en"]) == set(SCOPE_NAMES["zh"]) and set(PHASE_NAMES["en"]) == set(PHASE_NAMES["zh"])
    for key, text in STRINGS["en"].items():
        assert re.findall(r"{(\w+)}", text) == re.findall(r"{(\w+)}", STRINGS["zh"][key]), key


def test_translate_formats_and_falls_back():
    assert translate("zh", "results_count", n=3) == "共找到 3 起事故"
    assert translate("fr", "search_button") == "Search"
    assert translate("en", "no.such.key") == "no.such.key"


@pytest.mark.parametrize(("target", "expected"), [
    ("/incidents/INC-1?lang=zh", "/incidents/INC-1?lang=zh"),
    ("//evil.example/x", "/"), ("https://evil.example", "/"), ("/\\evil", "/"), ("javascript:alert(1)", "/"),
    ("", "/"), (None, "/"),
])
def test_safe_next_stays_on_site(target, expected):
    assert safe_next(target, "/") == expected
