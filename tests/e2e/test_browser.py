"""End to end in headless Chromium against `dsdoctor serve`: search, diagnose a pasted seed case,
record an experiment outcome, and look at every page at laptop and phone width (screenshots are
saved under tests/output/screenshots/ for review)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.cdp import Browser

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: a seed case (its expected.yaml names the root cause): the launcher log is pasted, dmesg uploaded
# a case the engine is not yet sure of (69 %), so experiments are proposed and one can change the leader
CASE = ROOT / "seed_cases" / "every-rank-but-rank-0-hits-the-nccl-watchdog-while-rank-0-spends-30-minutes-saving-a-checkpoint"
PASTED, UPLOADED = "node0.log", "node1.log"
SEEDED_QUERY = "残留 进程"
SEEDED_INCIDENT = "INC-SEED-01"


def _api(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}{path}", timeout=30) as response:
        return json.loads(response.read())


def _top_cause(browser: Browser) -> str:
    return browser.evaluate("document.querySelector('#causes .cause.top h3 code').textContent.trim()")


def _ranking(browser: Browser) -> list[str]:
    return browser.evaluate(
        "Array.from(document.querySelectorAll('#causes .cause')).map(li => "
        "li.querySelector('h3 code').textContent.trim() + ' ' + li.querySelector('.prob-value').textContent.trim())")


def _no_page_errors(browser: Browser) -> None:
    problems = [m for m in browser.console if "Content Security Policy" in m or "Uncaught" in m
                or "exception" in m.lower()]
    assert not problems, problems


def test_search_finds_a_seeded_incident(server, browser, screenshots):
    browser.set_viewport(1280, 900)
    browser.goto(f"{server}/?lang=en")
    browser.fill("#q", SEEDED_QUERY)
    browser.click("form[role=search] .search-row button[type=submit]")
    assert "q=" in browser.url()
    links = browser.evaluate("Array.from(document.querySelectorAll('.result-title a')).map(a => a.getAttribute('href'))")
    assert f"/incidents/{SEEDED_INCIDENT}" in links
    assert browser.evaluate("document.querySelectorAll('.results mark').length") > 0
    browser.screenshot(screenshots / "search.png")

    browser.click(f".result-title a[href='/incidents/{SEEDED_INCIDENT}']")
    assert browser.url().endswith(f"/incidents/{SEEDED_INCIDENT}")
    assert "memory.foreign_process_on_gpu" in browser.text("main")
    browser.screenshot(screenshots / "incident.png")

    browser.goto(f"{server}/?lang=zh&q=OOM")
    assert "检索历史事故" in browser.text("h1")
    browser.screenshot(screenshots / "search-zh.png")
    browser.goto(f"{server}/?lang=en")
    _no_page_errors(browser)


def test_pasted_log_is_diagnosed_and_an_outcome_reranks(server, browser, screenshots, real_kb):
    from kb.diagnosis import catalog_cause

    expected = yaml.safe_load((CASE / "expected.yaml").read_text(encoding="utf-8"))
    acceptable = {expected["root_cause"], *expected.get("also_ok", [])}
    browser.set_viewport(1280, 900)
    browser.goto(f"{server}/diagnoses/new?lang=en")
    browser.fill("#logs_text", (CASE / PASTED).read_text(encoding="utf-8"))
    browser.set_files("#log_files", [CASE / UPLOADED])
    if (CASE / "ds_config.json").is_file():
        browser.fill("#config_text", (CASE / "ds_config.json").read_text(encoding="utf-8"))
    if (CASE / "description.txt").is_file():
        browser.fill("#description", (CASE / "description.txt").read_text(encoding="utf-8"))
    browser.screenshot(screenshots / "diagnosis-new.png")
    browser.click("form[data-busy] button[type=submit]")
    url = browser.url()
    assert "/diagnoses/d" in url, f"{url}: {browser.text('main')[:800]}"
    diagnosis_id = url.rsplit("/", 1)[1].split("#", 1)[0]

    top = _top_cause(browser)
    assert catalog_cause(real_kb, top) in acceptable, f"top cause {top}, expected {sorted(acceptable)}"
    assert browser.evaluate("document.querySelectorAll('#paths svg.causal-graph .edge').length") > 0
    assert browser.evaluate("document.querySelectorAll('#lines tbody tr').length") > 0
    assert browser.evaluate("document.querySelectorAll('pre[data-copy] .copy-button').length") > 0  # JS ran
    browser.screenshot(screenshots / "diagnosis.png")

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
    shown_before = _ranking(browser)
    browser.click(f"form.outcome:has(input[value='{chosen['observe']}']) button")
    assert browser.url().split("#", 1)[0].endswith(f"/diagnoses/{diagnosis_id}")
    rerun = _api(server, f"/v1/diagnoses/{diagnosis_id}")
    assert chosen["observe"] in rerun["observations"]
    assert [(c["id"], c["probability"]) for c in rerun["causes"]] != before, "the ranking was recomputed"
    assert _top_cause(browser) == rerun["causes"][0]["id"]
    if flips:
        assert rerun["causes"][0]["id"] == chosen["leading_cause"] != top
        assert _ranking(browser) != shown_before
    assert "Recorded" in browser.text(".flashes")
    browser.screenshot(screenshots / "diagnosis-after-outcome.png")

    browser.goto(f"{server}/kb/causes/{catalog_cause(real_kb, top)}")
    assert browser.evaluate("document.querySelectorAll('svg.causal-graph .node').length") > 3
    browser.screenshot(screenshots / "cause.png")
    _no_page_errors(browser)


def test_pages_fit_a_phone_and_read_without_javascript(server, browser, screenshots):
    listing = _api(server, "/v1/diagnoses?limit=1")["items"]
    pages = {"search": "/?q=OOM", "cause": "/kb/causes/memory.foreign_process_on_gpu",
             "incident": f"/incidents/{SEEDED_INCIDENT}"}
    if listing:
        pages["diagnosis"] = f"/diagnoses/{listing[0]['id']}"
    browser.set_viewport(390, 844, mobile=True)
    try:
        for name, path in pages.items():
            browser.goto(f"{server}{path}")
            overflow = browser.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{path} is {overflow}px wider than a phone screen"
            browser.screenshot(screenshots / f"phone-{name}.png")
    finally:
        browser.set_viewport(1280, 900)

    browser.call("Emulation.setScriptExecutionDisabled", {"value": True}, session=True)
    try:
        for path in pages.values():
            browser.goto(f"{server}{path}")
            assert len(browser.text("main")) > 200, f"{path} shows its content without JavaScript"
    finally:
        browser.call("Emulation.setScriptExecutionDisabled", {"value": False}, session=True)
    _no_page_errors(browser)
