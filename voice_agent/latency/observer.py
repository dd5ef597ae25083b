"""`TurnLatencyObserver`: a Pipecat observer that builds each turn's timeline from the frames
that flow through the pipeline, without touching any processor.

Moments recorded per user turn (seconds on the observer's clock):
- `user_started`       UserStartedSpeakingFrame (the turn opened)
- `vad_stopped`        the last VADUserStoppedSpeakingFrame before the LLM request
- `turn_stopped`       UserStoppedSpeakingFrame (the turn strategy decided the caller is done)
- `transcript_final`   the STT's last result before the LLM request: a TranscriptionFrame, or the
                       end of a segment that gave no words (the STT's processing metric)
- `llm_request`        the first LLMContextFrame to reach the LLM service in the turn
- `first_token`        llm_request + the engine's ttft_ms (reasoning is never pushed as frames)
- `first_answer_token` the first LLMTextFrame from the LLM service (after reasoning and tools)
- `first_speakable`    the first text handed towards TTS: the answer, or a filler spoken while
                       a tool runs
- `tts_request`        first TTS audio minus the TTS service's own TTFB metric
- `tts_first_audio`    the first TTSAudioRawFrame of the reply
- `bot_started`        BotStartedSpeakingFrame from the output transport
- `first_bot_audio`    the first bot audio chunk the output transport wrote
- `first_answer_audio` the first chunk it wrote of the answer proper: a TTS context the LLM's text
                       opened, not a filler or other phrase spoken outside the context
- `bot_stopped`        BotStoppedSpeakingFrame

A caller turn is never split. When the pipeline ends a turn at a pause inside it (it asked the LLM
for an answer) and the caller goes on within `TURN_PAUSE_MAX_S` of their last word, or a transcript
of words spoken before that request opens a new pipeline turn, the observer keeps ONE turn: it
counts a false cut-off (`stt_cutoffs` instead when the turn had no pause: it ended before its
transcript came), keeps the cut-off answer's text and engine metrics aside, and measures the
answer to the whole turn from its end.

The engine's own metrics arrive in the LLM service's `EngineMetricsFrame` (one per engine call;
a tool call makes two calls in one turn) and are kept per turn. `voice_agent.latency.turns`
turns a timeline into the report's per-turn fields.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    InputAudioRawFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    MetricsFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import ProcessingMetricsData, TTFBMetricsData
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.services.llm_service import LLMService
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport

from voice_agent.latency.timeline import TURN_PAUSE_MAX_S, TurnTimeline

# Frames that say nothing about the conversation moving on; everything else counts as activity
# when deciding whether the pipeline is idle.
_PASSIVE = (InputAudioRawFrame, MetricsFrame)
# A turn that ended but never reached the LLM counts as in flight at most this long: the
# aggregator drops turns whose transcript came back empty.
ANSWER_WAIT_S = 10.0
# What a false cut-off starts over: the moments of the answer to the turn.
_ANSWER_MOMENTS = ("turn_stopped", "llm_request", "first_token", "first_answer_token", "first_speakable",
                   "tts_request", "tts_first_audio", "bot_started", "first_bot_audio", "first_answer_audio",
                   "bot_stopped", "tts_ttfb_ms")


class TurnLatencyObserver(BaseObserver):
    """Collects a `TurnTimeline` per caller turn, plus the greeting (bot speech before any turn).

    `clock` gives the time in seconds; replay passes the call's clock so that moments line up
    with positions in the recording. `on_turn` is called with each turn once its answer has
    started playing (or the turn was abandoned).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 on_turn: Callable[[TurnTimeline], None] | None = None, **kwargs: Any) -> None:
        # Every hop is observed only to see context frames arrive at the LLM (the assistant
        # aggregator sends them upstream after tool results); everything else is taken at its
        # first push, where it is made.
        super().__init__(observe_every_push=True, **kwargs)
        self._clock = clock
        self._on_turn = on_turn
        self.turns: list[TurnTimeline] = []
        self.greeting = TurnTimeline(index=-1)
        self._seen_siblings: set[int] = set()
        self._user_speaking = False
        self._bot_speaking = False
        self._llm_inflight = 0
        self._last_activity = clock()
        self._reported: set[int] = set()
        self._vad_start: float | None = None  # a VAD speech start not yet claimed by a turn
        self._vad_onset: float | None = None  # ... minus the VAD's start wait: when the speech began
        self._vad_speaking = False  # the aggregator pushes two copies of each VAD event: count one
        self._last_vad_stop: tuple[float, float | None] | None = None
        self._late_text: tuple[str, float] | None = None  # (text, arrival) after the LLM request
        # Is the audio the output transport writes now a phrase kept out of the context (a filler)?
        # Its TTSStartedFrame reaches the wire in order with the audio, so this flips where it plays.
        self._playing_aside = False

    # -- state for the replay transport ----------------------------------------------------------
    @property
    def current(self) -> TurnTimeline:
        return self.turns[-1] if self.turns else self.greeting

    def idle_for(self) -> float:
        """Seconds since the conversation last moved, or 0 while anything is in flight: the caller
        speaking, the bot speaking, the LLM working, or a turn that ended waiting for its answer
        (STT and turn detection emit no frames while they work)."""
        if self._user_speaking or self._bot_speaking or self._llm_inflight:
            return 0.0
        now = self._clock()
        turn = self.current
        if turn.index >= 0 and not turn.answered:
            if turn.llm_request is not None:
                return 0.0  # asked and not yet answered: the service always says something
            stopped = turn.turn_stopped or turn.vad_stopped
            if stopped is not None and now - stopped < ANSWER_WAIT_S:
                return 0.0  # STT / turn detection at work
        return max(0.0, now - self._last_activity)

    # -- observer --------------------------------------------------------------------------------
    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if isinstance(frame, LLMContextFrame):
            if isinstance(data.destination, LLMService):
                self._llm_requested(self._clock())
            return
        if isinstance(frame, TTSStartedFrame):
            if isinstance(data.source, BaseOutputTransport):
                # The TTS's frame, passed on by the transport where its audio starts to play.
                self._playing_aside = getattr(frame, "append_to_context", True) is False
            return
        if not data.first_push:
            return
        # System frames are often broadcast both ways as sibling copies: count each event once.
        sibling = getattr(frame, "broadcast_sibling_id", None)
        if sibling is not None:
            if sibling in self._seen_siblings:
                self._seen_siblings.discard(sibling)
                return
            self._seen_siblings.add(frame.id)
        now = self._clock()
        if not isinstance(frame, _PASSIVE):
            self._last_activity = now
        self._handle(frame, data, now)

    def _handle(self, frame: Frame, data: FramePushed, now: float) -> None:  # noqa: C901 - one dispatch
        src = data.source
        turn = self.current
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if self._vad_speaking:
                return
            self._vad_speaking = True
            if self._user_speaking and self.turns:
                self._vad_start = None  # the caller went on inside the open turn: it is this turn's speech
            else:
                self._vad_start, self._vad_onset = now, now - float(getattr(frame, "start_secs", 0.0) or 0.0)
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._user_speaking = True
            voiced, self._vad_start = self._vad_start, None
            if voiced is None and self.turns and turn.llm_request is None:
                # A turn opened by a transcript with no new speech: the STT answered after the turn
                # strategy gave up on it. Same caller words, same turn.
                return
            if self.turns and self._continues(turn, voiced):
                # Words from before the request with no pause in the turn: the turn ended before its
                # transcript came (Pipecat's 5 s stop watchdog on a slow STT), not at a pause.
                self._cut_off(turn, by_pause=voiced is not None or turn.vad_segments > 1)
                return
            if turn.llm_request is not None and not turn.answered:
                turn.interrupted = True
            elif turn.first_bot_audio is not None and turn.bot_stopped is None:
                turn.interrupted = True  # barge-in over the answer
            late = self._late_text if voiced is None else None
            if late is not None:
                self._late_text = None  # these words open the new turn
            self._flush_late_text()
            self._finish(turn)
            new = TurnTimeline(index=len(self.turns), user_started=voiced or now, vad_started=voiced)
            if voiced is None and self._last_vad_stop is not None:
                # Opened by a late transcript: its speech ended before the last VAD stop, and the
                # pipeline answers those words in this new turn.
                new.vad_stopped, new.vad_stop_secs = self._last_vad_stop
            if late is not None:
                new.user_text, new.transcript_final = late
            self.turns.append(new)
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            if not self._vad_speaking:
                return
            self._vad_speaking = False
            self._last_vad_stop = (now, getattr(frame, "stop_secs", None))
            if self.turns and turn.llm_request is None:
                turn.vad_stopped = now
                turn.vad_stop_secs = getattr(frame, "stop_secs", None)
                turn.vad_segments += 1
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._user_speaking = False
            if self.turns and turn.turn_stopped is None:
                turn.turn_stopped = now
        elif isinstance(frame, TranscriptionFrame):
            text = frame.text.strip()
            if not self.turns or not text:
                return
            if turn.llm_request is None:
                turn.transcript_final = now
                turn.user_text = f"{turn.user_text} {text}".strip()
            else:
                # Words that arrived after this turn's LLM request (a slow STT, or the caller going
                # on after a pause). If they open a turn of their own (Pipecat's transcription
                # turn start), they belong to it; otherwise they stay with the turn they were
                # spoken in, marked late: they did not delay its answer.
                prev = self._late_text
                self._late_text = (f"{prev[0]} {text}" if prev else text, now)
        elif isinstance(frame, MetricsFrame) and isinstance(src, STTService):
            # The STT finished a segment, with or without words: the transcript is as final as it gets.
            if (any(isinstance(m, ProcessingMetricsData) for m in frame.data) and self.turns
                    and turn.llm_request is None and turn.vad_stopped is not None):
                turn.transcript_final = now
        elif isinstance(frame, LLMFullResponseStartFrame) and isinstance(src, LLMService):
            self._llm_inflight += 1
        elif isinstance(frame, LLMFullResponseEndFrame) and isinstance(src, LLMService):
            self._llm_inflight = max(0, self._llm_inflight - 1)
        elif isinstance(frame, LLMTextFrame) and isinstance(src, LLMService):
            if turn.first_answer_token is None:
                turn.first_answer_token = now
            turn.first_speakable = turn.first_speakable or now
            turn.bot_text += frame.text
        elif isinstance(frame, TTSSpeakFrame):
            # Spoken without the LLM: the greeting, or a filler while a tool runs.
            turn.first_speakable = turn.first_speakable or now
            if turn is self.greeting:
                turn.bot_text += frame.text
            else:
                turn.filler_text = f"{turn.filler_text} {frame.text}".strip()
        elif type(frame).__name__ == "EngineMetricsFrame":
            metrics = dict(getattr(frame, "metrics", {}) or {})
            # The frame comes when the engine call ends; it belongs to the turn it started in. A call
            # decoded ahead (voice_agent/brain/ahead.py) started decoded_ahead_ms before its turn.
            ahead_s = float(metrics.get("decoded_ahead_ms") or 0.0) / 1000
            started = now - float(metrics.get("total_ms") or 0.0) / 1000 + ahead_s
            owner = next((t for t in reversed(self.turns)
                          if any(r <= started + 0.05 for r in t.llm_requests)), turn)
            if owner.llm_request is None or started + 0.05 < owner.llm_request:
                owner.cut_off_engine.append(metrics)  # a call for an answer that was cut off
            else:
                owner.engine.append(metrics)
                if owner.first_token is None and metrics.get("ttft_ms") is not None:
                    owner.first_token = (max(started, owner.llm_request)
                                         + max(0.0, float(metrics["ttft_ms"]) / 1000 - ahead_s))
            reasoning = getattr(frame, "reasoning", None) or getattr(src, "last_reasoning", "")
            if reasoning:
                owner.reasoning = f"{owner.reasoning}\n{reasoning}".strip()
        elif isinstance(frame, FunctionCallInProgressFrame):
            turn.tool_calls.append({"name": frame.function_name, "arguments": frame.arguments,
                                    "tool_call_id": frame.tool_call_id, "result": None,
                                    "started_s": now})
        elif isinstance(frame, FunctionCallResultFrame):
            for call in turn.tool_calls:
                if call["tool_call_id"] == frame.tool_call_id:
                    call["result"] = frame.result
                    call["duration_ms"] = round((now - call.pop("started_s")) * 1000, 1)
        elif isinstance(frame, MetricsFrame) and isinstance(src, TTSService):
            for m in frame.data:
                if isinstance(m, TTFBMetricsData) and m.value > 0 and turn.tts_ttfb_ms is None:
                    turn.tts_ttfb_ms = m.value * 1000
                    if turn.tts_first_audio is not None:
                        turn.tts_request = turn.tts_first_audio - m.value
        elif isinstance(frame, TTSAudioRawFrame) and isinstance(src, TTSService):
            if turn.tts_first_audio is None:
                turn.tts_first_audio = now
                if turn.tts_ttfb_ms is not None:
                    turn.tts_request = now - turn.tts_ttfb_ms / 1000
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking = True
            # Speech before the turn's LLM request is the previous reply's tail (a sentence its TTS
            # was late with), not this turn's answer: once it was counted, and its e2e was negative.
            if turn.bot_started is None and turn.llm_request is not None:
                turn.bot_started = now
        elif isinstance(frame, OutputAudioRawFrame) and isinstance(src, BaseOutputTransport):
            # The output transport pushes each chunk on after writing it to the wire.
            if turn.bot_started is None:
                return
            if turn.first_answer_audio is None and not self._playing_aside:
                turn.first_answer_audio = now
            if turn.first_bot_audio is None:
                turn.first_bot_audio = now
                self._maybe_report(turn)
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._bot_speaking = False
            if turn.bot_started is not None:
                turn.bot_stopped = now

    def _continues(self, turn: TurnTimeline, voiced: float | None) -> bool:
        """Does a new pipeline turn carry on the caller's current one? Only once an answer was asked
        for (else the pipeline had not ended it) and before the caller heard a whole answer: a
        transcript of words spoken before that request, or speech that began within
        TURN_PAUSE_MAX_S of the caller's last word."""
        if turn.index < 0 or turn.llm_request is None or turn.bot_stopped is not None:
            return False
        if voiced is None:
            return True
        if turn.vad_stopped is None or self._vad_onset is None:
            return False
        return self._vad_onset - (turn.vad_stopped - (turn.vad_stop_secs or 0.0)) < TURN_PAUSE_MAX_S

    def _cut_off(self, turn: TurnTimeline, by_pause: bool) -> None:
        """The pipeline ended this turn too early: count it, set the cut-off answer aside, and wait
        for the answer to the whole turn."""
        if by_pause:
            turn.false_cutoffs += 1
            turn.cutoffs_heard += turn.first_bot_audio is not None  # the caller heard the answer start
        else:
            turn.stt_cutoffs += 1
        turn.cut_off_text = f"{turn.cut_off_text} {turn.bot_text}".strip()
        turn.bot_text = ""
        turn.cut_off_engine += turn.engine
        turn.engine = []
        for moment in _ANSWER_MOMENTS:
            setattr(turn, moment, None)
        if self._late_text is not None:
            # Words that came after the cut-off request are asked about in the next one: not late.
            text, at = self._late_text
            turn.user_text, turn.transcript_final = f"{turn.user_text} {text}".strip(), at
            self._late_text = None

    def _flush_late_text(self) -> None:
        if self._late_text is not None and self.turns:
            turn = self.current
            turn.user_text = f"{turn.user_text} {self._late_text[0]}".strip()
            turn.late_transcript = True
        self._late_text = None

    def _llm_requested(self, now: float) -> None:
        self._last_activity = now
        self._flush_late_text()
        turn = self.current
        turn.llm_requests.append(now)
        if turn.llm_request is None:
            turn.llm_request = now
        turn.llm_calls += 1

    def _maybe_report(self, turn: TurnTimeline) -> None:
        if turn.index >= 0 and self._on_turn and turn.index not in self._reported:
            self._reported.add(turn.index)
            self._on_turn(turn)

    def _finish(self, turn: TurnTimeline) -> None:
        if turn.index >= 0:
            self._maybe_report(turn)

    def finish(self) -> list[TurnTimeline]:
        """Call at the end of the call: reports the last turn and returns every turn."""
        self._flush_late_text()
        if self.turns:
            self._finish(self.turns[-1])
        return self.turns
