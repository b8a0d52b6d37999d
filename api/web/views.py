"""The ``web`` blueprint: incident search, incident records, diagnoses and root causes as HTML pages."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    url_for,
)
from markupsafe import Markup
from werkzeug.exceptions import HTTPException

from dsdoctor.api.errors import ApiError
from dsdoctor.api.services import services
from dsdoctor.api.web import security
from dsdoctor.api.web.backend import FormProblem
from dsdoctor.api.web.highlight import safe_highlight
from dsdoctor.api.web.i18n import HTML_LANG, LANG_NAMES, PHASE_NAMES, SCOPE_NAMES, pick_lang, translate
from dsdoctor.kb.errors import DsdoctorError, KnowledgeError
from dsdoctor.kb.redact import redact_text

log = logging.getLogger("dsdoctor.web")
F = TypeVar("F", bound=Callable[..., Any])

bp = Blueprint("web", __name__, template_folder="templates", static_folder="static", static_url_path="/assets")

PAGE_SIZE = 20
SEVERITIES = ("critical", "high", "medium", "low")
STATUSES = ("open", "resolved")
EDITABLE = ("title", "phenomenon", "scope", "root_cause", "root_cause_detail", "fix", "regression", "prevention",
            "severity", "status", "tags")
OPEN_ENDPOINTS = {"web.static", "web.login", "web.logout"}
KNOWN_ERRORS = {"error_400", "error_401", "error_403", "error_404", "error_413", "error_422", "error_500", "error_503"}


def t(key: str, **values: Any) -> str:
    """The UI string ``key`` in the language of this request."""
    return translate(g.get("lang", "en"), key, **values)


def needs(scope: str) -> Callable[[F], F]:
    """Mark a page as needing ``scope`` when API tokens are configured (same scopes as the REST API)."""

    def decorator(func: F) -> F:
        func.web_scope = scope  # type: ignore[attr-defined]
        return func

    return decorator


# ---------------------------------------------------------------- request hooks


@bp.before_request
def _before() -> Any:
    g.lang = pick_lang()
    if request.endpoint == "web.static":
        return None
    if request.method == "POST":
        problem = security.csrf_problem()
        if problem:
            hours = round(current_app.config["WTF_CSRF_TIME_LIMIT"] / 3600, 1)
            return error_page(400, t("csrf_expired", hours=f"{hours:g}") if "expired" in problem else t("csrf_failed"))
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    viewer = security.current_viewer()
    g.viewer = viewer
    view = current_app.view_functions.get(request.endpoint or "")
    scope = getattr(view, "web_scope", "diagnose")
    if viewer is None:
        if request.method == "GET":
            return redirect(url_for("web.login", next=request.full_path.rstrip("?")))
        return error_page(401, t("login_intro"))
    if not viewer.allows(scope):
        return error_page(403, t("needs_scope", name=viewer.name, scope=scope))
    return None


@bp.after_request
def _after(response):
    return security.add_security_headers(response)


@bp.app_template_global("lang_switch_url")
def lang_switch_url() -> str:
    """This page in the other language (query string kept)."""
    other = "zh" if g.get("lang") == "en" else "en"
    if request.endpoint is None or request.method != "GET":
        return url_for("web.index", lang=other)
    view_args = request.view_args or {}
    # query keys url_for treats specially (_external, _scheme, _anchor...) or that name a path part are dropped
    args = {k: v for k, v in request.args.lists() if not k.startswith("_") and k not in view_args and k != "lang"}
    return url_for(request.endpoint, **view_args, **args, lang=other)


@bp.context_processor
def _template_context() -> dict[str, Any]:
    lang = g.get("lang", "en")
    return {
        "t": t, "lang": lang, "html_lang": HTML_LANG.get(lang, "en"), "viewer": g.get("viewer"),
        "csrf_token": security.csrf_token, "csrf_field": security.CSRF_FIELD, "highlight": safe_highlight,
        "scope_name": lambda s: SCOPE_NAMES[lang].get(s or "unknown", s),
        "phase_name": lambda p: PHASE_NAMES[lang].get(p or "unknown", p),
        "percent": percent, "can": can, "auth_enabled": _auth_enabled(),
    }


def _auth_enabled() -> bool:
    try:
        return security.auth_required()
    except Exception:
        return False


def can(scope: str) -> bool:
    viewer = g.get("viewer")
    return bool(viewer and viewer.allows(scope))


def percent(p: Any) -> str:
    try:
        value = float(p)
    except (TypeError, ValueError):
        return "–"
    if value != 0 and value < 0.001:
        return "<0.1%"
    return f"{value * 100:.1f}%" if value < 0.1 else f"{value * 100:.0f}%"


# ---------------------------------------------------------------- errors


def error_page(status: int, message: str, *, title: str | None = None, reference: str | None = None):
    """An HTML error page with ``status`` (never a traceback)."""
    key = f"error_{status}"
    message = redact_text(message)  # an id or path a client sent may hold a secret
    heading = title or (t(key) if key in KNOWN_ERRORS else t("error_title"))
    body = render_template("error.html", status=status, heading=heading, message=message, reference=reference)
    return current_app.response_class(body, status=status, mimetype="text/html")


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException):
    status = exc.code or 500
    if status == 413:
        limit = current_app.config.get("MAX_CONTENT_LENGTH") or 0
        return error_page(413, f"{exc.description} (limit {limit / (1024 * 1024):g} MiB, DSDOCTOR_MAX_BODY_MB)")
    return error_page(status, exc.description or "")


@bp.errorhandler(ApiError)
def _api_error(exc: ApiError):
    message = exc.detail
    if exc.errors:
        message += " — " + "; ".join(f"{e.get('field')}: {e.get('message')}" for e in exc.errors)
    return error_page(exc.status, message)


@bp.errorhandler(KnowledgeError)
def _kb_error(exc: KnowledgeError):
    return error_page(503, f"the knowledge base failed to load: {exc}")


@bp.errorhandler(DsdoctorError)
def _dsdoctor_error(exc: DsdoctorError):
    return error_page(int(getattr(exc, "http_status", 422)), str(exc))


@bp.errorhandler(Exception)
def _unexpected(exc: Exception):
    reference = secrets.token_hex(6)
    log.error("internal error %s on %s %s", reference, request.method, request.path, exc_info=exc)
    return error_page(500, t("error_500"), reference=reference)


def _store_or_none() -> Any:
    try:
        return services().incidents()
    except ApiError:
        return None


def _kb() -> Any:
    return services().kb()


def cause_title(cause_id: str | None) -> str:
    """The title of a knowledge-base cause in the page language ('' when unknown)."""
    if not cause_id:
        return ""
    try:
        node = _kb().causes.get(cause_id)
    except KnowledgeError:
        return ""
    return node.title.get(g.lang) if node else ""


bp.add_app_template_global(cause_title, "cause_title")


# ---------------------------------------------------------------- sign-in


@bp.route("/login", methods=["GET", "POST"])
def login():
    """Paste an API token once; the session keeps its hash."""
    target = security.safe_next(request.values.get("next"), url_for("web.index"))
    if not security.auth_required():
        return redirect(target)
    error = None
    if request.method == "POST":
        viewer = security.sign_in(request.form.get("token", ""))
        if viewer is not None:
            return redirect(target, code=303)
        error = t("login_failed")
    body = render_template("login.html", next=target, error=error)
    return current_app.response_class(body, status=401 if error else 200, mimetype="text/html")


@bp.route("/logout", methods=["POST"])
def logout():
    security.sign_out()
    return redirect(url_for("web.login") if security.auth_required() else url_for("web.index"), code=303)


# ---------------------------------------------------------------- search


def _search_args() -> dict[str, str]:
    return {k: request.args.get(k, "").strip() for k in ("q", "cause", "domain", "severity", "tag", "since", "until")}


def _with(args: dict[str, str], **changes: str | None) -> str:
    """The search URL for ``args`` with some changed (None removes); cursors are dropped."""
    merged = {k: v for k, v in {**args, **changes}.items() if v}
    return url_for("web.index", **merged)


@bp.route("/")
@needs("incidents:read")
def index():
    """Search past incidents with filters, facets, highlights and cursor pages."""
    args = _search_args()
    cursor = request.args.get("cursor") or None
    try:
        page = max(1, int(request.args.get("page", "1")))
    except ValueError:
        page = 1
    store = services().incidents()
    errors: dict[str, str] = {}
    found: dict[str, Any] = {"items": [], "facets": {}, "next_cursor": None, "total": 0}
    try:
        found = store.search(q=args["q"], cause=args["cause"] or None, domain=args["domain"] or None,
                             severity=args["severity"] or None, tag=args["tag"] or None, since=args["since"] or None,
                             until=args["until"] or None, limit=PAGE_SIZE, cursor=cursor)
    except DsdoctorError as exc:
        messages = getattr(exc, "messages", None) or {"q": [str(exc)]}
        errors = {k: " ".join(v) for k, v in messages.items()}
    kb = _kb()
    causes = sorted(kb.causes.values(), key=lambda c: c.id)
    next_url = None
    if found.get("next_cursor"):
        next_url = url_for("web.index", **{k: v for k, v in args.items() if v}, cursor=found["next_cursor"],
                           page=page + 1)
    first_url = _with(args) if cursor else None
    recent = []
    if can("diagnose"):
        recent, _ = services().diagnoses().list(limit=5)
    body = render_template(
        "search.html", args=args, found=found, errors=errors, causes=causes, domains=_domains(kb),
        severities=SEVERITIES, next_url=next_url, first_url=first_url, page=page, with_=_with, recent=recent,
    )
    return current_app.response_class(body, status=400 if errors else 200, mimetype="text/html")


def _domains(kb: Any) -> list[str]:
    from dsdoctor.kb.model import DOMAINS

    return [d for d in DOMAINS if any(c.domain == d for c in kb.causes.values())]


# ---------------------------------------------------------------- incidents


def _incident_or_404(incident_id: str) -> dict[str, Any]:
    from dsdoctor.kb.incidents import NotFoundError

    try:
        return services().incidents().get(incident_id)
    except NotFoundError:
        abort(404, t("unknown_incident", id=incident_id))


def _similar(incident_id: str) -> list[dict[str, Any]]:
    try:
        return services().incidents().similar(incident_id, limit=5)
    except DsdoctorError:
        return []


def _render_incident(incident: dict[str, Any], *, form: dict[str, Any] | None = None,
                     errors: dict[str, str] | None = None, status: int = 200, notice: str | None = None):
    kb = _kb()
    body = render_template(
        "incident.html", incident=incident, similar=_similar(incident["id"]), form=form or _form_values(incident),
        errors=errors or {}, severities=SEVERITIES, statuses=STATUSES, notice=notice,
        causes=sorted(kb.causes.values(), key=lambda c: c.id), known_cause=incident["root_cause"] in kb.causes,
    )
    return current_app.response_class(body, status=status, mimetype="text/html")


def _form_values(incident: dict[str, Any]) -> dict[str, Any]:
    values = {k: incident.get(k, "") for k in EDITABLE}
    values["tags"] = ", ".join(incident.get("tags") or [])
    values["version"] = incident.get("version", "")
    return values


@bp.route("/incidents/<incident_id>")
@needs("incidents:read")
def incident(incident_id: str):
    """One post-mortem record with its similar incidents (and an edit form for incidents:write)."""
    return _render_incident(_incident_or_404(incident_id))


@bp.route("/incidents/<incident_id>/edit", methods=["POST"])
@needs("incidents:write")
def edit_incident(incident_id: str):
    """Save the edit form; a concurrent change or a validation error shows the form again.

    The form carries the version it was made from; the store applies the change only to that
    version (compared inside the UPDATE), so of two saves of one version exactly one wins."""
    from dsdoctor.api.web.backend import update_incident
    from dsdoctor.kb.incidents import StaleVersionError, ValidationError

    current = _incident_or_404(incident_id)
    form = {k: request.form.get(k, "") for k in EDITABLE}
    form["version"] = request.form.get("version", "")
    if not form["version"].isascii() or not form["version"].isdigit():
        return _render_incident(current, form=form, status=422, errors={"version": t("edit_conflict")})
    patch: dict[str, Any] = {k: form[k] for k in EDITABLE if k != "tags"}
    patch["tags"] = [tag.strip() for tag in form["tags"].replace("，", ",").split(",") if tag.strip()]
    try:
        update_incident(incident_id, patch, version=int(form["version"]))
    except StaleVersionError:
        return _render_incident(_incident_or_404(incident_id), form=form, status=409, notice=t("edit_conflict"))
    except ValidationError as exc:
        errors = {k.split(".")[0]: " ".join(v) for k, v in exc.messages.items()}
        return _render_incident(current, form=form, errors=errors, status=422)
    flash(t("saved"), "success")
    return redirect(url_for("web.incident", incident_id=incident_id), code=303)


# ---------------------------------------------------------------- diagnoses


@bp.route("/diagnoses/new", methods=["GET", "POST"])
@needs("diagnose")
def new_diagnosis():
    """The evidence form; a POST diagnoses, stores and redirects to the result."""
    from dsdoctor.api.web import evidence_form as ef
    from dsdoctor.api.web import examples
    from dsdoctor.api.web.backend import create_diagnosis

    errors: dict[str, str] = {}
    status = 200
    form: Any = request.form
    slug = request.args.get("example")
    if request.method == "GET" and slug is not None:  # a shipped example fills the form (no script needed)
        form = examples.form_of(slug)
        if form is None:
            abort(404, t("unknown_example", id=slug))
    if request.method == "POST":
        try:
            evidence = ef.evidence_from_form(request.form, request.files)
            result = create_diagnosis(evidence, lang=g.lang)
            return redirect(url_for("web.diagnosis", diagnosis_id=result["id"]), code=303)
        except FormProblem as exc:
            errors = {k: t("need_input") if v == ef.NEED_INPUT else v for k, v in exc.errors.items()}
            status = exc.status
    body = render_template("new_diagnosis.html", form=form, errors=errors, fields=_form_fields(),
                           examples=examples.available(), example=slug)
    return current_app.response_class(body, status=status, mimetype="text/html")


def _form_fields() -> dict[str, str]:
    from dsdoctor.api.web import evidence_form as ef

    return {"logs_text": ef.LOGS_TEXT, "log_files": ef.LOG_FILES, "config_text": ef.CONFIG_TEXT,
            "config_file": ef.CONFIG_FILE, "metrics_file": ef.METRICS_FILE, "description": ef.DESCRIPTION}


@bp.route("/diagnoses")
@needs("diagnose")
def diagnoses():
    """Stored diagnoses, newest first (cursor pages)."""
    from dsdoctor.kb.storage.diagnoses import InvalidCursor

    try:
        items, next_cursor = services().diagnoses().list(limit=PAGE_SIZE, cursor=request.args.get("cursor") or None)
    except InvalidCursor as exc:
        return error_page(400, str(exc))
    body = render_template("diagnoses.html", items=items, next_cursor=next_cursor)
    return current_app.response_class(body, mimetype="text/html")


def _stored_or_404(diagnosis_id: str):
    from dsdoctor.api.web.backend import stored_diagnosis

    stored = stored_diagnosis(diagnosis_id)
    if stored is None:
        abort(404, t("unknown_diagnosis", id=diagnosis_id))
    return stored


def _localise(diagnosis: dict[str, Any], kb: Any, lang: str) -> dict[str, Any]:
    """Titles of causes, symptoms, experiments and outcomes in the page language (from the knowledge base)."""
    for cause in diagnosis.get("causes") or []:
        node = kb.causes.get(cause.get("id"))
        if node:
            cause["title"] = node.title.get(lang)
    for symptom in diagnosis.get("symptoms") or []:
        node = kb.symptoms.get(symptom.get("id"))
        if node:
            symptom["title"] = node.title.get(lang)
    for proposal in diagnosis.get("next_experiments") or []:
        node = kb.experiments.get(proposal.get("id"))
        if node:
            proposal["title"] = node.title.get(lang)
            proposal["how"] = node.how.get(lang)
            titles = {o.id: o.title.get(lang) for o in node.outcomes}
            for outcome in proposal.get("outcomes") or []:
                outcome["title"] = titles.get(outcome.get("id"), outcome.get("title"))
    return diagnosis


def observation_label(key: str) -> str:
    """``x.single_gpu_repro=reproduces`` -> "<experiment title>: <outcome title>" in the page language."""
    try:
        kb = _kb()
    except KnowledgeError:
        return key
    exp_id, _, outcome = key.partition("=")
    experiment = kb.experiments.get(exp_id)
    if experiment is None:
        node = kb.symptoms.get(key)
        return f"{node.title.get(g.lang)} ({key})" if node else key
    titles = {o.id: o.title.get(g.lang) for o in experiment.outcomes}
    return f"{experiment.title.get(g.lang)}: {titles.get(outcome, outcome)}"


bp.add_app_template_global(observation_label, "observation_label")


@bp.route("/diagnoses/<diagnosis_id>")
@needs("diagnose")
def diagnosis(diagnosis_id: str):
    """The three looks, ranked causes, matched lines, causal paths, next experiments, record as incident."""
    from dsdoctor.api.web.svg import diagnosis_drawing, render

    stored = _stored_or_404(diagnosis_id)
    kb = _kb()
    result = _localise(dict(stored.diagnosis), kb, g.lang)
    drawing = diagnosis_drawing(result, kb, g.lang, top=3,
                                cause_href=lambda cid: url_for("web.cause", cause_id=cid))
    drawing.title, drawing.description = t("causal_path_title"), t("causal_path_desc")
    drawing.column_titles = {"symptom": t("col_symptoms"), "mechanism": t("col_mechanisms"), "cause": t("col_causes")}
    graph = render(drawing, prefix="paths") if drawing.edges else Markup("")
    body = render_template(
        "diagnosis.html", d=result, stored=stored, graph=graph, paths=_path_rows(result, kb),
        lines=_matched_lines(result),
        history=stored.history, lang_note=stored.lang != g.lang and t("lang_note", lang=LANG_NAMES[g.lang].get(
            stored.lang, stored.lang)),
        causes=sorted(kb.causes.values(), key=lambda c: c.id), severities=SEVERITIES,
    )
    return current_app.response_class(body, mimetype="text/html")


def _matched_lines(diagnosis: dict[str, Any], limit: int = 80) -> list[dict[str, Any]]:
    """Every matched log line once (by source and line number), with the symptoms it showed, in time order."""
    lines: dict[tuple[Any, ...], dict[str, Any]] = {}
    for symptom in diagnosis.get("symptoms") or []:
        for ref in symptom.get("line_refs") or []:
            if ref.get("source") == "derived" or not ref.get("text"):
                continue  # a derived symptom (scope, phase) has no log line of its own
            key = (ref.get("source"), ref.get("lineno"), ref.get("text"))
            row = lines.setdefault(key, {**ref, "symptoms": []})
            if symptom.get("id") not in [s["id"] for s in row["symptoms"]]:
                row["symptoms"].append({"id": symptom.get("id"), "title": symptom.get("title")})
    rows = sorted(lines.values(), key=lambda r: (r.get("time") is None, str(r.get("time") or ""),
                                                 str(r.get("source") or ""), r.get("lineno") or 0))
    return rows[:limit]


def _path_rows(diagnosis: dict[str, Any], kb: Any) -> list[dict[str, Any]]:
    """The drawn paths as rows for the text version (symptom, mechanism, cause with titles and strengths)."""
    rows = []
    for cause in (diagnosis.get("causes") or [])[:3]:
        for path in cause.get("paths") or []:
            if len(path) != 3:
                continue
            sid, mid, cid = path
            mech = kb.mechanisms.get(mid)
            rows.append({
                "symptom": sid, "symptom_title": kb.symptoms[sid].title.get(g.lang) if sid in kb.symptoms else sid,
                "mechanism": mid, "mechanism_title": mech.title.get(g.lang) if mech else mid,
                "cause": cid, "cause_title": cause.get("title", cid),
                "m_to_s": mech.symptoms.get(sid) if mech else None,
                "c_to_m": kb.causes[cid].mechanisms.get(mid) if cid in kb.causes else None,
            })
    return rows


@bp.route("/diagnoses/<diagnosis_id>/outcomes", methods=["POST"])
@needs("diagnose")
def record_outcome(diagnosis_id: str):
    """Record an experiment outcome (``observe=x.exp=outcome``) and show the new ranking."""
    from dsdoctor.api.web.backend import add_observations

    key = request.form.get("observe", "").strip()
    value = request.form.get("value", "true") != "false"
    if not key or len(key) > 200:
        return error_page(422, "observe: give an experiment outcome such as x.single_gpu_repro=reproduces")
    before, after = add_observations(diagnosis_id, {key: value}, lang=g.lang)
    old = (before.diagnosis.get("causes") or [{}])[0].get("id") or "–"
    new = (after.get("causes") or [{}])[0].get("id") or "–"
    label = observation_label(key) + ("" if value else " ✗")
    message = t("recorded", obs=label, before=old, after=new) if old != new else t("recorded_same", obs=label,
                                                                                   after=new)
    for warning in after.get("warnings") or []:
        if key in warning:
            flash(warning, "warning")
    flash(message, "success")
    return redirect(url_for("web.diagnosis", diagnosis_id=diagnosis_id, _anchor="causes"), code=303)


@bp.route("/diagnoses/<diagnosis_id>/incident", methods=["POST"])
@needs("incidents:write")
def record_incident(diagnosis_id: str):
    """Create an incident pre-filled from the diagnosis and open it."""
    from dsdoctor.api.web.backend import record_incident as create
    from dsdoctor.kb.incidents import ValidationError

    overrides: dict[str, Any] = {}
    for name in ("title", "root_cause", "severity"):
        value = request.form.get(name, "").strip()
        if value:
            overrides[name] = value
    try:
        incident = create(diagnosis_id, overrides)
    except ValidationError as exc:
        return error_page(422, str(exc))
    flash(t("created"), "success")
    return redirect(url_for("web.incident", incident_id=incident["id"]), code=303)


# ---------------------------------------------------------------- knowledge base


@bp.route("/kb/causes")
@needs("diagnose")
def causes():
    """Every root cause of the knowledge base, by domain."""
    kb = _kb()
    by_domain: dict[str, list[Any]] = {}
    for cause in sorted(kb.causes.values(), key=lambda c: c.id):
        by_domain.setdefault(cause.domain, []).append(cause)
    body = render_template("causes.html", by_domain=by_domain)
    return current_app.response_class(body, mimetype="text/html")


@bp.route("/kb/causes/<cause_id>")
@needs("diagnose")
def cause(cause_id: str):
    """One root cause: description, neighbourhood drawing, fixes, regression check, prevention, references."""
    from dsdoctor.api.web.svg import neighbourhood_drawing, render
    from dsdoctor.kb.graph import describe

    kb = _kb()
    if cause_id not in kb.causes:
        abort(404, t("unknown_cause", id=cause_id))
    info = describe(kb, cause_id, g.lang)
    drawing = neighbourhood_drawing(kb, cause_id, g.lang, cause_href=lambda cid: url_for("web.cause", cause_id=cid))
    drawing.title = t("neighbourhood")
    drawing.description = t("neighbourhood_help")
    drawing.column_titles = {"symptom": t("col_symptoms"), "mechanism": t("col_mechanisms"), "cause": t("col_causes")}
    incidents: list[dict[str, Any]] = []
    store = _store_or_none() if can("incidents:read") else None
    if store is not None:
        try:
            from dsdoctor.kb.incidents.record import PUBLIC_PREFIX
            from dsdoctor.kb.incidents.search import MAX_LIMIT

            found = store.search(cause=cause_id, limit=MAX_LIMIT)["items"]
            # the site's own history first, then the public incidents shipped with dsdoctor (newest
            # first within each): a busy public cause must not push a site's incidents off the page
            incidents = sorted(found, key=lambda i: str(i.get("id", "")).startswith(PUBLIC_PREFIX))[:10]
        except DsdoctorError:
            incidents = []
    body = render_template("cause.html", c=info, graph=render(drawing, prefix="nb"), incidents=incidents,
                           references=[(ref, _is_link(ref)) for ref in info.get("references") or []])
    return current_app.response_class(body, mimetype="text/html")


def _is_link(ref: str) -> bool:
    return isinstance(ref, str) and (ref.startswith("https://") or ref.startswith("http://")) and " " not in ref


__all__ = ["bp"]
