"""Chat-ops over HTTP: real-format Slack slash-command payloads signed by slack_sdk's
SignatureVerifier, and the generic bot endpoint."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
from slack_sdk.signature import SignatureVerifier

from tests.test_api_support import assert_problem, make_app

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def app(dsdoctor_home):
    application = make_app(dsdoctor_home, DSDOCTOR_SLACK_SIGNING_SECRET=SECRET)
    yield application
    application.extensions["dsdoctor"]["services"].close()


@pytest.fixture
def client(app):
    return app.test_client()


def slack_body(text: str) -> bytes:
    return urlencode({
        "token": "gIkuvaNzQIHg97ATvDxqgjtO", "team_id": "T0001", "team_domain": "example",
        "channel_id": "C2147483705", "channel_name": "training-oncall", "user_id": "U2147483697",
        "user_name": "steve", "command": "/dsdoctor", "text": text,
        "response_url": "https://hooks.slack.com/commands/1234/5678", "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "api_app_id": "A123456",
    }).encode()


def sign(body: bytes, secret: str = SECRET, ts: int | None = None) -> dict[str, str]:
    """Headers signed as Slack signs them, by Slack's own SDK."""
    stamp = str(int(time.time()) if ts is None else ts)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature,
            "Content-Type": "application/x-www-form-urlencoded"}


def slack(client, text: str):
    body = slack_body(text)
    response = client.post("/v1/chatops/slack", data=body, headers=sign(body))
    assert response.status_code == 200, response.get_data(as_text=True)
    payload = response.get_json()
    assert payload["response_type"] == "in_channel" and payload["blocks"]
    for block in payload["blocks"]:
        assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
        assert len(block["text"]["text"]) <= 3000
    return payload


def text_of(payload) -> str:
    return "\n".join(b["text"]["text"] for b in payload["blocks"])


def test_valid_signature_help(client):
    assert "diagnose" in text_of(slack(client, "help"))


@pytest.mark.parametrize("case", ["tampered", "wrong_secret", "stale", "missing"])
def test_refused_signatures(client, case):
    body = slack_body("help")
    headers = {"tampered": sign(body), "wrong_secret": sign(body, "not-the-secret"),
               "stale": sign(body, ts=int(time.time()) - 301), "missing": {"Content-Type": "application/x-www-form-urlencoded"}}[case]
    sent = body + b"&text=diagnose" if case == "tampered" else body
    assert_problem(client.post("/v1/chatops/slack", data=sent, headers=headers), 401)


def test_slack_without_configured_secret_is_refused(dsdoctor_home, monkeypatch):
    monkeypatch.delenv("DSDOCTOR_SLACK_SIGNING_SECRET", raising=False)
    app = make_app(dsdoctor_home)
    body = slack_body("help")
    assert_problem(app.test_client().post("/v1/chatops/slack", data=body, headers=sign(body)), 401)


@pytest.mark.parametrize("text", ["", "   ", "frobnicate", "帮我看看"])
def test_empty_and_unknown_commands_get_help(client, text):
    assert "search" in text_of(slack(client, text))


def test_every_command_in_english_and_chinese(client):
    en = slack(client, "diagnose [rank3]: step 120 loss is nan\n[rank3]: only rank 3 diverged\n[rank0]: step 120 ok")
    did = en["blocks"][-1]["text"]["text"].rsplit("/", 1)[-1].strip("<>|` ")
    assert "rank 3" in text_of(en)
    zh = slack(client, "diagnose 训练时 loss is nan，only rank 3 出现")
    assert "第一个错误" in text_of(zh) or "最可能的根因" in text_of(zh)
    stored = client.get(f"/v1/diagnoses/{did}").get_json()
    experiment = stored["next_experiments"][0]
    observed = slack(client, f"observe {did} {experiment['outcomes'][0]['observe']}")
    assert "%" in text_of(observed)
    assert client.get(f"/v1/diagnoses/{did}").get_json()["observation_history"]
    assert "Next experiment" in text_of(slack(client, f"next {did}")) or "No further" in text_of(slack(client, f"next {did}"))
    assert "下一步实验" in text_of(slack(client, f"next {did} 下一步")) or "没有" in text_of(slack(client, f"next {did} 下一步"))
    assert "data.corrupt_sample" in text_of(slack(client, "cause data.corrupt_sample"))
    assert "如何修复" in text_of(slack(client, "cause data.corrupt_sample 是什么"))
    created = client.post("/v1/incidents", json={
        "title": "Rank 3 NaN from a corrupt shard", "phenomenon": "loss nan on rank 3 only；数据分片损坏",
        "scope": "rank 3", "root_cause": "data.corrupt_sample", "fix": "drop the bad sample", "severity": "high",
        "status": "resolved"})
    assert created.status_code == 201, created.get_data(as_text=True)
    iid = created.get_json()["id"]
    assert "drop the bad sample" in text_of(slack(client, "search corrupt shard"))
    assert "修复" in text_of(slack(client, "search 数据分片损坏"))
    assert "Phenomenon" in text_of(slack(client, f"incident {iid}"))
    assert "现象" in text_of(slack(client, f"incident {iid} 详情"))


def test_unknown_ids_are_clear_answers_not_errors(client):
    assert "no diagnosis" in text_of(slack(client, "next d000000"))
    assert "unknown root cause" in text_of(slack(client, "cause memory.nope"))


def test_long_paste_is_answered(client):
    payload = slack(client, "diagnose " + "[rank3]: step 1 loss is nan\n" * 12000)
    assert "Full diagnosis" in text_of(payload)


def test_generic_bot_query(client):
    response = client.post("/v1/chatops/query", json={"text": "cause data.corrupt_sample", "user": "bot", "channel": "c"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["data"]["cause"] == "data.corrupt_sample" and "**" in body["text"]


def test_generic_bot_query_validation(client):
    assert_problem(client.post("/v1/chatops/query", json={"user": "bot"}), 422, field="text")
