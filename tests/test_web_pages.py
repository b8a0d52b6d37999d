"""The web pages through Flask's test client: every page, its errors, sign-in, CSRF, escaping and CSP."""

from __future__ import annotations

import gzip
import io
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import escape

from dsdoctor.api.app import create_app
from dsdoctor.api.web import register_web
from dsdoctor.api.web.i18n import PHASE_NAMES, SCOPE_NAMES
from dsdoctor.api.web.security import CONTENT_SECURITY_POLICY, SECRET_FILE
from dsdoctor.kb.storage.tokens import TokenStore

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
OOM_LINE = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
            "capacity of 79.15 GiB of which 1.02 GiB is free. Process 48213 has 20.31 GiB memory in use.")
#: an OOM that several memory causes explain alike, so an experiment's outcome can change the leader
PLAIN_OOM_LINE = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
                  "total capacity of 79.15 GiB of which 1.02 GiB is free.")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def template_home(tmp_path_factory: pytest.TempPathFactory, real_kb) -> Path:
    """A data directory with the seeded incident store (built once; each test gets a copy)."""
    from dsdoctor.kb.incidents.store import IncidentStore

    home = tmp_path_factory.mktemp("web-template")
    with IncidentStore(home, valid_causes=list(real_kb.causes)) as store:
        assert store.count() > 20
    return home


@pytest.fixture
def home(tmp_path: Path, template_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "webhome"
    shutil.copytree(template_home, target)
    monkeypatch.setenv("DSDOCTOR_HOME", str(target))
    return target


def make_app(home: Path, kb, **config):
    app = create_app({"DSDOCTOR_HOME": str(home), "DSDOCTOR_KB": kb, "DSDOCTOR_PRELOAD": False, **config})
    register_web(app)
    return app


@pytest.fixture
def app(home: Path, real_kb):
    app = make_app(home, real_kb)
    yield app
    app.extensions["dsdoctor"]["services"].close()


@pytest.fixture
def client(app):
    return app.test_client()


def csrf_of(client, url: str = "/diagnoses/new") -> str:
    page = client.get(url)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True))
    assert found, f"no CSRF field on {url}"
    return found.group(1)


def diagnose(client, text: str = OOM_LINE, **extra) -> str:
    """Submit the new-diagnosis form; return the new diagnosis id."""
    response = client.post("/diagnoses/new", data={"csrf_token": csrf_of(client), "logs_text": text, **extra})
    assert response.status_code == 303, response.get_data(as_text=True)[:2000]
    found = re.fullmatch(r"/diagnoses/([A-Za-z0-9]+)", response.headers["Location"])
    assert found, response.headers["Location"]
    return found.group(1)


