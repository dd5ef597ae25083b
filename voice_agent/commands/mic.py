"""Talk to the agent with your microphone and speakers (Pipecat's LocalAudioTransport, fed by a
callback so replies do not stall, with WebRTC echo cancellation so open speakers work).

Every turn prints one latency line: e2e_ms (you stopped speaking -> first bot audio), stt_ms,
the engine's ttft_ms / ttfat_ms / tokens_per_forward, and tts_ttfb_ms. With `--report DIR` the
session's report (report.json, report.html, as replay writes them) is saved when you stop. Where
no audio device exists, this exits at once with status 2 and says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from voice_agent.commands.phone import add_call_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-device", type=int, default=None, help="PyAudio input device index")
    parser.add_argument("--output-device", type=int, default=None, help="PyAudio output device index")
    parser.add_argument("--list-devices", action="store_true", help="list audio devices and exit")
    parser.add_argument("--no-aec", dest="aec", action="store_false",
                        help="turn echo cancellation off (it removes the bot's own voice from the microphone, "
                             "so open laptop speakers work; with headphones it is not needed)")
    parser.add_argument("--report", type=Path, default=None, metavar="DIR",
                        help="on exit, write the session's report.json and report.html (replay's format) here")
    add_call_arguments(parser)
    from voice_agent.logs import add_log_arguments

    add_log_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    from voice_agent.logs import setup_logs

    setup_logs(args)
    from voice_agent.transports.mic import NoAudioDeviceError, check_audio_devices, list_audio_devices

    try:
        if args.list_devices:
            d = list_audio_devices()
            for kind, pool in (("input", d.inputs), ("output", d.outputs)):
                print(f"{kind} devices:" + ("" if pool else " none"))
                for i, name in pool:
                    print(f"  {i}: {name}")
            return 0
        check_audio_devices(args.input_device, args.output_device)
    except NoAudioDeviceError as e:
        print(f"voice-agent mic: {e}", file=sys.stderr)
        return 2
    return _run_demo(args)


def _run_demo(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from voice_agent.scenarios import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as e:
        print(f"voice-agent mic: {e}", file=sys.stderr)
        return 2

    from voice_agent.mic_demo import run_mic_session, write_mic_report

    report = asyncio.run(run_mic_session(args, scenario))
    if args.report is not None:
        write_mic_report(report, args.report)
    error = report["calls"][0].get("error")
    if error:
        print(f"voice-agent mic: {error}", file=sys.stderr)
        return 1
    return 0
