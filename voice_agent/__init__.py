"""The voice agent: a Pipecat cascade around the in-process diffusion engine."""

import os

# OpenMP's busy-wait collapses throughput 10x when cores are shared (measured: prefill 7.3 s vs
# 0.37 s on 2 busy cores); passive waiting costs nothing measurable on an idle machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
