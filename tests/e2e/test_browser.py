"""End to end in headless Chromium (Playwright) against `dsdoctor serve`: search, diagnose a pasted
seed case, load a shipped example, record an experiment outcome, and look at every page at laptop
and phone width (screenshots are saved under tests/output/screenshots/ for review)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import PHONE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: a seed case (its expected.yaml names the root cause): the launcher log is pasted, dmesg uploaded
# a case the engine is not yet sure of (69 %), so experiments are proposed and one can change the leader
CASE = ROOT / "seed_cases" / "every-rank-but-rank-0-hits-the-nccl-watchdog-while-rank-0-spends-30-minutes-saving-a-checkpoint"
PASTED, UPLOADED = "node0.log", "node1.log"
SEEDED_QUERY = "残留 进程"
SEEDED_INCIDENT = "INC-SEED-01"
#: finds incidents with long unbreakable strings: site-packages paths in tracebacks, a checkpoint
#: file name in a title, issue URLs
LONG_WORDS_QUERY = "site-packages OR zero_pp_rank"


def _api(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}{path}", timeout=30) as response:
        return json.loads(response.read())


def _top_cause(page) -> str:
    return page.evaluate("document.querySelector('#causes .cause.top h3 code').textContent.trim()")


def _ranking(page) -> list[str]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('#causes .cause')).map(li => "
        "li.querySelector('h3 code').textContent.trim() + ' ' + li.querySelector('.prob-value').textContent.trim())")


def _no_page_errors(console: list[str]) -> None:
    problems = [m for m in console if "Content Security Policy" in m or "Uncaught" in m
                or "exception" in m.lower()]
    assert not problems, problems


def _shot(page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)


def _click_and_load(page, selector: str) -> None:
    """Click like a person (the mouse, on the element's centre) and wait for the next page."""
    with page.expect_navigation(wait_until="load"):
        page.click(selector)


def _text(page, selector: str = "body") -> str:
    return page.inner_text(selector)


def test_search_finds_a_seeded_incident(server, page, console, screenshots):
    page.goto(f"{server}/?lang=en")
    page.fill("#q", SEEDED_QUERY)
    _click_and_load(page, "form[role=search] .search-row button[type=submit]")
    assert "q=" in page.url
    links = page.evaluate("Array.from(document.querySelectorAll('.result-title a')).map(a => a.getAttribute('href'))")
    assert f"/incidents/{SEEDED_INCIDENT}" in links
    assert page.evaluate("document.querySelectorAll('.results mark').length") > 0
    _shot(page, screenshots / "search.png")

    _click_and_load(page, f".result-title a[href='/incidents/{SEEDED_INCIDENT}']")
    assert page.url.endswith(f"/incidents/{SEEDED_INCIDENT}")
    assert "memory.foreign_process_on_gpu" in _text(page, "main")
    _shot(page, screenshots / "incident.png")

    page.goto(f"{server}/?lang=zh&q=OOM")
    assert "检索历史事故" in _text(page, "h1")
    _shot(page, screenshots / "search-zh.png")
    page.goto(f"{server}/?lang=en")
    _no_page_errors(console)


def test_pasted_log_is_diagnosed_and_an_outcome_reranks(server, page, console, screenshots, real_kb):
    from dsdoctor.kb.diagnosis import catalog_cause

    expected = yaml.safe_load((CASE / "expected.yaml").read_text(encoding="utf-8"))
    acceptable = {expected["root_cause"], *expected.get("also_ok", [])}
    page.goto(f"{server}/diagnoses/new?lang=en")
    page.fill("#logs_text", (CASE / PASTED).read_text(encoding="utf-8"))
    page.set_input_files("#log_files", [str(CASE / UPLOADED)])
    if (CASE / "ds_config.json").is_file():
        page.locator("details summary").first.click()  # the optional inputs are folded away
        page.fill("#config_text", (CASE / "ds_config.json").read_text(encoding="utf-8"))
    if (CASE / "description.txt").is_file():
        page.fill("#description", (CASE / "description.txt").read_text(encoding="utf-8"))
    _shot(page, screenshots / "diagnosis-new.png")
    _click_and_load(page, "form[data-busy] button[type=submit]")
    url = page.url
    assert "/diagnoses/d" in url, f"{url}: {_text(page, 'main')[:800]}"
    diagnosis_id = url.rsplit("/", 1)[1].split("#", 1)[0]

    top = _top_cause(page)
    assert catalog_cause(real_kb, top) in acceptable, f"top cause {top}, expected {sorted(acceptable)}"
    assert page.evaluate("document.querySelectorAll('#paths svg.causal-graph .edge').length") > 0
    assert page.evaluate("document.querySelectorAll('#lines tbody tr').length") > 0
    assert page.evaluate("document.querySelectorAll('pre[data-copy] .copy-button').length") > 0  # JS ran
    _shot(page, screenshots / "diagnosis.png")

    stored = _api(server, f"/v1/diagnoses/{diagnosis_id}")
    pasted_lines = len((CASE / PASTED).read_text(encoding="utf-8").splitlines())
    uploaded_lines = len((CASE / UPLOADED).read_text(encoding="utf-8").splitlines())
    assert stored["stats"]["lines"] == pasted_lines + uploaded_lines  # the pasted text and the uploaded file

    # an outcome predicted to change the leader (else the least expected one), clicked like a person would
    outcomes = [o for x in stored["next_experiments"] for o in x["outcomes"]]
    assert outcomes, "the diagnosis proposes an experiment"
    flips = [o for o in outcomes if o.get("leading_cause") and o["leading_cause"] not in (top, "unexplained")]
    chosen = flips[0] if flips else min(outcomes, key=lambda o: o["probability"])
    before = [(c["id"], c["probability"]) for c in stored["causes"]]
    shown_before = _ranking(page)
    _click_and_load(page, f"form.outcome:has(input[value='{chosen['observe']}']) button")
    assert page.url.split("#", 1)[0].endswith(f"/diagnoses/{diagnosis_id}")
    rerun = _api(server, f"/v1/diagnoses/{diagnosis_id}")
    assert chosen["observe"] in rerun["observations"]
    assert [(c["id"], c["probability"]) for c in rerun["causes"]] != before, "the ranking was recomputed"
    assert _top_cause(page) == rerun["causes"][0]["id"]
    if flips:
        assert rerun["causes"][0]["id"] == chosen["leading_cause"] != top
        assert _ranking(page) != shown_before
    assert "Recorded" in _text(page, ".flashes")
    _shot(page, screenshots / "diagnosis-after-outcome.png")

    page.goto(f"{server}/kb/causes/{catalog_cause(real_kb, top)}")
    assert page.evaluate("document.querySelectorAll('svg.causal-graph .node').length") > 3
    _shot(page, screenshots / "cause.png")
    _no_page_errors(console)


def test_a_shipped_example_fills_the_form_and_is_diagnosed(server, page, console, screenshots, real_kb):
    from dsdoctor.api.web.examples import CASES_DIR, EXAMPLES
    from dsdoctor.kb.diagnosis import catalog_cause

    slug = EXAMPLES[0]
    expected = yaml.safe_load((CASES_DIR / slug / "expected.yaml").read_text(encoding="utf-8"))
    page.goto(f"{server}/diagnoses/new?lang=en")
    _click_and_load(page, f".examples a[href*='{slug}']")
    assert page.input_value("#logs_text").strip(), "the example filled the log field"
    _shot(page, screenshots / "diagnosis-example.png")
    _click_and_load(page, "form[data-busy] button[type=submit]")
    assert "/diagnoses/d" in page.url, _text(page, "main")[:800]
    assert catalog_cause(real_kb, _top_cause(page)) in {*expected["top3"], expected["root_cause"]}
    _no_page_errors(console)


def test_pages_fit_a_phone_and_read_without_javascript(server, new_page, console, screenshots):
    query = urllib.parse.quote(LONG_WORDS_QUERY)
    found = _api(server, f"/v1/incidents?q={query}&limit=50")["items"]
    words = [w for item in found for w in json.dumps(item, ensure_ascii=False).split()]
    assert len(found) >= 5 and max(map(len, words)) > 60, "the query finds content with long unbreakable strings"
    listing = _api(server, "/v1/diagnoses?limit=1")["items"]
    pages = {"search": "/?q=OOM", "search-long-words": f"/?q={query}", "home": "/",
             "cause": "/kb/causes/memory.foreign_process_on_gpu", "incident": f"/incidents/{SEEDED_INCIDENT}",
             "new": "/diagnoses/new"}
    pages.update({f"incident-{i}": f"/incidents/{item['id']}" for i, item in enumerate(found)})
    if listing:
        pages["diagnosis"] = f"/diagnoses/{listing[0]['id']}"
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    for name, path in pages.items():
        phone.goto(f"{server}{path}")
        # a mobile viewport grows to fit wide content, so compare with the phone's width, not innerWidth
        overflow = phone.evaluate("document.documentElement.scrollWidth") - PHONE["width"]
        assert overflow <= 1, f"{path} is {overflow}px wider than a phone screen"
        _shot(phone, screenshots / f"phone-{name}.png")

    # underscores of linked ids stay visible: the underline sits below them
    phone.goto(f"{server}/?q=OOM&lang=en")
    offset = phone.evaluate("getComputedStyle(document.querySelector('.meta a code')).textUnderlineOffset")
    size = phone.evaluate("parseFloat(getComputedStyle(document.querySelector('.meta a code')).fontSize)")
    assert offset.endswith("px") and float(offset[:-2]) >= 0.3 * size, offset

    plain = new_page(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
    for path in pages.values():
        plain.goto(f"{server}{path}")
        assert len(_text(plain, "main")) > 200, f"{path} shows its content without JavaScript"
    _no_page_errors(console)
