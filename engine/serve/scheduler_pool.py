"""`SchedulerPool`: the calls' one scheduler, as K continuous-batching loops over the same weights.

On a CPU a single loop runs every pass on one thread of Python: while it lays out a pass, commits
its tokens or prefills a new turn, no other call's row moves. K loops (each with its own batch
cache and thread) run side by side, so one call's prefill overlaps another's decode as per-call
threads did, and calls past K share loops and batch; there is one admission point, and what waits
is counted. OpenMP's thread count is per calling thread, so each loop's narrow passes may run on
one thread (engine/runtime/pass_threads.py) while another loop uses the other core.

A call's requests all go to one loop (its session's), so they run in the order they were made; a
new call goes to the loop serving the fewest live calls.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from engine.api import Engine, Request
from engine.serve.scheduler import PrefillTicket, Scheduler, Ticket


class SchedulerPool:
    def __init__(self, engine: Engine, workers: int, **scheduler_kw: Any) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.engine = engine
        self.workers = [Scheduler(engine, **scheduler_kw) for _ in range(workers)]
        self._of_session: dict[int, int] = {}  # id(session) -> its loop, while the session lives
        self._lock = threading.Lock()

    def start(self) -> SchedulerPool:
        for w in self.workers:
            w.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        for w in self.workers:
            w.stop(timeout)

    def worker_for(self, session: Any) -> Scheduler:
        """The loop that serves `session` (chosen at its first request: the one with the fewest live calls)."""
        if session is None:
            return min(self.workers, key=lambda w: len(w.queue) + len(w.loop.rows))
        with self._lock:
            i = self._of_session.get(id(session))
            if i is None:
                load = [0] * len(self.workers)
                for j in self._of_session.values():
                    load[j] += 1
                i = self._of_session[id(session)] = load.index(min(load))
                weakref.finalize(session, self._forget, id(session))
            return self.workers[i]

    def _forget(self, key: int) -> None:
        with self._lock:
            self._of_session.pop(key, None)

    def submit(self, req: Request, loop: asyncio.AbstractEventLoop | None = None) -> Ticket:
        return self.worker_for(req.session).submit(req, loop)

    def submit_prefill(self, req: Request, *, guess: bool) -> PrefillTicket:
        return self.worker_for(req.session).submit_prefill(req, guess=guess)

    @property
    def backlogged(self) -> bool:
        return any(w.backlogged for w in self.workers)

    def snapshot(self) -> dict:
        """Every loop's counters added up (batch histograms merged), and each loop's own."""
        parts = [w.snapshot() for w in self.workers]
        total: dict[str, Any] = {"workers": len(parts)}
        for p in parts:
            for k, v in p.items():
                if isinstance(v, bool) or not isinstance(v, int | float | dict):
                    continue
                if isinstance(v, dict):
                    hist = total.setdefault(k, {})
                    for b, n in v.items():
                        hist[b] = hist.get(b, 0) + n
                else:
                    total[k] = total.get(k, 0) + v
        total["per_worker"] = parts
        return total
