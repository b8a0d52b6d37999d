"""Compact first events: past the first ranks of a symptom, a rank's first line of it is kept small.

When thousands of ranks print the same victim lines, the first line of each (symptom, rank) used
to become a full :class:`~rules.collect.Event` (its text, whole line, fields, stream context):
most of the memory and much of the time of an error-dense log. The looks only compare most of
them: the first error (earliest), the scope (which ranks) and the victims (which ranks, after the
origin). So once a symptom has :data:`FULL_EVENTS` full events, a further rank's first line of it
becomes a :class:`Light` record (rank, times, order, where the line is) unless it may be shown: it
is among the :data:`EARLIEST` earliest lines of its symptom so far (by the order the looks sort
in), or its own time is the earliest. A light record that a look does show after all (a victim
line of ``s.secondary_timeouts`` picked after filtering) is read again from its source
(:meth:`Collector.line_of <rules.collect.Collector.line_of>`).

Ordering during reading must agree with the order after year-less stamps get their year
(rules/derive.py ``_resolve_years``): within one source all year-less times get the same year, so a
symptom's events are compared within one class (year known or not, and the source of a year-less
time); a symptom whose events span classes, or a year-less 29 February, is read in full from then on.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: full events of a symptom before further ranks' first lines may be light
FULL_EVENTS = 64
#: the earliest lines of a symptom (by time, then order) always stay full: at least ``sample_lines``
EARLIEST = 8

TimeKey = tuple[bool, datetime, bool, int]
#: re-reads ``size`` bytes at source offset ``at`` (the line a light record stands for)
Reread = Callable[[int, int], bytes]


def time_key(near: datetime | None, rank: int | None, order: int) -> TimeKey:
    """The order the looks sort events in (rules/derive.py sorts by this too): earliest first."""
    return (near is None, near or datetime.max, rank is None, order)


@dataclass(frozen=True, slots=True)
class LightKind:
    """What the light records of one rule from one source share (one object, not six fields a record)."""

    symptom: str
    rule: str
    severity: str
    secondary: bool
    source: str
    source_index: int
    spec: Any  # (matcher, rule indexes) that confirm the line again when it is shown


class Light:
    """The first line of one symptom on one rank, kept small (see the module docstring)."""

    __slots__ = ("at", "count", "kind", "lineno", "local_rank", "near_time", "near_year_known", "node", "order",
                 "participant", "rank", "size", "time", "year_from", "year_known")

    def __init__(self, kind: LightKind, rank: int, participant: tuple[Any, ...], time: datetime | None,
                 year_known: bool, near_time: datetime | None, near_year_known: bool, order: int, lineno: int,
                 at: int, size: int):
        self.kind = kind
        self.rank = rank
        self.participant = participant
        self.time = time
        self.year_known = year_known
        self.near_time = near_time
        self.near_year_known = near_year_known
        self.order = order
        self.lineno = lineno
        self.at = at  # source offset of the line
        self.size = size  # its length in bytes (newline excluded)
        self.node: str | None = None
        self.local_rank: int | None = None
        self.year_from: str | None = None
        self.count = 1

    @property
    def symptom(self) -> str:
        return self.kind.symptom

    @property
    def rule(self) -> str:
        return self.kind.rule

    @property
    def severity(self) -> str:
        return self.kind.severity

    @property
    def secondary(self) -> bool:
        return self.kind.secondary

    @property
    def source(self) -> str:
        return self.kind.source

    @property
    def source_index(self) -> int:
        return self.kind.source_index

    @property
    def spec(self) -> Any:
        return self.kind.spec


@dataclass(slots=True)
class Earliest:
    """Per symptom: how many full events it has and the earliest keys among all its events."""

    full: int = 0
    klass: Any = None  # the one class its events' times are in (see the module docstring)
    mixed: bool = False
    keys: list[TimeKey] | None = None  # the EARLIEST smallest keys, sorted
    timed: TimeKey | None = None  # the smallest key of an event with its own time

    def note(self, key: TimeKey, klass: Any, has_time: bool, full: bool) -> None:
        """Record a new event of the symptom."""
        if full:
            self.full += 1
        if self.klass is None and not self.mixed:
            self.klass = klass
        elif klass != self.klass:
            self.mixed = True
        keys = self.keys
        if keys is None:
            keys = self.keys = []
        if len(keys) < EARLIEST or key < keys[-1]:
            insort(keys, key)
            if len(keys) > EARLIEST:
                keys.pop()
        if has_time and (self.timed is None or key < self.timed):
            self.timed = key

    def admits(self, key: TimeKey, klass: Any, has_time: bool) -> bool:
        """May a new event with this key be light (it cannot be among the lines a look shows)?"""
        if self.full < FULL_EVENTS or self.mixed or klass != self.klass or klass is None:
            return False
        keys = self.keys
        if keys is None or len(keys) < EARLIEST or key < keys[-1]:
            return False
        return not has_time or (self.timed is not None and key > self.timed)


def time_class(near: datetime | None, near_year_known: bool, source_index: int) -> Any:
    """The class a near time is compared in; ``None`` when it must not be compared at all (29 Feb)."""
    if near is None or near_year_known:
        return "known"
    if near.month == 2 and near.day == 29:
        return None
    return ("yearless", source_index)
