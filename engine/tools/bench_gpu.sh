#!/usr/bin/env bash
# One short accelerator run (a few minutes): decode tok/s and TTFAT at batch 1 and 8, for a random
# model of SDAR-1.7B's shape and the default model. Needs a CUDA build of torch on the GPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" -m engine.tools.bench_gpu --device "${DEVICE:-cuda}" --precision bf16 --models random,default --turns 4 "$@"
