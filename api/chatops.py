"""Chat-ops: answer `/dsdoctor <command> ...` from Slack and generic bots.

The command logic is independent of the transport: ``handle(text, ctx)`` returns a
:class:`ChatAnswer` with Markdown for generic bots, Slack mrkdwn blocks, and the structured
result. Answers follow the language of the question (any CJK character -> Chinese).

Untrusted text (incident records, pasted logs, ids and queries the user typed) goes into an
answer only through :func:`u` (running text) or :func:`uc` (inside a code span). They mark it;
rendering escapes it for each output: ``&``, ``<``, ``>`` for Slack (so ``<!channel>`` or a
masked link ``<https://evil|click>`` in a log line is shown, not obeyed) and HTML entities plus
escaped link brackets for Markdown (no ``<img onerror>``, no ``[x](javascript:...)``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.api.render import grouped_steps, outcome_effect
from dsdoctor.kb.errors import DsdoctorError

#: Slack refuses a request older than this (replay protection), in seconds
SLACK_MAX_AGE = 300
#: Slack caps a section block's text at 3,000 characters and a message at 50 blocks
SLACK_SECTION_LIMIT = 2900
#: longest paste diagnosed from chat; beyond it the text is cut and the answer says so
CHAT_PASTE_LIMIT = 200_000
COMMANDS = ("diagnose", "next", "observe", "search", "incident", "cause", "help")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def detect_lang(text: str) -> str:
    """'zh' when the text holds Chinese characters, else 'en'."""
    return "zh" if _CJK.search(text or "") else "en"


def verify_slack_signature(secret: str, timestamp: str | None, body: bytes, signature: str | None,
                           now: float | None = None) -> str | None:
    """None when the request is authentic and fresh; otherwise the reason it is refused."""
    if not secret:
        return "Slack signing secret is not configured (DSDOCTOR_SLACK_SIGNING_SECRET)"
    if not timestamp or not signature:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature header"
    try:
        age = abs((now if now is not None else time.time()) - int(timestamp))
    except ValueError:
        return "X-Slack-Request-Timestamp is not a number"
    if age > SLACK_MAX_AGE:
        return "request timestamp is older than 5 minutes (possible replay)"
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        return "signature mismatch"
    return None


@dataclass
class ChatContext:
    """What the commands need from the service (the API wires real functions in)."""

    kb: Any
    diagnose: Callable[[dict[str, Any], str], dict[str, Any]]  # evidence, lang -> stored diagnosis
    get_diagnosis: Callable[[str], dict[str, Any] | None]
    observe: Callable[[str, dict[str, bool], str], dict[str, Any]]  # id, observations, lang -> updated
    search_incidents: Callable[[str], list[dict[str, Any]]] | None = None
    get_incident: Callable[[str], dict[str, Any] | None] | None = None
    base_url: str = ""


_TEXT = ("\ue000", "\ue001")  # private-use marks around untrusted running text
_CODE = ("\ue002", "\ue003")  # ... and around untrusted text inside a code span
_MARKED = re.compile("([\ue000\ue002])([^\ue000-\ue003]*)[\ue001\ue003]")


def _mark(text: Any, marks: tuple[str, str]) -> str:
    return marks[0] + re.sub("[\ue000-\ue003]", "", str(text)) + marks[1]


def u(text: Any) -> str:
    """Untrusted running text, escaped when the answer is rendered."""
    return _mark(text, _TEXT)


def uc(text: Any) -> str:
    """Untrusted text inside a code span (backticks removed so it cannot close the span)."""
    return _mark(str(text).replace("`", "'"), _CODE)


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _markdown_escape(text: str, code: bool) -> str:
    text = _slack_escape(text)
    if code:
        return text
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def render_markdown(template: str) -> str:
    """An answer template as Markdown: untrusted parts HTML-escaped, their link brackets escaped."""
    return _MARKED.sub(lambda m: _markdown_escape(m.group(2), m.group(1) == _CODE[0]), template)


def render_mrkdwn(template: str) -> str:
    """An answer template as Slack mrkdwn: **bold** -> *bold* on our own text only, untrusted parts escaped."""
    kept: list[str] = []

    def stash(match: re.Match[str]) -> str:
        kept.append(match.group(2))
        return f"\ue004{len(kept) - 1}\ue005"

    text = re.sub(r"\*\*(.+?)\*\*", r"*\1*", _MARKED.sub(stash, template))
    return re.sub("\ue004(\\d+)\ue005", lambda m: _slack_escape(kept[int(m.group(1))]), text)


@dataclass
class ChatAnswer:
    """One answer: ``markdown`` and ``mrkdwn`` are templates with untrusted parts marked until
    ``__post_init__`` renders them (so ``markdown`` is ready to send, ``mrkdwn`` too)."""

    markdown: str
    data: dict[str, Any] = field(default_factory=dict)
    mrkdwn: list[str] = field(default_factory=list)  # Slack sections, each within the block limit

    def __post_init__(self) -> None:
        self._slack_default = render_mrkdwn(self.markdown)
        self.markdown = render_markdown(self.markdown)
        self.mrkdwn = [render_mrkdwn(s)[:SLACK_SECTION_LIMIT] for s in self.mrkdwn]

    def slack(self, response_type: str = "in_channel") -> dict[str, Any]:
        sections = self.mrkdwn or [self._slack_default]
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": s[:SLACK_SECTION_LIMIT]}}
                  for s in sections[:49]]
        return {"response_type": response_type, "text": sections[0][:SLACK_SECTION_LIMIT], "blocks": blocks}


def handle(text: str, ctx: ChatContext) -> ChatAnswer:
    """Run one chat command; unknown commands and empty text get the help text."""
    text = (text or "").strip()
    lang = detect_lang(text)
    if text.lower().startswith("/dsdoctor"):
        text = text[len("/dsdoctor"):].strip()
    command, _, rest = text.partition(" ")
    command = command.lower()
    if command not in COMMANDS or command == "help":
        return _help(lang, unknown=command if command and command != "help" else None)
    try:
        return HANDLERS[command](rest.strip(), ctx, lang)
    except DsdoctorError as exc:  # the message may quote what the user typed
        return ChatAnswer(f"⚠️ {u(exc)}", {"error": str(exc)})


# ---------------------------------------------------------------- commands


def _diagnose(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    if not rest:
        return _usage("diagnose <pasted log lines or a description>", lang)
    note = ""
    if len(rest) > CHAT_PASTE_LIMIT:
        rest = rest[:CHAT_PASTE_LIMIT]
        note = (f"(paste cut to its first {CHAT_PASTE_LIMIT:,} characters)" if lang == "en"
                else f"（粘贴内容过长，只诊断了前 {CHAT_PASTE_LIMIT:,} 个字符）")
    lines = rest.splitlines()
    looks_like_log = len(lines) > 1 or bool(re.search(r"Error|NCCL|CUDA|\[rank\d+\]|Traceback|Xid", rest))
    evidence: dict[str, Any] = {"description": rest} if not looks_like_log else {
        "logs": [{"source": "chat", "text": rest}], "description": lines[0][:500] if detect_lang(rest) == "zh" else ""}
    if not evidence.get("description"):
        evidence.pop("description", None)
    d = ctx.diagnose(evidence, lang)
    return _diagnosis_answer(d, ctx, lang, note)


def _next(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    if not rest:
        return _usage("next <diagnosis id>", lang)
    d = _require_diagnosis(rest.split()[0], ctx, lang)
    exps = d.get("next_experiments") or []
    if not exps:
        msg = "No further experiment would change the ranking." if lang == "en" else "没有能改变排序的进一步实验。"
        return ChatAnswer(msg, {"diagnosis": d["id"], "next_experiments": []})
    body = [_experiment_md(e, d["id"], lang) for e in exps[:2]]
    return ChatAnswer("\n\n".join(body), {"diagnosis": d["id"], "next_experiments": exps})


def _observe(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    parts = rest.split()
    if len(parts) < 2:
        return _usage("observe <diagnosis id> <experiment>=<outcome>", lang)
    observations: dict[str, bool] = {}
    for item in parts[1:]:
        negate = item.startswith("!")
        key = item.lstrip("!")
        if not key.startswith(("x.", "s.")):
            raise DsdoctorError(f"cannot read {item!r}: write x.EXPERIMENT=OUTCOME, s.SYMPTOM or !s.SYMPTOM")
        observations[key] = not negate
    _require_diagnosis(parts[0], ctx, lang)
    d = ctx.observe(parts[0], observations, lang)
    return _diagnosis_answer(d, ctx, lang)


def _search(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    if not rest:
        return _usage("search <query>", lang)
    if ctx.search_incidents is None:
        raise DsdoctorError("incident search is not available on this server")
    items = ctx.search_incidents(rest)[:5]
    if not items:
        msg = f"No past incident matches “{u(rest)}”." if lang == "en" else f"没有与“{u(rest)}”匹配的历史事故。"
        return ChatAnswer(msg, {"items": []})
    lines = [f"**{len(items)} past incident(s)**" if lang == "en" else f"**找到 {len(items)} 起历史事故**"]
    for it in items:
        lines.append(f"- `{uc(it['id'])}` {u(it['title'])} — `{uc(it.get('root_cause', ''))}`")
        if it.get("fix"):
            lines.append(f"  - {'fix' if lang == 'en' else '修复'}: {u(_short(it['fix'], 300))}")
    return ChatAnswer("\n".join(lines), {"items": items})


def _incident(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    if not rest:
        return _usage("incident <id>", lang)
    if ctx.get_incident is None:
        raise DsdoctorError("the incident store is not available on this server")
    inc = ctx.get_incident(rest.split()[0])
    if inc is None:
        raise DsdoctorError(f"no incident with id {rest.split()[0]!r}")
    labels = {"en": ("Phenomenon", "Scope", "Root cause", "Fix", "Regression", "Prevention"),
              "zh": ("现象", "影响范围", "根因", "修复", "回归验证", "预防")}[lang]
    keys = ("phenomenon", "scope", "root_cause", "fix", "regression", "prevention")
    lines = [f"**{u(inc['title'])}** (`{uc(inc['id'])}`)"]
    for label, key in zip(labels, keys, strict=True):
        value = inc.get(key)
        if not value:
            continue
        if key == "root_cause":
            shown = f"`{uc(value)}`" + (f" — {u(_short(inc['root_cause_detail'], 600))}"
                                        if inc.get("root_cause_detail") else "")
        else:
            shown = u(_short(str(value), 600))
        lines.append(f"*{label}*: {shown}")
    return ChatAnswer("\n".join(lines), {"incident": inc})


def _cause(rest: str, ctx: ChatContext, lang: str) -> ChatAnswer:
    if not rest:
        return _usage("cause <id>", lang)
    cid = rest.split()[0]
    cause = ctx.kb.causes.get(cid)
    if cause is None:
        import difflib

        close = difflib.get_close_matches(cid, list(ctx.kb.causes), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise DsdoctorError(f"unknown root cause {cid!r}{hint}")
    confirm = sorted(
        (e for e in ctx.kb.experiments.values() if cid in e.expects),
        key=lambda e: -max(e.expects[cid].values()) / e.cost,
    )[:2]
    L = {"en": ("What it is", "How to confirm", "How to fix", "Regression check", "Prevention"),
         "zh": ("是什么", "如何确认", "如何修复", "回归验证", "预防")}[lang]
    lines = [f"**{cause.title.get(lang)}** (`{cid}`, {cause.domain})", f"*{L[0]}*: {_short(cause.description.get(lang), 700)}"]
    if confirm:
        lines.append(f"*{L[1]}*: " + "; ".join(f"{e.title.get(lang)} (`{e.id}`)" for e in confirm))
    if cause.fixes:
        fix = cause.fixes[0]
        lines.append(f"*{L[2]}*: {fix.title.get(lang)}")
        if fix.snippet.strip():
            lines.append("```\n" + _short(fix.snippet.strip(), 800) + "\n```")
    lines.append(f"*{L[3]}*: {_short(cause.regression.get(lang), 400)}")
    lines.append(f"*{L[4]}*: {_short(cause.prevention.get(lang), 400)}")
    return ChatAnswer("\n".join(lines), {"cause": cid, "confirm_with": [e.id for e in confirm]})


HANDLERS: dict[str, Callable[[str, ChatContext, str], ChatAnswer]] = {
    "diagnose": _diagnose, "next": _next, "observe": _observe, "search": _search,
    "incident": _incident, "cause": _cause,
}


# ---------------------------------------------------------------- rendering


HELP = {
    "en": """*dsdoctor* — diagnose failed DeepSpeed / PyTorch-distributed / NCCL jobs
