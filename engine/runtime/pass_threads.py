"""How many threads a pass runs on: a wide pass on all of them; a narrow pass on a CPU on one or all,
whichever measured cheaper lately (`NarrowThreads`).

The engine's OpenMP threads wait passively (engine/__init__.py: spinning ones collapse throughput
when the cores are shared). Then every parallel op of a pass wakes the other threads, and a pass is
some 3,000 small ops: on an AMD EPYC with AVX512-BF16, 2 threads, idle, a 1-token w8a8 pass took
17.4 ms against 11.8 ms on one thread (spinning threads: 10.1 ms, but 38-87 ms with one other busy
process on the machine, where one thread kept 12.3). A wide pass has enough work per op to pay for
the wake-ups. Measured there, ms per pass over a 480-token cache by new tokens, one thread / two
(medians of 2-3 rounds, one process, switching the count per pass):

| precision | 1 | 4 | 8 | 12 | 16 | 32 |
| --- | --- | --- | --- | --- | --- | --- |
| w8a8 | 11.8 / 17.4 | 14.4 / 18.9 | 23.7 / 24.4 | 28.0 / 28.5 | 31.6 / 31.4 | 47.3 / 38.2 |
| int8 | 14.9 / 16.0 | 18.4 / 21.7 | 23.1 / 24.9 | | 30.5 / 28.2 | 48.0 / 38.3 |
| bf16 | 27.5 / 32.6 | 28.7 / 34.0 | 33.5 / 34.5 | | 41.7 / 35.9 | 58.2 / 48.4 |
| fp32 (packed) | 23.5 / 26.7 | 26.4 / 26.7 | 32.9 / 29.8 | | 43.6 / 34.1 | 71.2 / 51.1 |

So a pass of at most `SERIAL_UP_TO[precision]` tokens (rows x width: the linears' rows) may run on
one thread. Whether it does is measured, not fixed: on an Intel Xeon with AMX (below) the same narrow
passes ran 35-45% faster on two threads, and with the native layers (engine/model/native.py) the AMD EPYC's
did too when idle, while one busy process on the machine turns that around. So `NarrowThreads` times
the runner's own narrow passes on each count and keeps the cheaper (`VOICE_AGENT_NARROW_THREADS=one|all`
pins it). On the Intel Xeon, two engines decoding the bench turns alternately (6 turns, 48 tokens, the
same tokens on both), one thread / measured: instant 72.6 / 98.3, 105.8 / 127.9, 95.0 / 121.1 tok/s
over 3 rounds; `low` 162.1 / 178.9, 220.4 / 228.9, 264.3 / 259.4.

In bf16, int8 and w8a8 a pass's logits are bit-identical on one thread and two at every width
measured (1 to 40 tokens over a 200-token cache; tests/engine/unit/test_pass_threads.py). fp32 is left out: a
1-token fp32 pass rounds differently on one thread (logits 2.9e-5 apart), and fp32 is the precision
whose decodes are promised token for token; its gain would be small (1 token 23.5 vs 26.7 ms, 4 a
tie). Without native bf16 (an AMD EPYC capped to AVX512 without BF16, VOICE_AGENT_CPU_ISA=avx512,
2026-12-07), oneDNN's emulated bf16 gave a 5-token bf16 pass logits 0.29 apart on one thread and two, so
bf16 passes there run on all threads; int8 and w8a8 stayed bit-identical there and capped to AVX2. Waking the others for the LM head alone (a fifth
of a pass's weights in one kernel call) saved 0.2-0.4 ms back to back, but nothing in whole passes
(2026-12-06, medians of 3 rounds, ms at 1 / 4 / 8 tokens: 12.35 / 14.77 / 19.08 on one thread, 12.49 /
14.58 / 19.17 so), so a narrow pass's count holds throughout it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from engine.config import ENV, engine_config
from engine.errors import SettingError

# w8a8 was 12 while its passes above 4 rows multiplied the packed bf16 copy. With the int8 kernel up
# to 8 rows (engine/model/quant.py), 2026-12-06, same CPU kind, medians of 3 rounds, ms at 5 / 6 / 8 / 10 /
# 12 tokens, one thread up to 12 / up to 4: 17.4 / 18.0 / 19.4 / 27.2 / 29.0 against 24.5 / 20.8 / 21.0
# / 25.9 / 26.6: one thread while the int8 kernel runs, all threads for the packed copy.
SERIAL_UP_TO = {"w8a8": 8, "int8": 8, "bf16": 8}


def serial_up_to(device_type: str, precision: str | None) -> int:
    """The widest pass (in tokens) that runs on one thread; 0: none does (a GPU, fp32, or no precision)."""
    if device_type != "cpu" or precision is None:
        return 0
    if precision == "bf16":
        from engine.model.precision import native_bf16_flags

        if not native_bf16_flags():  # emulated bf16 rounds by the thread count: all threads, always
            return 0
    return SERIAL_UP_TO.get(precision, 0)


NARROW_THREADS_ENV = ENV["narrow_threads"]
NARROW_THREADS_MODES = ("auto", "one", "all")
# Which is cheaper depends on the machine and on what else runs on it. Same code, 2 threads, ms per
# pass at 1 / 2 / 4 / 8 tokens (w8a8, native layers, 480-token cache, medians of 12):
# - AMD EPYC with AVX512-BF16, idle: one thread 12.7 / - / - / 19.0, all 11.5-11.9 / - / - / 16.9-17.2;
#   with one other busy process: one 13.9 / - / 17.5 / 22.8, all 30.3 / - / 39.5 / 39.9 (2026-12-06).
# - Intel Xeon with AMX (family 6 model 207, KVM), idle, 3 rounds: one 16.4-21.3 / 18.3-24.3 / 22.0 /
#   27.2-29.6, all 10.5-12.3 / 11.6-13.6 / 13.6-18.9 / 17.9-22.7; with one busy process, 2 rounds: one
#   20.0-27.1 / 18.7-29.4 / 29.4-31.8 / 34.4-35.0, all 23.4-27.9 / 30.4-41.5 / 31.4-36.1 / 38.9-47.8.
# So neither count wins everywhere; the runner times its own narrow passes and keeps the cheaper,
# trying the other one pass in `EXPLORE_EVERY` (per width class) to notice when the machine changes.
EXPLORE_EVERY = 16
EWMA_WEIGHT = 0.25  # of the newest timing in a count's running cost


class NarrowThreadsError(SettingError):
    code = "invalid_narrow_threads"
    param = NARROW_THREADS_ENV


def narrow_threads_mode(mode: str | None = None) -> str:
    """`mode`, else `VOICE_AGENT_NARROW_THREADS`: auto (measured, the default), one, or all."""
    mode = (mode or engine_config().narrow_threads).strip().lower()
    if mode not in NARROW_THREADS_MODES:
        raise NarrowThreadsError(f"{NARROW_THREADS_ENV}={mode!r}: expected one of {', '.join(NARROW_THREADS_MODES)}")
    return mode


class NarrowThreads:
    """Runs passes of at most `limit` tokens (the linears' rows) on one thread or on all configured ones,
    whichever has cost less lately in that width class (1, 2-3, 4-7, 8-15 tokens); wider ones on all.

    The choice changes no number where `limit` > 0 (tests/engine/unit/test_pass_threads.py): only the time."""

    def __init__(self, limit: int, mode: str | None = None, explore_every: int = EXPLORE_EVERY) -> None:
        self.limit = limit
        self.mode = narrow_threads_mode(mode)
        self.explore_every = explore_every
        self._cost: dict[tuple[int, bool], float] = {}  # (width class, serial) -> running ms
        self._seen: dict[int, int] = {}  # width class -> passes chosen for
        self._lock = threading.Lock()

    def serial(self, tokens: int) -> bool | None:
        """Whether a pass of `tokens` runs on one thread; None where it is not narrow (all threads, untimed)."""
        if tokens > self.limit or self.mode == "all":
            return None if tokens > self.limit else False
        if self.mode == "one" or tokens <= 0:  # no forward at all: nothing to wake the others for
            return True
        k = tokens.bit_length()
        with self._lock:
            one_ms, all_ms = self._cost.get((k, True)), self._cost.get((k, False))
            if one_ms is None or all_ms is None:  # each is timed once before any is preferred
                return one_ms is None
            n = self._seen[k] = self._seen.get(k, 0) + 1
            one_is_cheaper = one_ms <= all_ms
            return (not one_is_cheaper) if n % self.explore_every == 0 else one_is_cheaper

    def record(self, tokens: int, serial: bool, ms: float) -> None:
        k = tokens.bit_length()
        with self._lock:
            old = self._cost.get((k, serial))
            self._cost[(k, serial)] = ms if old is None else (1 - EWMA_WEIGHT) * old + EWMA_WEIGHT * ms

    def costs(self) -> dict[str, float]:
        """The running ms by width class and count, e.g. {"1-1 one": 10.2, "1-1 all": 7.9}: for reports."""
        with self._lock:
            return {f"{1 << (k - 1)}-{(1 << k) - 1} {'one' if s else 'all'}": round(ms, 2)
                    for (k, s), ms in sorted(self._cost.items())}

    @contextmanager
    def run(self, tokens: int) -> Iterator[None]:
        """Run the body (a pass and the work on its logits) on the count chosen for `tokens`, timing it."""
        n = torch.get_num_threads()
        serial = self.serial(tokens) if n > 1 else None
        if serial is None:
            yield
            return
        if serial:
            torch.set_num_threads(1)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if serial:
                torch.set_num_threads(n)
        if self.mode == "auto" and tokens > 0:  # a failed pass (the exception above) is not timed
            self.record(tokens, serial, (time.perf_counter() - t0) * 1000)


__all__ = ["EXPLORE_EVERY", "NARROW_THREADS_ENV", "NARROW_THREADS_MODES", "SERIAL_UP_TO", "NarrowThreads",
           "NarrowThreadsError", "narrow_threads_mode", "serial_up_to"]
