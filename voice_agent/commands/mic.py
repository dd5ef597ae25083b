"""Talk to the agent with your microphone and speakers (Pipecat's LocalAudioTransport).

Every turn prints one latency line: e2e_ms (you stopped speaking -> first bot audio), stt_ms,
the engine's ttft_ms / ttfat_ms / tokens_per_forward, and tts_ttfb_ms. Use headphones, or the bot
hears itself and interrupts itself. Where no audio device exists, this exits at once with
status 2 and says so.
"""

from __future__ import annotations

import argparse

from voice_agent.commands.phone import add_call_arguments, call_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-device", type=int, default=None, help="PyAudio input device index")
    parser.add_argument("--output-device", type=int, default=None, help="PyAudio output device index")
    parser.add_argument("--list-devices", action="store_true", help="list audio devices and exit")
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

    async def main() -> None:
        from pipecat.workers.runner import WorkerRunner

        from voice_agent.latency.observer import TurnLatencyObserver
        from voice_agent.pipeline import build_pipeline
        from voice_agent.transports.mic import latency_line, make_mic_transport

        observer = TurnLatencyObserver(on_turn=lambda tl: print(latency_line(tl), flush=True))
        transport = make_mic_transport(args.input_device, args.output_device)
        call = build_pipeline(transport, scenario, call_options(args), observers=[observer])
        where = f" at {call.options.llm_url}" if call.options.remote else ""
        print(f"voice-agent mic: talking to {scenario.name} (model {call.llm.brain.model_name}{where}) "
              "(Ctrl-C to stop)", flush=True)
        runner = WorkerRunner(handle_sigint=True)
        await runner.add_workers(call.task)
        await runner.run()

    asyncio.run(main())
    return 0
