"""The latency observer never splits a caller turn: frames in the order Pipecat 1.14 pushes them
(traced from replays of the sample call) for a turn with a pause inside it.

- Fast STT: the pipeline ends the turn at the pause (it asks the LLM), the caller goes on 0.3 s
  later: ONE turn, one false cut-off, measured to the answer to the whole turn.
- Slow STT: the last words' transcript arrives after the request and Pipecat opens a turn for it:
  the same.
- The aggregator pushes two copies of each VAD event; a segment that gives no words still ends the
  STT stage. The real-pipeline version of these cases is tests/voice/audio/test_turn_pauses.py.
"""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    LLMContextFrame,
    LLMTextFrame,
    MetricsFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import ProcessingMetricsData, TTFBMetricsData
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.transports.base_output import BaseOutputTransport

from voice_agent.latency.metrics import summarize, turn_record
from voice_agent.latency.observer import TurnLatencyObserver
from voice_agent.services.llm import EngineMetricsFrame
from voice_agent.services.stt import LocalWhisperSTTService
from voice_agent.services.tts import HibariTTSService

# Only their types matter to the observer: which processor pushed a frame.
LLM = LLMService.__new__(LLMService)
TTS = HibariTTSService.__new__(HibariTTSService)
OUT = BaseOutputTransport.__new__(BaseOutputTransport)
STT = LocalWhisperSTTService.__new__(LocalWhisperSTTService)
OTHER = object()


def vad_start(t):  # each VAD event comes twice: the aggregator queues one copy and pushes one upstream
    return [(t, VADUserStartedSpeakingFrame(start_secs=0.2), OTHER), (t + 0.001, VADUserStartedSpeakingFrame(start_secs=0.2), OTHER)]


def vad_stop(t):
    return [(t, VADUserStoppedSpeakingFrame(stop_secs=0.2), OTHER), (t + 0.01, VADUserStoppedSpeakingFrame(stop_secs=0.2), OTHER)]


def stt_done(t, text):
    out = [(t, MetricsFrame(data=[ProcessingMetricsData(processor="stt", value=0.1)]), STT)]
    return out + ([(t, TranscriptionFrame(text, "", "now"), STT)] if text else [])


def answer(t, text, total_ms=600.0):
    """An LLM request at t, its first token 0.3 s later, audio 0.1 s after that, the engine's metrics."""
    return [(t, LLMContextFrame(LLMContext()), OTHER), (t, UserStoppedSpeakingFrame(), OTHER),
            (t + 0.3, LLMTextFrame(text), LLM),
            (t + 0.35, TTSAudioRawFrame(b"\1\0" * 160, 16000, 1), TTS),
            (t + 0.35, MetricsFrame(data=[TTFBMetricsData(processor="tts", value=0.02)]), TTS),
            (t + 0.36, BotStartedSpeakingFrame(), OUT), (t + 0.4, OutputAudioRawFrame(b"\1\0" * 160, 16000, 1), OUT),
            (t + total_ms / 1000, EngineMetricsFrame(metrics={"total_ms": total_ms, "ttft_ms": 300.0}), LLM)]


def observe(events) -> TurnLatencyObserver:
    now = {"t": 0.0}
    obs = TurnLatencyObserver(clock=lambda: now["t"])

    async def push_all():
        for t, frame, src in sorted(events, key=lambda e: e[0]):
            now["t"] = t
            dest = LLM if isinstance(frame, LLMContextFrame) else OTHER
            await obs.on_push_frame(FramePushed(source=src, destination=dest, frame=frame,
                                                direction=FrameDirection.DOWNSTREAM, timestamp=0))

    asyncio.run(push_all())
    obs.finish()
    return obs


