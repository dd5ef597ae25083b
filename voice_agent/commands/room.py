"""Join a LiveKit room as the voice agent, with Pipecat's LiveKit transport and the same pipeline
as every other entry point (Silero VAD -> faster-whisper -> the in-process engine -> hibari).

Give the server URL and an access token for the bot (the room comes from the token's grant, or
--room). The call ends when the room disconnects or the last other participant leaves. Needs a
reachable LiveKit server: without one it exits with an error message.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from voice_agent.commands.phone import add_call_arguments

    parser.add_argument("--url", default=os.environ.get("LIVEKIT_URL", ""),
                        help="LiveKit server URL, e.g. ws://127.0.0.1:7880 (env LIVEKIT_URL)")
    parser.add_argument("--token", default=os.environ.get("LIVEKIT_TOKEN", ""),
                        help="access token for the bot's participant (env LIVEKIT_TOKEN)")
    parser.add_argument("--room", default=None, help="room name (default: the room in the token's grant)")
    add_call_arguments(parser)
    from voice_agent.logs import add_log_arguments

    add_log_arguments(parser, default="info")


def run(args: argparse.Namespace) -> int:
    from voice_agent.livekit.connect import LiveKitUnreachable, check_reachable, require
    from voice_agent.logs import setup_logs

    setup_logs(args)

    def fail(msg: object) -> int:
        print(f"voice-agent room: error: {msg}", file=sys.stderr)
        return 2

    try:  # before any model loads: a wrong URL should cost a second
        require(url=args.url, token=args.token)
        check_reachable(args.url)
    except LiveKitUnreachable as e:
        return fail(e)

    import asyncio

    from voice_agent.commands.phone import call_options
    from voice_agent.scenarios import ScenarioError, load_scenario
    from voice_agent.transports.room import RoomJoinError, RoomTokenError, make_room_transport, run_room_call

    try:
        scenario = load_scenario(args.scenario)
        make_room_transport(args.url, args.token, args.room)  # checks the room name before loading models
        asyncio.run(run_room_call(args.url, args.token, scenario, call_options(args), room_name=args.room))
    except (ScenarioError, RoomTokenError, FileNotFoundError) as e:
        return fail(e)
    except RoomJoinError as e:
        return fail(f"could not join the room at {args.url}: {e}. Check --url and that --token is valid "
                    "for this server.")
    return 0
