"""Bounded soak run (a request count AND a time limit) of mixed good, bad, unauthorised and
disconnecting requests against a server on 127.0.0.1 (its own, unless --base-url). Checks at the
end: every good request fully answered, every bad one a 400, no 5xx, server RSS flat after
warm-up, all batch slots free, /health ok. The exit code is 0 only if every check passes.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The engine tool owns its flags (engine/serve/tool_args.py: stdlib only, so --help stays instant).
    from engine import soak_arguments

    soak_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engine import run_soak

    return run_soak(args)
