"""Load the knowledge base: built-in kb/data plus overlay directories, validated, as one graph.

Layers, in order: the base (``data_dir``, default the built-in ``kb/data``) and then each
overlay directory (``DSDOCTOR_KB_PATH``, ':'-separated, when ``overlays`` is None). Every
``*.yaml`` under a layer is read recursively (``template.yaml`` is skipped); each file has
exactly one top-level key: ``causes``, ``mechanisms``, ``symptoms`` or ``experiments``.

Overlay semantics:

* an overlay **adds** entries of any kind; an ID that already exists is an error (IDs are
  never redefined silently);
* an overlay **changes** existing entries only through a file whose top-level key is
  ``patches:``, each entry naming its ``target``. A cause patch may set ``prior`` (replaced),
  ``mechanisms`` (added/changed edges), ``fixes`` and ``references`` (appended) and
  ``status``; a mechanism patch ``symptoms``; a symptom patch ``leak``/``absent_reliability``;
  an experiment patch ``expects`` rows. Patches apply in file order after the overlay's own
  entries, so a patch may target an entry from the base, an earlier overlay or its own overlay.

Everything is validated the same way in every layer, every problem is collected with
``file:line``, and :func:`load_kb` raises :class:`KnowledgeError` if any error remains, so an
overlay that breaks the graph is refused with the same messages as broken built-in data.
Quality checks that do not stop loading (catalog coverage, separability, ...) live in
kb/lint.py.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdoctor.kb import snapshot
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.model import (
    Cause,
    Context,
    Experiment,
    Fix,
    KnowledgeBase,
    Mechanism,
    Outcome,
    Symptom,
    Text,
)
from dsdoctor.kb.yamlload import LineDict, LineList, display_path, line_of, load_file

DATA_DIR = Path(__file__).resolve().parent / "data"
#: not knowledge files: the authoring template and the search glossary (kb/incidents/expand.py)
SKIP_FILES = frozenset({"template.yaml", "glossary.yaml"})
KIND_NAMES = {"causes": "cause", "mechanisms": "mechanism", "symptoms": "symptom", "experiments": "experiment",
              "patches": "patch"}


@dataclass
class Entry:
    """One entry of a knowledge file: its raw YAML (with lines) and, if valid, its data."""

    kind: str
    id: str | None
    file: str
    line: int
    raw: Any
    data: dict[str, Any] | None


@dataclass
class ParsedFile:
    path: Path
    file: str
    kind: str | None
    entries: list[Entry]
    problems: list[Problem]
    unreadable_ids: set[str] = field(default_factory=set)


@dataclass
class Loaded:
    """Everything one load produced: the knowledge base (possibly partial) and the problems."""

    kb: KnowledgeBase
    problems: list[Problem]
    entries: dict[str, Entry]  # id -> the entry that defined it
    broken: set[str]  # ids whose entry is invalid (references to them are not reported again)
    files: list[str] = field(default_factory=list)
    patched: dict[tuple[Any, ...], tuple[str, int]] = field(default_factory=dict)

    def locate(self, node_id: str, *path: Any) -> tuple[str, int]:
        """``(file, line)`` of an entry or of a field/key inside it (patched keys point at the patch)."""
        for depth in range(len(path), 0, -1):
            key = (node_id, *path[:depth])
            if key in self.patched:
                return self.patched[key]
        entry = self.entries.get(node_id)
        if entry is None:
            return ("", 0)
        return entry.file, (line_of(entry.raw, path) or entry.line) if path else entry.line

    def problem(self, node_id: str, path: tuple[Any, ...], message: str, severity: str = "error") -> Problem:
        file, line = self.locate(node_id, *path)
        return Problem(file, line, message, severity)


# ---------------------------------------------------------------- files

_FILE_CACHE: dict[tuple[Any, ...], ParsedFile] = {}
_CACHE_LOCK = threading.Lock()


def knowledge_files(layer: Path) -> list[Path]:
    """The knowledge files of a layer (a directory, searched recursively, or one file), sorted."""
    if layer.is_file():
        return [layer]
    found = [p for pattern in ("*.yaml", "*.yml") for p in layer.rglob(pattern)]
    return sorted(p for p in found if p.name not in SKIP_FILES and p.is_file())


def parse_file(path: Path, *, overlay: bool) -> ParsedFile:
    """Parse and validate one knowledge file (cached while its size and mtime are unchanged)."""
    try:
        stat = path.stat()
        key: tuple[Any, ...] = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, overlay, os.getcwd())
    except OSError:
        key = ()
    with _CACHE_LOCK:
        cached = _FILE_CACHE.get(key) if key else None
    if cached is not None:
        return cached
    parsed = _parse_file(path, overlay)
    if key:
        with _CACHE_LOCK:
            _FILE_CACHE[key] = parsed
    return parsed


def _parse_file(path: Path, overlay: bool) -> ParsedFile:
    from dsdoctor.kb.schema import (  # marshmallow: not needed for a snapshot
        KINDS,
        OVERLAY_KINDS,
        validate_entry,
    )

    data, problems = load_file(path)
    file = display_path(path)
    parsed = ParsedFile(path, file, None, [], problems)
    kinds = OVERLAY_KINDS if overlay else KINDS
    if data is None:
        if problems:  # unreadable: remember its IDs so that references to them are not reported again
            parsed.unreadable_ids = _ids_in_text(path)
        else:
            problems.append(Problem(file, 1, f"the file is empty: write one top-level key, one of {', '.join(kinds)}"))
        return parsed
    if not isinstance(data, LineDict):
        problems.append(Problem(file, 1, f"a knowledge file is a mapping with one top-level key, one of {', '.join(kinds)}"))
        return parsed
    keys = list(data)
    for extra in keys[1:]:
        problems.append(Problem(file, data.key_lines[extra],
                                f"a knowledge file holds one kind: move '{extra}' to a file of its own"))
    kind = keys[0] if keys else None
    if kind == "patches" and not overlay:
        problems.append(Problem(file, data.key_lines[kind], "patches are for overlay directories "
                                "(DSDOCTOR_KB_PATH); in the base knowledge base edit the entry itself"))
        return parsed
    if kind not in kinds:
        line = data.key_lines.get(kind, 1)
        matches = difflib.get_close_matches(str(kind), kinds, n=1)
        hint = f" (did you mean '{matches[0]}'?)" if matches else ""
        problems.append(Problem(file, line, f"unknown file kind {kind!r}{hint}: the top-level key must be one of "
                                + ", ".join(kinds)))
        return parsed
    parsed.kind = kind
    items = data[kind]
    if items is None:
        return parsed
    if not isinstance(items, LineList):
        problems.append(Problem(file, data.key_lines[kind], f"'{kind}' must be a list of entries, each starting with '- id:'"))
        return parsed
    for index, raw in enumerate(items):
        line = items.item_lines[index]
        valid, issues = validate_entry(kind, raw)
        key_field = "target" if kind == "patches" else "id"
        entry_id = raw.get(key_field) if isinstance(raw, dict) and isinstance(raw.get(key_field), str) else None
        for path_, message in issues:
            problems.append(Problem(file, line_of(raw, path_) or line, message))
        parsed.entries.append(Entry(kind, entry_id, file, line, raw, valid))
    return parsed


_ID_LINE = re.compile(r"^\s*(?:-\s+)?(?:id|target):\s*['\"]?([a-z][\w.]*)", re.MULTILINE)


def _ids_in_text(path: Path) -> set[str]:
    try:
        return set(_ID_LINE.findall(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return set()


def clear_cache() -> None:
    """Forget parsed files and the process-wide knowledge base."""
    global _KB
    with _CACHE_LOCK:
        _FILE_CACHE.clear()
    with _KB_LOCK:
        _KB = None


# ---------------------------------------------------------------- conversion


def _text(raw: dict[str, str] | None) -> Text:
    return Text(raw["en"], raw["zh"]) if raw else Text("", "")


def _cause(d: dict[str, Any], entry: Entry) -> Cause:
    ctx = d.get("context") or {}
    return Cause(
        id=d["id"], domain=d["domain"], title=_text(d["title"]), description=_text(d["description"]),
        prior=d["prior"]["value"], prior_basis=d["prior"]["basis"],
        context=Context(**{k: ctx.get(k) for k in ("precision", "zero_stage", "offload", "min_nodes",
                                                    "min_world_size", "phases")}),
        mechanisms=dict(d["mechanisms"]),
        fixes=[Fix(_text(f["title"]), f["kind"], f.get("snippet", "")) for f in d["fixes"]],
        regression=_text(d.get("regression")), prevention=_text(d.get("prevention")),
        references=list(d["references"]), parent=d.get("parent"), file=entry.file, line=entry.line,
        status=d["status"],
    )


def _mechanism(d: dict[str, Any], entry: Entry) -> Mechanism:
    return Mechanism(d["id"], d["pillar"], _text(d["title"]), _text(d["description"]), dict(d["symptoms"]),
                     list(d["references"]), file=entry.file, line=entry.line, status=d["status"])


def _symptom(d: dict[str, Any], entry: Entry) -> Symptom:
    return Symptom(
        id=d["id"], title=_text(d["title"]), description=_text(d["description"]), kind=d["kind"],
        source=d["source"], severity=d["severity"], leak=d["leak"], absent_reliability=d["absent_reliability"],
        question=_text(d["question"]) if d.get("question") else None, references=list(d["references"]),
        file=entry.file, line=entry.line, status=d["status"], printed_by=tuple(d.get("printed_by") or ()),
    )


def _experiment(d: dict[str, Any], entry: Entry) -> Experiment:
    return Experiment(
        id=d["id"], title=_text(d["title"]), how=_text(d["how"]), commands=[text for _, text in d["commands"]],
        command_kinds=[kind for kind, _ in d["commands"]],
        cost_minutes=d["cost"]["minutes"], cost_gpus=d["cost"]["gpus"],
        outcomes=[Outcome(o["id"], _text(o["title"]), list(o["settled_by"])) for o in d["outcomes"]],
        default=dict(d["default"]), expects={k: dict(v) for k, v in d["expects"].items()},
        references=list(d["references"]), file=entry.file, line=entry.line, status=d["status"],
    )


_CONVERT = {"causes": _cause, "mechanisms": _mechanism, "symptoms": _symptom, "experiments": _experiment}


# ---------------------------------------------------------------- patches


def _apply_patch(patch: Entry, node: Any, kind: str, loaded: Loaded) -> list[Problem]:
    """Apply one valid patch to a (copied) node in place; return the problems it has."""
    from dsdoctor.kb.schema import PATCHABLE, row_issues

    data = patch.data or {}
    allowed = PATCHABLE[kind]
    problems = []
    for name in data:
        if name != "target" and name not in allowed:
            problems.append(Problem(patch.file, line_of(patch.raw, (name,)),
                                    f"a patch of a {KIND_NAMES[kind]} may set {', '.join(allowed)}; not '{name}'"))
    if problems:
        return problems
    target = data["target"]

    def mark(*path: Any) -> None:
        loaded.patched[(target, *path)] = (patch.file, line_of(patch.raw, path))

    if "prior" in data:
        node.prior, node.prior_basis = data["prior"]["value"], data["prior"]["basis"]
        mark("prior")
    for name, attr in (("mechanisms", "mechanisms"), ("symptoms", "symptoms")):
        if name in data:
            setattr(node, attr, {**getattr(node, attr), **data[name]})
            for key in data[name]:
                mark(name, key)
    for name in ("leak", "absent_reliability", "status"):
        if name in data:
            setattr(node, name, data[name])
            mark(name)
    if "fixes" in data:
        node.fixes = [*node.fixes, *(Fix(_text(f["title"]), f["kind"], f.get("snippet", "")) for f in data["fixes"])]
    if "references" in data:
        node.references = [*node.references, *data["references"]]
    if "expects" in data:
        outcomes = [o.id for o in node.outcomes]
        for cause_id, row in data["expects"].items():
            issues = list(row_issues(row, outcomes, ("expects", cause_id)))
            problems.extend(Problem(patch.file, line_of(patch.raw, p), m) for p, m in issues)
            if not issues:
                node.expects = {**node.expects, cause_id: dict(row)}
                mark("expects", cause_id)
    return problems


def _copy_node(node: Any) -> Any:
    from dataclasses import replace

    return replace(node)


# ---------------------------------------------------------------- references


def close_matches(node_id: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` IDs that look like ``node_id`` (for "did you mean" hints)."""
    return difflib.get_close_matches(node_id, list(candidates), n=n, cutoff=0.6)


