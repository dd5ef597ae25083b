"""Load-test an OpenAI-compatible server with N concurrent `openai` SDK clients (N in 1,2,4,8,16),
each a phone call of streaming dental-receptionist turns. Prints aggregate completion tok/s, TTFAT
p50/p95 and errors per N; --json prints the table as JSON on the last line. Without --base-url it
starts its own server on 127.0.0.1.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The engine tool owns its flags (engine/serve/tool_args.py: stdlib only, so --help stays instant).
    from engine import loadtest_arguments

    loadtest_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engine import run_loadtest

    return run_loadtest(args)
