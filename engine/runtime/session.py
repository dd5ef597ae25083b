"""A call's cached state, and the one rule for how much of a cached prefix a new prompt reuses.

Every admission (Engine.stream over the call's own cache, the scheduler over its batch cache, a
shared system-prompt prefix) plans its prefill with `reuse_plan`, so they cannot disagree.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from engine.model.families import Family
from engine.model.kv_cache import KVCache


@dataclass
class Session:
    """One call's cached state: its KV cache and the tokens and messages that are in it."""

    cache: KVCache
    tokens: list[int] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    settled: int = 0  # the last turn's prompt (or the warm-up) in the cache: a guess may not crop it

    def merged(self, messages: list[dict]) -> list[dict]:
        """`messages`, with the turns this session produced restored verbatim (reasoning kept),
        so the rendered history matches the cached tokens."""
        out = list(messages)
        for i, (old, new) in enumerate(zip(self.history, messages, strict=False)):
            if old.get("role") != new.get("role"):
                break
            if old["role"] == "assistant" and _same_assistant_turn(old, new):
                out[i] = old
            elif old != new:
                break
        return out

    def cached_tokens(self) -> list[int]:
        """The tokens whose K/V the call's cache holds."""
        return self.tokens[: self.cache.length(0)]

    def record(self, tokens: list[int], history: list[dict], prompt_len: int) -> None:
        """What the cache now holds after a turn (or a part of one): as far as the cache reaches.
        Its first `prompt_len` tokens were the turn's prompt; the rest it generated (which the
        next prompt, re-rendered from the history, may not repeat token for token)."""
        self.tokens = list(tokens)[: self.cache.length(0)]
        self.history = list(history)
        self.settled = min(prompt_len, len(self.tokens))

    def hold(self, tokens: list[int], *, guess: bool) -> int:
        """What the cache holds after a prefill without a turn: the warm-up (settled) or a guess at
        the coming turn (`guess`: a speculative prefill, which the turn may crop). The history
        stays that of the last turn. Returns the cached length."""
        self.tokens = list(tokens)[: self.cache.length(0)]
        if not guess:
            self.settled = len(self.tokens)
        return len(self.tokens)

    def would_crop(self, tokens: list[int]) -> bool:
        """Would a prefill of `tokens` drop settled tokens (the last turn's prompt) from the cache?"""
        return common_prefix(self.cached_tokens(), tokens) < min(self.settled, len(self.cached_tokens()))

    def reset(self) -> None:
        self.cache.clear()
        self.tokens, self.history, self.settled = [], [], 0


def _same_assistant_turn(a: dict, b: dict) -> bool:
    ac, bc = (a.get("content") or "").strip(), (b.get("content") or "").strip()
    an = [c["function"]["name"] for c in a.get("tool_calls") or []]
    bn = [c.get("function", {}).get("name") for c in b.get("tool_calls") or []]
    return ac == bc and an == bn


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def whole_blocks(family: Family, n: int) -> int:
    """With a block-causal cache a position's K/V depend on the rest of its block: only whole
    blocks of a prefix computed for another prompt are exactly what a fresh prefill computes."""
    if family.cache_attention == "block":
        b = max(family.block_size, 1)
        return n // b * b
    return n


def split_prompt(family: Family, n_tokens: int, cached: int) -> tuple[int, int]:
    """How a prompt of `n_tokens`, of which `cached` are in the cache, is prefilled:
    (k, end) = keep the first k cached, prefill tokens[k:end]; tokens[end:] are carried into
    the first block. Families without aligned blocks prefill everything but what is cached
    (at least one token, for the logits that predict the next one)."""
    if not family.align_blocks:
        return min(cached, n_tokens - 1), n_tokens
    b = max(family.block_size, 1)
    end = n_tokens // b * b
    cached = cached // b * b  # a block-causal position's K/V depend on the rest of its block
    if end == n_tokens:  # aligned: the first token comes from the prefill's last logits
        return min(cached, n_tokens - 1), n_tokens
    return min(cached, end), end


def reuse_plan(family: Family, cached: list[int], tokens: list[int], shared: bool) -> tuple[int, int]:
    """(k, end) for a prompt `tokens` over a cache holding `cached`: reuse the common prefix (but
    leave at least one token to prefill); a `shared` prefix (another call's) only in whole blocks."""
    k = min(common_prefix(cached, tokens), len(tokens) - 1)
    if shared:
        k = whole_blocks(family, k)
    return split_prompt(family, len(tokens), k)


__all__ = ["Session", "common_prefix", "reuse_plan", "split_prompt", "whole_blocks"]