def _did_you_mean(node_id: str, candidates: Iterable[str]) -> str:
    matches = close_matches(node_id, candidates)
    return f" (did you mean {', '.join(matches)}?)" if matches else ""


def _reference_problems(loaded: Loaded) -> list[Problem]:
    kb = loaded.kb
    problems: list[Problem] = []
    tables = {"cause": kb.causes, "mechanism": kb.mechanisms, "symptom": kb.symptoms, "experiment": kb.experiments}

    def dangling(owner: str, path: tuple[Any, ...], ref: str, kind: str, table: dict[str, Any], where: str) -> None:
        if ref in table or ref in loaded.broken:
            return
        other = next((k for k, t in tables.items() if ref in t), None)
        if other:
            text = f"{where} names {ref!r}, which is a {other}, not a {kind}"
        else:
            text = (f"{where} names {kind} {ref!r}, which is not defined: define it in a "
                    f"{kind}s file or fix the ID{_did_you_mean(ref, table)}")
        problems.append(loaded.problem(owner, path, text))

    for owner, field_name, refs in _references(loaded):
        kind, table = {"mechanisms": ("mechanism", kb.mechanisms), "symptoms": ("symptom", kb.symptoms),
                       "expects": ("cause", kb.causes), "parent": ("cause", kb.causes),
                       "settled_by": ("symptom", kb.symptoms)}[field_name]
        owner_kind = "cause" if field_name in ("mechanisms", "parent") else (
            "mechanism" if field_name == "symptoms" else "experiment")
        where = {"parent": f"the parent of cause {owner!r}", "expects": f"experiment {owner!r} expects",
                 "settled_by": f"experiment {owner!r} settled_by"}.get(field_name, f"{owner_kind} {owner!r}")
        for ref in refs:
            path = ("parent",) if field_name == "parent" else (field_name, ref)
            dangling(owner, path, ref, kind, table, where)
    problems.extend(_parent_cycles(loaded))
    return problems


