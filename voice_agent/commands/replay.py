"""Replay recorded calls through the same pipeline that serves live calls, and measure every turn
against the latency budget.

INPUT is one or more recorded calls or folders of them: WAV (PCM, float, mu-law, A-law, GSM 6.10,
IMA/MS ADPCM), FLAC, OGG (Opus, Vorbis) or MP3; mono or stereo; 8 to 48 kHz. With no INPUT,
the shipped sample call (samples/dental_booking_call.wav) is replayed. Each turn's e2e_ms runs
from the true end of the caller's speech in the recording (an offline VAD pass) to the first bot
audio. Results: DIR/report.json, DIR/report.html, and per
call a stereo WAV (caller left, bot right) and a transcript JSON.

Exit status: 0 when every input replayed (and, with --expect, every expectation passed);
1 when some input failed or an expectation failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_OUT = "replay_out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="INPUT", default=argparse.SUPPRESS,
                        help="audio files (WAV, FLAC, OGG/Opus, MP3) or folders of them (default: the shipped sample call)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for report.json, report.html and the calls")
    parser.add_argument("--scenario", default="dental_receptionist", help="scenario name in prompts/ or a YAML path")
    parser.add_argument("--reasoning-effort", choices=["instant", "low", "medium", "high"], default=None,
                        help="override the scenario's reasoning_effort")
    parser.add_argument("--model", default="default", help="engine model: 'default', 'smollm2-base' or a checkpoint folder")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--realtime", dest="fast", action="store_false", default=argparse.SUPPRESS,
                      help="feed caller audio at wall-clock rate: the honest latency mode, and the default")
    mode.add_argument("--fast", dest="fast", action="store_true", default=argparse.SUPPRESS,
                      help="skip silence while the pipeline is idle; per-turn latencies are unchanged "
                           "(skips never overlap a measured interval)")
    parser.add_argument("--caller-channel", default="left", choices=["left", "right", "0", "1"],
                        help="which channel of a stereo recording is the caller")
    parser.add_argument("--budget-ms", type=float, default=500.0, help="latency budget per turn")
    parser.add_argument("--expect", default=None, metavar="FILE",
                        help="expectations (YAML/JSON): tool calls, phrases that must / must not be said; "
                             "a failed check makes the exit status 1")
    parser.add_argument("--tail-s", type=float, default=20.0,
                        help="after the recording ends, wait at most this long for the bot to finish")
    parser.add_argument("--smart-turn", action="store_true",
                        help="end turns with Smart Turn v3 instead of VAD silence (the pipeline's option)")
    parser.add_argument("--stt-model", default="tiny.en", help="tiny.en, base, or a CTranslate2 Whisper folder")
    parser.add_argument("--stt-window", choices=["short", "30s"], default="short",
                        help="Whisper's encoder window: sized to the segment (default) or the fixed 30 s one")
    parser.add_argument("--no-early-stt", dest="early_stt", action="store_false",
                        help="transcribe after the VAD's stop wait instead of from the first silent frame")
    parser.add_argument("--decoding", choices=["diffusion", "ar"], default="diffusion",
                        help="ar: the same weights decoded autoregressively, to measure diffusion's share of the gain")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default=None,
                        help="engine precision (default: $VOICE_AGENT_PRECISION, else auto)")
    parser.add_argument("--engine-threads", type=int, default=None,
                        help="torch threads for the engine (default: torch's choice)")
    parser.add_argument("--link-audio", action="store_true",
                        help="link the call WAVs from report.html instead of embedding them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from voice_agent.replay import ReplayOptions, replay_main

    opts = ReplayOptions(
        scenario=args.scenario, reasoning_effort=args.reasoning_effort, model=args.model, fast=getattr(args, "fast", False),
        caller_channel=args.caller_channel, budget_ms=args.budget_ms,
        expect=Path(args.expect) if args.expect else None, tail_s=args.tail_s,
        embed_audio=not args.link_audio, progress=not args.no_progress, smart_turn=args.smart_turn,
        stt_model=args.stt_model, stt_window=args.stt_window, early_stt=args.early_stt,
        engine_threads=args.engine_threads, decoding=args.decoding,
        precision=args.precision)
    return replay_main([Path(p) for p in getattr(args, "inputs", [])], Path(args.out), opts)
