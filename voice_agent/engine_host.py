"""The process-wide engine: one per model (and precision, threads) per process. Every call and
room shares its weights; each call has its own session (KV cache)."""

from __future__ import annotations

import threading
from typing import Any

_engines: dict[tuple, Any] = {}
_lock = threading.Lock()


def call_engine(model: str, scenario: Any, **load_kwargs: Any) -> Any:
    """The shared engine for a call of `scenario`: with the pack's own adapter when it has one
    (`voice-agent train --scenario`), else the shipped one."""
    from voice_agent.packs.adapter import pack_adapter

    adapter = pack_adapter(scenario, model)
    return shared_engine(model, **load_kwargs, **({"adapter": str(adapter)} if adapter else {}))


def shared_engine(model: str = "default", **load_kwargs: Any) -> Any:
    """`Engine.load(model, **load_kwargs)`, once per process for the same arguments (None values
    mean the engine's defaults and are left out)."""
    kwargs = {k: v for k, v in load_kwargs.items() if v is not None}
    key = (str(model), tuple(sorted(kwargs.items())))
    with _lock:
        if key not in _engines:
            from engine import Engine

            _engines[key] = Engine.load(model, **kwargs)
        return _engines[key]


# Calls' turns wait this long at most for a row before the caller hears the apology: past it the
# machine is over its capacity, and a person would rather hear "sorry" than silence.
CALL_QUEUE_TIMEOUT_S = 6.0
# The calls' scheduler: CALL_WORKERS batching loops (engine/serve/scheduler_pool.py), a new call going to the
# loop with the fewest calls, each loop batching at most CALL_MAX_BATCH rows. On 2 cores
# (`voice-agent callload`, docs/benchmarks.md, 2026-12-07): batching several calls into one loop's
# passes does not pay there (TTFAT p95 at 8 calls: 3.3 s with 2 loops, twice, 1.9 s with 8, 1.5 s for
# the old thread per turn), while a loop per call overlaps one call's prefill with another's decode as
# threads did; but 8 loops at 16 calls left a third of the turns unanswered, where 2 loops answered
# every one. So one loop per call up to the default capacity (config.CALL_CAPACITY), batching past it.
CALL_WORKERS = 4
CALL_MAX_BATCH = 4

_schedulers: dict[int, tuple[Any, Any]] = {}  # id(engine) -> (engine, its scheduler)


def call_scheduler(engine: Any) -> Any:
    """The one scheduler of `engine` in this process (started on first use): every in-process call
    submits its turns, warm-ups and guesses to it, and it runs them in up to CALL_WORKERS batching
    loops, instead of one unbatched decode per turn fighting for the cores."""
    with _lock:
        held = _schedulers.get(id(engine))
        if held is None or held[0] is not engine:
            from engine import SchedulerPool

            # No prefix shared between calls: each call warms its own cache while its greeting plays,
            # and a turn's tokens then never depend on which call happened to come first (a prefix
            # prefilled in other chunks differs in the last bits, enough to flip a greedy token).
            sched = SchedulerPool(engine, CALL_WORKERS, max_batch=CALL_MAX_BATCH, max_queue=64,
                                  queue_timeout_s=CALL_QUEUE_TIMEOUT_S, prefix_entries=0).start()
            held = _schedulers[id(engine)] = (engine, sched)
        return held[1]


def share_scheduler(stand_in: Any, engine: Any) -> None:
    """Calls on `stand_in` (an object that acts for `engine`, e.g. a soak's fault injector) use
    `engine`'s scheduler."""
    sched = call_scheduler(engine)
    with _lock:
        _schedulers[id(stand_in)] = (stand_in, sched)