def _references(loaded: Loaded) -> Iterable[tuple[str, str, list[str]]]:
    """``(owner id, field, referenced ids)`` of every node, and of invalid entries as far as readable."""
    kb = loaded.kb
    for c in kb.causes.values():
        yield c.id, "mechanisms", list(c.mechanisms)
        if c.parent:
            yield c.id, "parent", [c.parent]
    for m in kb.mechanisms.values():
        yield m.id, "symptoms", list(m.symptoms)
    for x in kb.experiments.values():
        yield x.id, "expects", list(x.expects)
        yield x.id, "settled_by", [s for o in x.outcomes for s in o.settled_by]
    fields = {"causes": ("mechanisms", "parent"), "mechanisms": ("symptoms",), "experiments": ("expects",)}
    for node_id in sorted(loaded.broken):
        entry = loaded.entries.get(node_id)
        if entry is None or not isinstance(entry.raw, dict):
            continue
        for field_name in fields.get(entry.kind, ()):
            value = entry.raw.get(field_name)
            if isinstance(value, str):
                yield node_id, field_name, [value]
            elif isinstance(value, dict):
                yield node_id, field_name, [k for k in value if isinstance(k, str)]


def _parent_cycles(loaded: Loaded) -> list[Problem]:
    causes = loaded.kb.causes
    problems: list[Problem] = []
    reported: set[str] = set()
    for start in sorted(causes):
        chain = [start]
        node = causes[start].parent
        while node in causes and node not in chain:
            chain.append(node)
            node = causes[node].parent
        if node in chain and node not in reported:
            cycle = chain[chain.index(node):]
            reported.update(cycle)
            text = " -> ".join([*cycle, node])
            problems.append(loaded.problem(node, ("parent",), f"cycle of parents: {text}: a finer cause refines a "
                                                               "catalog cause, never the other way round"))
    return problems


