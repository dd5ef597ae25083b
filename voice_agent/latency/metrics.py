"""From timelines to numbers: each turn's report fields, its e2e breakdown, and the summary.

The breakdown walks the turn's moments in pipeline order and names the span between each
moment and the next, so the named stages tile the interval from the true end of the caller's
speech to the first bot audio. A moment that was not observed leaves its span unattributed:
that time, and any time moments overlap, goes to `other_ms`, so the stages always add up to
`e2e_ms` and a gap in the instrumentation shows up instead of being absorbed.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from typing import Any

import numpy as np

from voice_agent.latency.budget import BUDGET_METRICS, budget_verdict, pass_rate
from voice_agent.latency.timeline import TurnTimeline
from voice_agent.latency.truth import Segment, true_speech_end

DEFAULT_BUDGET_MS = 500.0
# The steps of a turn's TTFAT, in order: decoding the tool call (0 when the policy wrote it), running
# the tool, prefilling the prompt (with the tool's result on a tool turn), decoding to the first
# answer token; `other_ms` is what is left (the tool loop's own hops).
TTFAT_STEPS = ("call_decode_ms", "tool_ms", "prefill_ms", "first_answer_token_ms", "other_ms")

# (stage, the moment that ends it), in pipeline order. The first stage starts at the true end of
# the caller's speech; the last ends with the first bot audio on the wire.
STAGES: tuple[tuple[str, str], ...] = (
    ("vad_stop_ms", "vad_stopped"),            # VAD's end-of-speech wait
    ("stt_ms", "transcript_final"),            # Whisper on the utterance
    ("turn_ms", "llm_request"),                # turn strategy (e.g. Smart Turn) and context update
    ("llm_ms", "first_speakable"),             # LLM to first answer token (= ttfat_ms unless a filler)
    ("text_aggregation_ms", "tts_request"),    # waiting for a sentence to hand to TTS
    ("tts_ttfb_ms", "tts_first_audio"),        # TTS request to first audio
    ("transport_ms", "first_bot_audio"),       # output queue, resampling, chunking, write
)
STAGE_NAMES = tuple(s for s, _ in STAGES) + ("other_ms",)
STAGE_LABELS = {
    "vad_stop_ms": "VAD end-of-speech wait", "stt_ms": "STT", "turn_ms": "turn detection",
    "llm_ms": "LLM to first answer token", "text_aggregation_ms": "sentence aggregation",
    "tts_ttfb_ms": "TTS first audio", "transport_ms": "transport out", "other_ms": "other / unattributed",
}
PERCENTILES = (50, 95, 99)


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000, 1)


def breakdown(tl: TurnTimeline, start: float, end: float) -> dict[str, float | None]:
    """Split [start, end] (seconds) into the named stages plus `other_ms`."""
    out: dict[str, float | None] = {}
    cursor, attributable, other = start, True, 0.0
    for stage, moment in STAGES:
        t = getattr(tl, moment)
        if t is None:
            out[stage] = None
            attributable = False  # this stage's time ends up in whatever span comes next
            continue
        t = min(max(t, cursor), end)
        span = (t - cursor) * 1000
        if attributable:
            out[stage] = round(span, 1)
        else:
            out[stage] = None
            other += span
        cursor, attributable = t, True
    other += max(0.0, (end - cursor) * 1000)
    out["other_ms"] = round(other, 1)
    return out


def ttfat_breakdown(engine: list[dict], tool_calls: list[dict], ttfat: float | None) -> dict[str, float | None]:
    """Split a turn's TTFAT into TTFAT_STEPS from the engine's per-round metrics and the tools' times.
    A round decoded ahead (`decoded_ahead_ms` before the turn asked for it) counts only what was left."""
    if ttfat is None or not engine:
        return {s: None for s in TTFAT_STEPS}
    calling = [m for m in engine if m.get("tool_calls")]
    answering = next((m for m in reversed(engine) if not m.get("tool_calls")), {})
    ahead = float(answering.get("decoded_ahead_ms") or 0.0)
    prefill = float(answering.get("prefill_ms") or 0.0)
    first = float(answering.get("ttfat_ms") or 0.0)
    out = {
        "call_decode_ms": round(sum(max(0.0, float(m.get("total_ms") or 0.0) - float(m.get("decoded_ahead_ms") or 0.0))
                                    for m in calling), 1),
        "tool_ms": round(sum(float(c.get("duration_ms") or 0.0) for c in tool_calls), 1),
        "prefill_ms": round(max(0.0, prefill - ahead), 1),
        "first_answer_token_ms": round(max(0.0, first - max(prefill, ahead)), 1),
    }
    out["other_ms"] = round(max(0.0, ttfat - sum(out.values())), 1)
    return out


def call_turns(timelines: Iterable[TurnTimeline], segments: list[Segment], budget_ms: float) -> list[dict[str, Any]]:
    """A call's turn records, each measured from the true end of the caller's speech in `segments`
    (the recording's voiced segments, on the observer's clock): the last segment that ended before the
    turn's VAD stop and after the previous turn's. A turn with no such segment is `unmatched`."""
    records, prev_end = [], float("-inf")
    for tl in timelines:
        end = true_speech_end(segments, tl.vad_stopped, prev_end) if tl.vad_stopped is not None else None
        record = turn_record(tl, end, budget_ms)
        if end is not None:
            prev_end = end
        elif record["e2e_from"] == "recording":
            record["e2e_from"] = "unmatched"
        records.append(record)
    return records


def greeting_record(g: TurnTimeline) -> dict[str, Any]:
    return {"bot_text": g.bot_text.strip(),
            "first_bot_audio_s": None if g.first_bot_audio is None else round(g.first_bot_audio, 3)}


def turn_record(tl: TurnTimeline, true_end: float | None, budget_ms: float = DEFAULT_BUDGET_MS) -> dict[str, Any]:
    """The report's fields for one turn. `true_end` is the end of the caller's speech found by the
    offline VAD pass (replay); without it (live calls) it is estimated as the VAD stop minus the
    VAD's configured silence wait, and `e2e_from` says so."""
    e2e_from = "recording"
    if true_end is None and tl.vad_stopped is not None:
        true_end = tl.vad_stopped - (tl.vad_stop_secs or 0.0)
        e2e_from = "vad_estimate"
    end = tl.first_bot_audio
    e2e = _ms(true_end, end)
    answer_e2e = _ms(true_end, tl.first_answer_audio)
    first = tl.engine[0] if tl.engine else {}
    # the turn's decode: its first LLM round that ran the model (a round the policy decided ran none)
    decoded = next((m for m in tl.engine if m.get("forward_passes") != 0), {}) if tl.engine else {}
    parts = breakdown(tl, true_end, end) if e2e is not None and true_end is not None else {s: None for s in STAGE_NAMES}
    ttfat = _ms(tl.llm_request, tl.first_answer_token)
    record: dict[str, Any] = {
        "index": tl.index,
        "user_text": tl.user_text,
        "bot_text": tl.bot_text.strip(),
        "filler_text": tl.filler_text,
        "reasoning": tl.reasoning,
        "tool_calls": [_tool_call(c) for c in tl.tool_calls],
        "answered": tl.answered,
        "interrupted": tl.interrupted,
        "late_transcript": tl.late_transcript,
        "false_cutoffs": tl.false_cutoffs,
        "cutoffs_heard": tl.cutoffs_heard,
        "stt_cutoffs": tl.stt_cutoffs,
        "cut_off_text": tl.cut_off_text,
        "e2e_ms": e2e,
        "answer_e2e_ms": answer_e2e,
        "ttft_ms": _num(first.get("ttft_ms")),
        "ttfat_ms": ttfat,
        "stt_ms": _ms(tl.vad_stopped, tl.transcript_final),
        "tts_ttfb_ms": None if tl.tts_ttfb_ms is None else round(tl.tts_ttfb_ms, 1),
        "vad_stop_ms": _ms(true_end, tl.vad_stopped),
        "within_budget": e2e is not None and e2e <= budget_ms,
        "answer_within_budget": answer_e2e is not None and answer_e2e <= budget_ms,
        "ttfat_within_budget": ttfat is not None and ttfat <= budget_ms,
        "filler": bool(tl.filler_text),
        "ttfat_breakdown": ttfat_breakdown(tl.engine, tl.tool_calls, ttfat),
        "engine_ttfat_ms": _num(first.get("ttfat_ms")),
        "prefill_ms": _num(decoded.get("prefill_ms")),
        "tokens_per_forward": _num(decoded.get("tokens_per_forward")),
        "decode_tok_s": _num(decoded.get("decode_tok_s")),
        "reasoning_tokens": sum(int(m.get("reasoning_tokens") or 0) for m in tl.engine) if tl.engine else None,
        "completion_tokens": sum(int(m.get("completion_tokens") or 0) for m in tl.engine) if tl.engine else None,
        "cached_tokens": decoded.get("cached_tokens"),
        "llm_calls": tl.llm_calls,
        "e2e_from": e2e_from,
        "breakdown": parts,
        "timeline_s": {k: (None if v is None else round(v, 3)) for k, v in _moments(tl, true_end).items()},
        "engine": tl.engine,
        "cut_off_engine": tl.cut_off_engine,
    }
    return record


