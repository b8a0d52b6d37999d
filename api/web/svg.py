"""Causal-path drawings as inline SVG, rendered on the server.

Three columns, read right to left as the causal direction: root causes (right) activate
mechanisms (middle), which produce symptoms (left). Edge width grows with the link strength
of the knowledge base (P(mechanism | cause), P(symptom | mechanism)). Every label and attribute
is escaped here; the SVG carries no script and no ``style`` attributes (the page's CSP forbids
inline styles), only presentation attributes and classes styled by ``static/web.css``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from dsdoctor.kb.model import KnowledgeBase

KINDS = ("symptom", "mechanism", "cause")
NODE_W, NODE_H, GAP_Y, GAP_X = 250, 60, 12, 100
MARGIN, HEADER = 12, 30
MAX_LABEL_UNITS = 34
FILL = {"symptom": "#d1e7dd", "mechanism": "#fff3cd", "cause": "#f8d7da"}
STROKE = {"symptom": "#146c43", "mechanism": "#8a6d00", "cause": "#a52834"}


@dataclass
class Node:
    id: str
    kind: str  # symptom | mechanism | cause
    label: str
    href: str | None = None
    emphasis: bool = False  # the focal cause, or a symptom seen in the evidence
    order: float = 0.0  # preferred position within the column (smaller = higher)


@dataclass
class Edge:
    source: str  # the node nearer the cause (cause -> mechanism, mechanism -> symptom)
    target: str
    strength: float


@dataclass
class Drawing:
    nodes: list[Node]
    edges: list[Edge]
    title: str
    description: str
    column_titles: dict[str, str] = field(default_factory=dict)


def _units(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def fit(text: str, max_units: int = MAX_LABEL_UNITS) -> str:
    """``text`` cut to about ``max_units`` Latin character widths (CJK counts double), with '…'."""
    text = " ".join(str(text).split())
    if sum(_units(ch) for ch in text) <= max_units:
        return text
    used, out = 1, []  # one unit for the ellipsis
    for ch in text:
        used += _units(ch)
        if used > max_units:
            break
        out.append(ch)
    return "".join(out).rstrip() + "…"


def wrap(text: str, max_units: int = MAX_LABEL_UNITS, max_lines: int = 2) -> list[str]:
    """``text`` broken into at most ``max_lines`` lines of about ``max_units`` (at spaces when possible)."""
    words = " ".join(str(text).split())
    lines: list[str] = []
    while words and len(lines) < max_lines:
        if len(lines) == max_lines - 1:
            lines.append(fit(words, max_units))
            break
        used, cut, last_space = 0, len(words), -1
        for i, ch in enumerate(words):
            if ch == " ":
                last_space = i
            used += _units(ch)
            if used > max_units:
                cut = last_space if last_space > 0 else i
                break
        lines.append(words[:cut].rstrip())
        words = words[cut:].lstrip()
    return lines or [""]


def _layout(drawing: Drawing) -> dict[str, tuple[float, float]]:
    """Top-left corner of every node: causes in their given order, the other columns by barycentre."""
    columns: dict[str, list[Node]] = {k: [] for k in KINDS}
    for node in drawing.nodes:
        columns[node.kind].append(node)
    position: dict[str, float] = {}
    neighbours: dict[str, list[tuple[str, float]]] = {}
    for e in drawing.edges:
        neighbours.setdefault(e.target, []).append((e.source, e.strength))
    for kind in ("cause", "mechanism", "symptom"):
        nodes = columns[kind]
        if kind != "cause":
            for n in nodes:
                linked = [(position[s], w) for s, w in neighbours.get(n.id, []) if s in position]
                total = sum(w for _, w in linked) or 1.0
                n.order = sum(p * w for p, w in linked) / total if linked else 1e9
        nodes.sort(key=lambda n: (n.order, n.id))
        for i, n in enumerate(nodes):
            position[n.id] = i
    tallest = max((len(c) for c in columns.values()), default=0)
    height = tallest * (NODE_H + GAP_Y)
    corners: dict[str, tuple[float, float]] = {}
    for col, kind in enumerate(KINDS):
        nodes = columns[kind]
        top = MARGIN + HEADER + (height - len(nodes) * (NODE_H + GAP_Y)) / 2
        x = MARGIN + col * (NODE_W + GAP_X)
        for i, n in enumerate(nodes):
            corners[n.id] = (x, top + i * (NODE_H + GAP_Y))
    return corners


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def render(drawing: Drawing, prefix: str = "g") -> Markup:
    """The drawing as an ``<svg>`` element (safe Markup: every label escaped)."""
    if not drawing.nodes:
        return Markup("")
    corners = _layout(drawing)
    kinds = {n.id: n.kind for n in drawing.nodes}
    rows = max(sum(1 for n in drawing.nodes if n.kind == k) for k in KINDS)
    width = 2 * MARGIN + 3 * NODE_W + 2 * GAP_X
    height = 2 * MARGIN + HEADER + rows * (NODE_H + GAP_Y)
    pid = escape(prefix)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="causal-graph" viewBox="0 0 {width} {_num(height)}" '
        f'width="{width}" height="{_num(height)}" role="img" aria-labelledby="{pid}-title {pid}-desc" '
        f'font-family="system-ui, -apple-system, \'Segoe UI\', \'Noto Sans CJK SC\', sans-serif">',
        f'<title id="{pid}-title">{escape(drawing.title)}</title>',
        f'<desc id="{pid}-desc">{escape(drawing.description)}</desc>',
        '<defs>'
        f'<marker id="{pid}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="10" markerHeight="10" '
        'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/>'
        '</marker></defs>',
    ]
    for col, kind in enumerate(KINDS):
        x = MARGIN + col * (NODE_W + GAP_X) + NODE_W / 2
        heading = drawing.column_titles.get(kind, kind)
        parts.append(f'<text class="column-title" x="{_num(x)}" y="{MARGIN + 16}" text-anchor="middle" '
                     f'font-size="14" font-weight="700" fill="#1a1a1a">{escape(heading)}</text>')
    for e in sorted(drawing.edges, key=lambda e: e.strength):
        if e.source not in corners or e.target not in corners:
            continue
        sx, sy = corners[e.source]
        tx, ty = corners[e.target]
        x1, y1 = sx, sy + NODE_H / 2  # left edge of the node nearer the cause
        x2, y2 = tx + NODE_W, ty + NODE_H / 2  # right edge of the node nearer the symptom
        mid = (x1 + x2) / 2
        strength = max(0.0, min(1.0, float(e.strength)))
        label = f"{e.source} → {e.target}: {strength:.2f}"
        parts.append(
            f'<path class="edge edge-{escape(kinds[e.source])}" data-from="{escape(e.source)}" '
            f'data-to="{escape(e.target)}" d="M{_num(x1)},{_num(y1)} C{_num(mid)},{_num(y1)} {_num(mid)},{_num(y2)} '
            f'{_num(x2 + 2)},{_num(y2)}" fill="none" stroke="#444" stroke-opacity="{0.35 + 0.6 * strength:.2f}" '
            f'stroke-width="{1 + 6 * strength:.1f}" marker-end="url(#{pid}-arrow)"><title>{escape(label)}</title></path>'
        )
    for n in drawing.nodes:
        x, y = corners[n.id]
        classes = f"node node-{escape(n.kind)}" + (" emphasis" if n.emphasis else "")
        weight = ' font-weight="700"' if n.emphasis else ""
        label_units = MAX_LABEL_UNITS - (4 if n.emphasis else 0)
        label = "".join(f'<tspan x="{_num(x + 10)}" dy="{0 if i == 0 else 16}">{escape(line)}</tspan>'
                        for i, line in enumerate(wrap(n.label, label_units)))
        box = (f'<rect x="{_num(x)}" y="{_num(y)}" width="{NODE_W}" height="{NODE_H}" rx="6" '
               f'fill="{FILL[n.kind]}" stroke="{STROKE[n.kind]}" stroke-width="{3 if n.emphasis else 1.2}"/>'
               f'<text x="{_num(x + 10)}" y="{_num(y + 18)}" font-size="13" fill="#1a1a1a"{weight}>{label}</text>'
               f'<text x="{_num(x + 10)}" y="{_num(y + 51)}" font-size="11" fill="#3d3d3d" '
               f'font-family="ui-monospace, monospace">{escape(fit(n.id, 38))}</text>')
        tip = f"<title>{escape(n.label)} ({escape(n.id)})</title>"
        body = f'<a href="{escape(n.href)}">{tip}{box}</a>' if n.href else f"{tip}{box}"
        parts.append(f'<g class="{classes}" data-node="{escape(n.id)}">{body}</g>')
    parts.append("</svg>")
    return Markup("".join(parts))


# ---------------------------------------------------------------- what to draw


def _title(kb: KnowledgeBase, node_id: str, lang: str, fallback: str = "") -> str:
    node = kb.node(node_id)
    if node is not None:
        return node.title.get(lang)
    return fallback or node_id


def _strength(kb: KnowledgeBase, source: str, target: str, default: float = 0.5) -> float:
    if source in kb.causes:
        return kb.causes[source].mechanisms.get(target, default)
    if source in kb.mechanisms:
        return kb.mechanisms[source].symptoms.get(target, default)
    return default


def diagnosis_drawing(diagnosis: dict, kb: KnowledgeBase, lang: str, *, top: int = 3,
                      cause_href=None, titles: dict[str, str] | None = None) -> Drawing:
    """The explanation paths symptom <- mechanism <- cause of the top causes of a diagnosis."""
    titles = titles or {}
    observed = {s.get("id"): s.get("title", "") for s in diagnosis.get("symptoms") or []}
    nodes: dict[str, Node] = {}
    edges: dict[tuple[str, str], Edge] = {}
    for rank, cause in enumerate((diagnosis.get("causes") or [])[:top]):
        cid = cause.get("id", "")
        paths: Iterable[Sequence[str]] = cause.get("paths") or ([cause["path"]] if cause.get("path") else [])
        for path in paths:
            if len(path) != 3:
                continue
            sid, mid, pcid = (str(p) for p in path)
            nodes.setdefault(pcid, Node(pcid, "cause", _title(kb, pcid, lang, cause.get("title", "")),
                                        href=cause_href(pcid) if cause_href else None, emphasis=rank == 0,
                                        order=rank))
            nodes.setdefault(mid, Node(mid, "mechanism", _title(kb, mid, lang, titles.get(mid, ""))))
            nodes.setdefault(sid, Node(sid, "symptom", _title(kb, sid, lang, observed.get(sid, ""))))
            edges.setdefault((pcid, mid), Edge(pcid, mid, _strength(kb, pcid, mid)))
            edges.setdefault((mid, sid), Edge(mid, sid, _strength(kb, mid, sid)))
        if cid and cid not in nodes:  # a cause without a mechanism path still gets its box
            nodes[cid] = Node(cid, "cause", _title(kb, cid, lang, cause.get("title", "")),
                              href=cause_href(cid) if cause_href else None, emphasis=rank == 0, order=rank)
    return Drawing(list(nodes.values()), list(edges.values()), title="", description="")


def neighbourhood_drawing(kb: KnowledgeBase, cause_id: str, lang: str, *, max_symptoms: int = 12,
                          max_other_causes: int = 5, cause_href=None) -> Drawing:
    """A cause, its mechanisms, the symptoms they produce (strongest first) and the other causes
    that share those mechanisms (the ones it is confused with)."""
    cause = kb.causes[cause_id]
    nodes: dict[str, Node] = {cause_id: Node(cause_id, "cause", cause.title.get(lang), emphasis=True, order=0,
                                             href=cause_href(cause_id) if cause_href else None)}
    edges: list[Edge] = []
    mechanisms = [m for m in sorted(cause.mechanisms, key=lambda m: (-cause.mechanisms[m], m)) if m in kb.mechanisms]
    for mid in mechanisms:
        nodes[mid] = Node(mid, "mechanism", kb.mechanisms[mid].title.get(lang))
        edges.append(Edge(cause_id, mid, cause.mechanisms[mid]))
    reach = sorted(((cause.mechanisms[m] * w, m, s) for m in mechanisms for s, w in kb.mechanisms[m].symptoms.items()
                    if s in kb.symptoms), key=lambda t: (-t[0], t[2]))
    shown: set[str] = set()
    for _strength_value, mid, sid in reach:
        if sid not in shown and len(shown) >= max_symptoms:
            continue
        shown.add(sid)
        nodes.setdefault(sid, Node(sid, "symptom", kb.symptoms[sid].title.get(lang)))
        edges.append(Edge(mid, sid, kb.mechanisms[mid].symptoms[sid]))
    others = sorted(((sum(c.mechanisms.get(m, 0.0) for m in mechanisms), c.id) for c in kb.causes.values()
                     if c.id != cause_id and any(m in c.mechanisms for m in mechanisms)), key=lambda t: (-t[0], t[1]))
    for i, (_shared, oid) in enumerate(others[:max_other_causes], 1):
        other = kb.causes[oid]
        nodes[oid] = Node(oid, "cause", other.title.get(lang), order=i, href=cause_href(oid) if cause_href else None)
        edges.extend(Edge(oid, m, other.mechanisms[m]) for m in mechanisms if m in other.mechanisms)
    return Drawing(list(nodes.values()), edges, title="", description="")
