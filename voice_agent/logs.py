"""Quiet logs by default: one place that sets where the pipeline's logs go, for every command.

Pipecat logs every processor's start, frame and metric at DEBUG; a replay or a load run would print
hundreds of such lines around its progress bar. The commands print their own progress and results,
so the log on stderr shows warnings and errors unless `--log-level` asks for more, and `--log-file`
keeps everything (DEBUG) for a bug report.
"""

from __future__ import annotations

import argparse
import sys

LEVELS = ("error", "warning", "info", "debug")


def add_log_arguments(parser: argparse.ArgumentParser, default: str = "warning") -> None:
    parser.add_argument("--log-level", default=default, choices=LEVELS,
                        help="what of the pipeline's log goes to stderr (debug: every processor's detail)")
    parser.add_argument("--log-file", default=None, metavar="FILE",
                        help="also write the whole log (debug level) to FILE, e.g. for a bug report")


def setup_logs(args: argparse.Namespace) -> None:
    """Route loguru (Pipecat's logger and ours) as the command's flags say. Call before Pipecat is imported
    where possible (its banner is logged at import)."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=str(getattr(args, "log_level", "warning")).upper())
    path = getattr(args, "log_file", None)
    if path:
        logger.add(path, level="DEBUG", enqueue=True)
