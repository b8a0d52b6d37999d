"""Human renderings of a diagnosis: terminal text and Markdown, in English or Chinese."""

from __future__ import annotations

import textwrap
from typing import Any

LABELS = {
    "en": {
        "looks": "The three looks", "first": "First error", "scope": "Scope", "phase": "Phase",
        "none": "none found", "causes": "Most likely root causes", "for": "for", "against": "against",
        "fix": "fix", "findings": "Config findings", "next": "Next isolation experiment",
        "tried": "Already tried (read from the description)",
        "outcomes": "outcomes", "unexplained": "unexplained", "similar": "Similar past incidents",
        "warnings": "Warnings", "rank": "rank", "at": "at", "ruled": "Ruled out",
        "then": "then", "observe": "record with", "next_step": "Next step", "regression": "regression check",
        "no_experiment": "none left above the information floor", "settled": "already answered by the evidence:",
        "job": "Job", "local": "dsdoctor diagnosis (local only, not stored; diagnose with --server URL to keep it)",
    },
    "zh": {
        "looks": "三看", "first": "第一个错误", "scope": "影响范围", "phase": "阶段", "none": "未发现",
        "causes": "最可能的根因", "for": "支持", "against": "反对", "fix": "修复", "findings": "配置检查",
        "next": "下一步隔离实验", "tried": "已做过的实验（从描述中读出）", "outcomes": "可能结果", "unexplained": "无法解释",
        "similar": "相似的历史事故", "warnings": "警告", "rank": "rank", "at": "时间", "ruled": "已排除",
        "then": "则", "observe": "记录方式", "next_step": "下一步", "regression": "回归检查",
        "no_experiment": "没有信息增益高于下限的实验", "settled": "证据已给出结果：",
        "job": "作业", "local": "dsdoctor 诊断（仅本地，未保存；加 --server URL 可保存到服务器）",
    },
}
SCOPES = {"zh": {"single-rank": "单个 rank", "single-node": "单个节点", "multi-node": "多个节点", "global": "全局（所有 rank）",
                 "unknown": "未知"}}
PHASES = {"zh": {"launch": "启动/初始化", "first-step": "第一个 step", "steady": "稳定训练中", "checkpoint": "检查点保存/加载",
                 "eval": "评估/生成", "exit": "退出", "unknown": "未知"}}


def _bar(p: float, width: int = 20) -> str:
    filled = round(p * width)
    return "█" * filled + "·" * (width - filled)


def _first_error_where(d: dict[str, Any], lang: str) -> str:
    """``rank 3, node7, 2024-07-02 13:20:41.220, rank3.log:41`` (what is known of the first error)."""
    L = LABELS[lang]
    fe = d.get("first_error") or {}
    where = []
    if fe.get("rank") is not None:
        where.append(f"{L['rank']} {fe['rank']}")
    if fe.get("node"):
        where.append(fe["node"])
    if fe.get("time_shown") or fe.get("time"):
        where.append(fe.get("time_shown") or fe["time"])
    if fe.get("source"):
        where.append(f"{fe['source']}:{fe.get('lineno')}" if fe.get("lineno") else fe["source"])
    return ", ".join(where)


def _first_error_lines(d: dict[str, Any], lang: str, indent: str) -> list[str]:
    """Where the first error is, then its whole line wrapped at words (never cut)."""
    fe = d.get("first_error")
    if not fe:
        return [LABELS[lang]["none"]]
    where = _first_error_where(d, lang)
    wrapped = textwrap.wrap(fe.get("line") or "", width=100, break_long_words=True, break_on_hyphens=False)
    return [f"[{where}]" if where else "", *[indent + part for part in wrapped]]


def outcome_effect(o: dict[str, Any], now: dict[str, Any] | None, lang: str) -> str:
    """What recording this outcome would change, said plainly."""
    cause, p = o.get("leading_cause") or "–", o.get("leading_probability") or 0.0
    if now and now.get("id") == cause:
        if lang == "zh":
            return f"{cause} 仍居首位，概率变为 {p:.0%}（当前 {now['probability']:.0%}）"
        return f"{cause} stays the leading cause, at {p:.0%} (now {now['probability']:.0%})"
    if lang == "zh":
        return f"{cause} 将成为首要根因（{p:.0%}）"
    return f"{cause} would become the leading cause ({p:.0%})"


