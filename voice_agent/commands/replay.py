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

from voice_agent.config import LLM_FLAGS, add_flags
from voice_agent.logs import add_log_arguments, setup_logs

DEFAULT_OUT = "replay_out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="INPUT", default=argparse.SUPPRESS,
                        help="audio files (WAV, FLAC, OGG/Opus, MP3) or folders of them (default: the shipped sample call)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for report.json, report.html and the calls")
    add_flags(parser, ("scenario", *LLM_FLAGS, "smart_turn", "stt_model", "stt_window", "early_stt",
                       "first_clause_words", "turn_end_complete_s", "turn_end_incomplete_s"))
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
    parser.add_argument("--decoding", choices=["diffusion", "ar"], default="diffusion",
                        help="ar: the same weights decoded autoregressively, to measure diffusion's share of the gain")
    parser.add_argument("--link-audio", action="store_true",
                        help="link the call WAVs from report.html instead of embedding them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_log_arguments(parser)


def run(args: argparse.Namespace) -> int:
    setup_logs(args)
    from voice_agent.replay import ReplayOptions, replay_main

    opts = ReplayOptions.from_args(
        args, fast=getattr(args, "fast", False), expect=Path(args.expect) if args.expect else None,
        embed_audio=not args.link_audio, progress=not args.no_progress)
    return replay_main([Path(p) for p in getattr(args, "inputs", [])], Path(args.out), opts)
