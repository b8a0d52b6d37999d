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

from array import array
from bisect import insort
from calendar import isleap
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dsdoctor.rules.context import PLACEHOLDER_YEAR

#: full events of a symptom before further ranks' first lines may be light
FULL_EVENTS = 64
#: the earliest lines of a symptom (by time, then order) always stay full: at least ``sample_lines``
EARLIEST = 8

TimeKey = tuple[bool, datetime, bool, int]
#: a time in a table: microseconds since 0001-01-01; ``NO_TIME`` (larger than any) stands for none
_EPOCH = datetime(1, 1, 1)
_MICRO = timedelta(microseconds=1)
NO_TIME = (datetime.max - _EPOCH) // _MICRO + 1
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


def to_micros(time: datetime | None) -> int:
    """A table's number for a naive time (``NO_TIME`` for none); the order of times is kept."""
    return NO_TIME if time is None else (time - _EPOCH) // _MICRO


def from_micros(micros: int) -> datetime | None:
    return None if micros == NO_TIME else _EPOCH + timedelta(microseconds=micros)


def _with_year(micros: array, year: int) -> array:
    """The times given the year ``year`` (year-less stamps of one source get their year, rules/derive.py).

    A time of the placeholder year moves by one of two fixed offsets (before 1 March, from 1 March on:
    the days from either are the same in every year), so a table of 100,000 times costs no datetimes;
    29 February into a common year and anything else take :func:`_with_year_slow`.
    """
    try:
        jan, march = to_micros(datetime(PLACEHOLDER_YEAR, 1, 1)), to_micros(datetime(PLACEHOLDER_YEAR, 3, 1))
        leap_day, end = to_micros(datetime(PLACEHOLDER_YEAR, 2, 29)), to_micros(datetime(PLACEHOLDER_YEAR + 1, 1, 1))
        early = to_micros(datetime(year, 1, 1)) - jan
        late = to_micros(datetime(year, 3, 1)) - march
    except ValueError:  # a year datetime cannot hold (or a common placeholder year: no 29 February)
        return _with_year_slow(micros, year)
    if any(value != NO_TIME and not jan <= value < end for value in micros) \
            or (not isleap(year) and any(leap_day <= value < march for value in micros)):
        return _with_year_slow(micros, year)
    return array("q", [value if value == NO_TIME else value + (early if value < march else late) for value in micros])


def _with_year_slow(micros: array, year: int) -> array:
    """:func:`_with_year` one datetime at a time (what the fast path must agree with)."""
    out = array("q")
    for value in micros:
        if value != NO_TIME:
            time = from_micros(value)
            assert time is not None
            with suppress(ValueError):  # 29 February: never in a table (time_class), kept as it is
                value = to_micros(time.replace(year=year))
        out.append(value)
    return out


class LightTable:
    """The light records of one :class:`LightKind`, as numbers in arrays: a record is an index, not an
    object (thousands of ranks' first lines of a symptom cost a few machine words each).

    All records of a symptom are in one time class (:meth:`Earliest.admits`), so whether their years are
    known is one flag per table; ``node`` and ``year_from`` are set for the whole table by the derivation.
    Times and near times are :func:`to_micros` numbers, a record without its own time has ``NO_TIME``.
    """

    __slots__ = ("ats", "kind", "linenos", "near_known", "nears", "node", "orders", "ranks", "sizes", "time_known",
                 "times", "year_from", "years")

    def __init__(self, kind: LightKind, year_known: bool):
        self.kind = kind
        self.ranks = array("q")
        self.orders = array("q")
        self.linenos = array("q")
        self.ats = array("q")  # source offsets of the lines
        self.sizes = array("q")  # their lengths in bytes (newline excluded)
        self.times = array("q")
        self.nears = array("q")
        self.time_known = self.near_known = year_known
        self.node: str | None = None
        self.year_from: str | None = None
        self.years: Counter[int] = Counter()  # years of own times whose year was known when read

    def __len__(self) -> int:
        return len(self.ranks)

    def add(self, rank: int, time: datetime | None, near: datetime | None, order: int, lineno: int, at: int,
            size: int) -> None:
        self.ranks.append(rank)
        self.orders.append(order)
        self.linenos.append(lineno)
        self.ats.append(at)
        self.sizes.append(size)
        self.times.append(to_micros(time))
        self.nears.append(to_micros(near))
        if time is not None and self.time_known:
            self.years[time.year] += 1

    def give_years(self, own: int | None, estimate: int | None) -> None:
        """Year-less times take the year of their source (and say so); near times the estimate."""
        if not self.time_known and own is not None:
            self.times, self.time_known, self.year_from = _with_year(self.times, own), True, self.kind.source
        if not self.near_known and estimate is not None:
            self.nears, self.near_known = _with_year(self.nears, estimate), True

    def earliest(self) -> int:
        """The index of the earliest record by :func:`time_key` (records are added in order)."""
        nears = self.nears
        return nears.index(min(nears))

    def earliest_timed(self) -> int | None:
        """The index of the earliest record with its own time, or ``None``."""
        times = self.times
        first = min(times, default=NO_TIME)
        return None if first == NO_TIME else times.index(first)

    def record(self, i: int, participant: tuple[Any, ...]) -> Light:
        """Record ``i`` as a :class:`Light` object (only for the few records a look shows or compares)."""
        time, near = from_micros(self.times[i]), from_micros(self.nears[i])
        light = Light(self.kind, self.ranks[i], participant, time, self.time_known if time is not None else True,
                      near, self.near_known if near is not None else True, self.orders[i], self.linenos[i],
                      self.ats[i], self.sizes[i])
        light.node = self.node
        if time is not None:
            light.year_from = self.year_from
        return light

    def records(self, participants: Callable[[int], tuple[Any, ...]]) -> Iterator[Light]:
        for i in range(len(self.ranks)):
            yield self.record(i, participants(self.ranks[i]))
