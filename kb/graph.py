"""The causal graph: noisy-OR likelihoods, explanation paths, neighbourhoods and exports.

The graph is tripartite: cause -> mechanism (``strength`` = P(mechanism active | cause)) ->
symptom (``strength`` = P(symptom | mechanism active)). Under cause c, with the leak of s::

    P(s | c) = 1 - (1 - leak_s) * prod over mechanisms m of (1 - w(c->m) * w(m->s))

The loader stores this table once per load in ``kb.likelihoods`` (reachable symptoms only;
for any other symptom P(s | c) is its leak). :func:`noisy_or_likelihood` and :func:`paths`
are the small functions the inference engine and lint share.

Exports (DOT, Mermaid, JSON) work on an *export graph*: the causal graph plus "refines"
edges (finer cause -> its parent) and, on request, "tests" edges (experiment -> cause).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from dsdoctor.kb.model import Cause, KnowledgeBase, Mechanism, Symptom

if TYPE_CHECKING:  # networkx costs ~0.15 s to import; the ranking never needs it
    import networkx as nx


class MechanismPath(NamedTuple):
    """One path cause -> mechanism -> symptom and its two link strengths."""

    mechanism: str
    cause_to_mechanism: float
    mechanism_to_symptom: float

    @property
    def strength(self) -> float:
        """P(this path makes the symptom appear | cause) = w(c->m) * w(m->s)."""
        return self.cause_to_mechanism * self.mechanism_to_symptom


# ---------------------------------------------------------------- building


def build_graph(causes: Mapping[str, Cause], mechanisms: Mapping[str, Mechanism],
                symptoms: Mapping[str, Symptom]) -> nx.DiGraph:
    """The causal DiGraph: nodes carry ``kind`` (cause|mechanism|symptom); edges carry ``strength``.

    Edges to IDs that are not defined are left out (the loader reports them).
    """
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(
        (c.id, {"kind": "cause", "title": c.title.en, "domain": c.domain, "prior": c.prior, "status": c.status})
        for c in causes.values()
    )
    graph.add_nodes_from(
        (m.id, {"kind": "mechanism", "title": m.title.en, "pillar": m.pillar, "status": m.status})
        for m in mechanisms.values()
    )
    graph.add_nodes_from(
        (s.id, {"kind": "symptom", "title": s.title.en, "symptom_kind": s.kind, "source": s.source,
                "leak": s.leak, "status": s.status})
        for s in symptoms.values()
    )
    graph.add_edges_from(
        (c.id, mid, {"strength": w}) for c in causes.values() for mid, w in c.mechanisms.items() if mid in mechanisms
    )
    graph.add_edges_from(
        (m.id, sid, {"strength": w}) for m in mechanisms.values() for sid, w in m.symptoms.items() if sid in symptoms
    )
    return graph


def cause_likelihoods(cause: Cause, mechanisms: Mapping[str, Mechanism],
                      symptoms: Mapping[str, Symptom]) -> dict[str, float]:
    """P(s | cause) for every symptom the cause reaches, by noisy-OR over its mechanisms."""
    miss: dict[str, float] = {}
    for mid, w_cm in cause.mechanisms.items():
        mechanism = mechanisms.get(mid)
        if mechanism is None:
            continue
        for sid, w_ms in mechanism.symptoms.items():
            if sid in symptoms:
                miss[sid] = miss.get(sid, 1.0) * (1.0 - w_cm * w_ms)
    return {sid: 1.0 - (1.0 - symptoms[sid].leak) * m for sid, m in miss.items()}


def compute_likelihoods(causes: Mapping[str, Cause], mechanisms: Mapping[str, Mechanism],
                        symptoms: Mapping[str, Symptom]) -> dict[str, dict[str, float]]:
    """The table cause id -> symptom id -> P(s | c), for reachable symptoms."""
    return {cid: cause_likelihoods(c, mechanisms, symptoms) for cid, c in causes.items()}


def noisy_or_likelihood(kb: KnowledgeBase, symptom_id: str, cause_id: str) -> float:
    """P(symptom | cause): from ``kb.likelihoods`` when filled, else computed; the leak if unreached.

    Raises KeyError for an unknown symptom.
    """
    leak = kb.symptoms[symptom_id].leak
    table = kb.likelihoods.get(cause_id)
    if table is None and cause_id in kb.causes:
        table = cause_likelihoods(kb.causes[cause_id], kb.mechanisms, kb.symptoms)
    return (table or {}).get(symptom_id, leak)


def paths(kb: KnowledgeBase, cause_id: str, symptom_id: str) -> list[MechanismPath]:
    """Every path cause -> mechanism -> symptom, strongest first (the first is the one to show)."""
    cause = kb.causes.get(cause_id)
    if cause is None:
        return []
    found = [
        MechanismPath(mid, w_cm, kb.mechanisms[mid].symptoms[symptom_id])
        for mid, w_cm in cause.mechanisms.items()
        if mid in kb.mechanisms and symptom_id in kb.mechanisms[mid].symptoms
    ]
    return sorted(found, key=lambda p: (-p.strength, p.mechanism))


def signature(kb: KnowledgeBase, cause_id: str, threshold: float = 0.3) -> frozenset[str]:
    """Symptoms with P(s | cause) >= threshold: what the cause usually shows."""
    table = kb.likelihoods.get(cause_id)
    if table is None:
        table = cause_likelihoods(kb.causes[cause_id], kb.mechanisms, kb.symptoms)
    return frozenset(sid for sid, p in table.items() if p >= threshold)


# ---------------------------------------------------------------- export graph and neighbourhoods


def export_graph(kb: KnowledgeBase, *, experiments: bool = False, lang: str = "en") -> nx.DiGraph:
    """The causal graph with titles in ``lang``, "refines" edges and optional experiment nodes."""
    import networkx as nx

    graph = nx.DiGraph()
    for table, kind in ((kb.causes, "cause"), (kb.mechanisms, "mechanism"), (kb.symptoms, "symptom")):
        graph.add_nodes_from((nid, {"kind": kind, "title": node.title.get(lang)}) for nid, node in table.items())
    graph.add_edges_from((u, v, {"kind": "causes" if u in kb.causes else "produces", "strength": d["strength"]})
                         for u, v, d in kb.graph.edges(data=True))
    graph.add_edges_from((c.id, c.parent, {"kind": "refines"}) for c in kb.causes.values()
                         if c.parent and c.parent in kb.causes)
    if experiments:
        graph.add_nodes_from((x.id, {"kind": "experiment", "title": x.title.get(lang)}) for x in kb.experiments.values())
        graph.add_edges_from((x.id, cid, {"kind": "tests"}) for x in kb.experiments.values()
                             for cid in x.expects if cid in kb.causes)
    return graph


def neighbourhood(graph: nx.DiGraph, around: str, depth: int = 1) -> nx.DiGraph:
    """The subgraph of nodes within ``depth`` hops of ``around``, following edges both ways."""
    if around not in graph:
        raise KeyError(around)
    undirected = graph.to_undirected(as_view=True)
    import networkx as nx

    reached = nx.single_source_shortest_path_length(undirected, around, cutoff=max(0, depth))
    return graph.subgraph(reached).copy()


# ---------------------------------------------------------------- DOT

_DOT_STYLE = {
    "cause": 'shape=box, style="rounded,filled", fillcolor="#f8d7da"',
    "mechanism": 'shape=box, style="filled", fillcolor="#fff3cd"',
    "symptom": 'shape=ellipse, style="filled", fillcolor="#d1e7dd"',
    "experiment": 'shape=hexagon, style="filled", fillcolor="#cfe2ff"',
}
_EDGE_STYLE = {"refines": "style=dashed, arrowhead=empty", "tests": "style=dotted"}


def dot_quote(text: str) -> str:
    """A Graphviz double-quoted string: backslashes and quotes escaped, newlines as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(graph: nx.DiGraph, name: str = "kb") -> str:
    """Graphviz DOT text (``dot -Tsvg``); IDs quoted, labels escaped."""
    lines = [f"digraph {dot_quote(name)} {{", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for nid, data in sorted(graph.nodes(data=True)):
        label = dot_quote(f"{nid}\n{data.get('title', '')}")
        lines.append(f"  {dot_quote(nid)} [label={label}, {_DOT_STYLE.get(data.get('kind'), 'shape=box')}];")
    for u, v, data in sorted(graph.edges(data=True)):
        attrs = []
        if "strength" in data:
            attrs.append(f"label={dot_quote(_fmt(data['strength']))}")
        if data.get("kind") in _EDGE_STYLE:
            attrs.append(_EDGE_STYLE[data["kind"]])
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {dot_quote(u)} -> {dot_quote(v)}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- Mermaid

#: Mermaid refuses to render a flowchart with more edges than this (its default ``maxEdges``)
MERMAID_MAX_EDGES = 500
_MERMAID_SHAPE = {"cause": ('["', '"]'), "mechanism": ('("', '")'), "symptom": ('(["', '"])'),
                  "experiment": ('{{"', '"}}')}
_MERMAID_CLASS = {
    "cause": "fill:#f8d7da,stroke:#842029", "mechanism": "fill:#fff3cd,stroke:#997404",
    "symptom": "fill:#d1e7dd,stroke:#0f5132", "experiment": "fill:#cfe2ff,stroke:#084298",
}
_MERMAID_ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "&": "#amp;", "`": "#96;",
                     "|": "#124;", "[": "#91;", "]": "#93;", "{": "#123;", "}": "#125;"}


