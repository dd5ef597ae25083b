"""The phone call's websocket transport, with an output that stays silent after a barge-in.

Pipecat's audio task awaits (filters, speaking-state frames) between taking a chunk off its queue
and writing it. A barge-in in that gap sends the provider's `clear` first and the stale chunk after
it, so the caller hears a blip of the interrupted reply after the bot was told to fall silent.
"""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import Frame, InterruptionFrame, OutputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.websocket.fastapi import FastAPIWebsocketOutputTransport, FastAPIWebsocketTransport
from pipecat.utils.utils import obj_id


class BargeInSafeOutput(FastAPIWebsocketOutputTransport):
    """Drops interruptible audio chunks made before the latest interruption (frame ids grow with
    creation time, so an id below the mark was queued for the reply the caller cut off)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stale_below = 0
        self.dropped_after_barge_in = 0

    def mark_interruption(self) -> None:
        self._stale_below = obj_id()

    def is_stale(self, frame: OutputAudioRawFrame) -> bool:
        return frame.id < self._stale_below and frame.interruptible

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            self.mark_interruption()  # before the `clear` goes out
        await super().process_frame(frame, direction)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self.is_stale(frame):
            self.dropped_after_barge_in += 1
            return False  # not spoken, so not passed on to the assistant's context either
        return await super().write_audio_frame(frame)


class PhoneWebsocketTransport(FastAPIWebsocketTransport):
    """Pipecat's FastAPI websocket transport with `BargeInSafeOutput` as its output."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._output = BargeInSafeOutput(self, self._client, self._params, name=self._output_name)

    def output(self) -> BargeInSafeOutput:
        return self._output