def test_a_turn_cut_at_its_inner_pause_stays_one_turn_with_a_false_cutoff():
    # "Ten in the morning works, | and my name is Jordan Lee.": words end 24.6, the VAD stops at 24.8,
    # the transcript is back at 24.9, the turn strategy asks the LLM at 25.0; the caller went on at
    # 24.92 (the VAD confirms it 0.2 s later, 25.12) and ends at 26.4.
    events = [(23.79, VADUserStartedSpeakingFrame(start_secs=0.2), OTHER), (23.79, UserStartedSpeakingFrame(), OTHER),
              *vad_stop(24.8), *stt_done(24.9, "10 in the morning works."),
              *answer(25.0, "Sure.", total_ms=900.0)[:2],          # asked; cut off before a word came
              *vad_start(25.12), (25.12, UserStartedSpeakingFrame(), OTHER),
              (25.9, EngineMetricsFrame(metrics={"total_ms": 900.0, "ttft_ms": 250.0}), LLM),  # the cut-off call ends
              *vad_stop(26.6), *stt_done(26.7, "And my name is Jordan Lee."),
              *answer(26.8, "Thanks, Jordan."), (28.0, BotStoppedSpeakingFrame(), OUT)]
    obs = observe(events)
    assert len(obs.turns) == 1
    (turn,) = obs.turns
    assert turn.user_text == "10 in the morning works. And my name is Jordan Lee."
    assert turn.false_cutoffs == 1 and not turn.interrupted and not turn.late_transcript
    assert (turn.vad_stopped, turn.transcript_final, turn.llm_request) == (26.6, 26.7, 26.8)
    assert turn.first_bot_audio == pytest.approx(27.2) and turn.bot_text == "Thanks, Jordan."
    assert turn.engine == [{"total_ms": 600.0, "ttft_ms": 300.0}]  # the answer's call only
    assert turn.cut_off_engine == [{"total_ms": 900.0, "ttft_ms": 250.0}]
    assert turn.llm_calls == 2 and turn.llm_requests == [25.0, 26.8]
    record = turn_record(turn, true_end=26.4)
    assert record["stt_ms"] == pytest.approx(100.0) and record["e2e_ms"] == pytest.approx(800.0)
    assert record["false_cutoffs"] == 1 and record["ttft_ms"] == 300.0
    assert record["cutoffs_heard"] == 0  # cut off before a word of it played
    summary = summarize([{"turns": [record]}], budget_ms=500, model="m", reasoning_effort="instant")
    assert summary["false_cutoffs"] == 1 and summary["turns"] == 1 and summary["cutoffs_heard"] == 0


def test_a_cut_off_answer_the_caller_heard_begin_is_counted_as_heard():
    # The same pause, but the cut-off answer's audio began (25.4) before the caller went on (25.5).
    events = [(23.79, VADUserStartedSpeakingFrame(start_secs=0.2), OTHER), (23.79, UserStartedSpeakingFrame(), OTHER),
              *vad_stop(24.8), *stt_done(24.9, "10 in the morning works."),
              *answer(25.0, "What name is it under?", total_ms=500.0),
              *vad_start(25.7), (25.7, UserStartedSpeakingFrame(), OTHER),
              *vad_stop(26.6), *stt_done(26.7, "And my name is Jordan Lee."),
              *answer(26.8, "Thanks, Jordan."), (28.0, BotStoppedSpeakingFrame(), OUT)]
    (turn,) = observe(events).turns
    assert (turn.false_cutoffs, turn.cutoffs_heard) == (1, 1)
    assert turn.cut_off_text == "What name is it under?" and turn.bot_text == "Thanks, Jordan."


def test_a_late_transcript_before_the_answer_is_the_same_turn_not_a_new_one():
    """Slow STT (main before the short window): the first segment's transcript came after the
    caller went on, the turn ended on it, and the last words' transcript opened a Pipecat turn
    (no new speech) before any answer played."""
    events = [(23.789, VADUserStartedSpeakingFrame(start_secs=0.2), OTHER), (23.789, UserStartedSpeakingFrame(), OTHER),
              *vad_stop(24.806), *vad_start(25.111),                  # the caller goes on inside the open turn
              *stt_done(26.258, "10 in the morning works."), *vad_stop(26.547),
              (26.751, LLMContextFrame(LLMContext()), OTHER), (26.751, UserStoppedSpeakingFrame(), OTHER),
              *stt_done(28.395, "And my name is Jordan Lee."),
              (28.409, UserStartedSpeakingFrame(), OTHER),             # Pipecat's transcription turn start
              *answer(28.612, "Thanks, Jordan.")]
    obs = observe(events)
    (turn,) = obs.turns
    assert turn.user_started == 23.789  # not the resumption's VAD start
    assert turn.user_text == "10 in the morning works. And my name is Jordan Lee."
    assert (turn.false_cutoffs, turn.stt_cutoffs) == (1, 0) and not turn.late_transcript  # it had a pause
    assert (turn.vad_stopped, turn.transcript_final, turn.llm_request) == (26.547, 28.395, 28.612)
    assert turn_record(turn, true_end=26.368)["stt_ms"] > 0


