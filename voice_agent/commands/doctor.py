"""Check that everything a call needs is here, in plain lines: the base weights, the adapter, the
STT, TTS and VAD models (path and size), the CPU's bf16 flags and the precision the engine will
pick (and why), the audio devices for `mic`, whether the default ports are free, the LiveKit
variables (values of keys never shown) and the versions of the main packages.

Each line is `ok`, `warn` (optional, or of this machine: no microphone, a port in use) or `FAIL`,
and a problem names the commands it affects. Exit status: 0 when nothing fails; 1 when something
a command needs is missing (or, with --for COMMAND, when anything that command needs is not ok).
"""

from __future__ import annotations

import argparse

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--for", dest="commands", action="append", default=[], metavar="COMMAND",
                        help="also fail on warnings that affect COMMAND (e.g. --for mic on a box without "
                        "a microphone); repeatable")


def run(args: argparse.Namespace) -> int:
    from voice_agent.doctor import run_checks

    strict = set(args.commands)
    failed: dict[str, set[str]] = {}
    warned: set[str] = set()
    results = run_checks()
    width = max(len(c.item) for checks in results.values() for c in checks)
    for section, checks in results.items():
        print(f"[{section}]")
        for c in checks:
            status = "fail" if c.status == "warn" and strict & set(c.affects) else c.status
            note = f"  -> affects: {', '.join(c.affects)}" if c.affects and status != "ok" else ""
            print(f"  {_MARK[status]}  {c.item:<{width}}  {c.detail}{note}", flush=True)
            if status == "fail":
                failed[c.item] = set(c.affects)
            elif status == "warn":
                warned |= set(c.affects)
    if not failed:
        warnings = f"; warnings for {', '.join(sorted(warned))}" if warned else ""
        print(f"doctor: nothing a command needs is missing{warnings}")
        return 0
    commands = sorted(set().union(*failed.values()))
    print(f"doctor: {len(failed)} problem(s): {', '.join(failed)}; affects: {', '.join(commands) or '-'}")
    return 1