class PageScan(HTMLParser):
    """Tags, attributes and visible text of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def scan(html: str) -> PageScan:
    parser = PageScan()
    parser.feed(html)
    return parser


def assert_safe_page(html: str) -> PageScan:
    """No injected element or handler, no inline script or style: what the CSP would block anyway."""
    page = scan(html)
    for tag, attrs in page.tags:
        assert tag != "img", f"an <img> element reached the page: {attrs}"
        assert tag != "style", "inline <style> element"
        if tag == "script":
            assert (attrs.get("src") or "").startswith("/assets/"), f"inline or foreign script: {attrs}"
        for name in attrs:
            assert not name.startswith("on"), f"event handler attribute {name} on <{tag}>"
            assert name != "style", f"inline style attribute on <{tag}>"
    assert SCRIPT not in html and IMG not in html
    return page


def assert_shown_as_text(html: str, *payloads: str) -> None:
    page = assert_safe_page(html)
    text = "".join(page.text)
    values = " ".join(str(v) for _, attrs in page.tags for v in attrs.values())
    for payload in payloads:
        assert payload in text or payload in values, f"{payload!r} is not shown as text"
        assert str(escape(payload)) in html or payload.replace("<", "&lt;") in html


# ---------------------------------------------------------------- search


def test_search_finds_seeded_incidents_with_highlights_and_facets(client):
    response = client.get("/?q=OOM")
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert "<mark>OOM</mark>" in html
    assert "INC-SEED-01" in html
    page = assert_safe_page(html)
    facet_links = [a.get("href") for tag, a in page.tags if tag == "a" and "domain=memory" in (a.get("href") or "")]
    assert facet_links, "the domain facet links to a filtered search"
    assert re.search(r"memory</a>\s*<span class=\"count\">\d+</span>", html)


def test_search_filters_narrow_the_results(client):
    html = client.get("/?domain=comm").get_data(as_text=True)
    results = html.split('class="results"', 1)[1].split("</ol>", 1)[0]
    causes = set(re.findall(r'<a href="[^"]*"><code>([a-z]+\.[a-z_]+)</code></a>', results))
    assert causes and all(c.startswith("comm.") for c in causes)
    html = client.get("/?severity=critical&q=").get_data(as_text=True)
    assert "sev-critical" in html and "sev-low" not in html.split("results-heading", 1)[1]


def test_search_pages_with_a_cursor_without_repeats(client):
    first = client.get("/").get_data(as_text=True)
    ids_first = re.findall(r'href="/incidents/([^"]+)"', first)
    next_link = re.search(r'href="([^"]+)" rel="next"', first)
    assert len(ids_first) == 20 and next_link
    second = client.get(next_link.group(1).replace("&amp;", "&")).get_data(as_text=True)
    ids_second = re.findall(r'href="/incidents/([^"]+)"', second)
    assert ids_second and not set(ids_second) & set(ids_first)
    assert "First page" in second


def test_search_rejects_a_bad_date_with_a_message(client):
    response = client.get("/?since=2024-13-45")
    assert response.status_code == 400
    assert "since" in response.get_data(as_text=True) and 'aria-invalid="true"' in response.get_data(as_text=True)


def test_language_switch_changes_the_ui_and_is_remembered(client):
    html = client.get("/?lang=zh").get_data(as_text=True)
    assert '<html lang="zh-CN">' in html and "检索历史事故" in html
    assert "检索历史事故" in client.get("/").get_data(as_text=True)  # kept in the session
    html = client.get("/?lang=en").get_data(as_text=True)
    assert '<html lang="en">' in html and "Search past incidents" in html


def test_language_switch_link_keeps_the_query_but_not_url_for_options(client):
    html = client.get("/incidents/INC-SEED-01?incident_id=x&_external=1&_scheme=javascript&_anchor=a").get_data(
        as_text=True)
    link = re.search(r'class="lang-switch" href="([^"]+)"', html).group(1)
    assert link == "/incidents/INC-SEED-01?lang=zh"
    link = re.search(r'class="lang-switch" href="([^"]+)"', client.get("/?q=nccl&domain=comm").get_data(
        as_text=True)).group(1)
    assert link == "/?q=nccl&amp;domain=comm&amp;lang=zh"


def test_accept_language_picks_chinese(client):
    html = client.get("/", headers={"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}).get_data(as_text=True)
    assert "检索历史事故" in html


# ---------------------------------------------------------------- incidents


def test_incident_page_shows_the_record_and_similar_incidents(client):
    html = client.get("/incidents/INC-SEED-01").get_data(as_text=True)
    for heading in ("Phenomenon", "Scope", "Root cause", "Fix", "Regression check", "Prevention",
                    "Similar incidents"):
        assert heading in html
    assert "memory.foreign_process_on_gpu" in html
    similar = html.split("similar-heading", 1)[1]
    assert re.search(r'href="/incidents/INC-SEED-\d+"', similar)
    assert 'action="/incidents/INC-SEED-01/edit"' in html  # open mode may write


@pytest.mark.parametrize("url", ["/incidents/NO-SUCH-1", "/diagnoses/d0000", "/kb/causes/memory.nope"])
def test_unknown_ids_get_an_html_404(client, url):
    response = client.get(url)
    assert response.status_code == 404
    assert response.mimetype == "text/html"
    assert "404" in response.get_data(as_text=True)
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_editing_an_incident_saves_and_redirects(client, app):
    page = client.get("/incidents/INC-SEED-01").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    version = re.search(r'name="version" value="([^"]+)"', page).group(1)
    incident = app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-01")
    form = {k: incident[k] for k in ("title", "phenomenon", "scope", "root_cause", "root_cause_detail", "fix",
                                     "regression", "prevention", "severity", "status")}
    form.update(csrf_token=token, version=version, tags="oom, slurm", fix="killed the stale vLLM server")
    response = client.post("/incidents/INC-SEED-01/edit", data=form)
    assert response.status_code == 303 and response.headers["Location"] == "/incidents/INC-SEED-01"
    html = client.get("/incidents/INC-SEED-01").get_data(as_text=True)
    assert "killed the stale vLLM server" in html and "Saved." in html
    assert app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-01")["tags"] == ["oom", "slurm"]

    # the same form again is stale now: refused with 409, nothing overwritten
    form["fix"] = "an older edit"
    response = client.post("/incidents/INC-SEED-01/edit", data=form)
    assert response.status_code == 409
    assert app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-01")["fix"] == "killed the stale vLLM server"


def _edit_form(client, app, incident_id: str, **changes) -> dict[str, str]:
    page = client.get(f"/incidents/{incident_id}").get_data(as_text=True)
    incident = app.extensions["dsdoctor"]["services"].incidents().get(incident_id)
    form = {k: incident[k] for k in ("title", "phenomenon", "scope", "root_cause", "root_cause_detail", "fix",
                                     "regression", "prevention", "severity", "status")}
    form.update(csrf_token=re.search(r'name="csrf_token" value="([^"]+)"', page).group(1),
                version=re.search(r'name="version" value="([^"]+)"', page).group(1), tags="", **changes)
    return form


def test_issue14_a_stale_form_saved_in_the_same_second_is_refused(client, app):
    """Two forms opened on one version: the second save is a 409 even within the same second."""
    first = _edit_form(client, app, "INC-SEED-03", fix="first edit")
    second = dict(first, fix="second edit")
    assert client.post("/incidents/INC-SEED-03/edit", data=first).status_code == 303
    assert client.post("/incidents/INC-SEED-03/edit", data=second).status_code == 409
    assert app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-03")["fix"] == "first edit"


def test_issue14_saves_released_together_exactly_one_wins(app):
    """Eight saves of one version released at once from threads: one 303, seven 409."""
    import threading

    clients = [app.test_client() for _ in range(8)]
    forms = [_edit_form(c, app, "INC-SEED-04", fix=f"edit {i}") for i, c in enumerate(clients)]
    barrier = threading.Barrier(len(clients))
    codes: list[int] = []

    def save(c, form):
        barrier.wait()
        codes.append(c.post("/incidents/INC-SEED-04/edit", data=form).status_code)

    threads = [threading.Thread(target=save, args=pair) for pair in zip(clients, forms, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [303] + [409] * 7
    stored = app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-04")
    assert stored["version"] == int(forms[0]["version"]) + 1


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"title": ""}, "title", "must not be empty"),
    ({"root_cause": "memory.nope"}, "root_cause", "unknown root cause"),
    ({"tags": "has space"}, "tags", "without spaces"),
])
def test_editing_with_invalid_values_shows_the_errors(client, app, change, field, message):
    page = client.get("/incidents/INC-SEED-02").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    version = re.search(r'name="version" value="([^"]+)"', page).group(1)
    form = {"csrf_token": token, "version": version, "title": "t", "phenomenon": "x",
            "root_cause": "memory.fragmentation", "severity": "high", "status": "open", "tags": "", **change}
    response = client.post("/incidents/INC-SEED-02/edit", data=form)
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    assert message in html and f'id="{field}-error"' in html
    assert app.extensions["dsdoctor"]["services"].incidents().get("INC-SEED-02")["title"] != "t"


# ---------------------------------------------------------------- diagnoses


def test_new_diagnosis_form_is_labelled(client):
    html = client.get("/diagnoses/new").get_data(as_text=True)
    page = assert_safe_page(html)
    ids = {attrs.get("id") for tag, attrs in page.tags if tag in ("textarea", "input", "select") and attrs.get("id")}
    labelled = {attrs.get("for") for tag, attrs in page.tags if tag == "label"}
    assert {"logs_text", "log_files", "config_text", "config_file", "metrics_file", "description"} <= ids & labelled
    assert 'enctype="multipart/form-data"' in html


def test_new_diagnosis_form_offers_shipped_examples(client):
    from dsdoctor.api.web.examples import EXAMPLES

    html = client.get("/diagnoses/new?lang=en").get_data(as_text=True)
    assert_safe_page(html)  # links, not script: the strict CSP stays
    for slug in EXAMPLES:
        assert f'href="/diagnoses/new?example={slug}"' in html


@pytest.mark.parametrize("slug", ["only-rank-3-ooms-on-an-8-gpu-node-while-a-stale-process-holds-its-gpu",
                                  "two-node-job-hangs-at-the-first-broadcast-because-nccl-bound-docker0"])
def test_an_example_fills_the_form_from_its_seed_case(client, app, slug):
    import yaml

    case = ROOT / "seed_cases" / slug
    html = client.get(f"/diagnoses/new?example={slug}&lang=en").get_data(as_text=True)
    assert_safe_page(html)
    assert "Example loaded" in html and 'aria-current="true"' in html
    log_name = sorted(case.glob("*.log"))[0]
    assert str(escape(log_name.read_text(encoding="utf-8").splitlines()[0])) in html
    if (case / "ds_config.json").is_file():
        assert str(escape((case / "ds_config.json").read_text(encoding="utf-8").strip())) in html
    # submitted as it stands, the example is diagnosed as its expected.yaml says
    from dsdoctor.api.web.examples import form_of

    diagnosis_id = diagnose(client, **{"text": form_of(slug)["logs_text"],
                                       **{k: v for k, v in form_of(slug).items() if k != "logs_text"}})
    with app.app_context():
        stored = app.extensions["dsdoctor"]["services"].diagnoses().get(diagnosis_id).diagnosis
    expected = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8"))
    assert stored["causes"][0]["id"] in {expected["root_cause"], *expected.get("top3", [])}


def test_an_unknown_example_is_a_404_naming_it(client):
    response = client.get("/diagnoses/new?example=../../etc/passwd&lang=en")
    assert response.status_code == 404
    assert "There is no example ../../etc/passwd." in response.get_data(as_text=True)


def test_pasted_log_gives_a_stored_diagnosis_page(client, app):
    diagnosis_id = diagnose(client, text=PLAIN_OOM_LINE)  # experiments left to run
    response = client.get(f"/diagnoses/{diagnosis_id}")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    for section in ('id="looks"', 'id="causes"', 'id="paths"', 'id="lines"', 'id="experiments"', 'id="record"'):
        assert section in html
    with app.app_context():
        stored = app.extensions["dsdoctor"]["services"].diagnoses().get(diagnosis_id).diagnosis
    top = stored["causes"][0]
    assert top["id"].startswith("memory.")  # an OOM ranks a memory cause first
    first_cause = html.split('id="causes"', 1)[1].split("</li>", 1)[0]
    assert top["id"] in first_cause and f'{top["probability"] * 100:.0f}%' in first_cause
    looks = html.split('id="looks"', 1)[1].split("</section>", 1)[0]
    assert SCOPE_NAMES["en"][stored["scope"]] in looks and PHASE_NAMES["en"][stored["phase"]] in looks
    assert "<dt>Rank</dt><dd>3</dd>" in looks and "torch.OutOfMemoryError" in looks
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="causal-graph"' in html
    assert re.search(r'<td data-label="Rank">3</td><td data-label="Node">–</td>', html), "the line's rank"
    assert 'name="observe" value="x.' in html
    assert f'href="/diagnoses/{diagnosis_id}"' in client.get("/diagnoses").get_data(as_text=True)


def test_uploaded_files_are_read_including_gzip(client):
    data = {
        "csrf_token": csrf_of(client),
        "log_files": [(io.BytesIO(gzip.compress(OOM_LINE.encode())), "rank3.log.gz"),
                      (io.BytesIO(b"[rank0]: step 1 loss 2.1\n"), "rank0.log")],
        "config_file": (io.BytesIO(b'{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}'),
                        "ds_config.json"),
        "metrics_file": (io.BytesIO(b"name,rank,step,value\nloss,0,1,2.1\n"), "metrics.csv"),
        "description": "只有 3 号卡 OOM",
    }
    response = client.post("/diagnoses/new", data=data, content_type="multipart/form-data")
    assert response.status_code == 303
    html = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "<code>rank3:1</code>" in html  # the gzip file's line, named after the file


@pytest.mark.parametrize(("data", "field", "message"), [
    ({"logs_text": "   "}, "logs_text", "Paste log lines"),
    ({"logs_text": OOM_LINE, "config_text": "{not json"}, "config_text", "not valid JSON"),
    ({"logs_text": OOM_LINE, "config_text": "[1, 2]"}, "config_text", "JSON object"),
])
def test_new_diagnosis_refuses_unusable_input_with_a_message(client, data, field, message):
    response = client.post("/diagnoses/new", data={"csrf_token": csrf_of(client), **data})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    assert message in html and f'id="{field}-error"' in html


def test_recording_an_outcome_reranks_and_keeps_history(client, app):
    diagnosis_id = diagnose(client, text=PLAIN_OOM_LINE)
    store = app.extensions["dsdoctor"]["services"]
    with app.app_context():
        before = store.diagnoses().get(diagnosis_id).diagnosis
    top = before["causes"][0]["id"]
    outcome = next(o for x in before["next_experiments"] for o in x["outcomes"]
                   if o["leading_cause"] and o["leading_cause"] != top)
    response = client.post(f"/diagnoses/{diagnosis_id}/outcomes",
                           data={"csrf_token": csrf_of(client), "observe": outcome["observe"]})
    assert response.status_code == 303 and response.headers["Location"].startswith(f"/diagnoses/{diagnosis_id}")
    with app.app_context():
        after = store.diagnoses().get(diagnosis_id)
    assert after.diagnosis["observations"] == {outcome["observe"]: True}
    assert after.diagnosis["causes"][0]["id"] == outcome["leading_cause"] != top
    assert after.history[-1]["top_cause_before"] == top
    html = client.get(f"/diagnoses/{diagnosis_id}").get_data(as_text=True)
    assert f"{top} → {outcome['leading_cause']}" in html  # the flash message names the change
    assert "Recorded observations" in html


def test_recording_an_unknown_outcome_is_reported_not_fatal(client):
    diagnosis_id = diagnose(client)
    response = client.post(f"/diagnoses/{diagnosis_id}/outcomes",
                           data={"csrf_token": csrf_of(client), "observe": "x.nope=whatever"}, follow_redirects=True)
    assert response.status_code == 200
    assert "unknown experiment in observations" in response.get_data(as_text=True)


def test_record_as_incident_creates_a_prefilled_incident(client, app):
    diagnosis_id = diagnose(client)
    response = client.post(f"/diagnoses/{diagnosis_id}/incident",
                           data={"csrf_token": csrf_of(client), "severity": "high",
                                 "root_cause": "memory.foreign_process_on_gpu"})
    assert response.status_code == 303
    incident_id = response.headers["Location"].rsplit("/", 1)[1]
    incident = app.extensions["dsdoctor"]["services"].incidents().get(incident_id)
    assert incident["diagnosis_id"] == diagnosis_id
    assert incident["root_cause"] == "memory.foreign_process_on_gpu" and incident["severity"] == "high"
    assert "CUDA out of memory" in incident["phenomenon"]
    html = client.get(f"/incidents/{incident_id}").get_data(as_text=True)
    assert f'href="/diagnoses/{diagnosis_id}"' in html


# ---------------------------------------------------------------- knowledge base


def test_cause_page_draws_the_neighbourhood(client):
    html = client.get("/kb/causes/memory.foreign_process_on_gpu").get_data(as_text=True)
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="causal-graph"' in html
    assert 'data-node="m.gpu_memory_held_by_other"' in html and 'data-node="s.oom_other_process_on_gpu"' in html
    for heading in ("Fixes", "Regression check", "Prevention", "References", "Incidents with this root cause"):
        assert heading in html
    assert "INC-SEED-01" in html
    page = assert_safe_page(html)
    external = [a for tag, a in page.tags if tag == "a" and (a.get("href") or "").startswith("http")]
    assert external and all(a.get("rel") == "noopener noreferrer" for a in external)


def test_cause_list_links_every_cause(client, real_kb):
    html = client.get("/kb/causes").get_data(as_text=True)
    for cause_id in real_kb.causes:
        assert f'href="/kb/causes/{cause_id}"' in html


# ---------------------------------------------------------------- security


def test_every_page_sends_a_strict_csp(client):
    diagnosis_id = diagnose(client)
    for url in ("/", "/?q=nccl", "/incidents/INC-SEED-01", "/diagnoses/new", "/diagnoses",
                f"/diagnoses/{diagnosis_id}", "/kb/causes", "/kb/causes/comm.collective_mismatch",
                "/assets/web.css", "/assets/web.js", "/incidents/nope"):
        response = client.get(url)
        csp = response.headers.get("Content-Security-Policy", "")
        assert csp == CONTENT_SECURITY_POLICY, url
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        if response.mimetype == "text/html":
            assert_safe_page(response.get_data(as_text=True))


@pytest.mark.parametrize("url", ["/diagnoses/new", "/incidents/INC-SEED-01/edit", "/logout"])
def test_posts_without_the_csrf_token_are_refused(client, url):
    client.get("/")  # a session exists, but the form does not carry its token
    response = client.post(url, data={"logs_text": OOM_LINE, "title": "changed"})
    assert response.status_code == 400
    assert "expired" in response.get_data(as_text=True)
    response = client.post(url, data={"logs_text": OOM_LINE, "csrf_token": "forged" * 8})
    assert response.status_code == 400


def test_issue16_a_csrf_token_expires(client, app, monkeypatch):
    import time
    import types

    import itsdangerous.timed

    token = csrf_of(client)
    limit = app.config["WTF_CSRF_TIME_LIMIT"]
    assert 3600 <= limit <= 24 * 3600  # a working session, not forever
    later = types.SimpleNamespace(time=lambda: time.time() + limit + 5)
    monkeypatch.setattr(itsdangerous.timed, "time", later)  # the clock Flask-WTF's signer reads
    response = client.post("/diagnoses/new", data={"csrf_token": token, "logs_text": OOM_LINE})
    assert response.status_code == 400
    assert "The form has expired (it was opened more than 8 hours ago)" in response.get_data(as_text=True)
    monkeypatch.undo()
    assert client.post("/diagnoses/new", data={"csrf_token": token, "logs_text": OOM_LINE}).status_code == 303


def test_issue16_a_token_of_another_session_is_refused(client, app):
    other = app.test_client()
    foreign = csrf_of(other)
    csrf_of(client)  # this browser has a session of its own
    response = client.post("/diagnoses/new", data={"csrf_token": foreign, "logs_text": OOM_LINE})
    assert response.status_code == 400


def test_issue16_the_rest_api_needs_no_csrf_token(client):
    response = client.post("/v1/diagnoses", json={"description": "CUDA out of memory on rank 3"})
    assert response.status_code in (200, 201), response.get_data(as_text=True)[:500]


def test_outcome_and_incident_posts_need_the_csrf_token(client, app):
    diagnosis_id = diagnose(client)
    count = app.extensions["dsdoctor"]["services"].incidents().count()
    assert client.post(f"/diagnoses/{diagnosis_id}/outcomes", data={"observe": "x.a=b"}).status_code == 400
    assert client.post(f"/diagnoses/{diagnosis_id}/incident", data={}).status_code == 400
    assert app.extensions["dsdoctor"]["services"].incidents().count() == count


def test_untrusted_text_is_escaped_on_every_page(client, app):
    # a log line and a file name holding markup
    data = {"csrf_token": csrf_of(client),
            "logs_text": f"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                         f"{SCRIPT} {IMG} GPU 3 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
            "log_files": [(io.BytesIO(OOM_LINE.encode()), f"{IMG}.log")]}
    response = client.post("/diagnoses/new", data=data, content_type="multipart/form-data")
    assert response.status_code == 303
    diagnosis_id = response.headers["Location"].rsplit("/", 1)[1]
    assert_shown_as_text(client.get(f"/diagnoses/{diagnosis_id}").get_data(as_text=True), SCRIPT, IMG)

    # the incident recorded from it carries the line in its title and phenomenon
    response = client.post(f"/diagnoses/{diagnosis_id}/incident", data={"csrf_token": csrf_of(client)})
    incident_id = response.headers["Location"].rsplit("/", 1)[1]
    # and an incident whose title holds both payloads
    store = app.extensions["dsdoctor"]["services"].incidents()
    crafted = store.add({"title": f"OOM {SCRIPT} {IMG}", "phenomenon": f"rank 3 OOM {SCRIPT}",
                         "root_cause": "memory.foreign_process_on_gpu", "tags": ["xss"]})
    for url in (f"/incidents/{incident_id}", f"/incidents/{crafted['id']}"):
        assert_shown_as_text(client.get(url).get_data(as_text=True), SCRIPT, IMG)
    for url in ("/?q=OOM", "/?q=script", "/?tag=xss", "/kb/causes/memory.foreign_process_on_gpu",
                "/incidents/INC-SEED-01", f"/diagnoses/{diagnosis_id}"):
        html = client.get(url).get_data(as_text=True)
        assert_safe_page(html)
    tagged = client.get("/?tag=xss").get_data(as_text=True)
    assert_shown_as_text(tagged, SCRIPT, IMG)
    assert re.findall(r'href="/incidents/([^"]+)"', tagged.split('class="results"', 1)[1]) == [crafted["id"]]
    assert "<mark>script</mark>" in client.get("/?q=script").get_data(as_text=True)


# ---------------------------------------------------------------- sign-in


def test_pages_are_open_without_tokens_on_loopback(client):
    response = client.get("/")
    assert response.status_code == 200 and "Open mode" in response.get_data(as_text=True)


def test_pages_need_a_token_when_tokens_exist(home, real_kb, store_backend):
    tokens = TokenStore(home)
    reader, _ = tokens.create("reader", "incidents:read")
    writer, _ = tokens.create("writer", "admin")
    app = make_app(home, real_kb)
    client = app.test_client()
    response = client.get("/incidents/INC-SEED-01")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login?next=/incidents/INC-SEED-01")
    assert client.get("/diagnoses/new").status_code == 302
    assert client.get("/assets/web.css").status_code == 200  # assets stay public

    token = csrf_of(client, "/login")
    response = client.post("/login", data={"csrf_token": token, "token": "dsd_wrong", "next": "/"})
    assert response.status_code == 401 and "not valid" in response.get_data(as_text=True)
    response = client.post("/login", data={"csrf_token": token, "token": reader, "next": "/incidents/INC-SEED-01"})
    assert response.status_code == 303 and response.headers["Location"] == "/incidents/INC-SEED-01"
    cookie = client.get_cookie("dsdoctor_session")
    assert cookie is not None and reader not in cookie.value  # only the hash is kept
    html = client.get("/incidents/INC-SEED-01").get_data(as_text=True)
    assert "Signed in as reader" in html
    assert "/edit" not in html  # no incidents:write, no edit form
    assert client.get("/diagnoses/new").status_code == 403  # needs diagnose

    tokens.revoke("reader")  # revocation applies at the next request
    assert client.get("/incidents/INC-SEED-01").status_code == 302

    token = csrf_of(client, "/login")
    client.post("/login", data={"csrf_token": token, "token": writer})
    assert client.get("/diagnoses/new").status_code == 200
    response = client.post("/logout", data={"csrf_token": csrf_of(client)})
    assert response.status_code == 303
    assert client.get("/").status_code == 302
    app.extensions["dsdoctor"]["services"].close()


def test_closed_bind_without_tokens_needs_sign_in(home, real_kb):
    app = make_app(home, real_kb, DSDOCTOR_OPEN_WITHOUT_TOKENS=False)
    client = app.test_client()
    assert client.get("/").status_code == 302
    assert client.get("/login").status_code == 200


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example", "javascript:x"])
def test_login_never_redirects_off_site(home, real_kb, target):
    secret, _ = TokenStore(home).create("someone", "admin")
    client = make_app(home, real_kb).test_client()
    response = client.post("/login", data={"csrf_token": csrf_of(client, "/login"), "token": secret, "next": target})
    assert response.status_code == 303 and response.headers["Location"] == "/"


def test_a_browser_signed_in_on_one_replica_is_signed_in_on_all(home, real_kb, pg_url, template_home, tmp_path):
    """Two replicas with their own data directories on one PostgreSQL share the session key and the
    session records: sign in through one, browse through the other, sign out anywhere."""
    other = tmp_path / "replica-b"
    shutil.copytree(template_home, other)
    secret, _ = TokenStore(home).create("fleet-user", "admin")
    a, b = make_app(home, real_kb), make_app(other, real_kb)
    assert a.config["SECRET_KEY"] == b.config["SECRET_KEY"] and not (home / SECRET_FILE).exists()
    browser = a.test_client()
    browser.post("/login", data={"csrf_token": csrf_of(browser, "/login"), "token": secret, "next": "/"})
    cookie = browser.get_cookie("dsdoctor_session")
    on_b = b.test_client()
    on_b.set_cookie("dsdoctor_session", cookie.value)
    assert on_b.get("/diagnoses/new").status_code == 200  # replica B knows the session A started
    assert on_b.post("/logout", data={"csrf_token": csrf_of(on_b)}).status_code == 303
    assert browser.get("/diagnoses/new").status_code == 302  # signed out on B: ended on A too
    for app in (a, b):
        app.extensions["dsdoctor"]["services"].close()


def test_session_key_is_made_once_and_private(home, real_kb):
    first = make_app(home, real_kb)
    key_file = home / SECRET_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    second = make_app(home, real_kb)
    assert first.config["SECRET_KEY"] == second.config["SECRET_KEY"] and len(first.config["SECRET_KEY"]) == 32


def test_register_web_is_idempotent(app):
    register_web(app)
    assert "web" in app.blueprints


def test_api_errors_stay_problem_json(client):
    response = client.get("/v1/incidents/NO-SUCH-1")
    assert response.status_code == 404 and response.mimetype == "application/problem+json"


def test_issue14_a_copied_session_cookie_stops_working_after_logout(home, real_kb):
    secret, _ = TokenStore(home).create("someone", "admin")
    app = make_app(home, real_kb)
    browser, thief = app.test_client(), app.test_client()
    browser.post("/login", data={"csrf_token": csrf_of(browser, "/login"), "token": secret})
    thief.set_cookie("dsdoctor_session", browser.get_cookie("dsdoctor_session").value)
    assert thief.get("/incidents/INC-SEED-01").status_code == 200
    assert browser.post("/logout", data={"csrf_token": csrf_of(browser)}).status_code == 303
    assert thief.get("/incidents/INC-SEED-01").status_code == 302  # back to /login
    app.extensions["dsdoctor"]["services"].close()


def test_issue14_an_expired_token_signs_the_browser_out(home, real_kb):
    import datetime as dt
    import sqlite3

    tokens = TokenStore(home)
    secret, _ = tokens.create("short", "admin", expires_in=dt.timedelta(hours=1))
    app = make_app(home, real_kb)
    client = app.test_client()
    client.post("/login", data={"csrf_token": csrf_of(client, "/login"), "token": secret})
    assert client.get("/").status_code == 200
    with sqlite3.connect(tokens.path) as conn:
        conn.execute("UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z'")
    conn.close()
    assert client.get("/").status_code == 302
    app.extensions["dsdoctor"]["services"].close()


@pytest.mark.parametrize("target", ["/\r\nSet-Cookie: x=1", "/\rLocation: https://evil.example", "/a\nb"])
def test_issue14_login_next_with_cr_lf_is_no_500(home, real_kb, target):
    from urllib.parse import quote

    secret, _ = TokenStore(home).create("someone", "admin")
    client = make_app(home, real_kb).test_client()
    assert client.get("/login?next=" + quote(target, safe="/%")).status_code == 200
    response = client.post("/login", data={"csrf_token": csrf_of(client, "/login"), "token": secret, "next": target})
    assert response.status_code == 303 and response.headers["Location"] == "/"


def test_issue14_open_mode_refuses_cross_site_writes_and_foreign_hosts(client):
    evil = {"Origin": "https://evil.example"}
    assert client.post("/v1/diagnoses", data={"description": "x"}, headers=evil).status_code == 403
    response = client.post("/v1/diagnoses/d1/incident", headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403 and response.mimetype == "application/problem+json"
    assert client.get("/v1/kb/causes", headers={"Host": "evil.example:8000"}).status_code == 403  # DNS rebinding
    assert client.get("/healthz", headers={"Host": "127.0.0.1:8000"}).status_code == 200
    same_site = {"Origin": "http://localhost:8000", "Sec-Fetch-Site": "same-origin"}
    assert client.post("/v1/chatops/query", json={"text": "help"}, headers=same_site).status_code == 200
    assert client.post("/v1/chatops/query", json={"text": "help"}).status_code == 200  # curl sends neither


def test_issue14_docs_cannot_be_framed(client):
    for url in ("/docs", "/docs/assets/init.js"):
        response = client.get(url)
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]

def test_outcome_buttons_say_plainly_what_the_answer_would_change(client, app):
    # issue 15: "... activations - 16% likely; then memory.leak_across_steps leads" read as a contradiction
    diagnosis_id = diagnose(client, text=PLAIN_OOM_LINE)  # experiments left to run
    store = app.extensions["dsdoctor"]["services"]
    with app.app_context():
        d = store.diagnoses().get(diagnosis_id).diagnosis
    html = client.get(f"/diagnoses/{diagnosis_id}").get_data(as_text=True)
    assert "likely; then" not in html
    top = d["causes"][0]["id"]
    outcomes = [o for x in d["next_experiments"] for o in x["outcomes"]]
    assert outcomes
    for o in outcomes:
        if o["leading_cause"] == top:
            assert f"This answer keeps {top} the leading cause" in html
        else:
            assert f"This answer would make {o['leading_cause']} the leading cause" in html
