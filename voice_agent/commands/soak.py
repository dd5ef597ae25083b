"""Bounded soak run (a request count AND a time limit) of mixed good, bad, unauthorised and
disconnecting requests against a server on 127.0.0.1 (its own, unless --base-url). Checks at the
end: every good request fully answered, every bad one a 400, no 5xx, server RSS flat after
warm-up, all batch slots free, /health ok. The exit code is 0 only if every check passes.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default=None, help="a running server (default: start one on 127.0.0.1)")
    parser.add_argument("--api-key", default=os.environ.get("VOICE_AGENT_API_KEY"),
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


def run(args: argparse.Namespace) -> int:
    from engine.soak import run as run_soak

    return run_soak(args)
