"""How many threads a pass runs on: one for a narrow pass on a CPU, all of them for a wide one.

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

So a pass of at most `SERIAL_UP_TO[precision]` tokens (rows x width: the linears' rows) runs on one
thread. In bf16, int8 and w8a8 its logits are bit-identical on one thread and two at every width
measured (1 to 40 tokens over a 200-token cache; tests/test_pass_threads.py). fp32 is left out: a
1-token fp32 pass rounds differently on one thread (logits 2.9e-5 apart), and fp32 is the precision
whose decodes are promised token for token; its gain would be small (1 token 23.5 vs 26.7 ms, 4 a
tie). Not measured on a CPU without AVX512-BF16. Waking the others for the LM head alone (a fifth
of a pass's weights in one kernel call) saved 0.2-0.4 ms back to back, but nothing in whole passes
(2026-12-06, medians of 3 rounds, ms at 1 / 4 / 8 tokens: 12.35 / 14.77 / 19.08 on one thread, 12.49 /
14.58 / 19.17 so), so a narrow pass stays on one thread throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

# w8a8 was 12 while its passes above 4 rows multiplied the packed bf16 copy. With the int8 kernel up
# to 8 rows (engine/quant.py), 2026-12-06, same CPU kind, medians of 3 rounds, ms at 5 / 6 / 8 / 10 /
# 12 tokens, one thread up to 12 / up to 4: 17.4 / 18.0 / 19.4 / 27.2 / 29.0 against 24.5 / 20.8 / 21.0
# / 25.9 / 26.6: one thread while the int8 kernel runs, all threads for the packed copy.
SERIAL_UP_TO = {"w8a8": 8, "int8": 8, "bf16": 8}


def serial_up_to(device_type: str, precision: str | None) -> int:
    """The widest pass (in tokens) that runs on one thread; 0: none does (a GPU, fp32, or no precision)."""
    if device_type != "cpu" or precision is None:
        return 0
    return SERIAL_UP_TO.get(precision, 0)


@contextmanager
def threads_for(tokens: int, limit: int) -> Iterator[None]:
    """Run the body on one thread when `tokens` <= `limit` and more are configured; restore after."""
    n = torch.get_num_threads()
    if n <= 1 or tokens > limit:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


__all__ = ["SERIAL_UP_TO", "serial_up_to", "threads_for"]
