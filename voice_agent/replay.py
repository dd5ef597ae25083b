"""Replay recorded calls through the live pipeline and measure every turn.

For each input file:
1. read the caller's side (audio_io) and find where the caller really spoke (offline VAD, truth.py);
2. build the SAME pipeline live calls use (`voice_agent.pipeline.build_pipeline`) on a
   `ReplayTransport`, with a `TurnLatencyObserver` attached;
3. feed the recording on its own clock, keep the line open until the bot has finished its last
   answer, hang up;
4. turn the observed timelines into per-turn records (e2e_ms counted from the true end of speech)
   and write the call's stereo WAV (caller left, bot right) and transcript JSON.

A file that cannot be read, or a call that fails, becomes a call entry with an `error` and the
batch goes on. The engine is loaded once for the batch; each call gets its own session.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from loguru import logger

from voice_agent.audio_io import AUDIO_SUFFIXES, AudioFormatError, read_caller_audio, write_wav
from voice_agent.config import CallOptions
from voice_agent.latency import expectations as expect_mod
from voice_agent.latency.budget import budget_lines
from voice_agent.latency.metrics import add_counters, call_turns, distribution, greeting_record, summarize
from voice_agent.latency.report import build_report, write_report
from voice_agent.latency.truth import speech_segments, utterances
from voice_agent.latency.wer import word_errors

SAMPLE_CALL = Path(__file__).resolve().parent.parent / "samples" / "dental_booking_call.wav"
SETTLE_S = 2.0          # after the recording ends: this long with nothing happening ends the call
HANGUP_TIMEOUT_S = 20.0  # how long the pipeline may take to shut down once we hang up
MAX_INPUT_LAG_MS = 200.0  # caller audio reaching the VAD later than this (p95) flags the run


@dataclass(kw_only=True)
class ReplayOptions(CallOptions):
    """The call's knobs (CallOptions) and the replay's own."""

    fast: bool = False
    caller_channel: str = "left"
    budget_ms: float = 500.0
    expect: Path | None = None
    tail_s: float = 20.0
    embed_audio: bool = True
    progress: bool = True
    decoding: str = "diffusion"   # "ar": the same weights decoded one token per pass (the baseline)


def discover_inputs(inputs: list[Path]) -> list[Path]:
    """Files as given; folders expanded to the audio files inside (.wav .flac .mp3 .ogg .opus;
    recursively, sorted). Paths that do not exist are kept, so they are reported as failed inputs."""
    out: list[Path] = []
    for p in inputs or [SAMPLE_CALL]:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in AUDIO_SUFFIXES)
            out += found or [p]  # an empty folder is reported as a failed input
        else:
            out.append(p)
    return out


def _slug(path: Path, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem) or "call"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _sidecar(path: Path) -> dict | None:
    """A recording's metadata JSON (same stem), e.g. the sample call's script."""
    meta = path.with_suffix(".json")
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- the pipeline ------------------------------------------------------------------------------

def call_backend(scenario: Any, store: Path, meta: dict | None) -> tuple[Any, dt.date | None]:
    """A fresh backend of the scenario for one replayed call, on a store of its own (replays are
    repeatable and never touch the live data), and the call's "today". A recording's metadata may pin
    both, so that a call recorded on one day replays against the same state on any other:
    {"today": "2026-12-01", "setup": {...}} (the dental pack's older `db` is the same as `setup`)."""
    meta = meta or {}
    today = dt.date.fromisoformat(str(meta["today"])) if meta.get("today") else None
    backend = scenario.open_backend(store, today)
    setup = meta.get("setup") if meta.get("setup") is not None else meta.get("db")
    backend.setup(dict(setup or {}))
    return backend, today


def _make_pipeline(transport: Any, scenario: Any, opts: ReplayOptions, engine: Any, observers: list[Any],
                   backend: Any, today: dt.date | None) -> Any:
    """The live-call pipeline on our transport, on the call's own backend (the replay's
    options are the call's: a fresh CallOptions of the same values). Returns the built pipeline."""
    from voice_agent.pipeline import build_pipeline

    options = CallOptions(**{f.name: getattr(opts, f.name) for f in fields(CallOptions)})
    return build_pipeline(transport, scenario, options, engine=engine, observers=observers,
                          backend=backend, today=today)


def _wait_engine_idle(built: Any, timeout_s: float = 60.0) -> None:
    """Block until the call's engine session is free: an answer cut off by the hang-up stops at its
    next committed block, and a process must not exit with the engine mid-forward."""
    lock = getattr(getattr(getattr(built, "llm", None), "session", None), "lock", None)
    if lock is not None and lock.acquire(timeout=timeout_s):
        lock.release()


async def _run_call(path: Path, samples: Any, segments: list, scenario: Any, engine: Any,
                    opts: ReplayOptions, turns_bar: Any, backend: Any, today: dt.date | None) -> tuple[Any, Any, Any]:
    from pipecat.workers.runner import WorkerRunner

    from voice_agent.latency.observer import TurnLatencyObserver
    from voice_agent.replay_transport import ReplayProbe, ReplayTransport

    def on_turn(tl: Any) -> None:
        if turns_bar is not None:
            turns_bar.update(1)
            if tl.first_bot_audio is not None and tl.vad_stopped is not None:
                turns_bar.set_postfix_str(f"last turn answered {tl.first_bot_audio - tl.vad_stopped:.2f}s after VAD stop")

    transport = ReplayTransport(samples, fast=opts.fast, segments=segments)
    observer = TurnLatencyObserver(clock=transport.clock.now, on_turn=on_turn)
    transport.set_idle_probe(observer.idle_for)
    probe = ReplayProbe(transport)
    built = _make_pipeline(transport, scenario, opts, engine, [observer, probe], backend, today)
    task = built.task
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(task)
    run = asyncio.create_task(runner.run())

    file_done = asyncio.create_task(transport.file_done.wait())
    await asyncio.wait({run, file_done}, return_when=asyncio.FIRST_COMPLETED)
    if run.done():
        file_done.cancel()
        run.result()  # the pipeline ended on its own: raise its error, if any
        raise RuntimeError("the pipeline ended before the recording did")
    # The recording is over; the line stays open (silence) until the bot has finished.
    deadline = transport.clock.now() + opts.tail_s
    while transport.clock.now() < deadline and not run.done():
        if observer.idle_for() >= SETTLE_S:
            break
        await asyncio.sleep(0.1)
    await transport.hang_up()
    if not run.done():
        from pipecat.frames.frames import EndFrame

        await task.queue_frame(EndFrame())
        try:
            await asyncio.wait_for(asyncio.shield(run), timeout=HANGUP_TIMEOUT_S)
        except TimeoutError:
            logger.warning(f"{path}: pipeline did not end within {HANGUP_TIMEOUT_S:.0f}s of hang-up; cancelling")
            await asyncio.wait_for(task.cancel(), timeout=HANGUP_TIMEOUT_S)
            await asyncio.wait_for(run, timeout=HANGUP_TIMEOUT_S)
    await asyncio.to_thread(_wait_engine_idle, built)
    run.result()
    observer.finish()
    transport.input_lag_s = probe.lags_s
    return observer, transport, built


# --- one call ----------------------------------------------------------------------------------

def _bot_audio_gaps(turns: list[dict], capture: Any, threshold: int = 500, rate: int = 16000,
                    frame_s: float = 0.02) -> None:
    """What the ear gets of each answer: how long its first audio stays silent (TTS padding) before
    a voice is heard (`bot_leading_silence_ms`; e2e_ms counts to the first audio sent, as defined),
    and the longest silence inside it, between its first and last audible frame
    (`bot_longest_pause_ms`: a reply spoken in pieces waits there for the model's next words)."""
    import numpy as np

    track = capture.bot_track(0, rate)
    loud = np.abs(track.astype(np.int32)) > threshold
    frame = max(1, int(frame_s * rate))
    for t in turns:
        tl = t["timeline_s"]
        start = tl.get("first_bot_audio")
        t["bot_leading_silence_ms"] = t["bot_longest_pause_ms"] = None
        if start is None:
            continue
        window = loud[int(start * rate): int((start + 2.0) * rate)]
        hits = np.flatnonzero(window)
        if hits.size:
            t["bot_leading_silence_ms"] = round(hits[0] / rate * 1000, 1)
        stop = tl.get("bot_stopped")
        if stop is None or stop <= start:
            continue
        seg = loud[int(start * rate): int(stop * rate)]
        n = len(seg) // frame
        frames = np.flatnonzero(seg[: n * frame].reshape(n, frame).any(axis=1))
        if frames.size:
            gaps = np.diff(frames) - 1  # silent frames between two audible ones
            t["bot_longest_pause_ms"] = round(float(gaps.max(initial=0)) * frame_s * 1000, 1)


def _transcript(entry: dict, caller_lines: list[dict]) -> dict:
    """Both sides in time order: what the caller said (STT), what the bot said, reasoning (never
    spoken) and tool calls."""
    events: list[dict] = []
    greeting = entry.get("greeting") or {}
    if greeting.get("bot_text"):
        events.append({"t_s": greeting.get("first_bot_audio_s"), "speaker": "bot", "text": greeting["bot_text"]})
    for t in entry["turns"]:
        tl = t["timeline_s"]
        events.append({"t_s": tl.get("user_started"), "speaker": "caller", "turn": t["index"], "text": t["user_text"]})
        for call in t["tool_calls"]:
            events.append({"t_s": tl.get("llm_request"), "speaker": "tool", "turn": t["index"],
                           "name": call.get("name"), "arguments": call.get("arguments"), "result": call.get("result")})
        if t["reasoning"]:
            events.append({"t_s": tl.get("llm_request"), "speaker": "bot-reasoning", "turn": t["index"],
                           "spoken": False, "text": t["reasoning"]})
        if t.get("filler_text"):
            events.append({"t_s": tl.get("first_bot_audio"), "speaker": "bot", "turn": t["index"],
                           "filler": True, "text": t["filler_text"]})
        if t["bot_text"]:
            events.append({"t_s": tl.get("first_bot_audio"), "speaker": "bot", "turn": t["index"],
                           "text": t["bot_text"], "interrupted": t["interrupted"]})
    return {"file": entry["file"], "duration_s": entry.get("duration_s"), "script": caller_lines,
            "events": events}


async def replay_call(path: Path, scenario: Any, engine: Any, opts: ReplayOptions, out_dir: Path,
                      slug: str, calls_bar: Any = None) -> dict:
    entry: dict[str, Any] = {"file": str(path), "error": None, "turns": []}
    if path.is_dir():
        entry["error"] = f"{path}: folder has no audio files (.wav .flac .mp3 .ogg .opus)"
        return entry
    try:
        audio = read_caller_audio(path, opts.caller_channel)
    except AudioFormatError as e:
        entry["error"] = str(e)
        return entry
    entry["duration_s"] = round(audio.duration_s, 3)
    entry["input"] = {"encoding": audio.info.encoding, "sample_rate": audio.info.sample_rate,
                      "channels": audio.info.channels, "caller_channel": audio.channel}
    segments = speech_segments(audio.samples)
    if not segments:
        entry["error"] = f"{path}: no caller speech found in the recording"
        return entry
    entry["caller_speech_s"] = [[round(s.start_s, 3), round(s.end_s, 3)] for s in segments]

    turns_bar = None
    if opts.progress:
        from tqdm import tqdm

        turns_bar = tqdm(total=len(utterances(segments)), desc=f"  {path.name}", unit="turn", leave=False,
                         position=1, file=sys.stderr)
    call_dir = out_dir / "calls" / slug
    call_dir.mkdir(parents=True, exist_ok=True)
    store = call_dir / "store"
    shutil.rmtree(store, ignore_errors=True)
    meta = _sidecar(path)  # the call's script, date and diary
    t_wall = time.monotonic()
    try:
        backend, today = call_backend(scenario, store, meta)
        observer, transport, built = await _run_call(path, audio.samples, segments, scenario, engine, opts,
                                                         turns_bar, backend, today)
    except Exception as e:  # one call failing must not stop the batch
        logger.exception(f"replay of {path} failed")
        entry["error"] = f"{path}: replay failed: {type(e).__name__}: {e}"
        entry["turns"] = []
        return entry
    finally:
        if turns_bar is not None:
            turns_bar.close()
    entry["wall_s"] = round(time.monotonic() - t_wall, 2)
    entry["skipped_silence_s"] = round(transport.clock.skipped_s, 2)
    entry["stt"] = {"window": opts.stt_window, "early": opts.early_stt, **built.stt.stats.as_dict()}
    speculation = getattr(built.llm.brain, "speculation", None)  # the in-process engine's guesses
    entry["speculative_prefill"] = speculation.as_dict() if speculation is not None else None
    lag = distribution(x * 1000 for x in getattr(transport, "input_lag_s", []))
    entry["input_lag_ms"] = {k: lag[k] for k in ("n", "p50", "p95", "max")}
    if lag["p95"] is not None and lag["p95"] > MAX_INPUT_LAG_MS:
        entry["warning"] = (f"this machine did not keep up in real time: caller audio reached the VAD "
                            f"{lag['p95']:.0f} ms late (p95), and every latency here includes that backlog")

    entry["turns"] = call_turns(observer.turns, segments, opts.budget_ms)
    _bot_audio_gaps(entry["turns"], transport.capture)
    entry["greeting"] = greeting_record(observer.greeting)

    # What the call left in its backend (checked by `state` expectations).
    entry["state"] = backend.snapshot()
    backend.close()
    script = [str(s) for s in (meta or {}).get("script", [])]
    if script:
        errors, words = word_errors(" ".join(script), " ".join(t["user_text"] for t in entry["turns"]))
        entry["caller_wer"] = round(errors / max(1, words), 4)

    import numpy as np

    bot = transport.capture.bot_track(len(audio.samples))
    caller = np.zeros(len(bot), dtype=np.int16)
    caller[: len(audio.samples)] = audio.samples
    write_wav(call_dir / "call.wav", np.stack([caller, bot], axis=1), 16000)
    (call_dir / "transcript.json").write_text(json.dumps(_transcript(entry, script), indent=2, default=str) + "\n",
                                              encoding="utf-8")
    entry["outputs"] = {"call_wav": f"calls/{slug}/call.wav", "transcript": f"calls/{slug}/transcript.json"}
    return entry


# --- the batch ---------------------------------------------------------------------------------

async def replay_batch(inputs: list[Path], out_dir: Path, opts: ReplayOptions) -> dict:
    from voice_agent.scenarios import load_scenario

    files = discover_inputs(inputs)
    scenario = load_scenario(opts.scenario)
    effort = opts.reasoning_effort or scenario.reasoning_effort
    engine = None  # with --llm-url the turns go to that server: no engine here
    if not opts.remote:
        from voice_agent.engine_host import call_engine

        # the one loader of a call's engine (the pack's own adapter where it has one), as phone and mic use
        engine = call_engine(opts.model, scenario, threads=opts.engine_threads, precision=opts.precision)
        if opts.decoding == "ar":
            engine = engine.variant(family="ar")  # same weights, one token per forward: diffusion's share, measured
    calls: list[dict] = []
    taken: set[str] = set()
    calls_bar = None
    if opts.progress:
        from tqdm import tqdm

        calls_bar = tqdm(total=len(files), desc="calls", unit="call", position=0, file=sys.stderr)
    for path in files:
        if calls_bar is not None:
            calls_bar.set_postfix_str(path.name)
        entry = await replay_call(path, scenario, engine, opts, out_dir, _slug(path, taken), calls_bar)
        calls.append(entry)
        if calls_bar is not None:
            calls_bar.update(1)
    if calls_bar is not None:
        calls_bar.close()

    expectations = None
    if opts.expect is not None:
        expectations = expect_mod.apply(calls, expect_mod.load_expectations(opts.expect))
    model = engine.model_name if engine is not None else _served_model(calls, opts)
    summary = summarize(calls, budget_ms=opts.budget_ms, model=str(model),
                        reasoning_effort=effort, extra={
                            "llm_url": opts.llm_url,
                            "mode": "fast" if opts.fast else "realtime",
                            "scenario": scenario.name,
                            "stt_model": opts.stt_model,
                            "stt_window": opts.stt_window,
                            "early_stt": opts.early_stt,
                            "warm_prefill": opts.warm_prefill,
                            "decode_ahead": opts.decodes_ahead,
                            "stt": add_counters(c.get("stt") for c in calls),
                            "speculative_prefill": add_counters(c.get("speculative_prefill") for c in calls),
                            "first_clause_words": opts.first_clause_words,
                            "bot_longest_pause_ms": distribution(t.get("bot_longest_pause_ms") for c in calls
                                                                 for t in c.get("turns") or []),
                            "command": " ".join(["voice-agent", "replay", *sys.argv[2:]]) if sys.argv[1:2] == ["replay"]
                            else " ".join(sys.argv),
                            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                            "expectations": expectations,
                            "input_lag_p95_ms": max((c["input_lag_ms"]["p95"] for c in calls
                                                     if (c.get("input_lag_ms") or {}).get("p95") is not None),
                                                    default=None),
                            "kept_up_in_real_time": not any(c.get("warning") for c in calls),
                        })
    return build_report(calls, summary)


def _served_model(calls: list[dict], opts: ReplayOptions) -> str:
    """The model the LLM server said it ran (in the turns' metrics), else the one asked for."""
    for call in calls:
        for turn in call.get("turns") or []:
            for m in turn.get("engine") or []:
                if m.get("model"):
                    return str(m["model"])
    return opts.llm_model or "(the server's)"

def print_summary(report: dict, out_dir: Path) -> None:
    s = report["summary"]
    where = f" at {s['llm_url']}" if s.get("llm_url") else ""
    print(f"\n{s['calls'] - s['calls_failed']}/{s['calls']} calls replayed, {s['answered_turns']}/{s['scored_turns']} "
          f"turns answered ({s['mode']}, model {s['model']}{where}, reasoning_effort {s['reasoning_effort']})")
    for line in budget_lines(s):
        print(line)
    pause = s.get("bot_longest_pause_ms") or {}
    if pause.get("max") is not None:
        print(f"longest pause inside a reply: p50 {pause['p50']}  max {pause['max']} ms "
              f"(first {s.get('first_clause_words')} words to the TTS before the sentence ends)")
    spec = s.get("speculative_prefill") or {}
    if spec:
        print(f"speculative prefill: {spec.get('used', 0)} of {spec.get('started', 0)} used "
              f"({spec.get('wasted', 0)} wasted, {spec.get('skipped', 0)} skipped)")
        if spec.get("decoded"):
            print(f"decoded ahead: {spec.get('decode_used', 0)} of {spec['decoded']} guesses answered their turn "
                  f"({spec.get('decode_wasted', 0)} cancelled)")
        if spec.get("tools_run") or spec.get("tools_skipped"):
            print(f"read-only tools run while the caller spoke: {spec.get('tools_used', 0)} of "
                  f"{spec.get('tools_run', 0)} used ({spec.get('tools_wasted', 0)} wasted, "
                  f"{spec.get('tools_skipped', 0)} calls with side effects skipped); answers decoded ahead from "
                  f"them: {spec.get('answers_ahead_used', 0)}")
    for call in report["calls"]:
        if call.get("error"):
            print(f"FAILED INPUT {call['error']}")
        if call.get("warning"):
            print(f"WARNING {call['file']}: {call['warning']}")
    table = expect_mod.table_text(report["calls"])
    if table:
        print("\nexpectations:\n" + table)
    print(f"\nreport: {out_dir / 'report.json'}  {out_dir / 'report.html'}")


def replay_main(inputs: list[Path], out_dir: Path, opts: ReplayOptions) -> int:
    try:
        if opts.expect is not None:
            expect_mod.load_expectations(opts.expect)  # fail before the (long) replay, not after
        report = asyncio.run(replay_batch(inputs, out_dir, opts))
    except (expect_mod.ExpectationsError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_report(report, out_dir, embed_audio=opts.embed_audio)
    print_summary(report, out_dir)
    failed = report["summary"]["calls_failed"] > 0
    exp = report["summary"].get("expectations")
    if exp is not None and not exp["passed"]:
        failed = True
    return 1 if failed else 0
