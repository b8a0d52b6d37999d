"""Scope of a failure: which ranks and nodes show it, origin and victims kept apart.

The units that locate the fault are the participants with non-victim error lines (the origin);
ranks that only print victim lines (a peer's timeout after the origin died) are reported beside
them, never mixed in. Two exceptions: a hang (every error line is a victim) is located by its
victims, and so is a failure whose origin lines all name a link between peers (a refused
connection, an IB completion error: both ends print it, so the printing rank is not the culprit).

Nodes come from the line prefixes, from a source whose lines all name one node (its other lines
are on that node too), and from ``rank // (world_size / nodes)`` when the evidence states both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.rules.collect import Collector, Event, Participant
from dsdoctor.rules.compact import LightTable


@dataclass
class Scope:
    """The scope value and what it rests on."""

    value: str = "unknown"  # single-rank | single-node | multi-node | global | unknown
    origin_ranks: list[int] = field(default_factory=list)
    origin_nodes: list[str] = field(default_factory=list)
    victim_ranks: list[int] = field(default_factory=list)
    victim_nodes: list[str] = field(default_factory=list)

    def as_dict(self, world: int | None, nodes: int | None) -> dict[str, Any]:
        return {"origin": {"ranks": self.origin_ranks, "nodes": self.origin_nodes},
                "victims": {"ranks": self.victim_ranks, "nodes": self.victim_nodes},
                "world_size": world, "nodes": nodes}


def unit(participant: Participant, single_node: bool) -> Participant:
    """A participant as a rank where possible (one node: local rank = global rank)."""
    if participant[0] == "n" and single_node and participant[2] is not None:
        return ("r", participant[2])
    return participant


def attribute_sources(collector: Collector) -> None:
    """Lines of a source whose lines name exactly one node are on that node (a per-node log file)."""
    single = {src.index: next(iter(src.nodes)) for src in collector.sources if len(src.nodes) == 1}
    for event in collector.events.values():
        node = single.get(event.source_index)
        if node is None:
            continue
        if event.node is None:
            event.node = node
        if event.rank is not None:
            collector.rank_nodes.setdefault(event.rank, node)
    for table in collector.tables():  # light records (rules/compact.py): one node for the whole table
        node = single.get(table.kind.source_index)
        if node is None:
            continue
        if table.node is None:
            table.node = node
        for rank in table.ranks:
            collector.rank_nodes.setdefault(rank, node)


def _node_map(collector: Collector, world: int | None, nodes: int | None) -> Callable[[Participant], str | None]:
    """unit -> node name (or ``node#k`` from the rank when the evidence states world size and nodes)."""
    per_node = world // nodes if world and nodes and world % nodes == 0 else None
    names = {n for n in collector.nodes_seen if not n.startswith("source:")}
    index_of: dict[str, int] = {}
    if per_node:
        for rank, name in collector.rank_nodes.items():
            index_of.setdefault(name, rank // per_node)
    by_index = {i: name for name, i in index_of.items()}
    # a node#k stands for a node only when every named node's index is known (no double count)
    numbered = per_node is not None and names <= set(index_of)

    def node_of(u: Participant) -> str | None:
        if u[0] == "n":
            return None if str(u[1]).startswith("source:") else u[1]
        rank = u[1]
        if rank in collector.rank_nodes:
            return collector.rank_nodes[rank]
        if per_node:
            index = rank // per_node
            return by_index.get(index) or (f"node#{index}" if numbered else None)
        return None

    return node_of


def _merge(units: set[Participant], collector: Collector, node_of, world: int | None,
           nodes: int | None) -> set[Participant]:
    """("n", node, local rank) is the same process as ("r", rank) on that node with that local rank."""
    if not any(u[0] == "n" for u in units):
        return units  # nothing to merge: the same set (at 100,000 ranks a copy is megabytes)
    per_node = world // nodes if world and nodes and world % nodes == 0 else None
    ranks_on: dict[tuple[str, int], int] = {}
    for e in collector.events.values():
        if e.rank is not None and e.local_rank is not None and e.node is not None:
            ranks_on.setdefault((e.node, e.local_rank), e.rank)
    if per_node:
        for rank, name in collector.rank_nodes.items():
            ranks_on.setdefault((name, rank % per_node), rank)
    out = set()
    for u in units:
        if u[0] == "n" and u[2] is not None and (u[1], u[2]) in ranks_on:
            out.add(("r", ranks_on[(u[1], u[2])]))
        else:
            out.add(u)
    return out


def _summary(units: Iterable[Participant], node_of) -> tuple[list[int], list[str]]:
    units = list(units)
    ranks = sorted({u[1] for u in units if u[0] == "r"})
    names = sorted({n for n in (node_of(u) for u in units) if n is not None})
    return ranks, names


def derive_scope(collector: Collector, cfg: dict[str, Any], world: int | None, nodes: int | None) -> Scope:
    """single-rank / single-node / multi-node / global over the ranks that locate the fault."""
    settings = cfg["scope"]
    single_node = nodes == 1
    by_nature = set(settings["global_by_nature"])
    peers = set(settings["between_peers"])
    node_of = _node_map(collector, world, nodes)
    events = [e for e in collector.events.values() if e.symptom not in by_nature and e.participant[0] != "s"]
    errors = [e for e in events if e.severity == "error"]
    origin = [e for e in errors if not e.secondary]
    victims = [e for e in errors if e.secondary]
    # light records (rules/compact.py) are ranks' lines: their units are ("r", rank) whatever the node
    tables = [t for t in collector.tables() if t.kind.symptom not in by_nature and len(t)]
    error_tables = [t for t in tables if t.kind.severity == "error"]
    origin_tables = [t for t in error_tables if not t.kind.secondary]

    def units_of(chosen: list[Event], lit: list[LightTable]) -> set[Participant]:
        units = {unit(e.participant, single_node) for e in chosen}
        for table in lit:
            units.update(collector.participant_of(rank) for rank in table.ranks)
        return _merge(units, collector, node_of, world, nodes)

    origin_units = units_of(origin, origin_tables)
    victim_units = units_of(victims, [t for t in error_tables if t.kind.secondary]) - origin_units
    out = Scope()
    out.origin_ranks, out.origin_nodes = _summary(origin_units, node_of)
    out.victim_ranks, out.victim_nodes = _summary(victim_units, node_of)
    if (origin or origin_tables) and all(e.symptom in peers for e in origin) \
            and all(t.kind.symptom in peers for t in origin_tables):
        affected = origin_units | victim_units  # a link has two ends: the victims locate it too
    else:
        affected = origin_units or victim_units
    if not affected:
        warnings = [e for e in events if e.severity == "warning" and not e.secondary]
        affected = {unit(e.participant, single_node) for e in warnings}
        for table in tables:
            if table.kind.severity == "warning" and not table.kind.secondary:
                affected.update(collector.participant_of(rank) for rank in table.ranks)
        for sid in settings["anomalies"]:
            obs = collector.symptoms.get(sid)
            if obs is not None:
                affected |= {("r", r) for r in obs.ranks}
        affected = _merge(affected, collector, node_of, world, nodes)
    if not affected:
        natured = any(e.symptom in by_nature for e in collector.events.values()) or any(
            t.kind.symptom in by_nature for t in collector.tables()) or any(
            sid in collector.symptoms for sid in by_nature)
        out.value = "global" if natured else "unknown"
        return out
    seen = {unit(p, single_node) for p in collector.participants}
    seen |= {("r", rank) for (_, rank) in collector.numbers.series if rank is not None}
    seen = _merge(seen, collector, node_of, world, nodes)
    seen |= affected  # in place: ``seen`` is this function's own set
    out.value = _value(affected, seen, settings, world, single_node, node_of)
    return out


def _value(affected: set[Participant], seen: set[Participant], settings: dict[str, Any], world: int | None,
           single_node: bool, node_of) -> str:
    """The scope value of the ``affected`` units among every unit ``seen`` (both merged)."""
    if world is not None:
        is_global = world > 1 and len(affected) >= world
    else:
        is_global = len(seen) >= settings["min_known_ranks_for_global"] and affected == seen
    if is_global:
        return "global"
    affected_nodes = {node_of(u) for u in affected}
    known_nodes = affected_nodes - {None}
    if len(known_nodes) >= 2:
        return "multi-node"  # true whatever the units of unknown node are
    if len(affected) == 1:
        # one rank shows it; claim "single-rank" only when other ranks were seen and were fine ...
        if len(seen) < 2 or (world is not None and world < 2):
            return "unknown"
        (only,) = affected
        node = node_of(only)
        if node is None or single_node:
            return "single-rank"
        # ... on its own node too: a node whose other ranks left no lines may have failed whole
        if any(node_of(u) == node for u in seen if u not in affected):
            return "single-rank"
        return "single-node" if any(node_of(u) not in (None, node) for u in seen if u not in affected) \
            else "unknown"
    if None in affected_nodes:
        return "single-node" if single_node else "unknown"
    return "single-node"