def _graph_cycles(loaded: Loaded) -> list[Problem]:
    import networkx as nx

    graph = loaded.kb.graph
    if nx.is_directed_acyclic_graph(graph):
        return []
    cycle = nx.find_cycle(graph)
    text = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
    return [loaded.problem(cycle[0][0], (), f"cycle in the causal graph: {text}")]


# ---------------------------------------------------------------- layers


@dataclass(frozen=True)
class Layer:
    path: Path
    overlay: bool


def layers_for(overlays: Sequence[Path] | None = None, *, builtin: bool = True,
               data_dir: Path | None = None) -> list[Layer]:
    """The layers a load reads: base (``data_dir`` or built-in data, unless ``builtin`` is False), overlays."""
    from dsdoctor.kb.storage.settings import kb_overlay_paths

    base = data_dir if data_dir is not None else (DATA_DIR if builtin else None)
    extra = kb_overlay_paths() if overlays is None else list(overlays)
    return ([Layer(Path(base), False)] if base is not None else []) + [Layer(Path(p), True) for p in extra]


def collect(layers: Sequence[Layer]) -> Loaded:
    """Read every layer and build the knowledge base, collecting problems instead of raising."""
    kb = KnowledgeBase({}, {}, {}, {}, graph=None, sources=[display_path(layer.path) for layer in layers])
    loaded = Loaded(kb, [], {}, set())
    tables: dict[str, dict[str, Any]] = {"causes": kb.causes, "mechanisms": kb.mechanisms,
                                         "symptoms": kb.symptoms, "experiments": kb.experiments}
    for layer in layers:
        if not layer.path.exists():
            origin = " (listed in DSDOCTOR_KB_PATH or --overlay)" if layer.overlay else ""
            loaded.problems.append(Problem(display_path(layer.path), 0, f"knowledge directory does not exist{origin}"))
            continue
        patches: list[Entry] = []
        for path in knowledge_files(layer.path):
            parsed = parse_file(path, overlay=layer.overlay)
            loaded.files.append(parsed.file)
            loaded.problems.extend(parsed.problems)
            loaded.broken.update(parsed.unreadable_ids)
            for entry in parsed.entries:
                if entry.kind == "patches":
                    patches.append(entry)
                elif entry.id is not None:
                    _add_entry(entry, tables, loaded, layer)
        for patch in patches:
            _add_patch(patch, tables, loaded)
    _finish(loaded)
    return loaded


