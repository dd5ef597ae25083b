"""`HoldOnSpeechStopStrategy`: Pipecat's speech-timeout turn stop that does not end a turn while
the VAD hears speech it has not confirmed yet.

Pipecat ends a turn `user_speech_timeout` after the VAD's stop; the caller going on is confirmed
only `start_secs` after they resume. With the STT off the critical path (early, short-window
transcripts are back before the timeout), a pause a little longer than `stop_secs` therefore ended
the turn even when the caller had already gone on: the timer fired while the VAD was still in its
STARTING state. Here the stop waits (at most `max_hold_s`) for the VAD to decide: confirmed speech
keeps the turn open (Pipecat's VAD start resets the strategy), anything else ends it as before.
When the VAD hears nothing at that moment, nothing changes and nothing is added.

A segment the STT heard no words in (a breath or a click right after the caller's line) ends the
strategy's STT wait at once (`SegmentHeardNothingFrame`), as a transcript would: Pipecat otherwise
waits the STT's p99 latency for text that never comes (turn 1 of the sample call ended 0.8 s late).

The words set the wait (`voice_agent/services/turn_text.py`): once the segment's final transcript
is in, a turn whose words end a sentence ends `complete_s` after the VAD's stop instead of
`user_speech_timeout`, and one cut off mid-clause ("and", "for the", a trailing comma) waits
`incomplete_s`. Unsure text (no closing mark) keeps `user_speech_timeout`. The hold for speech the
VAD has not confirmed applies to all three.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADState
from pipecat.frames.frames import Frame, TranscriptionFrame
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy

from voice_agent.services.stt import SegmentHeardNothingFrame
from voice_agent.services.turn_text import TurnEnding, turn_ending
from voice_agent.services.vad import PauseAwareSileroVAD

POLL_S = 0.01


class HoldOnSpeechStopStrategy(SpeechTimeoutUserTurnStopStrategy):
    def __init__(self, *, vad: PauseAwareSileroVAD, max_hold_s: float, complete_s: float | None = None,
                 incomplete_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._vad = vad
        self._max_hold_s = max_hold_s
        self._hold_task: asyncio.Task | None = None
        # None: that ending keeps `user_speech_timeout`.
        self._wait_for: dict[TurnEnding, float | None] = {"complete": complete_s, "incomplete": incomplete_s}
        self._vad_stopped_at: float | None = None
        self.holds = 0  # stops that waited for the VAD (how often a resumption was in progress)
        self.endings: list[TurnEnding] = []  # how each segment's final transcript ended (tests read it)

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, SegmentHeardNothingFrame):
            # The segment's transcription is final and empty: as a finalized transcript would,
            # end the STT safety wait (Pipecat waits ttfs_p99 - stop_secs for text otherwise).
            frame = TranscriptionFrame("", "", "", finalized=True)
        return await super().process_frame(frame)

    async def _handle_vad_user_stopped_speaking(self, frame: Any) -> None:
        self._vad_stopped_at = asyncio.get_running_loop().time()
        await super()._handle_vad_user_stopped_speaking(frame)

    async def _handle_transcription(self, frame: TranscriptionFrame) -> None:
        await super()._handle_transcription(frame)
        # Only a final transcript after the VAD's stop, while the speech timer still runs, resets it.
        if not (frame.finalized and self._vad_stopped and self._vad_stopped_at is not None):
            return
        if self._user_speech_wait_done or self._vad_user_speaking or self._user_speech_timeout_task is None:
            return
        ending = turn_ending(self._text)
        self.endings.append(ending)
        wait = self._wait_for.get(ending)
        if wait is None:
            return
        left = max(0.0, wait - (asyncio.get_running_loop().time() - self._vad_stopped_at))
        await self.task_manager.cancel_task(self._user_speech_timeout_task)
        self._user_speech_timeout_task = self.task_manager.create_task(
            self._user_speech_timeout_handler(left), f"{self}::_user_speech_timeout_handler")

    async def trigger_user_turn_stopped(self, **kwargs: Any) -> None:
        if self._vad.state != VADState.STARTING:
            await super().trigger_user_turn_stopped(**kwargs)
        elif self._hold_task is None:
            # Wait in a task of its own: this may be called while the aggregator processes a frame,
            # and the VAD state only moves when the aggregator gets to the next audio.
            self.holds += 1
            self._hold_task = self.task_manager.create_task(self._hold(kwargs), f"{self}::hold")

    async def _hold(self, kwargs: dict[str, Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._max_hold_s
            while self._vad.state == VADState.STARTING and loop.time() < deadline:
                await asyncio.sleep(POLL_S)
        finally:
            self._hold_task = None
        logger.debug(f"{self}: turn stop held for speech; the VAD is now {self._vad.state.name}")
        if self._vad.state != VADState.SPEAKING:
            await super().trigger_user_turn_stopped(**kwargs)

    async def cleanup(self) -> None:
        if self._hold_task is not None:
            await self.task_manager.cancel_task(self._hold_task)
            self._hold_task = None
        await super().cleanup()
