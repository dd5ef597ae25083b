"""Run a LiveKit Agents worker. Every room it is dispatched to (SIP phone calls land in rooms)
gets an AgentSession with the in-process diffusion engine as its LLM (EngineLLM), faster-whisper
STT, hibari TTS, Silero VAD and LiveKit's turn detector pinned to its offline "v1-mini" model.
The agent is a scenario from prompts/ (default: the dental receptionist, whose tools run on the
clinic's SQLite database). A job's dispatch metadata may set {"reasoning_effort": "..."} per call.

Needs a reachable LiveKit server: without one it exits with an error message.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

EFFORTS = ("instant", "low", "medium", "high")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("LIVEKIT_URL", ""),
                        help="LiveKit server URL, e.g. ws://127.0.0.1:7880 (env LIVEKIT_URL)")
    parser.add_argument("--api-key", default=os.environ.get("LIVEKIT_API_KEY", ""), help="env LIVEKIT_API_KEY")
    parser.add_argument("--api-secret", default=os.environ.get("LIVEKIT_API_SECRET", ""),
                        help="env LIVEKIT_API_SECRET")
    parser.add_argument("--scenario", default="dental_receptionist", help="a prompts/<name>.yaml scenario")
    parser.add_argument("--reasoning-effort", choices=EFFORTS, default=None,
                        help="default reasoning_effort for calls (default: the scenario's)")
    parser.add_argument("--model", default="default", help="'default', 'smollm2-base' or a local HF model folder")
    parser.add_argument("--stt-model", default="tiny.en", help="'tiny.en', 'base' or a CTranslate2 Whisper folder")
    parser.add_argument("--db", default=None, help="clinic SQLite file (default: ~/.cache/voice-agent/clinic.sqlite)")
    parser.add_argument("--agent-name", default=os.environ.get("LIVEKIT_AGENT_NAME", ""),
                        help="register for explicit dispatch under this name (SIP dispatch rules)")
    parser.add_argument("--max-calls", type=int, default=4, help="concurrent rooms this worker takes")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads for the engine")
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

    cfg = WorkerConfig(url=args.url, api_key=args.api_key, api_secret=args.api_secret, scenario=args.scenario,
                       reasoning_effort=args.reasoning_effort, model=args.model, stt_model=args.stt_model,
                       db_path=args.db, agent_name=args.agent_name, threads=args.threads,
                       http_port=args.http_port, max_retry=args.max_retry, max_calls=args.max_calls)
    try:
        run_worker(cfg)
    except (WorkerError, ScenarioError, FileNotFoundError) as e:
        print(f"voice-agent livekit-worker: error: {e}", file=sys.stderr)
        return 2
    return 0
