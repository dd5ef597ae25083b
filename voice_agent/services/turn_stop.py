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
from voice_agent.services.vad import PauseAwareSileroVAD

POLL_S = 0.01


class HoldOnSpeechStopStrategy(SpeechTimeoutUserTurnStopStrategy):
    def __init__(self, *, vad: PauseAwareSileroVAD, max_hold_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._vad = vad
        self._max_hold_s = max_hold_s
        self._hold_task: asyncio.Task | None = None
        self.holds = 0  # stops that waited for the VAD (how often a resumption was in progress)

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, SegmentHeardNothingFrame):
            # The segment's transcription is final and empty: as a finalized transcript would,
            # end the STT safety wait (Pipecat waits ttfs_p99 - stop_secs for text otherwise).
            frame = TranscriptionFrame("", "", "", finalized=True)
        return await super().process_frame(frame)

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