def test_a_pause_shorter_than_stop_secs_is_no_event_at_all():
    """The VAD never stops: one segment, one transcript, no cut-off."""
    events = [*vad_start(5.1), (5.1, UserStartedSpeakingFrame(), OTHER),
              *vad_stop(8.33), *stt_done(8.43, "Hi, I'd like to book a cleaning for next Tuesday, please."),
              *answer(8.55, "Sure."), (10.0, BotStoppedSpeakingFrame(), OUT)]
    (turn,) = observe(events).turns
    assert turn.false_cutoffs == 0 and turn.vad_stopped == 8.33 and turn.user_started == 5.1


def test_the_caller_speaking_again_after_a_long_pause_is_a_new_turn():
    """Over TURN_PAUSE_MAX_S after the last word, with no answer yet: a new turn, and the first
    one was interrupted (the sample call's first turn on a slow LLM)."""
    events = [*vad_start(5.1), (5.1, UserStartedSpeakingFrame(), OTHER), *vad_stop(8.33),
              *stt_done(8.43, "Hi, I'd like a cleaning."), (8.55, LLMContextFrame(LLMContext()), OTHER),
              (8.55, UserStoppedSpeakingFrame(), OTHER),
              *vad_start(15.69), (15.69, UserStartedSpeakingFrame(), OTHER), *vad_stop(17.0),
              *stt_done(17.1, "Do you have anything in the morning?"), *answer(17.2, "Yes, at ten.")]
    first, second = observe(events).turns
    assert first.interrupted and first.false_cutoffs == 0 and second.false_cutoffs == 0
    assert second.user_text == "Do you have anything in the morning?" and second.user_started == 15.69


def test_a_last_segment_without_words_still_ends_the_stt_stage():
    """"... next Tuesday, | please.": the second segment came back empty. The STT stage ends when
    it was done, not at the first segment's transcript (which gave a negative stt_ms before)."""
    events = [*vad_start(5.1), (5.1, UserStartedSpeakingFrame(), OTHER), *vad_stop(7.805),
              *vad_start(7.949), *stt_done(8.281, "Hi, I'd like to book a teeth cleaning for next Tuesday."),
              *vad_stop(8.325), *stt_done(8.45, ""), *answer(8.527, "Sure.")]
    (turn,) = observe(events).turns
    assert turn.transcript_final == 8.45
    assert turn_record(turn, true_end=8.16)["stt_ms"] == pytest.approx(125.0)


def test_a_turn_ended_before_its_transcript_came_is_one_turn_but_not_a_pause_cutoff():
    """One segment, no pause; the STT took over 5 s on a saturated CPU and Pipecat's stop watchdog
    ended the turn with no words: the transcript then opened a turn. Still one turn, counted as
    an STT cut-off, not a false cut-off."""
    events = [*vad_start(15.699), (15.699, UserStartedSpeakingFrame(), OTHER), *vad_stop(17.027),
              (22.03, LLMContextFrame(LLMContext()), OTHER), (22.03, UserStoppedSpeakingFrame(), OTHER),
              *stt_done(22.51, "Do you have anything in the morning?"), (22.52, UserStartedSpeakingFrame(), OTHER),
              *answer(22.732, "Yes, at ten.")]
    (turn,) = observe(events).turns
    assert (turn.false_cutoffs, turn.stt_cutoffs) == (0, 1)
    assert turn.user_text == "Do you have anything in the morning?" and turn.llm_request == 22.732


def test_the_previous_replys_late_tail_is_not_the_new_turns_first_audio():
    """A reply's last sentence came out late and played as the caller began the next turn
    ("Great, thank you so much, bye"): that speech is not the new turn's answer (its e2e was
    -1.3 s in one replay); the answer to the new turn is."""
    events = [*vad_start(23.79), (23.79, UserStartedSpeakingFrame(), OTHER), *vad_stop(26.55),
              *stt_done(26.56, "10 in the morning works. And my name is Jordan Lee."),
              *answer(26.7, "You're booked."), (28.66, BotStoppedSpeakingFrame(), OUT),
              *vad_start(34.384), (34.384, UserStartedSpeakingFrame(), OTHER),
              (34.39, BotStartedSpeakingFrame(), OUT), (34.43, OutputAudioRawFrame(b"\1\0" * 160, 16000, 1), OUT),
              (34.9, BotStoppedSpeakingFrame(), OUT),
              *vad_stop(35.93), *stt_done(35.97, "Great. Thank you so much. Bye."), *answer(36.09, "Goodbye!")]
    first, second = observe(events).turns
    assert second.user_text == "Great. Thank you so much. Bye."
    assert second.bot_started == pytest.approx(36.45) and second.first_bot_audio == pytest.approx(36.49)
    assert turn_record(second, true_end=35.71)["e2e_ms"] == pytest.approx(780.0)
