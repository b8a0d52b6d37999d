"""Chat-ops command handling and Slack signature checks, independent of HTTP."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.signature import SignatureVerifier

from dsdoctor.api.chatops import ChatContext, detect_lang, handle, verify_slack_signature
from tests.kbfactory import nan_kb


def _diagnosis(did="d1"):
    return {
        "id": did, "summary": {"text": "Leading candidate data.corrupt_sample (61%)", "verdict": "uncertain"},
        "first_error": {"rank": 37, "line": "loss=nan, grad_norm=inf", "source": "node4"},
        "causes": [{"id": "data.corrupt_sample", "title": "bad sample", "probability": 0.61}],
        "next_experiments": [{"id": "x.swap_suspect_gpu", "title": "swap GPU", "cost": "30 min, 8 GPUs", "why": "separates",
                              "commands": ["CUDA_VISIBLE_DEVICES=..."],
                              "outcomes": [{"id": "issue_stays", "title": "stays", "probability": 0.7,
                                            "leading_cause": "data.corrupt_sample", "observe": "x.swap_suspect_gpu=issue_stays"}]}],
    }


@pytest.fixture()
def ctx():
    calls = {}

    def diagnose(evidence, lang):
        calls["evidence"], calls["lang"] = evidence, lang
        return _diagnosis()

    def observe(did, observations, lang):
        calls["observe"] = (did, observations)
        return _diagnosis(did)

    context = ChatContext(
        kb=nan_kb(), diagnose=diagnose, get_diagnosis=lambda did: _diagnosis(did) if did == "d1" else None,
        observe=observe, search_incidents=lambda q: [{"id": "inc-1", "title": "rank 3 OOM", "root_cause": "memory.foreign_process_on_gpu", "fix": "kill it"}],
        get_incident=lambda i: {"id": i, "title": "t", "phenomenon": "p", "root_cause": "memory.fragmentation", "fix": "f"} if i == "inc-1" else None,
        base_url="http://127.0.0.1:8000",
    )
    context.calls = calls
    return context


class _Clock:
    def __init__(self, now: float):
        self._now = now

    def now(self) -> float:
        return self._now


def _sign(secret: str, ts: str, body: bytes) -> str:
    """The signature as Slack's own SDK computes it (no second hand-written HMAC in the tests)."""
    return SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)


def test_valid_slack_signature_is_accepted():
    body = b"command=%2Fdsdoctor&text=help"
    assert verify_slack_signature("s3cret", "1700000000", body, _sign("s3cret", "1700000000", body), now=1700000010) is None


@pytest.mark.parametrize("case", ["tampered", "wrong_secret", "stale", "missing"])
def test_bad_slack_signatures_are_refused(case):
    body, ts = b"command=%2Fdsdoctor&text=help", "1700000000"
    sig = _sign("s3cret", ts, body)
    args = {"tampered": ("s3cret", ts, body + b"x", sig, 1700000010),
            "wrong_secret": ("other", ts, body, sig, 1700000010),
            "stale": ("s3cret", ts, body, sig, 1700000000 + 301),
            "missing": ("s3cret", None, body, None, 1700000010)}[case]
    assert verify_slack_signature(*args[:4], now=args[4]) is not None


@settings(derandomize=True, max_examples=300, deadline=None)
@given(body=st.text(max_size=200).map(lambda t: t.encode("utf-8")),
       age=st.integers(min_value=-400, max_value=400),
       secret=st.sampled_from(["s3cret", "8f742231b10e8888abcd99yyyzzz85a5"]),
       signed_with=st.sampled_from(["same", "other", "tampered", "garbage"]))
def test_our_slack_check_agrees_with_slack_sdk(body, age, secret, signed_with):
    ts, now = "1700000000", 1700000000 + age
    signature = {"same": _sign(secret, ts, body), "other": _sign("not-" + secret, ts, body),
                 "tampered": _sign(secret, ts, body + b"&text=diagnose"), "garbage": "v0=deadbeef"}[signed_with]
    slack_says = SignatureVerifier(secret, clock=_Clock(now)).is_valid(body=body, timestamp=ts, signature=signature)
    assert (verify_slack_signature(secret, ts, body, signature, now=now) is None) == slack_says


def test_language_follows_the_question():
    assert detect_lang("只有 3 号卡 OOM") == "zh" and detect_lang("only rank 3 OOMs") == "en"


@pytest.mark.parametrize("text", ["", "help", "frobnicate now", "/dsdoctor"])
def test_unknown_or_empty_commands_get_help(ctx, text):
    answer = handle(text, ctx)
    assert "diagnose" in answer.markdown and "search" in answer.markdown


def test_help_in_chinese():
    assert "诊断" in handle("帮助 求助", ChatContext(None, None, None, None)).markdown


def test_diagnose_passes_logs_and_answers_with_first_error_and_next_experiment(ctx):
    answer = handle("diagnose [rank37]: loss=nan, grad_norm=inf\n[rank12]: loss=2.3", ctx)
    assert ctx.calls["evidence"]["logs"][0]["text"].startswith("[rank37]")
    assert "rank 37" in answer.markdown and "swap GPU" in answer.markdown
    assert "http://127.0.0.1:8000/diagnoses/d1" in answer.markdown
    slack = answer.slack()
    assert slack["response_type"] == "in_channel" and all(len(b["text"]["text"]) <= 3000 for b in slack["blocks"])