def _num(v: Any) -> float | None:
    return None if v is None else round(float(v), 2)


def _tool_call(c: dict) -> dict:
    return {k: v for k, v in c.items() if k != "started_s"}


def _moments(tl: TurnTimeline, true_end: float | None) -> dict[str, float | None]:
    return {
        "user_started": tl.user_started, "true_speech_end": true_end, "vad_stopped": tl.vad_stopped,
        "turn_stopped": tl.turn_stopped, "transcript_final": tl.transcript_final,
        "llm_request": tl.llm_request, "first_token": tl.first_token,
        "first_answer_token": tl.first_answer_token, "first_speakable": tl.first_speakable,
        "tts_request": tl.tts_request, "tts_first_audio": tl.tts_first_audio,
        "bot_started": tl.bot_started, "first_bot_audio": tl.first_bot_audio,
        "first_answer_audio": tl.first_answer_audio, "bot_stopped": tl.bot_stopped,
    }


# --- summary ---------------------------------------------------------------------------------

def distribution(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """n, mean, min, max and p50/p95/p99 (linear interpolation) of the non-missing values."""
    xs = np.array([v for v in values if v is not None], dtype=np.float64)
    out: dict[str, float | int | None] = {"n": int(xs.size)}
    for p in PERCENTILES:
        out[f"p{p}"] = round(float(np.percentile(xs, p)), 1) if xs.size else None
    out["mean"] = round(float(xs.mean()), 1) if xs.size else None
    out["min"] = round(float(xs.min()), 1) if xs.size else None
    out["max"] = round(float(xs.max()), 1) if xs.size else None
    return out


def add_counters(counters: Iterable[dict | None]) -> dict[str, int]:
    """Integer counters added up key by key (each call's STT or speculation counts); other values skipped."""
    totals: dict[str, int] = {}
    for c in counters:
        for k, v in (c or {}).items():
            if isinstance(v, int) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
    return totals


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "machine": platform.machine()}


