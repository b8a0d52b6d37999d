"""Bounded per-rank summaries of numeric series (loss, grad norm, loss scale, step time, memory).

Values come from the evidence ``metrics`` list and from fields captured on log lines, in any
amount: a summary keeps the first and last few points, counts, the minimum and the first
non-finite point, so memory stays bounded however long the run was.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Any

KEEP = 64  # points kept at each end of a series


@dataclass(slots=True)
class Point:
    step: float | None  # training step when known
    order: int  # position in the evidence (log order or metric index)
    value: float


@dataclass
class SeriesSummary:
    """One series (name, rank): bounded head and tail, plus running facts."""

    count: int = 0
    nonfinite: int = 0
    first_nonfinite: Point | None = None
    first: Point | None = None
    min_point: Point | None = None
    zeros: int = 0
    decreases: int = 0
    head: list[Point] = field(default_factory=list)
    tail: deque[Point] = field(default_factory=lambda: deque(maxlen=KEEP))
    _last: float | None = None

    def add(self, value: float, step: float | None, order: int) -> None:
        point = Point(step, order, value)
        self.count += 1
        if self.first is None:
            self.first = point
        if not math.isfinite(value):
            self.nonfinite += 1
            if self.first_nonfinite is None:
                self.first_nonfinite = point
        else:
            if self.min_point is None or value < self.min_point.value:
                self.min_point = point
            if value == 0:
                self.zeros += 1
            if self._last is not None and math.isfinite(self._last) and value < self._last:
                self.decreases += 1
            self._last = value
        if len(self.head) < KEEP:
            self.head.append(point)
        else:
            self.tail.append(point)

    def points(self) -> list[Point]:
        """The kept points in order (head then tail; the middle of a long series is dropped)."""
        return [*self.head, *self.tail]

    def finite_values(self) -> list[float]:
        return [p.value for p in self.points() if math.isfinite(p.value)]

    def median(self) -> float | None:
        values = self.finite_values()
        return median(values) if values else None


@dataclass
class NumericFacts:
    """Series per (name, rank); rank ``None`` when the value could not be attributed."""

    series: dict[tuple[str, int | None], SeriesSummary] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)  # "logs" and/or "metrics"

    def add(self, name: str, rank: int | None, value: Any, step: float | None, order: int, source: str) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        key = (name, rank)
        summary = self.series.get(key)
        if summary is None:
            summary = self.series[key] = SeriesSummary()
        summary.add(float(value), step, order)
        self.sources.add(source)

    def by_name(self, name: str) -> dict[int | None, SeriesSummary]:
        return {rank: s for (n, rank), s in self.series.items() if n == name}
