"""Serve phone calls over a telephony media-stream websocket at ws://HOST:PORT/ws.

Point a Twilio <Stream> (or a Telnyx media stream, --provider telnyx) at this URL through a
tunnel or your own edge. It speaks the Twilio Media Streams protocol: `connected`, `start`,
`media` (base64 8 kHz mu-law) and `stop` events in, `media` and `clear` events out. Every
connection is one call with its own engine session; the engine is loaded once, and every call's
turns are batched by its one scheduler. Past --max-calls, a new caller hears the scenario's busy
message and is hung up on, so the calls already connected keep their latency. GET /health
reports the active calls and the limit. Auto hang-up via the provider's REST API is off (no outbound
network): the provider ends the call when the websocket closes.
"""

from __future__ import annotations

import argparse


def add_call_arguments(parser: argparse.ArgumentParser) -> None:
    """The call options every live entry point shares (mic, phone, room), from CallOptions."""
    from voice_agent.config import LIVE_CALL_FLAGS, add_flags

    add_flags(parser, LIVE_CALL_FLAGS)


def call_options(args: argparse.Namespace):
    from voice_agent.config import CallOptions

    return CallOptions.from_args(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=8765, help="TCP port")
    parser.add_argument("--provider", choices=["twilio", "telnyx"], default="twilio",
                        help="media-stream protocol and serializer")
    from voice_agent.config import CALL_CAPACITY, positive_int

    parser.add_argument("--max-calls", type=positive_int, default=CALL_CAPACITY, metavar="N",
                        help="calls taken at once; a caller past them hears the scenario's busy message and is "
                             "hung up on, so the calls already connected keep their latency (measured capacity "
                             "of a 2-core machine: `voice-agent callload`)")
    add_call_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    from voice_agent.logs import setup_logs

    setup_logs(args)
    import uvicorn

    from voice_agent.pipeline import load_engine
    from voice_agent.scenarios import ScenarioError, load_scenario
    from voice_agent.transports.phone import PhoneServer, create_app

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as e:
        print(f"voice-agent phone: {e}", file=sys.stderr)
        return 2
    options = call_options(args)
    # With --llm-url the turns go to that server: no engine is loaded here.
    engine = None if options.remote else load_engine(options.model, options.precision, options.engine_threads,
                                                         scenario)
    # Load the speech models now, so the first caller does not wait for them.
    from voice_agent.services.stt import load_whisper, whisper_model_path
    from voice_agent.services.tts import load_hibari

    load_whisper(str(whisper_model_path(options.stt_model)), options.stt_threads)
    scenario.open_backend(options.store).close()  # the store is made (and seeded) before the first caller
    if options.tts == "hibari":
        load_hibari()
    app = create_app(PhoneServer(engine=engine, scenario=scenario, options=options, provider=args.provider,
                                 max_calls=args.max_calls))
    model = f"LLM server {options.llm_url}" if engine is None else f"model {engine.model_name}"
    print(f"voice-agent phone: {args.provider} media streams on ws://{args.host}:{args.port}/ws "
          f"(scenario {scenario.name}, {model}, at most {args.max_calls} call{'s' if args.max_calls != 1 else ''} at once)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", ws="websockets-sansio")
    return 0
