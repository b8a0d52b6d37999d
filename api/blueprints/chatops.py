"""Chat-ops endpoints: Slack slash commands (signed) and a generic bot query (bearer token)."""

from __future__ import annotations

import os
from typing import Any

import marshmallow as ma
from flask import current_app, request
from flask_smorest import Blueprint

from dsdoctor.api import diagnosis_service
from dsdoctor.api.auth import requires
from dsdoctor.api.blueprints import json_response
from dsdoctor.api.chatops import ChatAnswer, ChatContext, handle, verify_slack_signature
from dsdoctor.api.errors import ApiError, field_error, flatten_messages, validation_error
from dsdoctor.api.services import services
from dsdoctor.api.uploads import json_body

blp = Blueprint("chatops", __name__, url_prefix="/v1/chatops",
                description="Answer chat questions: Slack slash commands and generic bots.")


class QuerySchema(ma.Schema):
    text = ma.fields.String(required=True, validate=ma.validate.Length(max=1_000_000),
                            metadata={"description": "the command, e.g. 'diagnose <log lines>' or 'search OOM'"})
    user = ma.fields.String(load_default=None, allow_none=True)
    channel = ma.fields.String(load_default=None, allow_none=True)


_QUERY = QuerySchema()


class AnswerSchema(ma.Schema):
    text = ma.fields.String(required=True, metadata={"description": "the answer in Markdown"})
    data = ma.fields.Dict(required=True, metadata={"description": "the structured result"})


class SlackAnswerSchema(ma.Schema):
    response_type = ma.fields.String(required=True)
    text = ma.fields.String(required=True)
    blocks = ma.fields.List(ma.fields.Dict(), required=True)


def signed_by_slack(func):
    """Mark a view as authenticated by the Slack request signature instead of a bearer token."""
    func.auth_exempt = True
    return func


def _context() -> ChatContext:
    svc = services()
    incidents = svc.incidents_or_none()

    def search(q: str) -> list[dict[str, Any]]:
        return incidents.search(q=q, limit=5)["items"] if incidents else []

    def get_incident(incident_id: str) -> dict[str, Any] | None:
        if incidents is None:
            return None
        try:
            return incidents.get(incident_id)
        except Exception:
            return None

    def get_diagnosis(did: str) -> dict[str, Any] | None:
        stored = svc.diagnoses().get(did)
        return stored.diagnosis if stored else None

    base = current_app.config.get("DSDOCTOR_PUBLIC_URL") or request.host_url
    return ChatContext(
        kb=svc.kb(),
        diagnose=lambda evidence, lang: diagnosis_service.create(evidence, lang=lang, top=5),
        get_diagnosis=get_diagnosis,
        observe=lambda did, obs, lang: diagnosis_service.observe(did, {"observations": obs}, lang=lang),
        search_incidents=search if incidents else None,
        get_incident=get_incident if incidents else None,
        base_url=base,
    )


@blp.route("/slack", methods=["POST"])
@signed_by_slack
@blp.response(200, SlackAnswerSchema)
@blp.doc(security=[], requestBody={"content": {"application/x-www-form-urlencoded": {"schema": {
    "type": "object", "properties": {"command": {"type": "string"}, "text": {"type": "string"},
                                     "user_id": {"type": "string"}, "channel_id": {"type": "string"},
                                     "response_url": {"type": "string"}}}}}})
def slack_command():
    """A Slack slash command (`/dsdoctor <command> ...`), verified with the v0 request signature.

    Needs `X-Slack-Signature` and `X-Slack-Request-Timestamp` signed with
    DSDOCTOR_SLACK_SIGNING_SECRET; a request older than 5 minutes is refused as a replay.
    """
    raw = request.get_data(cache=True)
    secret = current_app.config.get("DSDOCTOR_SLACK_SIGNING_SECRET") or os.environ.get(
        "DSDOCTOR_SLACK_SIGNING_SECRET", "")
    problem = verify_slack_signature(secret, request.headers.get("X-Slack-Request-Timestamp"), raw,
                                     request.headers.get("X-Slack-Signature"))
    if problem:
        raise ApiError(401, f"Slack request refused: {problem}", title="Unauthorized")
    text = request.form.get("text", "")
    answer = _answer(text)
    return json_response(answer.slack("in_channel"))


@blp.route("/query", methods=["POST"])
@requires("diagnose")
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": QuerySchema}}})
@blp.response(200, AnswerSchema)
def bot_query():
    """A generic bot's question: the same commands as Slack; answers in Markdown plus data."""
    body = json_body("the question")
    if not isinstance(body, dict):
        raise validation_error([field_error("", f"expected a JSON object, got {type(body).__name__}")])
    try:
        body = _QUERY.load(body)
    except ma.ValidationError as exc:
        raise validation_error(flatten_messages(exc.messages)) from None
    answer = _answer(body["text"])
    return json_response({"text": answer.markdown, "data": answer.data})


def _answer(text: str) -> ChatAnswer:
    return handle(text, _context())
