"""Continuous batching: one thread owns a multi-row KV cache and decodes every active request in
one batched forward per step.

Between steps it drops cancelled requests, fails requests that waited too long, and admits queued
ones (prefilling each into a free row). Active requests occupy rows 0..n-1 so the decoder works on
views, not gathered copies: when a row frees up, the last row moves into it. Each request's events
go to its own `Ticket`, which a thread (`iter_sync`) or an asyncio task (`get`) reads.

A fault stays inside the request that caused it: if the batched forward raises, each row is
stepped alone once so that only the rows that still fail are failed.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import torch

from engine.api import ChatResult, Engine, Request, StreamEvent
from engine.decode import _RowSubset, prefill_mask
from engine.kv_cache import KVCache


class Rejected(Exception):
    """The scheduler cannot take a request now. `status` is the HTTP status that fits."""

    status = 503

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueFull(Rejected):
    status = 429


class QueueTimeout(Rejected):
    status = 503


class RequestCancelled(Exception):
    pass


@dataclass
class Item:
    """What a ticket receives: "admitted", then "event"s, then one "done" or "error"."""

    kind: str
    event: StreamEvent | None = None
    result: ChatResult | None = None
    error: BaseException | None = None


class Ticket:
    """One submitted request: its place in the scheduler and the channel its events arrive on."""

    _ids = itertools.count(1)

    def __init__(self, req: Request, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.id = next(self._ids)
        self.req = req
        self.loop = loop
        self.created = time.monotonic()
        self.admitted_at: float | None = None
        self.finished_at: float | None = None
        self.cancelled = False
        self.finished = False
        self._async_q: asyncio.Queue[Item] | None = asyncio.Queue() if loop is not None else None
        self._sync_q: queue.Queue[Item] | None = None if loop is not None else queue.Queue()
        self._pending: asyncio.Future | None = None

    def cancel(self) -> None:
        """Ask the scheduler to drop this request; it frees the row before its next step.
        (Async tickets: call from the event loop's thread.)"""
        self.cancelled = True
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()

    # -- producer side (the scheduler thread) ---------------------------------------------------
    def _put(self, item: Item) -> None:
        if item.kind in ("done", "error"):
            self.finished = True
            self.finished_at = time.monotonic()
        if self._sync_q is not None:
            self._sync_q.put(item)
            return
        try:
            self.loop.call_soon_threadsafe(self._async_q.put_nowait, item)
        except RuntimeError:  # the consumer's event loop is gone: nobody is listening any more
            self.cancelled = True

    # -- consumer side -------------------------------------------------------------------------
    async def get(self, timeout: float | None = None) -> Item:
        """The next item; TimeoutError after `timeout` s (the pending read is kept, so no item is lost)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._async_q.get())
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            raise TimeoutError
        fut, self._pending = self._pending, None
        return fut.result()

    def iter_sync(self, timeout: float | None = None):
        """Yield items until "done" or "error" (a blocking generator for threads and tests)."""
        while True:
            item = self._sync_q.get(timeout=timeout)
            yield item
            if item.kind in ("done", "error"):
                return

    def result_sync(self, timeout: float | None = None) -> ChatResult:
        for item in self.iter_sync(timeout):
            if item.kind == "done":
                return item.result
            if item.kind == "error":
                raise item.error
        raise RuntimeError("ticket ended without a result")


@dataclass
class _Prefix:
    tokens: list[int]
    cache: KVCache


@dataclass
class _Plan:
    """How one admitted request is prefilled: `k` tokens come from `source`, the rest are new."""

    ticket: Ticket
    source: KVCache | None
    k: int
    new_tokens: list[int]
    from_prefix: bool = False
    slot: int = -1
    carry: list[int] = field(default_factory=list)  # the prompt's leftover for the first block (aligned families)


@dataclass
class SchedulerStats:
    submitted: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    rejected_full: int = 0
    timed_out: int = 0
    steps: int = 0
    rows_stepped: int = 0
    prefills: int = 0
    prefix_hits: int = 0
    prefix_tokens_reused: int = 0
    step_fallbacks: int = 0
    batch_hist: dict = field(default_factory=dict)


class Scheduler:
    def __init__(self, engine: Engine, max_batch: int = 8, max_queue: int = 64,
                 queue_timeout_s: float = 30.0, prefix_entries: int = 4,
                 prefill_budget: int = 1024) -> None:
        if max_batch < 1 or max_queue < 0:
            raise ValueError("max_batch must be >= 1 and max_queue >= 0")
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        # Prompt tokens prefilled per scheduler iteration before the active rows get their next
        # step: long prompts arriving together must not stall running calls for many seconds.
        self.prefill_budget = prefill_budget
        self.prefix_entries = prefix_entries if engine.family.cache_attention in ("causal", "block") else 0
        self.cache = engine.new_cache(batch=max_batch)
        self.active: list[Ticket] = []  # active[i] decodes in cache row i
        self.queue: deque[Ticket] = deque()
        self.stats = SchedulerStats()
        self._prefixes: OrderedDict[int, _Prefix] = OrderedDict()
        self._prefix_ids = itertools.count()
        self._busy_sessions: set[int] = set()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._step_ema_s = 0.5  # for Retry-After estimates

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engine-scheduler", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- submitting ------------------------------------------------------------------------------
    def submit(self, req: Request, loop: asyncio.AbstractEventLoop | None = None) -> Ticket:
        """Queue a prepared request. Raises QueueFull when the queue is at its limit."""
        ticket = Ticket(req, loop)
        with self._cv:
            if self._stop:
                raise Rejected("the server is shutting down", retry_after=5)
            waiting = len(self.queue)
            free_rows = max(0, self.max_batch - len(self.active))
            if waiting >= self.max_queue + free_rows:
                self.stats.rejected_full += 1
                raise QueueFull(
                    f"server busy: {len(self.active)} requests decoding and {waiting} queued "
                    f"(limit {self.max_queue}); retry later", retry_after=self.retry_after())
            self.queue.append(ticket)
            self.stats.submitted += 1
            self._cv.notify_all()
        return ticket

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: a rough guess from the step time and queue depth."""
        per_request = max(self._step_ema_s, 0.05) * 32
        return max(1, min(60, round(per_request * (1 + len(self.queue) / self.max_batch))))

    def snapshot(self) -> dict:
        with self._cv:
            s = self.stats
            return {
                "active": len(self.active),
                "queued": len(self.queue),
                "max_batch": self.max_batch,
                "max_queue": self.max_queue,
                "queue_timeout_s": self.queue_timeout_s,
                "submitted": s.submitted,
                "completed": s.completed,
                "failed": s.failed,
                "cancelled": s.cancelled,
                "rejected_full": s.rejected_full,
                "timed_out": s.timed_out,
                "steps": s.steps,
                "rows_stepped": s.rows_stepped,
                "mean_batch": round(s.rows_stepped / s.steps, 3) if s.steps else 0.0,
                "batch_hist": dict(sorted(s.batch_hist.items())),
                "prefills": s.prefills,
                "prefix_hits": s.prefix_hits,
                "prefix_tokens_reused": s.prefix_tokens_reused,
                "step_fallbacks": s.step_fallbacks,
                "step_ms_ema": round(self._step_ema_s * 1000, 1),
                "cache_rows": self.cache.batch,
                "cache_capacity": self.cache.capacity,
                "running": self._thread is not None and self._thread.is_alive(),
            }

    # -- the loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        # Everything that touches the batch cache runs here, in inference mode: tensors that a
        # forward allocates (a cache that grows) are inference tensors, and only inference mode
        # may update them in place (row moves, loads, extracts).
        with torch.inference_mode():
            while True:
                with self._cv:
                    if self._stop:
                        break
                    self._expire_queued()
                    if not self.active and not self._admissible():
                        self._cv.wait(timeout=self._next_deadline())
                        continue
                try:
                    self._iteration()
                except Exception as e:  # a bug in the loop itself: fail what is in flight, keep serving
                    self._fail_all(e)
            self._shutdown()

    def _fail_all(self, e: BaseException) -> None:
        """Last resort: fail every active request without touching the cache, and start clean."""
        for t in self.active:
            try:
                self._release_session(t)
            except Exception:  # a lock we no longer hold: nothing else to undo
                pass
            self.stats.failed += 1
            t._put(Item("error", error=e))
        self._busy_sessions.clear()
        self._reset_rows()

    def _iteration(self) -> None:
        self._drop_cancelled()
        self._admit()
        self._drop_cancelled()
        if not self.active:
            return
        t0 = time.perf_counter()
        self._step()
        dt = time.perf_counter() - t0
        self._step_ema_s = 0.8 * self._step_ema_s + 0.2 * dt
        for t in list(self.active):
            self._absorb(t)

    def _admissible(self) -> bool:
        return len(self.active) < self.max_batch and any(
            t.cancelled or self._session_free(t) for t in self.queue)

    def _next_deadline(self) -> float:
        if not self.queue:
            return 1.0
        oldest = min(t.created for t in self.queue)
        return max(0.01, min(1.0, oldest + self.queue_timeout_s - time.monotonic()))

    def _expire_queued(self) -> None:
        now = time.monotonic()
        keep: deque[Ticket] = deque()
        for t in self.queue:
            if t.cancelled:
                self.stats.cancelled += 1
                t._put(Item("error", error=RequestCancelled("cancelled while queued")))
            elif now - t.created > self.queue_timeout_s:
                self.stats.timed_out += 1
                t._put(Item("error", error=QueueTimeout(
                    f"request waited {now - t.created:.1f} s in the queue (limit {self.queue_timeout_s:g} s); "
                    "the server is overloaded", retry_after=self.retry_after())))
            else:
                keep.append(t)
        self.queue = keep

    def _session_free(self, t: Ticket) -> bool:
        s = t.req.session
        return s is None or (id(s) not in self._busy_sessions and not s.lock.locked())

    # -- admission -------------------------------------------------------------------------------
    def _admit(self) -> None:
        """Take queued requests into free rows and prefill them, batched by similar length."""
        plans: list[_Plan] = []
        reference: list[Ticket] = []
        budget = self.prefill_budget
        with self._cv:
            self._expire_queued()
            for t in list(self.queue):
                if len(self.active) + len(plans) >= self.max_batch or budget <= 0:
                    break
                if not self._session_free(t):
                    continue
                s = t.req.session
                if s is not None:
                    # Someone outside the scheduler (Engine.stream) may hold the session: wait.
                    if not s.lock.acquire(blocking=False):
                        continue
                    self._busy_sessions.add(id(s))
                self.queue.remove(t)
                if self.engine.decoding == "reference":
                    reference.append(t)
                    continue
                try:
                    plan = self._plan(t)
                except Exception as e:
                    self._release_session(t)
                    self._fail(t, e)
                    continue
                plans.append(plan)
                budget -= len(plan.new_tokens)
        for t in reference:
            self._run_reference(t)
        if not plans:
            return
        for group in _length_groups(plans):
            self._prefill_group(group)

    def _run_reference(self, t: Ticket) -> None:
        """Engine.decoding == "reference": the family's reference sampler decodes the request
        alone and whole (it batches nothing and keeps no cache), then its events and result go out."""
        req = t.req
        try:
            cache = req.session.cache if req.session is not None else self.engine.new_cache(capacity=16)
            for ev in req.run_reference(cache):
                if ev.type == "done":
                    self.stats.completed += 1
                    t._put(Item("done", result=ev.result))
                else:
                    t._put(Item("event", event=ev))
        except Exception as e:
            self._fail(t, e)
        finally:
            self._release_session(t)

    def _plan(self, t: Ticket) -> _Plan:
        """Where this request's cached tokens come from: its call's cache, a shared prefix, or none."""
        req = t.req
        sess = req.session
        if sess is not None and sess.tokens and int(sess.cache.lengths[0]) > 0:
            # the same reuse rule as Request.prefill: the call's cache, as far as it matches
            have, source, from_prefix = sess.tokens[: int(sess.cache.lengths[0])], sess.cache, False
        else:
            (have, source), from_prefix = self._find_prefix(req.tokens), True
        k = min(_common_prefix(have, req.tokens), len(req.tokens) - 1)  # >= 1 token to prefill
        if from_prefix:
            k = self._usable_prefix(k)
        k, end = self.engine.decoder.split_prompt(len(req.tokens), k)
        return _Plan(t, source if k > 0 else None, k, req.tokens[k:end], from_prefix and k > 0,
                     carry=req.tokens[end:])

    def _prefill_group(self, group: list[_Plan]) -> None:
        """Load each plan's cached rows, then prefill the rest of every prompt in one forward."""
        cache = self.cache
        rows: list[_Plan] = []
        for p in group:
            slot = len(self.active) + len(rows)
            try:
                cache.lengths[slot] = 0
                if p.source is not None:
                    cache.load_row(slot, p.source)
                    cache.lengths[slot] = p.k
                p.slot = slot
                rows.append(p)
            except Exception as e:
                cache.lengths[slot] = 0
                self._release_session(p.ticket)
                self._fail(p.ticket, e)
        if not rows:
            return
        t0 = time.perf_counter()
        # A prompt whose uncached rest all goes into its first block (aligned families) has
        # nothing to prefill: no forward, no next-token logits.
        fwd = [p for p in rows if p.new_tokens]
        try:
            logits = iter(self._prefill_forward([(p.slot, p.new_tokens) for p in fwd]) if fwd else [])
            done = [(p, next(logits) if p.new_tokens else None) for p in rows]
        except Exception:
            # One bad request must not fail the others: prefill each alone, fail only what fails.
            done = []
            for p in rows:
                try:
                    lg = self._prefill_forward([(p.slot, p.new_tokens)])[0] if p.new_tokens else None
                    done.append((p, lg))
                except Exception as e:
                    self._release_session(p.ticket)
                    self._fail(p.ticket, e)
        t1 = time.perf_counter()
        eng = self.engine
        for p, lg in done:
            req = p.ticket.req
            slot = len(self.active)
            if p.slot != slot:  # a row before it failed: keep rows contiguous
                self._move_row(p.slot, slot)
            try:
                req.cached_tokens = p.k
                req.t_prefill_end, req.prefill_ms = t1, (t1 - t0) * 1000
                req.state = eng.decoder.start(req.params, lg, row=slot, eos_ids=eng.eos_ids, carry=p.carry,
                                              prompt_len=len(req.tokens))
                self._remember_prefix(req.tokens, slot, p.k)
            except Exception as e:
                cache.lengths[slot] = 0
                self._release_session(p.ticket)
                self._fail(p.ticket, e)
                continue
            self.stats.prefills += 1
            if p.from_prefix:
                self.stats.prefix_hits += 1
                self.stats.prefix_tokens_reused += p.k
            p.ticket.admitted_at = time.monotonic()
            self.active.append(p.ticket)
            p.ticket._put(Item("admitted"))

    @torch.inference_mode()
    def _prefill_forward(self, rows: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """Prefill several rows (contiguous slots) at once; each gets the logits of its next token.

        Each row's tokens see the row's cache and each other as in a lone prefill; padding sees
        only itself. The logits come from each row's own last position, one vector at a time, as
        `BlockDecoder.prefill` computes them, so a batched prefill matches a lone one."""
        cache, model, fam = self.cache, self.engine.model, self.engine.family
        slots = [s for s, _ in rows]
        t = max(len(toks) for _, toks in rows)
        cache.ensure(int(cache.lengths[slots].max()) + t)  # grow the parent before taking views
        view = _RowSubset(cache, slots)
        x = torch.zeros(len(rows), t, dtype=torch.long)
        intra = torch.zeros(len(rows), t, t, dtype=torch.bool)
        for i, (slot, toks) in enumerate(rows):
            n = len(toks)
            x[i, :n] = torch.tensor(toks)
            intra[i, :n, :n] = prefill_mask(n, fam.cache_attention, fam.block_size, int(cache.lengths[slot]))
            idx = torch.arange(n, t)
            intra[i, idx, idx] = True
        mask, _ = view.mask(intra[0] if len(rows) == 1 else intra, t)
        pos_slots = view.slots_for(t)
        pos = pos_slots.clamp(max=model.cfg.max_seq_len - 1)
        h = model.hidden(x, pos, mask, view, pos_slots)
        out = []
        for i, (slot, toks) in enumerate(rows):
            cache.lengths[slot] += len(toks)
            out.append(model.lm_head(h[i, len(toks) - 1]).float())
        return out

    def _move_row(self, src: int, dst: int) -> None:
        n = int(self.cache.lengths[src])
        self.cache.k[:, dst, :, :n] = self.cache.k[:, src, :, :n]
        self.cache.v[:, dst, :, :n] = self.cache.v[:, src, :, :n]
        self.cache.lengths[dst] = n
        self.cache.lengths[src] = 0

    def _find_prefix(self, tokens: list[int]) -> tuple[list[int], KVCache | None]:
        """The stored prompt prefix (system prompt and tools) that shares the most with `tokens`."""
        best, best_n = None, 0
        for key, p in self._prefixes.items():
            n = _common_prefix(p.tokens, tokens)
            if n > best_n:
                best, best_n = key, n
        if best is None or self._usable_prefix(best_n) < 16:
            return [], None
        self._prefixes.move_to_end(best)
        p = self._prefixes[best]
        return p.tokens, p.cache

    def _usable_prefix(self, n: int) -> int:
        # With block-causal caches a position's K/V depend on the rest of its block: only whole
        # blocks of a shared prefix are exactly what a fresh prefill would compute.
        if self.engine.family.cache_attention == "block":
            b = max(self.engine.family.block_size, 1)
            return n // b * b
        return n

    def _remember_prefix(self, tokens: list[int], slot: int, reused: int) -> None:
        if not self.prefix_entries or len(tokens) - reused < 32:
            return  # nothing new worth keeping
        # The last prompt token is re-fed on a hit, so keep one short (and never more than the
        # row holds: aligned families keep the prompt's leftover out of the cache).
        n = min(len(tokens) - 1, int(self.cache.lengths[slot]))
        for p in self._prefixes.values():
            if _common_prefix(p.tokens, tokens) >= n * 0.9:
                return
        pc = KVCache(*_dims(self.cache), capacity=n, dtype=self.cache.dtype,
                     max_capacity=self.cache.max_capacity)
        pc.k[:, 0] = self.cache.k[:, slot, :, :n]
        pc.v[:, 0] = self.cache.v[:, slot, :, :n]
        pc.lengths[0] = n
        self._prefixes[next(self._prefix_ids)] = _Prefix(list(tokens[:n]), pc)
        while len(self._prefixes) > self.prefix_entries:
            self._prefixes.popitem(last=False)

    # -- decoding --------------------------------------------------------------------------------
    def _step(self) -> None:
        states = [t.req.state for t in self.active if not t.req.state.done]
        if not states:
            return
        self.stats.steps += 1
        self.stats.rows_stepped += len(states)
        self.stats.batch_hist[len(states)] = self.stats.batch_hist.get(len(states), 0) + 1
        try:
            self.engine.decoder.step(self.cache, states)
        except Exception:
            # Find the row(s) at fault: step each alone; the others lose nothing but time.
            self.stats.step_fallbacks += 1
            for t in list(self.active):
                st = t.req.state
                if st.done:
                    continue
                try:
                    self.engine.decoder.step(self.cache, [st])
                except Exception as e:
                    self._remove(t, e)

    def _absorb(self, t: Ticket) -> None:
        try:
            events = t.req.absorb()
            for ev in events:
                t._put(Item("event", event=ev))
            if t.req.state.done:
                self._finish(t)
        except Exception as e:
            self._fail(t, e)

    def _finish(self, t: Ticket) -> None:
        req = t.req
        slot = req.state.row
        for ev in req.absorb():
            t._put(Item("event", event=ev))
        if req.session is not None:
            self.cache.extract_row(slot, req.session.cache)
            result = req.finish(req.session.cache)
        else:
            result = req.finish(_RowSubset(self.cache, [slot]))
        self._remove(t)
        self.stats.completed += 1
        t._put(Item("done", result=result))

    def _drop_cancelled(self) -> None:
        for t in list(self.active):
            if t.cancelled:
                self.stats.cancelled += 1
                self._remove(t, RequestCancelled("cancelled"), count=False)

    def _remove(self, t: Ticket, error: BaseException | None = None, count: bool = True) -> None:
        """Take `t` out of the batch; keep rows 0..n-1 contiguous by moving the last row down."""
        i = self.active.index(t)
        last = len(self.active) - 1
        if i != last:
            moved = self.active[last]
            n = int(self.cache.lengths[last])
            # pending tokens sit beyond the committed length only in K/V written by the next pass,
            # so copying the committed part is the whole state of the row
            self.cache.k[:, i, :, :n] = self.cache.k[:, last, :, :n]
            self.cache.v[:, i, :, :n] = self.cache.v[:, last, :, :n]
            self.cache.lengths[i] = n
            moved.req.state.row = i
            self.active[i] = moved
        self.active.pop()
        self.cache.lengths[last] = 0
        self._release_session(t)
        if error is not None:
            if count:
                self.stats.failed += 1
            t._put(Item("error", error=error))
        with self._cv:
            self._cv.notify_all()

    def _fail(self, t: Ticket, e: BaseException) -> None:
        if t in self.active:
            self._remove(t, e)
        else:
            self.stats.failed += 1
            t._put(Item("error", error=e))

    def _release_session(self, t: Ticket) -> None:
        s = t.req.session
        if s is not None and id(s) in self._busy_sessions:
            self._busy_sessions.discard(id(s))
            s.lock.release()

    def _reset_rows(self) -> None:
        self.active.clear()
        self.cache.lengths.zero_()

    def _shutdown(self) -> None:
        err = Rejected("the server is shutting down", retry_after=5)
        for t in list(self.active):
            self._remove(t, err)
        with self._cv:
            for t in self.queue:
                t._put(Item("error", error=err))
            self.queue.clear()


def _length_groups(plans: list[_Plan]) -> list[list[_Plan]]:
    """Split prefills into groups whose padded size wastes little: sorted by length, a group
    grows while its padded tokens stay within 1.5x of its real tokens."""
    groups: list[list[_Plan]] = []
    for p in sorted(plans, key=lambda p: -len(p.new_tokens)):
        g = groups[-1] if groups else None
        if g is not None:
            longest = len(g[0].new_tokens)
            real = sum(len(q.new_tokens) for q in g) + len(p.new_tokens)
            if longest * (len(g) + 1) <= 1.5 * real:
                g.append(p)
                continue
        groups.append([p])
    return groups


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _dims(cache: KVCache) -> tuple[int, int, int, int]:
    n_layers, _, n_kv, head_dim = cache.shape
    return n_layers, 1, n_kv, head_dim
