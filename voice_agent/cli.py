"""`voice-agent`: one command with a subcommand per entry point.

Each subcommand lives in voice_agent/commands/<name>.py with `add_arguments(parser)` and
`run(args) -> int`. Those modules import heavy dependencies (torch, pipecat) inside `run`, so
`voice-agent --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from engine import SettingError

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "replay": ("replay", "replay recorded calls through the live pipeline; per-turn latency report (default: the sample call)"),
    "simulate": ("simulate", "run scripted text callers through the live turn logic; grade calls by the backend's state"),
    "report": ("report", "work with replay reports: `report diff OLD.json NEW.json` gates regressions"),
    "mic": ("mic", "talk to the agent with your microphone and speakers; prints a latency line per turn"),
    "phone": ("phone", "serve a Twilio/Telnyx media-stream websocket at ws://HOST:PORT/ws for phone calls"),
    "callload": ("callload", "place N concurrent phone calls against the phone app; per-N latency and the capacity"),
    "room": ("room", "join a LiveKit room with Pipecat's LiveKit transport"),
    "livekit-worker": ("livekit_worker", "run a LiveKit Agents worker: SIP calls in rooms get an AgentSession on our engine"),
    "serve": ("serve", "serve the engine over an OpenAI-compatible HTTP API with continuous batching"),
    "loadtest": ("loadtest", "load-test a running server with N concurrent openai-SDK clients"),
    "soak": ("soak", "bounded soak run of good, bad and disconnecting requests against a server"),
    "train": ("train", "specialise the shipped adapter on one scenario pack: its own adapter, measured on its callers"),
    "doctor": ("doctor", "check that everything a call needs is here: models, CPU precision, audio devices, ports, LiveKit"),
}


def _settings_epilog() -> str:
    from engine import settings_text  # engine/config.py: torch-free

    return "engine settings (environment variables, value in force):\n" + settings_text()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent",
        description="A phone voice agent whose brain is an in-process diffusion LLM "
        "(Silero VAD -> faster-whisper -> diffusion engine -> local neural TTS, on Pipecat).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_settings_epilog(),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        try:
            mod = importlib.import_module(f"voice_agent.commands.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"voice_agent.commands.{module}":
                raise
            continue  # not built yet
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip(),
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args._run(args) or 0)
    except SettingError as e:  # a bad --precision or VOICE_AGENT_* setting: say which, no traceback
        print(f"voice-agent {args.command}: error [{e.code}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