def summarize(calls: list[dict], *, budget_ms: float, model: str, reasoning_effort: str,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report's `summary` over every turn of every call that ran."""
    turns = [t for c in calls if not c.get("error") for t in c.get("turns", [])]
    # A turn counts once the pipeline asked the LLM for an answer; an answer that never played
    # (the caller spoke over the silence) is a miss, not something to leave out.
    scored = [t for t in turns if t.get("llm_calls")]
    rates = {m: pass_rate(scored, m, budget_ms) for m in BUDGET_METRICS}
    means = {s: distribution(t["breakdown"].get(s) for t in scored if t["e2e_ms"] is not None)["mean"]
             for s in STAGE_NAMES}
    present = {s: v for s, v in means.items() if v is not None}
    summary: dict[str, Any] = {
        "calls": len(calls),
        "calls_failed": sum(1 for c in calls if c.get("error")),
        "turns": len(turns),
        "scored_turns": len(scored),
        "answered_turns": sum(1 for t in scored if t["e2e_ms"] is not None),
        # caller turns the pipeline ended at a pause inside them (the caller went on): each one is
        # still one turn in this report, measured from the end of the whole turn
        "false_cutoffs": sum(int(t.get("false_cutoffs") or 0) for t in turns),
        # ... of which the caller heard the cut-off answer begin (the rest were dropped unheard)
        "cutoffs_heard": sum(int(t.get("cutoffs_heard") or 0) for t in turns),
        "stt_cutoffs": sum(int(t.get("stt_cutoffs") or 0) for t in turns),  # ended before the transcript came
        "budget_ms": budget_ms,
        "budget_pass_rate": rates["e2e_ms"],
        "answer_budget_pass_rate": rates["answer_e2e_ms"],
        "ttfat_budget_pass_rate": rates["ttfat_ms"],
        "budget_verdict": budget_verdict(rates),
        "filler_turn_share": round(sum(1 for t in scored if t.get("filler")) / len(scored), 4) if scored else None,
        "e2e_ms": distribution(t["e2e_ms"] for t in scored),
        "answer_e2e_ms": distribution(t.get("answer_e2e_ms") for t in scored),
        "ttfat_ms": distribution(t["ttfat_ms"] for t in scored),
        "ttfat_breakdown_mean_ms": {s: distribution((t.get("ttfat_breakdown") or {}).get(s) for t in scored)["mean"]
                                    for s in TTFAT_STEPS},
        "ttft_ms": distribution(t["ttft_ms"] for t in scored),
        "stt_ms": distribution(t["stt_ms"] for t in scored),
        "tts_ttfb_ms": distribution(t["tts_ttfb_ms"] for t in scored),
        "vad_stop_ms": distribution(t["vad_stop_ms"] for t in scored),
        "breakdown_mean_ms": means,
        "dominant_stage": max(present, key=lambda s: present[s]) if present else None,
        "model": model,
        "reasoning_effort": reasoning_effort,
        "machine": machine_info(),
    }
    summary.update(extra or {})
    return summary
