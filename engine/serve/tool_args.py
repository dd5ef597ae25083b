"""The command-line flags of the engine's own tools: `python -m engine.serve.server`, `engine.tools.loadtest`,
`engine.tools.soak`. Each tool owns its flags here; `voice-agent serve|loadtest|soak` reuse them.

Standard library only (and `engine/__init__` imports lazily), so building these parsers loads no
torch: `voice-agent --help` stays instant.
"""

from __future__ import annotations

import argparse

from engine.config import DEFAULT_MAX_TOKENS, PRECISION_ALIASES, PRECISIONS, engine_config

EFFORT_CHOICES = ["instant", "low", "medium", "high"]  # engine/runtime/effort.py EFFORTS (a test keeps them equal)
PRECISION_CHOICES = [*PRECISIONS, *PRECISION_ALIASES]
PRECISION_HELP = ("weights and activations (default: $VOICE_AGENT_PRECISION, else auto: w8a8 for the embedded "
                  "default model on any CPU with AVX2 or better (bf16 around it with AMX/AVX512-BF16, fp32 "
                  "without); for a model folder bf16 with AMX/AVX512-BF16, else fp32. int8 = weight-only "
                  "int8 linears; w8a8 = int8 activations too on narrow passes)")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m engine.serve.server` (and `voice-agent serve`)."""
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (loopback by default)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="default", help="'default', 'smollm2-base' or a local HF model folder")
    parser.add_argument("--served-model-name", default=None, help="the model id clients see (default: from --model)")
    parser.add_argument("--api-key", default=None, help="require this bearer key (or set VOICE_AGENT_API_KEY)")
    parser.add_argument("--max-batch", type=int, default=8, help="requests decoded together in one forward")
    parser.add_argument("--max-queue", type=int, default=64, help="requests waiting for a batch slot before 429")
    parser.add_argument("--queue-timeout", type=float, default=30.0, help="seconds a request may wait before 503")
    parser.add_argument("--max-sessions", type=int, default=32, help="calls whose KV cache is kept (LRU)")
    parser.add_argument("--default-effort", default="low", choices=EFFORT_CHOICES,
                        help="reasoning_effort when a request gives none")
    parser.add_argument("--default-max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--precision", "--dtype", dest="precision", default=None, choices=PRECISION_CHOICES,
                        help=PRECISION_HELP)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--decoding", default="engine", choices=["engine", "reference"],
                        help="'engine': our block decoder (efforts, guards, streaming); 'reference': a dLLM "
                        "checkpoint's own reference sampler at its documented greedy settings, exactly "
                        "(sdar, fast_dllm_v2, llada, dream; one request at a time, no streaming)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def loadtest_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m engine.tools.loadtest` (and `voice-agent loadtest`)."""
    parser.add_argument("--base-url", default=None, help="a running server (default: start one on 127.0.0.1)")
    parser.add_argument("--api-key", default=engine_config().api_key or None)
    parser.add_argument("--model", default="default",
                        help="model of the server this starts: 'default', a folder, or 'random-<dim>x<layers>' "
                        "(a random-weight model of that size)")
    parser.add_argument("--concurrency", default="1,2,4,8,16", help="comma-separated N values")
    parser.add_argument("--turns", type=int, default=2, help="turns per simulated call (turn 2+ reuse the call's cache)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--effort", default="instant", help="reasoning_effort of every turn")
    parser.add_argument("--max-batch", type=int, default=16, help="--max-batch of the server this starts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the server this starts")
    parser.add_argument("--precision", "--dtype", dest="precision", default=None, choices=PRECISION_CHOICES,
                        help=PRECISION_HELP)
    parser.add_argument("--timeout", type=float, default=900.0, help="per-request client timeout (s)")
    parser.add_argument("--server-log", default=None, help="write the started server's log here")
    parser.add_argument("--json", action="store_true", help="print the table as JSON on the last line")


def soak_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m engine.tools.soak` (and `voice-agent soak`)."""
    parser.add_argument("--base-url", default=None, help="a running server (default: start one on 127.0.0.1)")
    parser.add_argument("--api-key", default=engine_config().api_key or None,
                        help="the server's key (a started server gets a random one)")
    parser.add_argument("--model", default="default", help="model of the server this starts")
    parser.add_argument("--requests", type=int, default=200, help="stop after this many requests...")
    parser.add_argument("--seconds", type=float, default=180.0, help="...or after this many seconds")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    parser.add_argument("--calls", type=int, default=6, help="simulated calls (sessions) that good turns belong to")
    parser.add_argument("--turns", type=int, default=3, help="turns per call before it starts over")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens of good requests")
    parser.add_argument("--max-batch", type=int, default=8, help="--max-batch of the server this starts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the server this starts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=20, help="requests before the RSS baseline is taken")
    parser.add_argument("--rss-every", type=int, default=5, help="sample the server's RSS every N requests")
    parser.add_argument("--rss-tolerance-mb", type=float, default=64.0, help="allowed RSS growth after warm-up")
    parser.add_argument("--request-timeout", type=float, default=300.0)
    parser.add_argument("--server-log", default=None, help="write the started server's log here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on the last line")
