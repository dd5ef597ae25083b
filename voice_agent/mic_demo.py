"""`voice-agent mic`'s session: the call pipeline on the sound card, one latency line per turn, and
on exit (Ctrl-C, SIGTERM) a report like replay's, so `report diff` and the plots work on a live
session.

Live audio has no recording to find the caller's true end of speech in: each turn's e2e is taken
from the VAD stop minus the VAD's silence wait (`e2e_from: "vad_estimate"`). The report's clock
starts with the session; `clock_origin_monotonic` is that start on the machine's monotonic clock,
so an outside recorder (tests/sound_card.py) can line its audio up with the turns.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    UserStartedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed

from voice_agent.scenarios import Scenario


class SpeakingLog(BaseObserver):
    """When each side started (and the bot stopped) speaking, on the session's clock: what tells a
    self-interruption (the caller "starting" while only the bot talks) from a barge-in."""

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self._clock = clock
        self._seen: set[int] = set()
        self.user_started_s: list[float] = []
        self.vad_started_s: list[float] = []
        self.bot_spoke_s: list[list[float | None]] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        kinds = (UserStartedSpeakingFrame, VADUserStartedSpeakingFrame, BotStartedSpeakingFrame,
                 BotStoppedSpeakingFrame)
        if not isinstance(frame, kinds):
            return
        # one event per frame (and per broadcast pair): the first copy seen counts
        key = getattr(frame, "broadcast_sibling_id", None) or frame.id
        if frame.id in self._seen or key in self._seen:
            return
        self._seen.update({frame.id, key})
        now = round(self._clock(), 3)
        if isinstance(frame, UserStartedSpeakingFrame):
            self.user_started_s.append(now)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self.vad_started_s.append(now)
        elif isinstance(frame, BotStartedSpeakingFrame):
            if not self.bot_spoke_s or self.bot_spoke_s[-1][1] is not None:
                self.bot_spoke_s.append([now, None])
        elif self.bot_spoke_s and self.bot_spoke_s[-1][1] is None:
            self.bot_spoke_s[-1][1] = now

    def as_dict(self) -> dict[str, Any]:
        return {"user_started_s": self.user_started_s, "vad_started_s": self.vad_started_s,
                "bot_spoke_s": self.bot_spoke_s}


async def run_mic_session(args: argparse.Namespace, scenario: Scenario) -> dict:
    """Run the demo until Ctrl-C or SIGTERM; return the session's report."""
    from pipecat.workers.runner import WorkerRunner

    from voice_agent.commands.phone import call_options
    from voice_agent.latency.metrics import DEFAULT_BUDGET_MS, call_turns, greeting_record, summarize
    from voice_agent.latency.observer import TurnLatencyObserver
    from voice_agent.latency.report import build_report
    from voice_agent.pipeline import build_pipeline
    from voice_agent.transports.mic import latency_line, make_mic_transport

    origin = time.monotonic()

    def clock() -> float:
        return time.monotonic() - origin

    options = call_options(args)
    observer = TurnLatencyObserver(clock=clock, on_turn=lambda tl: print(latency_line(tl), flush=True))
    speaking = SpeakingLog(clock)
    transport = make_mic_transport(args.input_device, args.output_device, aec=args.aec)
    backend = scenario.open_backend(options.store, None)
    call = build_pipeline(transport, scenario, options, observers=[observer, speaking], backend=backend)
    where = f" at {call.options.llm_url}" if call.options.remote else ""
    print(f"voice-agent mic: talking to {scenario.name} (model {call.llm.brain.model_name}{where}; echo "
          f"cancellation {'on' if transport.echo is not None else 'off'}) (Ctrl-C to stop)", flush=True)
    started = dt.datetime.now(dt.UTC)
    runner = WorkerRunner(handle_sigint=True)
    await runner.add_workers(call.task)
    error = None
    try:
        await runner.run()
    except Exception as e:  # the report is still written: it says what happened
        error = f"microphone session failed: {type(e).__name__}: {e}"
    observer.finish()
    entry: dict[str, Any] = {
        "file": "microphone", "error": error, "duration_s": round(clock(), 3),
        "clock_origin_monotonic": origin, "echo_cancellation": transport.echo is not None,
        "turns": call_turns(observer.turns, [], DEFAULT_BUDGET_MS),
        "greeting": greeting_record(observer.greeting), "speaking": speaking.as_dict(),
    }
    try:
        entry["state"] = backend.snapshot()
    finally:
        backend.close()
    effort = options.reasoning_effort or scenario.reasoning_effort
    summary = summarize([entry], budget_ms=DEFAULT_BUDGET_MS, model=str(call.llm.brain.model_name),
                        reasoning_effort=effort, extra={
                            "mode": "live", "scenario": scenario.name, "llm_url": options.llm_url,
                            "echo_cancellation": transport.echo is not None,
                            "command": " ".join(["voice-agent", *sys.argv[1:]]),
                            "created": started.isoformat(timespec="seconds")})
    return build_report([entry], summary)


def write_mic_report(report: dict, out_dir: Path) -> None:
    from voice_agent.latency.report import write_report

    json_path, html_path = write_report(report, out_dir, embed_audio=False)
    s = report["summary"]
    print(f"voice-agent mic: {s['answered_turns']}/{s['scored_turns']} turns answered; report: {json_path} "
          f"{html_path}", flush=True)