`diagnose <pasted log lines or a description>` — top causes, first error, next experiment
`next <diagnosis id>` — the next isolation experiments
`observe <diagnosis id> <experiment>=<outcome>` — record an outcome and re-rank
`search <query>` — past incidents with their fixes
`incident <id>` — one past incident
`cause <id>` — what a root cause is, how to confirm and fix it
`help` — this text""",
    "zh": """*dsdoctor* — 诊断失败的 DeepSpeed / PyTorch 分布式 / NCCL 训练任务
`diagnose <粘贴日志或文字描述>` — 最可能的根因、第一个错误、下一步实验
`next <诊断 id>` — 下一步隔离实验
`observe <诊断 id> <实验>=<结果>` — 记录实验结果并重新排序
`search <关键词>` — 搜索历史事故及其修复
`incident <id>` — 查看一起历史事故
`cause <id>` — 根因说明、确认方法与修复
`help` — 显示本帮助""",
}


def _help(lang: str, unknown: str | None = None) -> ChatAnswer:
    head = ""
    if unknown:
        head = (f"Unknown command `{uc(unknown)}`.\n" if lang == "en" else f"未知命令 `{uc(unknown)}`。\n")
    text = head + HELP[lang]
    return ChatAnswer(text.replace("*dsdoctor*", "**dsdoctor**"), {"commands": list(COMMANDS)},
                      [head + _slack_escape(HELP[lang])])  # its <placeholders> are text, not Slack links


def _usage(usage: str, lang: str) -> ChatAnswer:
    msg = f"Usage: `{uc(usage)}`" if lang == "en" else f"用法：`{uc(usage)}`"
    return ChatAnswer(msg, {"usage": usage})


def _require_diagnosis(did: str, ctx: ChatContext, lang: str) -> dict[str, Any]:
    d = ctx.get_diagnosis(did)
    if d is None:
        raise DsdoctorError(f"no diagnosis with id {did!r}" if lang == "en" else f"找不到诊断 {did!r}")
    return d


def _short(text: str, limit: int) -> str:
    """``text`` cut at the last word boundary before ``limit`` (never mid-word), with an ellipsis."""
    text = text or ""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + " …"


def _experiment_md(e: dict[str, Any], did: str, lang: str, now: dict[str, Any] | None = None) -> str:
    head = ("Next experiment" if lang == "en" else "下一步实验") + f": **{e['title']}** ({e['cost']})"
    lines = [head, e["why"]]
    steps = e.get("steps") or [{"kind": "shell", "text": c} for c in e.get("commands", [])]
    fence = {"shell": "sh", "python": "python", "config": "json", "args": "sh"}
    for kind, texts in grouped_steps(steps[:3]):
        lines.append(f"```{fence.get(kind, '')}\n" + "\n".join(texts) + "\n```")
    for o in e.get("outcomes", []):
        lines.append(f"- {o['title']} ({o['probability']:.0%}): {outcome_effect(o, now, lang)}; "
                     f"`observe {did} {o['observe']}`")
    return "\n".join(lines)


def _diagnosis_answer(d: dict[str, Any], ctx: ChatContext, lang: str, note: str = "") -> ChatAnswer:
    parts = []
    head = f"**{u(d['summary']['text'])}**"
    if note:
        head += f"\n_{note}_"
    if d.get("job"):
        from dsdoctor.api.render import job_line

        head += f"\n{'Job' if lang == 'en' else '作业'}: `{job_line(d['job']).replace('`', '')}`"
    parts.append(head)
    fe = d.get("first_error")
    if fe:
        where = f"rank {fe['rank']}" if fe.get("rank") is not None else (fe.get("source") or "")
        if fe.get("time_shown"):
            where += f", {fe['time_shown']}"
        label = "First error" if lang == "en" else "第一个错误"
        parts.append(f"*{label}* ({u(where)}): `{uc(_short(fe['line'], 300).replace('`', ''))}`")
    label = "Top causes" if lang == "en" else "最可能的根因"
    rows = [f"*{label}*"] + [f"{i}. `{c['id']}` {c['title']} — {c['probability']:.0%}"
                             for i, c in enumerate(d["causes"][:3], 1)]
    parts.append("\n".join(rows))
    if d.get("next_experiments"):
        parts.append(_experiment_md(d["next_experiments"][0], d["id"], lang, (d.get("causes") or [None])[0]))
    link = f"{ctx.base_url.rstrip('/')}/diagnoses/{d['id']}" if ctx.base_url else f"id `{d['id']}`"
    parts.append(("Full diagnosis: " if lang == "en" else "完整诊断：") + link)
    markdown = "\n\n".join(parts)
    data = {"diagnosis": d}
    return ChatAnswer(markdown, data, parts)