def mermaid_text(text: str) -> str:
    """Text safe inside a quoted Mermaid label: special characters as entity codes, newlines as <br/>."""
    escaped = "".join(_MERMAID_ENTITIES.get(ch, ch) for ch in text.replace("\r", ""))
    return escaped.replace("\n", "<br/>")


def mermaid_ids(node_ids: Iterable[str]) -> dict[str, str]:
    """Safe, unique Mermaid node IDs (letters, digits, underscores) for arbitrary knowledge IDs."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for nid in sorted(node_ids):
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", nid)
        candidate, n = base, 1
        while candidate in used:
            n += 1
            candidate = f"{base}_{n}"
        used.add(candidate)
        out[nid] = candidate
    return out


def to_mermaid(graph: nx.DiGraph) -> str:
    """Mermaid ``flowchart LR`` text (paste inside a ```mermaid fence to render in Markdown)."""
    ids = mermaid_ids(graph.nodes)
    lines = ["flowchart LR"]
    by_kind: dict[str, list[str]] = {}
    for nid, data in sorted(graph.nodes(data=True)):
        kind = data.get("kind", "cause")
        left, right = _MERMAID_SHAPE.get(kind, ('["', '"]'))
        label = mermaid_text(nid) + "<br/>" + mermaid_text(str(data.get("title", "")))
        lines.append(f"  {ids[nid]}{left}{label}{right}")
        by_kind.setdefault(kind, []).append(ids[nid])
    for u, v, data in sorted(graph.edges(data=True)):
        kind = data.get("kind")
        if "strength" in data:
            lines.append(f"  {ids[u]} -->|{_fmt(data['strength'])}| {ids[v]}")
        elif kind in ("refines", "tests"):
            lines.append(f"  {ids[u]} -.->|{kind}| {ids[v]}")
        else:
            lines.append(f"  {ids[u]} --> {ids[v]}")
    for kind, members in by_kind.items():
        if kind in _MERMAID_CLASS:
            lines.append(f"  classDef {kind} {_MERMAID_CLASS[kind]}")
            lines.append(f"  class {','.join(members)} {kind}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- JSON


def to_json(graph: nx.DiGraph) -> str:
    """``{"nodes": [{id, kind, title}], "edges": [{source, target, kind, strength?}]}`` as text."""
    doc: dict[str, Any] = {
        "nodes": [{"id": nid, **data} for nid, data in sorted(graph.nodes(data=True))],
        "edges": [{"source": u, "target": v, **data} for u, v, data in sorted(graph.edges(data=True))],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# ---------------------------------------------------------------- one node with its neighbours


def describe(kb: KnowledgeBase, node_id: str, lang: str = "en") -> dict[str, Any]:
    """One node and its neighbours as plain data (for ``dsdoctor kb show`` and the API).

    Raises KeyError for an unknown ID.
    """
    if node_id in kb.causes:
        return _describe_cause(kb, node_id, lang)
    if node_id in kb.mechanisms:
        return _describe_mechanism(kb, node_id, lang)
    if node_id in kb.symptoms:
        return _describe_symptom(kb, node_id, lang)
    if node_id in kb.experiments:
        return _describe_experiment(kb, node_id, lang)
    raise KeyError(node_id)


def _tv(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    return 0.5 * sum(abs(p.get(o, 0.0) - q.get(o, 0.0)) for o in set(p) | set(q))


def _describe_cause(kb: KnowledgeBase, cid: str, lang: str) -> dict[str, Any]:
    c = kb.causes[cid]
    table = kb.likelihoods.get(cid) or cause_likelihoods(c, kb.mechanisms, kb.symptoms)
    symptoms = [
        {"id": sid, "title": kb.symptoms[sid].title.get(lang), "likelihood": round(p, 4),
         "leak": kb.symptoms[sid].leak,
         "via": [{"mechanism": path.mechanism, "strength": round(path.strength, 4)} for path in paths(kb, cid, sid)]}
        for sid, p in sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    experiments = [
        {"id": x.id, "title": x.title.get(lang), "outcomes": x.expects[cid], "default": x.default,
         "total_variation_from_default": round(_tv(x.expects[cid], x.default), 4)}
        for x in sorted(kb.experiments.values(), key=lambda x: x.id) if cid in x.expects
    ]
    ctx = {k: v for k, v in vars(c.context).items() if v is not None}
    return {
        "id": cid, "type": "cause", "status": c.status, "domain": c.domain, "title": c.title.get(lang),
        "description": c.description.get(lang), "prior": c.prior, "prior_basis": c.prior_basis, "parent": c.parent,
        "children": sorted(o.id for o in kb.causes.values() if o.parent == cid), "context": ctx,
        "mechanisms": [{"id": mid, "strength": w, "title": kb.mechanisms[mid].title.get(lang) if mid in kb.mechanisms
                        else ""} for mid, w in sorted(c.mechanisms.items(), key=lambda kv: (-kv[1], kv[0]))],
        "symptoms": symptoms,
        "fixes": [{"title": f.title.get(lang), "kind": f.kind, "snippet": f.snippet} for f in c.fixes],
        "regression": c.regression.get(lang), "prevention": c.prevention.get(lang), "references": c.references,
        "experiments": experiments, "file": c.file, "line": c.line,
    }


def _describe_mechanism(kb: KnowledgeBase, mid: str, lang: str) -> dict[str, Any]:
    m = kb.mechanisms[mid]
    causes = sorted(((c.id, c.mechanisms[mid]) for c in kb.causes.values() if mid in c.mechanisms),
                    key=lambda kv: (-kv[1], kv[0]))
    return {
        "id": mid, "type": "mechanism", "status": m.status, "pillar": m.pillar, "title": m.title.get(lang),
        "description": m.description.get(lang),
        "causes": [{"id": cid, "strength": w, "title": kb.causes[cid].title.get(lang)} for cid, w in causes],
        "symptoms": [{"id": sid, "strength": w, "title": kb.symptoms[sid].title.get(lang) if sid in kb.symptoms
                      else ""} for sid, w in sorted(m.symptoms.items(), key=lambda kv: (-kv[1], kv[0]))],
        "references": m.references, "file": m.file, "line": m.line,
    }


def _describe_symptom(kb: KnowledgeBase, sid: str, lang: str) -> dict[str, Any]:
    s = kb.symptoms[sid]
    producers = sorted(((m.id, m.symptoms[sid]) for m in kb.mechanisms.values() if sid in m.symptoms),
                       key=lambda kv: (-kv[1], kv[0]))
    causes = sorted(((cid, table[sid]) for cid, table in kb.likelihoods.items() if sid in table),
                    key=lambda kv: (-kv[1], kv[0]))
    return {
        "id": sid, "type": "symptom", "status": s.status, "kind": s.kind, "source": s.source, "severity": s.severity,
        "title": s.title.get(lang), "description": s.description.get(lang), "leak": s.leak,
        "absent_reliability": s.absent_reliability, "printed_by": list(s.printed_by),
        "question": s.question.get(lang) if s.question else None,
        "mechanisms": [{"id": mid, "strength": w, "title": kb.mechanisms[mid].title.get(lang)} for mid, w in producers],
        "causes": [{"id": cid, "likelihood": round(p, 4), "title": kb.causes[cid].title.get(lang)} for cid, p in causes],
        "references": s.references, "file": s.file, "line": s.line,
    }


def _describe_experiment(kb: KnowledgeBase, xid: str, lang: str) -> dict[str, Any]:
    x = kb.experiments[xid]
    rows = [{"cause": cid, "title": kb.causes[cid].title.get(lang) if cid in kb.causes else "", "outcomes": row}
            for cid, row in sorted(x.expects.items())]
    return {
        "id": xid, "type": "experiment", "status": x.status, "title": x.title.get(lang), "how": x.how.get(lang),
        "commands": x.commands, "cost": {"minutes": x.cost_minutes, "gpus": x.cost_gpus},
        "outcomes": [{"id": o.id, "title": o.title.get(lang)} for o in x.outcomes],
        "table": [*rows, {"cause": "(default)", "title": "causes not listed", "outcomes": x.default}],
        "references": x.references, "file": x.file, "line": x.line,
    }