def _add_entry(entry: Entry, tables: dict[str, dict[str, Any]], loaded: Loaded, layer: Layer) -> None:
    assert entry.id is not None
    previous = loaded.entries.get(entry.id)
    if previous is not None:
        hint = (f"; to change it from an overlay write a 'patches:' entry with target: {entry.id}"
                if layer.overlay else "; IDs are unique: keep one definition")
        loaded.problems.append(Problem(entry.file, entry.line,
                                       f"ID {entry.id!r} is already defined at {previous.file}:{previous.line}{hint}"))
        return
    loaded.entries[entry.id] = entry
    if entry.data is None:
        loaded.broken.add(entry.id)
        return
    tables[entry.kind][entry.id] = _CONVERT[entry.kind](entry.data, entry)


def _add_patch(patch: Entry, tables: dict[str, dict[str, Any]], loaded: Loaded) -> None:
    if patch.data is None or patch.id is None:
        return
    target = patch.id
    if target in loaded.broken:
        return
    kind = next((k for k, t in tables.items() if target in t), None)
    if kind is None:
        known = [i for t in tables.values() for i in t]
        loaded.problems.append(Problem(patch.file, line_of(patch.raw, ("target",)),
                                       f"patch target {target!r} is not defined{_did_you_mean(target, known)}"))
        return
    node = _copy_node(tables[kind][target])
    problems = _apply_patch(patch, node, kind, loaded)
    loaded.problems.extend(problems)
    if not problems:
        tables[kind][target] = node


