"""Serve the engine over an OpenAI-compatible HTTP API (POST /v1/chat/completions, GET /v1/models,
GET /health) with continuous batching across concurrent calls.

Name a call with the `X-Session-Id` header (or `prompt_cache_key` / `user`) to keep its KV cache
between turns. Set an API key with --api-key or VOICE_AGENT_API_KEY; the server binds to loopback
unless told otherwise.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The engine tool owns its flags (engine/serve/tool_args.py: stdlib only, so --help stays instant).
    from engine import serve_arguments

    serve_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engine import run_server as run_from_args

    return run_from_args(args)
