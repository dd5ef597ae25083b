"""Place N concurrent phone calls at once against the phone app (`voice-agent phone`'s, served here
on a loopback port) and measure every turn, for each N given.

Each call is a Twilio Media Streams client that plays a recorded caller in real time (8 kHz
mu-law, 20 ms messages) and reads the bot's audio back. Each turn's e2e runs from the caller's
true end of speech to the bot's first audio, as in `voice-agent replay`. Per N it prints the
answered turns, e2e and TTFAT p50/p95, the budget pass rate and the CPU use, and writes a
replay-shaped report (DIR/N<n>/report.json and report.html); DIR/capacity.json holds the table
and the capacity: the largest N whose e2e p95 stays within 800 ms and whose budget pass rate
stays at or above 90%, with every turn answered. The run is bounded and stops by itself.

With --soak-minutes M it runs a bounded soak with faults at the first N instead (see --help below).

Exit status: 0 when it ran (whatever the curve measured) or the soak held; 1 when the soak found a
crash, an unanswered turn, a silent call, or a lost or doubled booking; 2 on bad arguments or
unreadable callers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from voice_agent.config import LLM_FLAGS, positive_int
from voice_agent.logs import add_log_arguments, setup_logs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from voice_agent.config import add_flags

    parser.add_argument("--calls", default="1,2,4,8,16", metavar="N,N,...",
                        help="the numbers of concurrent calls to place, one load level each")
    parser.add_argument("--caller", action="append", default=None, metavar="WHO",
                        help="who calls: 'sample' (the shipped sample call), 'two-turn' (the replay test's "
                             "two-line caller) or a recording; repeat to deal several round-robin (default: sample)")
    parser.add_argument("--out", default="callload_out", help="folder for the reports and capacity.json")
    parser.add_argument("--stagger-s", type=float, default=0.5, help="call i starts this many seconds after call i-1")
    parser.add_argument("--tail-s", type=float, default=8.0,
                        help="silence each caller keeps the line open for after its recording")
    parser.add_argument("--max-calls", type=positive_int, default=None, metavar="N",
                        help="the server's admission limit: callers past it hear the busy message "
                             "(default: no limit, to measure the capacity)")
    parser.add_argument("--budget-ms", type=float, default=500.0, help="latency budget per turn")
    parser.add_argument("--max-minutes", type=float, default=30.0, help="stop before a load level past this")
    parser.add_argument("--soak-minutes", type=float, default=0.0, metavar="M",
                        help="instead of the curve: waves of the first N calls for M minutes on one shared store, "
                             "each caller bringing a fault in turn (junk frames, a hang-up mid-turn or mid-tool-call, "
                             "a stalled socket, an engine failure); checks no crash, every turn answered, no booking "
                             "lost or doubled (exit 1 if one fails); writes DIR/soak.json")
    parser.add_argument("--no-progress", action="store_true", help="no per-level progress lines")
    add_log_arguments(parser)
    add_flags(parser, ("scenario", *LLM_FLAGS, "stt_model"))


def run(args: argparse.Namespace) -> int:
    import sys

    setup_logs(args)
    from voice_agent.callload.main import callload_main
    from voice_agent.callload.run import LoadOptions

    try:
        counts = tuple(int(x) for x in str(args.calls).split(",") if x.strip())
        if not counts or min(counts) < 1:
            raise ValueError
    except ValueError:
        print(f"voice-agent callload: --calls must be whole numbers >= 1 separated by commas; got {args.calls!r}",
              file=sys.stderr)
        return 2
    opts = LoadOptions.from_args(args, counts=counts, callers=tuple(args.caller or ["sample"]),
                                 progress=not args.no_progress)
    return callload_main(opts, Path(args.out))
