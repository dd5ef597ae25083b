"""Load-test an OpenAI-compatible server with N concurrent `openai` SDK clients (N in 1,2,4,8,16),
each a phone call of streaming dental-receptionist turns. Prints aggregate completion tok/s, TTFAT
p50/p95 and errors per N; --json prints the table as JSON on the last line. Without --base-url it
starts its own server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default=None, help="a running server (default: start one on 127.0.0.1)")
    parser.add_argument("--api-key", default=os.environ.get("VOICE_AGENT_API_KEY"))
    parser.add_argument("--model", default="default",
                        help="model of the server this starts: 'default', a folder, or 'random-<dim>x<layers>' "
                        "(a random-weight model of that size)")
    parser.add_argument("--concurrency", default="1,2,4,8,16", help="comma-separated N values")
    parser.add_argument("--turns", type=int, default=2, help="turns per simulated call (turn 2+ reuse the call's cache)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--effort", default="instant", help="reasoning_effort of every turn")
    parser.add_argument("--max-batch", type=int, default=16, help="--max-batch of the server this starts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the server this starts")
    parser.add_argument("--precision", "--dtype", dest="precision", default=None,
                        choices=["auto", "fp32", "bf16", "float32", "bfloat16"],
                        help="weights and activations (default: $VOICE_AGENT_PRECISION, else auto: bf16 only "
                        "on CPUs with AMX/AVX512-BF16)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-request client timeout (s)")
    parser.add_argument("--server-log", default=None, help="write the started server's log here")
    parser.add_argument("--json", action="store_true", help="print the table as JSON on the last line")


def run(args: argparse.Namespace) -> int:
    from engine.loadtest import run as run_loadtest

    return run_loadtest(args)
