"""Shared prompt prefixes (a system prompt and its tools) kept across calls, by their tokens."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from engine.model.families import Family
from engine.model.kv_cache import KVCache
from engine.runtime.session import common_prefix, whole_blocks

MIN_REUSE = 16  # fewer shared tokens than this are not worth a row copy
MIN_NEW = 32  # a prompt that added fewer new tokens than this is not stored


@dataclass
class _Prefix:
    tokens: list[int]
    cache: KVCache


class PrefixCache:
    def __init__(self, family: Family, entries: int = 4) -> None:
        self.family = family
        self.entries = entries
        self._items: OrderedDict[int, _Prefix] = OrderedDict()
        self._ids = itertools.count()

    def find(self, tokens: list[int]) -> tuple[list[int], KVCache | None]:
        """The stored prefix that shares the most with `tokens` (its tokens and single-row cache)."""
        best, best_n = None, 0
        for key, p in self._items.items():
            n = common_prefix(p.tokens, tokens)
            if n > best_n:
                best, best_n = key, n
        if best is None or whole_blocks(self.family, best_n) < MIN_REUSE:
            return [], None
        self._items.move_to_end(best)
        p = self._items[best]
        return p.tokens, p.cache

    def remember(self, tokens: list[int], cache: KVCache, row: int, reused: int) -> None:
        """Keep row `row`'s prompt prefix, unless it adds little or is already (nearly) stored."""
        if not self.entries or len(tokens) - reused < MIN_NEW:
            return
        # The last prompt token is re-fed on a hit, so keep one short (and never more than the
        # row holds: aligned families keep the prompt's leftover out of the cache).
        n = min(len(tokens) - 1, cache.length(row))
        for p in self._items.values():
            if common_prefix(p.tokens, tokens) >= n * 0.9:
                return
        self._items[next(self._ids)] = _Prefix(list(tokens[:n]), cache.copy_prefix(row, n))
        while len(self._items) > self.entries:
            self._items.popitem(last=False)


__all__ = ["PrefixCache"]