def _steps_text(e: dict[str, Any]) -> list[str]:
    """Shell lines as ``$ ...``; Python, config fragments and flags as indented blocks that say what they are."""
    out = []
    label = {"python": "Python:", "config": "ds_config:", "args": "add to the launch command:"}
    previous = None
    for step in (e.get("steps") or [{"kind": "shell", "text": c} for c in e["commands"]])[:4]:
        kind = step.get("kind", "shell")
        if kind == "shell":
            out.append(f"  $ {step['text']}")
        else:
            if kind != previous:
                out.append(f"  {label.get(kind, kind)}")
            out.append(f"      {step['text']}")
        if step.get("note"):
            out.append(f"    ({step['note']})")
        previous = kind
    return out


def job_line(job: dict[str, Any] | None) -> str:
    """``48213 llama-sft @ a100-east  https://...  team=pretrain``; empty without a job."""
    if not job:
        return ""
    head = " ".join(str(job[k]) for k in ("id", "name") if job.get(k))
    if job.get("cluster"):
        head += f" @ {job['cluster']}"
    labels = " ".join(f"{k}={v}" for k, v in sorted((job.get("labels") or {}).items()))
    return "  ".join(p for p in (head.strip(), job.get("run_url") or "", labels) if p)


def render_text(d: dict[str, Any], lang: str = "en", *, stored: bool = True) -> str:
    """The diagnosis for a person at a terminal; ``stored=False`` (computed locally) quotes no id."""
    L = LABELS[lang]
    out = [f"dsdoctor diagnosis {d['id']}" if stored else L["local"]]
    if d.get("job"):
        out.append(f"{L['job']}: {job_line(d['job'])}")
    out += ["", d["summary"]["text"], "", f"{L['looks']}:"]
    first = _first_error_lines(d, lang, "       ")
    out.append(f"  1. {L['first']}: {first[0]}")
    out += first[1:]
    out.append(f"  2. {L['scope']}: {SCOPES.get(lang, {}).get(d['scope'], d['scope'])}")
    out.append(f"  3. {L['phase']}: {PHASES.get(lang, {}).get(d['phase'], d['phase'])}")
    out += ["", f"{L['causes']}:"]
    for i, c in enumerate(d["causes"], 1):
        out.append(f"  {i}. {_bar(c['probability'])} {c['probability']:6.1%}  {c['id']} — {c['title']}")
        if c.get("site_incidents"):
            n = c["site_incidents"]
            out.append(f"       {n} past incident(s) on this site" if lang == "en" else f"       本站点已有 {n} 起同类事故")
        for reason in c["supporting"][:3]:
            out.append(f"       + {L['for']}: {reason}")
        for reason in c["contradicting"][:2]:
            out.append(f"       - {L['against']}: {reason}")
        if i == 1 and c["fixes"]:
            out.append(f"       {L['fix']}: {c['fixes'][0]['title']}")
    out.append(f"     {_bar(d['unexplained'])} {d['unexplained']:6.1%}  ({L['unexplained']})")
    if d["config_findings"]:
        out += ["", f"{L['findings']}:"]
        out += [f"  [{f['severity']}] {f['key_path']}: {f['message']}" for f in d["config_findings"]]
    if d.get("reported_experiments"):
        out += ["", f"{L['tried']}:"]
        out += [f"  {'' if r['happened'] else 'not '}{r['observe']}: {r['outcome_title']}" for r in d["reported_experiments"]]
    step = d.get("next_step")
    if step:
        out += ["", f"{L['next_step']}: {step['title']}"]
        if step.get("fix"):
            out.append(f"  {L['fix']}: {step['fix']['title']}")
        if step.get("regression"):
            out.append(f"  {L['regression']}: {step['regression']}")
    if d["next_experiments"]:
        e = d["next_experiments"][0]
        out += ["", f"{L['next']}: {e['title']} ({e['cost']})", f"  {e['why']}"]
        out += _steps_text(e)
        out.append(f"  {L['outcomes']}:")
        now = d["causes"][0] if d["causes"] else None
        for o in e["outcomes"]:
            out.append(f"    {o['probability']:5.0%} {o['title']}")
            out.append(f"          → {outcome_effect(o, now, lang)}; {L['observe']} --observe {o['observe']}")
        for other in d["next_experiments"][1:]:
            out.append(f"  · {other['title']} ({other['cost']}): {other['why']}")
    elif not step:
        out += ["", f"{L['next']}: {L['no_experiment']}"]
    for x in d.get("settled_experiments") or []:
        out.append(f"  ✓ {x['id']}: {L['settled']} {x['outcome']} ({x['by']})")
    if d.get("similar_incidents"):
        out += ["", f"{L['similar']}:"]
        out += [f"  {s['id']}: {s['title']} ({s.get('root_cause', '')}; {s.get('score', 0):.2f}"
                + (f"; shares {', '.join(s['shared_symptoms'][:4])}" if s.get("shared_symptoms") else "") + ")"
                for s in d["similar_incidents"][:3]]
    if d.get("warnings"):
        out += ["", f"{L['warnings']}:"] + [f"  ! {w}" for w in d["warnings"][:10]]
    return "\n".join(out) + "\n"


