"""Run a LiveKit Agents worker. Every room it is dispatched to (SIP phone calls land in rooms)
gets an AgentSession with the in-process diffusion engine as its LLM (EngineLLM), faster-whisper
STT, hibari TTS, Silero VAD and LiveKit's turn detector pinned to its offline "v1-mini" model.
The agent is a scenario pack (--scenario; default: dental_clinic), its tools on the pack's
backend (--store). A job's dispatch metadata may set {"reasoning_effort": "..."} per call.

With --llm-url the calls' turns go to an OpenAI-compatible server instead (no engine is loaded).
Needs a reachable LiveKit server: without one it exits with an error message.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from voice_agent.config import LLM_FLAGS, add_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("LIVEKIT_URL", ""),
                        help="LiveKit server URL, e.g. ws://127.0.0.1:7880 (env LIVEKIT_URL)")
    parser.add_argument("--api-key", default=os.environ.get("LIVEKIT_API_KEY", ""), help="env LIVEKIT_API_KEY")
    parser.add_argument("--api-secret", default=os.environ.get("LIVEKIT_API_SECRET", ""),
                        help="env LIVEKIT_API_SECRET")
    # engine threads keep this command's older flag name, --threads
    add_flags(parser, ("scenario", *LLM_FLAGS, "stt_model", "store"), flags={"engine_threads": "--threads"})
    parser.add_argument("--agent-name", default=os.environ.get("LIVEKIT_AGENT_NAME", ""),
                        help="register for explicit dispatch under this name (SIP dispatch rules)")
    parser.add_argument("--max-calls", type=int, default=4, help="concurrent rooms this worker takes")
    parser.add_argument("--http-port", type=int, default=8081, help="health-check port (0: any free port)")
    parser.add_argument("--max-retry", type=int, default=3, help="connection attempts before giving up")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    from voice_agent.livekit.connect import LiveKitUnreachable, check_reachable, require

    try:  # before any model loads: a wrong URL should cost a second
        require(url=args.url, api_key=args.api_key, api_secret=args.api_secret)
        check_reachable(args.url)
    except LiveKitUnreachable as e:
        print(f"voice-agent livekit-worker: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from voice_agent.livekit.worker import WorkerConfig, WorkerError, run_worker
    from voice_agent.scenarios import ScenarioError

    cfg = WorkerConfig.from_args(args)
    try:
        run_worker(cfg)
    except (WorkerError, ScenarioError, FileNotFoundError) as e:
        print(f"voice-agent livekit-worker: error: {e}", file=sys.stderr)
        return 2
    return 0
