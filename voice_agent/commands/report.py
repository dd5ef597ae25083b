"""Work with replay reports.

  voice-agent report diff OLD.json NEW.json   change per metric; exit 1 on a regression past the
                                              thresholds (a CI gate), 2 if a report is unreadable
  voice-agent report html REPORT.json         re-render report.html next to a report.json
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="report_command", metavar="ACTION")
    d = sub.add_parser("diff", help="compare two report.json files; non-zero exit on a regression",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("old", help="the baseline report.json")
    d.add_argument("new", help="the candidate report.json")
    d.add_argument("--max-p95-regression-ms", type=float, default=50.0,
                   help="p95 e2e_ms / ttfat_ms may grow by this many ms (and by --max-p95-regression-pct)")
    d.add_argument("--max-p95-regression-pct", type=float, default=10.0,
                   help="p95 e2e_ms / ttfat_ms may grow by this many percent (and by --max-p95-regression-ms)")
    d.add_argument("--max-pass-rate-drop", type=float, default=0.05,
                   help="budget_pass_rate may drop by this much (absolute, 0.05 = 5 points)")
    h = sub.add_parser("html", help="re-render report.html from a report.json (in the same folder)")
    h.add_argument("report", help="path of report.json")
    h.add_argument("--link-audio", action="store_true", help="link the call WAVs instead of embedding them")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.report_command == "diff":
        from voice_agent.latency.diff import Thresholds, run_diff

        th = Thresholds(p95_ms=args.max_p95_regression_ms, p95_pct=args.max_p95_regression_pct,
                        pass_rate_drop=args.max_pass_rate_drop)
        return run_diff(Path(args.old), Path(args.new), th)
    if args.report_command == "html":
        from voice_agent.latency.report import load_report, render_html

        path = Path(args.report)
        try:
            report = load_report(path)
        except ValueError as e:
            print(f"error: {e}")
            return 2
        out = path.parent / "report.html"
        out.write_text(render_html(report, path.parent, embed_audio=not args.link_audio), encoding="utf-8")
        print(f"wrote {out}")
        return 0
    print("usage: voice-agent report {diff,html} ...  (see voice-agent report --help)")
    return 2