def test_diagnose_description_in_chinese_answers_in_chinese(ctx):
    answer = handle("diagnose 两台机器就卡住，单机正常", ctx)
    assert ctx.calls["lang"] == "zh" and ctx.calls["evidence"] == {"description": "两台机器就卡住，单机正常"}
    assert "第一个错误" in answer.markdown


def test_long_paste_is_cut_with_a_note(ctx):
    answer = handle("diagnose " + "x" * 300_000, ctx)
    assert "cut" in answer.markdown


def test_observe_reranks(ctx):
    answer = handle("observe d1 x.swap_suspect_gpu=issue_stays !s.loss_nan", ctx)
    assert ctx.calls["observe"] == ("d1", {"x.swap_suspect_gpu=issue_stays": True, "s.loss_nan": False})
    assert answer.data["diagnosis"]["id"] == "d1"


def test_observe_unknown_diagnosis_is_a_clear_message(ctx):
    assert "no diagnosis" in handle("observe nope x.a=b", ctx).markdown


def test_next_search_incident_and_cause(ctx):
    assert "swap GPU" in handle("next d1", ctx).markdown
    assert "kill it" in handle("search OOM rank 3", ctx).markdown
    assert "memory.fragmentation" in handle("incident inc-1", ctx).markdown
    cause = handle("cause data.corrupt_sample", ctx)
    assert "fix" in cause.markdown.lower() and cause.data["cause"] == "data.corrupt_sample"
    assert "did you mean" in handle("cause data.corrupt_sampel", ctx).markdown


# ---------------------------------------------------------------- issue 14: untrusted text is escaped

HOSTILE = "<!channel> <!everyone> <https://evil.example|click here> <img src=x onerror=alert(1)> " \
          "[docs](javascript:alert(1)) & **bold**"


def _hostile_ctx():
    incident = {"id": "inc-1", "title": HOSTILE, "phenomenon": HOSTILE, "root_cause": "memory.fragmentation",
                "root_cause_detail": HOSTILE, "fix": HOSTILE}
    hostile = {**_diagnosis(), "summary": {"text": HOSTILE, "verdict": "uncertain"},
               "first_error": {"rank": 3, "line": HOSTILE + " `tick`", "source": "x"}}
    return ChatContext(kb=nan_kb(), diagnose=lambda evidence, lang: hostile, get_diagnosis=lambda did: None,
                       observe=lambda *a: hostile, search_incidents=lambda q: [incident],
                       get_incident=lambda i: incident if i == "inc-1" else None)


@pytest.mark.parametrize("command", ["incident inc-1", "search oom", f"search {HOSTILE}", "diagnose x",
                                     f"next {HOSTILE}", f"{HOSTILE} help", "incident <!here>"])
def test_issue14_slack_answers_escape_untrusted_text(command: str) -> None:
    answer = handle(command, _hostile_ctx()).slack("in_channel")
    texts = [answer["text"], *(b["text"]["text"] for b in answer["blocks"])]
    for text in texts:
        for raw in ("<!channel>", "<!everyone>", "<!here>", "<https://evil", "<img"):
            assert raw not in text, (command, text)
    assert any("&lt;!channel&gt;" in t or "&lt;!here&gt;" in t for t in texts) or command.startswith("next")


@pytest.mark.parametrize("command", ["incident inc-1", "search oom", "diagnose x"])
def test_issue14_markdown_answers_carry_no_raw_html_or_links(command: str) -> None:
    markdown = handle(command, _hostile_ctx()).markdown
    assert "<img" not in markdown and "<!channel>" not in markdown and "<https://" not in markdown
    assert "[docs](javascript:" not in re.sub(r"`[^`]*`", "", markdown)  # a code span shows links as text
    assert "&lt;img src=x onerror=alert(1)&gt;" in markdown


def test_issue14_our_own_formatting_survives_the_escaping(ctx) -> None:
    answer = handle("diagnose [rank37]: loss=nan", ctx)
    assert answer.markdown.startswith("**Leading candidate") and "`data.corrupt_sample`" in answer.markdown
    assert answer.slack()["blocks"][0]["text"]["text"].startswith("*Leading candidate")
    assert "`loss=nan, grad_norm=inf`" in answer.markdown  # code spans keep [brackets] unescaped

def test_a_long_first_error_is_cut_at_a_word_and_python_is_fenced_as_python() -> None:
    from dsdoctor.api.chatops import _experiment_md, _short

    line = "RuntimeError: CUDA error: an illegal memory access was encountered " * 8
    short = _short(line, 120)
    assert short.endswith(" …") and line.startswith(short[:-2]) and short[-3] != " "
    assert line[len(short) - 2] == " "  # the cut falls between two words
    e = {"title": "Record a CUDA memory snapshot", "cost": "25 min, 1 GPU", "why": "",
         "commands": ["torch.cuda.memory._record_memory_history(max_entries=100000)"],
         "steps": [{"kind": "python", "text": "torch.cuda.memory._record_memory_history(max_entries=100000)"}],
         "outcomes": [{"title": "grows", "probability": 0.16, "leading_cause": "memory.leak_across_steps",
                       "leading_probability": 0.73, "observe": "x.memory_snapshot=grows_per_step"}]}
    md = _experiment_md(e, "d1", "en", {"id": "memory.activation_memory", "probability": 0.42})
    assert "```python\ntorch.cuda.memory._record_memory_history(max_entries=100000)\n```" in md
    assert "memory.leak_across_steps would become the leading cause (73%)" in md
