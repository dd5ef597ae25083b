"""Frame processors that tests put into a Pipecat pipeline to watch it and end it."""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import EndWorkerFrame, Frame, LLMFullResponseEndFrame, StartFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

# Longer than any turn a test waits for, shorter than pytest's own timeout: a turn that never comes
# (an error instead of the response a test waits for) fails the test's assertions instead of hanging
# the suite (Pipecat's tasks swallow pytest-timeout's signal).
DEADLINE_S = 300.0


class StopAfterResponses(FrameProcessor):
    """Records what the LLM pushes and ends the pipeline after the n-th complete response, or at
    `deadline_s` after the pipeline starts (then `timed_out` is True)."""

    def __init__(self, n: int, deadline_s: float = DEADLINE_S) -> None:
        super().__init__()
        self.n, self.frames = n, []
        self.deadline_s, self.timed_out = deadline_s, False
        self._deadline: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame) and self._deadline is None:
            self._deadline = asyncio.get_running_loop().create_task(self._end_at_deadline())
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMFullResponseEndFrame):
            self.n -= 1
            if self.n == 0:
                self._cancel_deadline()
                await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)

    async def _end_at_deadline(self) -> None:
        await asyncio.sleep(self.deadline_s)
        self.timed_out = True
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None and not self._deadline.done():
            self._deadline.cancel()

    async def cleanup(self) -> None:
        self._cancel_deadline()
        await super().cleanup()
