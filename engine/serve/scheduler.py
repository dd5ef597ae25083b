"""Continuous batching: one thread owns a decode loop over a multi-row KV cache and steps every
active request in one batched forward.

Between steps it drops cancelled requests, fails requests that waited too long, and admits queued
ones (prefilling each into a free row, batched by similar length). The decode protocol itself
(prefill, step, commit, absorb, finish, row moves) is the loop's (engine/runtime/decode.py); this module
decides who runs when, and where a fault stops. Each request's events go to its own `Ticket`,
which a thread (`iter_sync`) or an asyncio task (`get`) reads.

A fault stays inside the request that caused it: if a batched prefill or step raises, each request
is retried alone once so that only the ones that still fail are failed.

Besides turns, it takes prefills without a turn (`submit_prefill`): a call's warm-up and its guesses
at the coming turn are prefilled into the call's session by this same thread, batched with the
other calls' work, so one process runs one forward at a time over its weights. A guess gives way:
it is skipped while turns wait in the queue or its call has a turn of its own under way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from engine.api import ChatResult, Engine, Request, StreamEvent
from engine.errors import EngineError
from engine.model.kv_cache import KVCache
from engine.runtime.decode import Admission, DecodeLoop
from engine.runtime.prefix_cache import PrefixCache


class Rejected(EngineError):
    """The scheduler cannot take a request now. `status` is the HTTP status that fits."""

    status = 503
    code = "server_overloaded"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueFull(Rejected):
    status = 429
    code = "rate_limit_exceeded"


class QueueTimeout(Rejected):
    status = 503


class RequestCancelled(EngineError):
    code = "cancelled"


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
        self.waits = False  # submitted behind a full batch or a queue: it waits its turn
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


class PrefillTicket(Ticket):
    """A prefill without a turn into the request's session: a call's warm-up (`guess=False`), or a
    guess at its coming turn, which may not crop what the last turn left (`guess=True`). `done`
    holds the session's cached length, or None when it was skipped."""

    def __init__(self, req: Request, guess: bool) -> None:
        super().__init__(req, None)
        self.guess = guess
        self.done: concurrent.futures.Future[int | None] = concurrent.futures.Future()

    def _put(self, item: Item) -> None:
        if item.kind not in ("done", "error"):
            return
        self.finished = True
        self.finished_at = time.monotonic()
        if self.done.done():
            return
        if item.kind == "done":
            self.done.set_result(item.result)  # type: ignore[arg-type]
        elif isinstance(item.error, RequestCancelled | Rejected):
            self.done.set_result(None)  # given way to turns: skipped, not failed
        else:
            self.done.set_exception(item.error)


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
    prefills_ahead: int = 0     # warm-ups and guesses prefilled without a turn (submit_prefill)
    prefills_skipped: int = 0   # guesses that gave way to turns, or would crop the last turn's prompt
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
        prefixes = PrefixCache(engine.family, self.prefix_entries) if self.prefix_entries else None
        self.loop = DecodeLoop(engine, engine.new_cache(batch=max_batch), prefixes)
        self.queue: deque[Ticket] = deque()
        self.stats = SchedulerStats()
        self._tickets: dict[int, Ticket] = {}  # id(request) -> its ticket, for the requests in the loop
        self._busy_sessions: set[int] = set()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._step_ema_s = 0.5  # for Retry-After estimates

    @property
    def cache(self) -> KVCache:
        """The batch KV cache (the loop's)."""
        return self.loop.cache

    @property
    def active(self) -> list[Ticket]:
        """The admitted tickets, in cache-row order."""
        return [self._tickets[id(r)] for r in self.loop.rows]

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
            ticket.waits = free_rows == 0 or any(not isinstance(t, PrefillTicket) for t in self.queue)
            self.queue.append(ticket)
            self.stats.submitted += 1
            self._cv.notify_all()
        return ticket

    def submit_prefill(self, req: Request, *, guess: bool) -> PrefillTicket:
        """Queue a prefill of `req`'s tokens into its session, with no turn (Engine.warm_request,
        Engine.guess_request). Its `done` future holds the session's cached length, or None if
        skipped: a guess is, while turns wait or its own call has a turn under way, and so is one
        cancelled while still queued (the turn that made it moot prefills the words itself)."""
        ticket = PrefillTicket(req, guess)
        with self._cv:
            if guess and (self._stop or self.backlogged_locked() or self._turn_of(req.session)):
                self.stats.prefills_skipped += 1
                ticket.done.set_result(None)
                return ticket
            if self._stop:
                ticket.done.set_exception(Rejected("the scheduler is shutting down", retry_after=5))
                return ticket
            self.queue.append(ticket)
            self._cv.notify_all()
        return ticket

    @property
    def backlogged(self) -> bool:
        """Turns are waiting for a row: work that is only a guess should give way."""
        with self._cv:
            return self.backlogged_locked()

    def backlogged_locked(self) -> bool:
        return any(not isinstance(t, PrefillTicket) for t in self.queue)

    def _turn_of(self, session) -> bool:
        """Has `session` a turn queued or decoding?"""
        return session is not None and any(
            t.req.session is session and not isinstance(t, PrefillTicket)
            for t in (*self.queue, *tuple(self._tickets.values())))

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
                "prefills_ahead": s.prefills_ahead,
                "prefills_skipped": s.prefills_skipped,
                "prefix_hits": s.prefix_hits,
                "prefix_tokens_reused": s.prefix_tokens_reused,
                "step_fallbacks": s.step_fallbacks,
                "step_ms_ema": round(self._step_ema_s * 1000, 1),
                "cache_rows": self.loop.cache.batch,
                "cache_capacity": self.loop.cache.capacity,
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
        self._tickets.clear()
        self.loop = DecodeLoop(self.engine, self.loop.cache, self.loop.prefixes)
        self.loop.cache.clear()

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
        plans: list[Admission] = []
        budget = self.prefill_budget
        with self._cv:
            self._expire_queued()
            for t in list(self.queue):
                if len(self.loop.rows) + len(plans) >= self.max_batch or budget <= 0:
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
                prefill = isinstance(t, PrefillTicket)
                if prefill and t.guess and s.would_crop(t.req.tokens):
                    self._release_session(t)
                    self.stats.prefills_skipped += 1
                    t._put(Item("done", result=None))
                    continue
                try:
                    plan = self.loop.plan(t.req, prefill_only=prefill)
                except Exception as e:
                    self._release_session(t)
                    self._fail(t, e)
                    continue
                self._tickets[id(t.req)] = t
                plans.append(plan)
                budget -= len(plan.new_tokens)
        for group in _length_groups(plans):
            self._admit_group(group)

    def _admit_group(self, group: list[Admission]) -> None:
        # Into an empty batch, a turn's new prompt tokens ride in its first decoding pass (one forward
        # saved, as a lone decode does); beside rows already decoding they would widen every row's pass.
        merge = not self.loop.rows and not any(isinstance(self._tickets[id(a.req)], PrefillTicket) for a in group)
        try:
            self.loop.admit(group, merge_prefill=merge)
            admitted = group
        except Exception:
            # One bad request must not fail the others: admit each alone, fail only what fails.
            admitted = []
            for a in group:
                try:
                    self.loop.admit([a], merge_prefill=merge)
                    admitted.append(a)
                except Exception as e:
                    t = self._tickets.pop(id(a.req))
                    self._release_session(t)
                    self._fail(t, e)
        for a in admitted:
            self.stats.prefills += 1
            if a.from_prefix:
                self.stats.prefix_hits += 1
                self.stats.prefix_tokens_reused += a.k
            t = self._tickets[id(a.req)]
            t.admitted_at = time.monotonic()
            t._put(Item("admitted"))
        for a in admitted:
            t = self._tickets[id(a.req)]
            if isinstance(t, PrefillTicket):
                self._finish_prefill(t)

    def _finish_prefill(self, t: PrefillTicket) -> None:
        """A prefill without a turn is done once admitted: its row goes back to the session."""
        sess = t.req.session
        try:
            self.cache.extract_row(t.req.state.row, sess.cache)
            held = sess.hold(t.req.tokens, guess=t.guess)
        except Exception as e:
            self._remove(t, e)
            return
        self.loop.remove(t.req)
        self._tickets.pop(id(t.req), None)
        self._release_session(t)
        self.stats.prefills_ahead += 1
        t._put(Item("done", result=held))  # type: ignore[arg-type]

    # -- decoding --------------------------------------------------------------------------------
    def _step(self) -> None:
        n = sum(not r.state.done for r in self.loop.rows)
        if not n:
            return
        self.stats.steps += 1
        self.stats.rows_stepped += n
        self.stats.batch_hist[n] = self.stats.batch_hist.get(n, 0) + 1
        try:
            self.loop.step()
        except Exception:
            # Find the row(s) at fault: step each alone; the others lose nothing but time.
            self.stats.step_fallbacks += 1
            for t in list(self.active):
                if t.req.state.done:
                    continue
                try:
                    self.loop.step(only=[t.req])
                except Exception as e:
                    self._remove(t, e)

    def _absorb(self, t: Ticket) -> None:
        try:
            events = self.loop.absorb(t.req)
            for ev in events:
                t._put(Item("event", event=ev))
            if t.req.state.done:
                self._finish(t)
        except Exception as e:
            self._fail(t, e)

    def _finish(self, t: Ticket) -> None:
        events, result = self.loop.finish(t.req)
        for ev in events:
            t._put(Item("event", event=ev))
        self._tickets.pop(id(t.req), None)
        self._release_session(t)
        with self._cv:
            self._cv.notify_all()
        self.stats.completed += 1
        if t.admitted_at is not None:  # time behind other requests, counted in every turn's metrics
            result.metrics["queue_wait_ms"] = round((t.admitted_at - t.created) * 1000, 1)
        t._put(Item("done", result=result))

    def _drop_cancelled(self) -> None:
        for t in list(self.active):
            if t.cancelled:
                self.stats.cancelled += 1
                self._keep_partial(t)
                self._remove(t, RequestCancelled("cancelled"), count=False)

    def _keep_partial(self, t: Ticket) -> None:
        """A call's turn stopped before its end (a barge-in): its row goes back to the call's cache
        and the session records what it holds, so the next turn reuses the prompt and what was
        said of the answer, as a turn decoded over the call's own cache does (Request.abandon)."""
        sess = t.req.session
        if sess is None or t.req.state is None or sess.cache is self.cache:
            return
        try:
            self.cache.extract_row(t.req.state.row, sess.cache)
            t.req.abandon()
        except Exception:  # the call's cache is in doubt: its next turn prefills from scratch
            sess.reset()

    def _remove(self, t: Ticket, error: BaseException | None = None, count: bool = True) -> None:
        """Take `t` out of the batch (the loop keeps its rows contiguous)."""
        if t.req in self.loop.rows:
            self.loop.remove(t.req)
        self._tickets.pop(id(t.req), None)
        self._release_session(t)
        if error is not None:
            if count:
                self.stats.failed += 1
            t._put(Item("error", error=error))
        with self._cv:
            self._cv.notify_all()

    def _fail(self, t: Ticket, e: BaseException) -> None:
        if t.req in self.loop.rows:
            self._remove(t, e)
        else:
            self.stats.failed += 1
            t._put(Item("error", error=e))

    def _release_session(self, t: Ticket) -> None:
        s = t.req.session
        if s is not None and id(s) in self._busy_sessions:
            self._busy_sessions.discard(id(s))
            s.lock.release()

    def _shutdown(self) -> None:
        err = Rejected("the server is shutting down", retry_after=5)
        for t in list(self.active):
            self._remove(t, err)
        with self._cv:
            for t in self.queue:
                t._put(Item("error", error=err))
            self.queue.clear()


def _length_groups(plans: list[Admission]) -> list[list[Admission]]:
    """Split prefills into groups whose padded size wastes little: sorted by length, a group
    grows while its padded tokens stay within 1.5x of its real tokens."""
    groups: list[list[Admission]] = []
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
