"""A small thread-safe LRU (search caches, memoized likelihoods)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """At most ``size`` entries, least recently used dropped first.

    ``get_or_compute`` runs ``compute`` outside the lock: two threads may both compute a missing
    value once, but a slow computation never blocks readers of other keys.
    """

    def __init__(self, size: int):
        self.size = size
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._data)


def memo(cache: dict, name: str, size: int) -> BoundedCache:
    """The LRU called ``name`` in ``cache`` (a knowledge base's derived tables), made on first use."""
    found = cache.get(name)
    if found is None:
        found = cache.setdefault(name, BoundedCache(size))
    return found