def grouped_steps(steps: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Consecutive steps of one kind, so each kind gets its own code block."""
    out: list[tuple[str, list[str]]] = []
    for step in steps[:4]:
        kind = step.get("kind", "shell")
        if out and out[-1][0] == kind:
            out[-1][1].append(step["text"])
        else:
            out.append((kind, [step["text"]]))
    return out


def render_markdown(d: dict[str, Any], lang: str = "en", *, stored: bool = True) -> str:
    """The diagnosis as Markdown (for tickets, chat and pull requests); ``stored=False`` quotes no id."""
    L = LABELS[lang]
    out = [f"## dsdoctor diagnosis `{d['id']}`" if stored else f"## {L['local']}"]
    if d.get("job"):
        out += ["", f"**{L['job']}**: {job_line(d['job'])}"]
    out += ["", f"**{d['summary']['text']}**", "", f"### {L['looks']}", ""]
    fe = d.get("first_error")
    out.append(f"1. **{L['first']}**: {_first_error_where(d, lang) if fe else L['none']}")
    if fe:
        line = (fe.get("line") or "").replace("`", "'")
        out += ["", "   ```text", f"   {line}", "   ```", ""]
    out.append(f"2. **{L['scope']}**: {SCOPES.get(lang, {}).get(d['scope'], d['scope'])}")
    out.append(f"3. **{L['phase']}**: {PHASES.get(lang, {}).get(d['phase'], d['phase'])}")
    out += ["", f"### {L['causes']}", "", "| # | cause | p | why |", "|---|---|---|---|"]
    for i, c in enumerate(d["causes"], 1):
        why = "; ".join(c["supporting"][:2]).replace("|", "\\|")
        out.append(f"| {i} | `{c['id']}` {c['title']} | {c['probability']:.0%} | {why} |")
    out.append(f"| | *{L['unexplained']}* | {d['unexplained']:.0%} | |")
    if d["causes"] and d["causes"][0]["fixes"]:
        fix = d["causes"][0]["fixes"][0]
        out += ["", f"**{L['fix']}**: {fix['title']}", "", "```", fix["snippet"].rstrip(), "```"]
    if d["config_findings"]:
        out += ["", f"### {L['findings']}", ""]
        out += [f"- **{f['severity']}** `{f['key_path']}`: {f['message']}" for f in d["config_findings"]]
    step = d.get("next_step")
    if step:
        out += ["", f"### {L['next_step']}: {step['title']}", ""]
        if step.get("regression"):
            out.append(f"**{L['regression']}**: {step['regression']}")
    if d["next_experiments"]:
        e = d["next_experiments"][0]
        out += ["", f"### {L['next']}: {e['title']}", "", f"{e['why']}", ""]
        fence = {"shell": "sh", "python": "python", "config": "json", "args": "sh"}
        for kind, texts in grouped_steps(e.get("steps") or [{"kind": "shell", "text": c} for c in e["commands"]][:4]):
            out += [f"```{fence.get(kind, 'text')}", *texts, "```", ""]
        now = d["causes"][0] if d["causes"] else None
        out += [f"- {o['title']} ({o['probability']:.0%}): {outcome_effect(o, now, lang)}; `--observe {o['observe']}`"
                for o in e["outcomes"]]
    return "\n".join(out) + "\n"