def _finish(loaded: Loaded) -> None:
    from dsdoctor.kb.graph import build_graph, compute_likelihoods

    kb = loaded.kb
    loaded.problems.extend(_reference_problems(loaded))
    kb.graph = build_graph(kb.causes, kb.mechanisms, kb.symptoms)
    loaded.problems.extend(_graph_cycles(loaded))
    kb.likelihoods = compute_likelihoods(kb.causes, kb.mechanisms, kb.symptoms)


# ---------------------------------------------------------------- public API


def load_kb(overlays: list[Path] | None = None, *, builtin: bool = True, data_dir: Path | None = None) -> KnowledgeBase:
    """Load and validate the knowledge base; raise KnowledgeError listing every error found.

    ``overlays=None`` reads the directories of ``DSDOCTOR_KB_PATH``; pass ``[]`` for none.
    ``data_dir`` replaces the built-in ``kb/data``; ``builtin=False`` (without ``data_dir``)
    loads only the overlays.
    """
    loaded = collect(layers_for(overlays, builtin=builtin, data_dir=data_dir))
    errors = [p for p in loaded.problems if p.severity == "error"]
    if errors:
        raise KnowledgeError(errors)
    return loaded.kb


_KB: tuple[tuple[str, ...], KnowledgeBase] | None = None
_KB_LOCK = threading.Lock()


def get_kb(*, reload: bool = False) -> KnowledgeBase:
    """The process-wide knowledge base (built-in data + DSDOCTOR_KB_PATH), loaded once.

    ``reload=True`` reads the files again (unchanged files come from the parse cache); a change
    of ``DSDOCTOR_KB_PATH`` also triggers a reload. On error the previous knowledge base stays.
    """
    from dsdoctor.kb.storage.settings import kb_overlay_paths

    global _KB
    key = tuple(str(p) for p in kb_overlay_paths())
    with _KB_LOCK:
        if reload or _KB is None or _KB[0] != key:
            _KB = (key, _load_snapshot())
        return _KB[1]


#: modules whose code shapes a loaded knowledge base (a change of any of them invalidates its snapshot)
_CODE = ("dsdoctor.kb.loader", "dsdoctor.kb.model", "dsdoctor.kb.schema", "dsdoctor.kb.graph", "dsdoctor.kb.yamlload")


def _load_snapshot() -> KnowledgeBase:
    """:func:`load_kb` of the default layers, from the disk snapshot when one matches their files."""
    layers = layers_for()

    def files() -> list[Path]:
        return [p for layer in layers for p in knowledge_files(layer.path)]

    def salt() -> str:  # a missing overlay directory is an error, an empty one is not
        return "\n".join(f"{layer.path} {layer.path.exists()}" for layer in layers)

    return snapshot.cached("kb", files, _CODE, load_kb, salt)
