"""`MicTransport`: Pipecat's LocalAudioTransport with a callback-fed speaker and echo cancellation
(why: voice_agent/transports/mic.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pyaudio
from loguru import logger
from pipecat.frames.frames import InputAudioRawFrame, InterruptionFrame, OutputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor, FrameProcessorSetup
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.local.audio import (
    LocalAudioInputTransport,
    LocalAudioOutputTransport,
    LocalAudioTransport,
    LocalAudioTransportParams,
)

from voice_agent.transports.echo_cancel import EchoCanceller
from voice_agent.transports.quiet import quiet_stderr

LEAD_S = 0.06      # audio kept queued ahead of the speaker: what a barge-in may still let through
BLOCK_S = 0.02     # PortAudio's callback block, both ways


class PlaybackBuffer:
    """Audio waiting for the speaker: the pipeline puts, PortAudio's callback takes (silence when
    empty, so the stream never runs dry), a barge-in clears."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._lock = threading.Lock()

    def put(self, pcm: bytes) -> None:
        with self._lock:
            self._data += pcm

    def take(self, nbytes: int) -> bytes:
        with self._lock:
            out = bytes(self._data[:nbytes])
            del self._data[:nbytes]
        return out + bytes(nbytes - len(out))

    def clear(self) -> int:
        with self._lock:
            n = len(self._data)
            self._data.clear()
        return n

    def __len__(self) -> int:
        return len(self._data)


class MicOutputTransport(LocalAudioOutputTransport):
    """The speaker, fed by PortAudio's callback from a `PlaybackBuffer`."""

    def __init__(self, py_audio: pyaudio.PyAudio, params: LocalAudioTransportParams,
                 echo: EchoCanceller | None) -> None:
        super().__init__(py_audio, params)
        self._echo = echo
        self.buffer = PlaybackBuffer()

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await BaseOutputTransport.setup(self, setup)  # not the parent's: it opens a blocking stream
        if self._params.audio_out_channels != 1:
            raise ValueError("the mic demo plays mono audio (audio_out_channels=1)")
        self._out_stream = self._py_audio.open(
            format=pyaudio.paInt16, channels=1, rate=self.sample_rate, output=True,
            frames_per_buffer=int(self.sample_rate * BLOCK_S), stream_callback=self._play,
            output_device_index=self._params.output_device_index)
        if self._echo is not None:
            self._echo.set_latency("render", self.output_latency_s)

    def _play(self, _in: Any, frame_count: int, _time: Any, _status: int) -> tuple[bytes, int]:
        block = self.buffer.take(frame_count * 2)
        if self._echo is not None:
            self._echo.far_end(block, self.sample_rate)
        return block, pyaudio.paContinue

    @property
    def output_latency_s(self) -> float:
        return float(self._out_stream.get_output_latency()) if self._out_stream else 0.0

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if not self._out_stream:
            return False
        self.buffer.put(frame.audio)
        # Pace the pipeline to the speaker: Pipecat's timing (bot speaking, interruptions) assumes
        # a write returns when its audio is about to play.
        ahead_s = len(self.buffer) / (2 * self.sample_rate) - LEAD_S
        if ahead_s > 0:
            await asyncio.sleep(ahead_s)
        return True

    async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            self.buffer.clear()  # the caller spoke over the bot: what is queued must not play
        await super().process_frame(frame, direction)


class MicInputTransport(LocalAudioInputTransport):
    """The microphone, cleaned of the speaker's echo before anything downstream hears it."""

    def __init__(self, py_audio: pyaudio.PyAudio, params: LocalAudioTransportParams,
                 echo: EchoCanceller | None) -> None:
        super().__init__(py_audio, params)
        self._echo = echo

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await BaseInputTransport.setup(self, setup)
        if self._params.audio_in_channels != 1:
            raise ValueError("the mic demo records mono audio (audio_in_channels=1)")
        self._in_stream = self._py_audio.open(
            format=pyaudio.paInt16, channels=1, rate=self.sample_rate, input=True,
            frames_per_buffer=int(self.sample_rate * BLOCK_S), stream_callback=self._record,
            input_device_index=self._params.input_device_index)
        if self._echo is not None:
            self._echo.set_latency("capture", self.input_latency_s)

    def _record(self, in_data: bytes, _count: int, _time: Any, _status: int) -> tuple[None, int]:
        try:
            audio = self._echo.near_end(in_data, self.sample_rate) if self._echo is not None else in_data
        except Exception as e:  # a failing canceller must not silence the caller
            logger.warning(f"echo canceller failed ({e}); the microphone goes on without it")
            self._echo, audio = None, in_data
        frame = InputAudioRawFrame(audio=audio, sample_rate=self.sample_rate, num_channels=1)
        asyncio.run_coroutine_threadsafe(self.push_audio_frame(frame), self.get_event_loop())
        return None, pyaudio.paContinue

    @property
    def input_latency_s(self) -> float:
        return float(self._in_stream.get_input_latency()) if self._in_stream else 0.0


class MicTransport(LocalAudioTransport):
    """LocalAudioTransport with `MicInputTransport` and `MicOutputTransport` sharing one canceller."""

    def __init__(self, params: LocalAudioTransportParams, *, aec: bool = True) -> None:
        with quiet_stderr():  # PortAudio's probing of JACK and ALSA prints pages of noise
            super().__init__(params)
        self.echo = EchoCanceller() if aec else None

    def input(self) -> FrameProcessor:
        if not self._input:
            self._input = MicInputTransport(self._pyaudio, self._params, self.echo)
        return self._input

    def output(self) -> FrameProcessor:
        if not self._output:
            self._output = MicOutputTransport(self._pyaudio, self._params, self.echo)
        return self._output
