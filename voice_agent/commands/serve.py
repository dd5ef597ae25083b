"""Serve the engine over an OpenAI-compatible HTTP API (POST /v1/chat/completions, GET /v1/models,
GET /health) with continuous batching across concurrent calls.

Name a call with the `X-Session-Id` header (or `prompt_cache_key` / `user`) to keep its KV cache
between turns. Set an API key with --api-key or VOICE_AGENT_API_KEY; the server binds to loopback
unless told otherwise.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (loopback by default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="default", help="'default', 'smollm2-base' or a local HF model folder")
    parser.add_argument("--served-model-name", default=None, help="the model id clients see (default: from --model)")
    parser.add_argument("--api-key", default=None, help="require this bearer key (or set VOICE_AGENT_API_KEY)")
    parser.add_argument("--max-batch", type=int, default=8, help="requests decoded together in one forward")
    parser.add_argument("--max-queue", type=int, default=64, help="requests waiting for a batch slot before 429")
    parser.add_argument("--queue-timeout", type=float, default=30.0, help="seconds a request may wait before 503")
    parser.add_argument("--max-sessions", type=int, default=32, help="calls whose KV cache is kept (LRU)")
    parser.add_argument("--default-effort", default="low", choices=["instant", "low", "medium", "high"],
                        help="reasoning_effort when a request gives none")
    parser.add_argument("--default-max-tokens", type=int, default=256)
    parser.add_argument("--precision", "--dtype", dest="precision", default=None,
                        choices=["auto", "fp32", "bf16", "float32", "bfloat16"],
                        help="weights and activations (default: $VOICE_AGENT_PRECISION, else auto: bf16 only "
                        "on CPUs with AMX/AVX512-BF16)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def run(args: argparse.Namespace) -> int:
    from engine.server import run_from_args

    return run_from_args(args)
