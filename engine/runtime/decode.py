"""The decode loop: the one driver of the protocol, prefill -> step -> commit -> absorb -> finish.

Block-diffusion decoding with an exact KV cache; AR decoding is the block size 1 case. A loop owns
one KV cache whose rows 0..n-1 hold its active requests (`rows[i]` decodes in row i):
- `plan` + `admit`: reuse what a cache already holds (the call's own, or a shared prefix; one rule,
  engine/runtime/session.py), prefill the rest of a group of prompts in one forward, open their sequences;
- `step`: ONE forward over every active row (each row's pending tokens, then its block), then the
  commit rule (engine/runtime/sampler.py) for every row, greedy rows batched into one softmax;
- `absorb` (the request's text rules) after each step, `finish` when a sequence is done.
`Engine.stream` runs it over the call's own cache (`run`); the scheduler over its batch cache, with
its own admission and fault policy; eval and the teacher over a batch of prompts (`run_batch`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from engine.model.kv_cache import KVCache
from engine.runtime import sampler
from engine.runtime.drafts import KEY_LENGTHS
from engine.runtime.masks import intra_mask, prefill_mask  # noqa: F401 - re-exported (tests, callers of old)
from engine.runtime.prefix_cache import PrefixCache
from engine.runtime.results import ChatResult, StreamEvent
from engine.runtime.runner import StepPlan
from engine.runtime.sequence import DecodeParams, Sequence, StepInput, verifies
from engine.runtime.session import reuse_plan

if TYPE_CHECKING:
    from engine.model.families import Family
    from engine.runtime.runner import ModelRunner
    from engine.text.request import Request


class DecodeContext(Protocol):
    """What the loop reads of the engine that runs it (`Engine` is one): the model's runner and family,
    how it decodes, the shared draft pool and the special token ids."""

    runner: ModelRunner
    family: Family
    decoding: str              # "diffusion" | "reference" (the family's own sampler, whole replies)
    drafts: Any                # NgramDrafts | None: the shared pool of draft n-grams
    mask_id: int
    eos_ids: Any               # the token ids that end a reply
    reference: Any             # the family's reference sampler (decoding == "reference")


@dataclass
class Admission:
    """How one request is prefilled: its first `k` tokens come from `source`, `new_tokens` are
    prefilled, `carry` goes into the first block (aligned families)."""

    req: Request
    source: KVCache | None
    k: int
    new_tokens: list[int]
    carry: list[int] = field(default_factory=list)
    from_prefix: bool = False
    reference: bool = False  # decoded whole by the family's reference sampler (Engine.decoding)


class DecodeLoop:
    def __init__(self, ctx: DecodeContext, cache: KVCache, prefixes: PrefixCache | None = None) -> None:
        self.ctx = ctx
        self.runner = ctx.runner
        self.family = ctx.family
        self.cache = cache
        self.prefixes = prefixes
        self.rows: list[Request] = []
        self._plan: StepPlan | None = None

    @property
    def free_rows(self) -> int:
        return self.cache.batch - len(self.rows)

    # -- admission ------------------------------------------------------------------------------------
    def plan(self, req: Request, prefill_only: bool = False) -> Admission:
        """Where this request's cached tokens come from: its call's cache, a shared prefix, or none.
        (`prefill_only`: a session warm-up, which prefills even where the reference sampler decodes.)"""
        if self.ctx.decoding == "reference" and not prefill_only:
            return Admission(req, None, 0, [], reference=True)
        sess = req.session
        if sess is not None and sess.cached_tokens():
            have, source, shared = sess.cached_tokens(), sess.cache, False
        elif self.prefixes is not None:
            (have, source), shared = self.prefixes.find(req.tokens), True
        else:
            have, source, shared = [], None, False
        k, end = reuse_plan(self.family, have, req.tokens, shared)
        return Admission(req, source if k > 0 else None, k, req.tokens[k:end], req.tokens[end:], shared and k > 0)

    def merges_prefill(self, a: Admission) -> bool:
        """Whether `a`'s new prompt tokens can go into its first decoding pass, as that pass's
        pending tokens, instead of a prefill pass of their own: they see each other causally there
        as in a prefill, and the block sees them as it sees the cache, so the pass writes the same
        K/V and predicts the block the same way, and a turn saves one forward before its first
        token. Only for a causal cache without a masked window (the embedded default's family):
        not where a block's first token is committed from the prefill's logits before it is
        denoised, blocks sit at absolute positions (the prompt's tail goes into the block), or the
        rest of the window rides along as masks (the reference samplers' pass layout is kept)."""
        fam = self.family
        return (bool(a.new_tokens) and not a.carry and not a.reference and fam.cache_attention == "causal"
                and not fam.align_blocks and not fam.first_token_at_once and not fam.masked_window)

    @torch.inference_mode()
    def admit(self, group: list[Admission], merge_prefill: bool = False) -> None:
        """Prefill a group into the next free rows (one forward per contiguous run of rows with new
        tokens) and open their sequences. All or nothing: on an error the rows are freed and it raises.
        `merge_prefill`: where `merges_prefill` allows, the new tokens are left to the first pass."""
        base = len(self.rows)
        if base + len(group) > self.cache.batch:
            raise RuntimeError(f"{len(group)} requests do not fit in {self.free_rows} free rows")
        rows = range(base, base + len(group))
        try:
            for row, a in zip(rows, group, strict=True):
                if a.source is self.cache:  # the call's own cache (Engine.stream): keep what matches
                    self.cache.crop(a.k, row)
                elif a.source is not None:
                    self.cache.load_row(row, a.source, length=a.k)
                else:
                    self.cache.reset_row(row)
            merged = {row for row, a in zip(rows, group, strict=True) if merge_prefill and self.merges_prefill(a)}
            t0 = time.perf_counter()
            logits = self._prefill([(row, a.new_tokens) for row, a in zip(rows, group, strict=True)
                                    if a.new_tokens and row not in merged])
            t1 = time.perf_counter()
            started = []
            for row, a in zip(rows, group, strict=True):
                if a.reference:
                    started.append(self._decode_reference(a.req, row))
                    continue
                pool = self.ctx.drafts
                if verifies(a.req.params, self.family):
                    pool.observe(a.req.tokens[max(a.k - max(KEY_LENGTHS), 0):])
                seq = Sequence.start(a.req.params, self.family, self.ctx.mask_id, self.ctx.eos_ids, row,
                                     logits.get(row), a.carry, len(a.req.tokens), self.runner.device,
                                     pending=a.new_tokens if row in merged else None, pool=pool,
                                     context=a.req.tokens)
                started.append((seq, a.k, t0, t1))
                if self.prefixes is not None and row not in merged:
                    self.prefixes.remember(a.req.tokens, self.cache, row, a.k)
        except BaseException:
            for row, a in zip(rows, group, strict=True):
                if a.source is not self.cache:
                    self.cache.reset_row(row)
            raise
        for a, (seq, k, t0, t1) in zip(group, started, strict=True):
            a.req.begin(seq, k, t0, t1)
            self.rows.append(a.req)

    def _prefill(self, rows: list[tuple[int, list[int]]]) -> dict[int, torch.Tensor]:
        out: dict[int, torch.Tensor] = {}
        while rows:  # a prefill covers a contiguous run of rows
            n = 1
            while n < len(rows) and rows[n][0] == rows[n - 1][0] + 1:
                n += 1
            run, rows = rows[:n], rows[n:]
            for (row, _), lg in zip(run, self.runner.prefill(self.cache, run, self.family), strict=True):
                out[row] = lg
        return out

    def _decode_reference(self, req: Request, row: int) -> tuple[Sequence, int, float, float]:
        """Engine.decoding == "reference": the family's own sampler decodes the whole reply at once
        (it keeps no cache between calls, so neither does the session)."""
        t = time.perf_counter()
        ref = self.ctx.reference
        out = ref.generate(req.tokens, req.params.max_tokens)
        seq = Sequence.whole(req.params, self.family, self.ctx.mask_id, ref.stop_ids, out.tokens, out.forward_passes)
        seq.move(row)
        return seq, 0, t, t

    # -- decoding -------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self, only: list[Request] | None = None) -> None:
        """One batched forward over every active row (or those in `only`), then commit by confidence.
        If the forward raises, no sequence has changed but for its step's `new_final`."""
        reqs = [r for r in (self.rows if only is None else only) if not r.state.done]
        seqs = [r.state for r in reqs]
        if not seqs:
            return
        for s in seqs:
            s.begin_step()
        cost = self.runner.pass_cost
        if cost is not None and len(seqs) > 1:  # every row is padded to the widest: the pass costs rows x width
            cost = dataclasses.replace(cost, rows=len(seqs))
        # Inside a tool call every pass keeps the whole layout: a call's few passes are what the caller
        # waits on, and there the branch saves whole passes that the planner's one-pass view misses
        # (a named cancel on the default model at int8: 3 passes so, 5 planned; tests/engine/unit/test_tool_guide.py).
        inputs = [s.step_input(lean=len(seqs) > 1, cost=None if r.guide is not None else cost)
                  for r, s in zip(reqs, seqs, strict=True)]
        fwd = [(s.row, inp) for s, inp in zip(seqs, inputs, strict=True) if inp.tokens]
        # A narrow pass, its layout and its commit run on one thread (engine/runtime/pass_threads.py): the
        # layout's and the commit's small ops would wake the other threads as the pass's ops would.
        with self.runner.threads(fwd):
            logits = None
            if fwd:
                self._plan = self.runner.plan(self.cache, fwd, self.family, reuse=self._plan)
                logits = self.runner.forward(self._plan, fwd)
            commits = _Commits(logits)
            for s, inp in zip(seqs, inputs, strict=True):
                off = None
                if inp.tokens:
                    off = self._plan.offsets[s.row]
                    nxt = logits[off[0] + inp.n_pending - 1 - off[1]] if inp.n_pending else None
                    self.cache.advance(s.row, inp.n_pending)
                    s.after_forward(nxt)
                commits.add(s, inp, off)
            commits.apply()

    # -- the end of a request -----------------------------------------------------------------------
    def absorb(self, req: Request) -> list[StreamEvent]:
        return req.absorb()

    def finish(self, req: Request) -> tuple[list[StreamEvent], ChatResult]:
        """A done request: its last events and its result; its row goes back to the call's cache."""
        events = req.absorb()
        if req.state.pool is not None:
            req.state.pool.observe(req.tokens[-max(KEY_LENGTHS):] + req.state.generated)
        sess = req.session
        if sess is not None and sess.cache is not self.cache:
            self.cache.extract_row(req.state.row, sess.cache)
        result = req.finish()
        self.remove(req)
        return events, result

    def remove(self, req: Request) -> None:
        """Free `req`'s row; rows stay 0..n-1 (the last row moves into the gap)."""
        i = self.rows.index(req)
        last = len(self.rows) - 1
        if i != last:
            moved = self.rows[last]
            self.cache.move_row(last, i)
            moved.state.move(i)
            self.rows[i] = moved
        self.rows.pop()
        if req.session is None or req.session.cache is not self.cache:
            self.cache.reset_row(last)

    def abandon(self, req: Request) -> None:
        """A request stopped before its end: the call's cache keeps what it holds, the session says so."""
        req.abandon()
        if req in self.rows:
            self.remove(req)

    # -- whole runs -------------------------------------------------------------------------------------
    def run(self, req: Request, stop: threading.Event | None = None) -> Iterator[StreamEvent]:
        """One request, prefill to result: its events, then "done". `stop` set: the request ends
        after the current pass (abandoned, its cache kept), even in a stretch of steps that commit
        nothing to stream, such as a tool call's arguments."""
        finished = False
        try:
            if not req.call_announced:  # a forced call is known before its prompt is prefilled: say so now
                req.call_announced = True
                yield StreamEvent("tool_call", "", req._ms())
            self.admit([self.plan(req)], merge_prefill=True)
            while not req.state.done:
                if stop is not None and stop.is_set():
                    return
                self.step()
                yield from req.absorb()
            events, result = self.finish(req)
            yield from events
            finished = True
            yield StreamEvent("done", "", req._ms(), result)
        finally:
            if not finished:
                self.abandon(req)

    def run_batch(self, reqs: list[Request]) -> list[ChatResult]:
        """Many requests in one batch, each prompt prefilled alone; rows stay in place until all are done."""
        for req in reqs:
            self.admit([self.plan(req)])
        while True:
            active = [r for r in self.rows if not r.state.done]
            if not active:
                break
            self.step()
            for r in active:
                r.absorb()
        return [self.finish(r)[1] for r in reqs]


class _Commits:
    """One step's commits: greedy rows share one softmax and one transfer to the host."""

    def __init__(self, logits: torch.Tensor | None) -> None:
        self.logits = logits
        self.greedy: list[tuple[Sequence, list[int], bool, int]] = []  # (seq, positions, first_only, n in rows)
        self.index: list[int] = []  # rows of `logits` (or of `extra`, past its end) to read
        self.extra: list[torch.Tensor] = []  # next_logits of earlier passes
        self.thresholds: list[float] = []
        self.banned: list[tuple[int, int, list[int]]] = []
        self.sampled: list[tuple[Sequence, list[int], bool, torch.Tensor]] = []
        self.verified: list[tuple[Sequence, int]] = []  # (seq, n in rows), after the greedy rows

    def add(self, s: Sequence, inp: StepInput, off: tuple[int, int, int] | None) -> None:
        if s.verifying:
            self._add_verified(s, inp, off)
            return
        positions = s.open_positions(inp.n_block)
        if not positions:
            return
        first_only = s.first_only(inp.n_block)
        if s.params.temperature > 0:
            self.sampled.append((s, positions, first_only, self._predictions(s, inp, off)[positions]))
            return
        # Greedy: only position 0 had a prediction when the block was not in the input.
        read = ([0] if positions[0] == 0 else []) if first_only else positions
        lo = len(self.index)
        for j in read:
            p = s.source(j, inp.n_pending)
            if p is None and inp.n_pending and off is not None:
                p = inp.n_pending - 1  # position 0 is predicted by this pass's last pending token
            if p is None:
                self.index.append(-1 - len(self.extra))
                self.extra.append(s.next_logits if s.next_logits is not None or self.logits is None
                                  else self.logits.new_zeros(self.logits.shape[-1]))
            else:
                self.index.append(off[0] + p - off[1])
        self.thresholds.extend([s.params.threshold] * len(read))
        if s.banned and read:
            self.banned.append((lo, lo + len(read), list(s.banned)))
        self.greedy.append((s, positions, first_only, len(read)))

    def _add_verified(self, s: Sequence, inp: StepInput, off: tuple[int, int, int] | None) -> None:
        """verify: the predictions after the last pending token, after each draft and after each
        block position but the last, in order (the first one is `next_logits` when nothing was pending)."""
        n = s.reads(inp) if off is not None else 1
        lo = len(self.index)
        for i in range(n):
            p = inp.n_pending - 1 + i
            if p < 0 or off is None:
                self.index.append(-1 - len(self.extra))
                self.extra.append(s.next_logits)
            else:
                self.index.append(off[0] + p - off[1])
        self.thresholds.extend([1.0] * n)
        if s.banned:
            self.banned.append((lo, lo + n, list(s.banned)))
        self.verified.append((s, n))

    def _predictions(self, s: Sequence, inp: StepInput, off: tuple[int, int, int] | None) -> torch.Tensor:
        """Logits [b, V] predicting each block position (zeros where this step has none)."""
        rows: list[torch.Tensor | None] = []
        for j in range(len(s.block)):
            p = s.source(j, inp.n_pending)
            if p is None:
                rows.append(s.next_logits)
            elif off is not None and inp.n_block and 0 <= p - off[1] < off[2]:
                rows.append(self.logits[off[0] + p - off[1]])
            else:
                rows.append(None)
        v = next(r for r in rows if r is not None)
        return torch.stack([r if r is not None else torch.zeros_like(v) for r in rows])

    def apply(self) -> None:
        if self.greedy or self.verified:
            tok, conf, above = sampler.greedy(self._gather(), self.thresholds, self.banned) if self.index else ([], [], [])
            at = 0
            for s, positions, first_only, n in self.greedy:
                sl = slice(at, at + n)
                at += n
                self._commit(s, positions if not first_only else positions[:n], tok[sl], conf[sl], above[sl],
                             first_only)
            for s, n in self.verified:
                s.accept(tok[at:at + n], conf[at:at + n], sampler.DRAFT_MIN_CONFIDENCE)
                at += n
        for s, positions, first_only, logits in self.sampled:
            tok, conf, above = sampler.sample(logits, s.params.temperature, s.params.threshold, s.banned, s.generator)
            self._commit(s, positions, tok, conf, above, first_only)

    def _gather(self) -> torch.Tensor:
        if not self.extra:
            return self.logits[torch.tensor(self.index, device=self.logits.device)]
        src = torch.stack(self.extra) if self.logits is None else torch.cat([self.logits, torch.stack(self.extra)])
        base = 0 if self.logits is None else self.logits.shape[0]
        idx = [i if i >= 0 else base + (-1 - i) for i in self.index]
        return src[torch.tensor(idx, device=src.device)]

    @staticmethod
    def _commit(s: Sequence, positions: list[int], tok: list[int], conf: list[float], above: list[bool],
                first_only: bool) -> None:
        chosen = sampler.choose(positions, tok, conf, above, first_only=first_only, last_step=s.last_step(),
                                dedup=s.params.dedup_guard, order=s.params.order)
        s.commit([positions[i] for i in chosen], [tok[i] for i in chosen])


__all__ = ["Admission", "DecodeLoop", "DecodeParams", "prefill_mask"]
