"""Frame processors that tests put into a Pipecat pipeline to watch it and end it."""

from __future__ import annotations

from pipecat.frames.frames import EndWorkerFrame, Frame, LLMFullResponseEndFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class StopAfterResponses(FrameProcessor):
    """Records what the LLM pushes and ends the pipeline after the n-th complete response."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.frames = n, []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
        await self.push_frame(frame, direction)
        if isinstance(frame, LLMFullResponseEndFrame):
            self.n -= 1
            if self.n == 0:
                await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
