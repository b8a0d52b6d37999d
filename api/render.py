"""Human renderings of a diagnosis: terminal text and Markdown, in English or Chinese."""

from __future__ import annotations

from typing import Any

LABELS = {
    "en": {
        "looks": "The three looks", "first": "First error", "scope": "Scope", "phase": "Phase",
        "none": "none found", "causes": "Most likely root causes", "for": "for", "against": "against",
        "fix": "fix", "findings": "Config findings", "next": "Next isolation experiment",
        "tried": "Already tried (read from the description)",
        "outcomes": "outcomes", "unexplained": "unexplained", "similar": "Similar past incidents",
        "warnings": "Warnings", "rank": "rank", "at": "at", "ruled": "Ruled out",
        "then": "then", "observe": "record with",
    },
    "zh": {
        "looks": "三看", "first": "第一个错误", "scope": "影响范围", "phase": "阶段", "none": "未发现",
        "causes": "最可能的根因", "for": "支持", "against": "反对", "fix": "修复", "findings": "配置检查",
        "next": "下一步隔离实验", "tried": "已做过的实验（从描述中读出）", "outcomes": "可能结果", "unexplained": "无法解释",
        "similar": "相似的历史事故", "warnings": "警告", "rank": "rank", "at": "时间", "ruled": "已排除",
        "then": "则", "observe": "记录方式",
    },
}
SCOPES = {"zh": {"single-rank": "单个 rank", "single-node": "单个节点", "multi-node": "多个节点", "global": "全局（所有 rank）",
                 "unknown": "未知"}}
PHASES = {"zh": {"launch": "启动/初始化", "first-step": "第一个 step", "steady": "稳定训练中", "checkpoint": "检查点保存/加载",
                 "eval": "评估/生成", "exit": "退出", "unknown": "未知"}}


def _bar(p: float, width: int = 20) -> str:
    filled = round(p * width)
    return "█" * filled + "·" * (width - filled)


def _first_error_line(d: dict[str, Any], lang: str) -> str:
    L = LABELS[lang]
    fe = d.get("first_error")
    if not fe:
        return L["none"]
    where = []
    if fe.get("rank") is not None:
        where.append(f"{L['rank']} {fe['rank']}")
    if fe.get("node"):
        where.append(fe["node"])
    if fe.get("time"):
        where.append(fe["time"])
    prefix = f"[{', '.join(where)}] " if where else ""
    return prefix + (fe.get("line") or "")[:240]


def render_text(d: dict[str, Any], lang: str = "en") -> str:
    """The diagnosis for a person at a terminal."""
    L = LABELS[lang]
    out = [f"dsdoctor diagnosis {d['id']}", "", d["summary"]["text"], "", f"{L['looks']}:"]
    out.append(f"  1. {L['first']}: {_first_error_line(d, lang)}")
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
    if d["next_experiments"]:
        e = d["next_experiments"][0]
        out += ["", f"{L['next']}: {e['title']} ({e['cost']})", f"  {e['why']}"]
        out += [f"  $ {cmd}" for cmd in e["commands"][:3]]
        out.append(f"  {L['outcomes']}:")
        for o in e["outcomes"]:
            out.append(f"    {o['probability']:5.0%} {o['title']}  → {L['then']} {o['leading_cause']} "
                       f"({o['leading_probability']:.0%}); {L['observe']} --observe {o['observe']}")
        for other in d["next_experiments"][1:]:
            out.append(f"  · {other['title']} ({other['cost']}): {other['why']}")
    if d.get("similar_incidents"):
        out += ["", f"{L['similar']}:"]
        out += [f"  {s['id']}: {s['title']} ({s.get('root_cause', '')})" for s in d["similar_incidents"][:3]]
    if d.get("warnings"):
        out += ["", f"{L['warnings']}:"] + [f"  ! {w}" for w in d["warnings"][:10]]
    return "\n".join(out) + "\n"


def render_markdown(d: dict[str, Any], lang: str = "en") -> str:
    """The diagnosis as Markdown (for tickets, chat and pull requests)."""
    L = LABELS[lang]
    out = [f"## dsdoctor diagnosis `{d['id']}`", "", f"**{d['summary']['text']}**", "", f"### {L['looks']}", ""]
    first = _first_error_line(d, lang).replace("`", "'")
    out.append(f"1. **{L['first']}**: `{first}`")
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
    if d["next_experiments"]:
        e = d["next_experiments"][0]
        out += ["", f"### {L['next']}: {e['title']}", "", f"{e['why']}", "", "```sh", *e["commands"][:3], "```", ""]
        out += [f"- {o['title']} ({o['probability']:.0%}) → `{o['leading_cause']}`; `--observe {o['observe']}`"
                for o in e["outcomes"]]
    return "\n".join(out) + "\n"
