"""A Pipecat transport whose "phone line" is a recorded call.

Input: the caller's audio is pushed as 20 ms `InputAudioRawFrame`s on the recording's own clock.
Frame i (covering [20i, 20i+20) ms of the file) is pushed at call time 20(i+1) ms, when a live
line would have delivered it, so a moment in the pipeline and a position in the recording share
one time axis: the `CallClock`.

Output: bot audio is "played" at real-time pace (a write returns when its chunk starts playing,
like a sound card with one chunk of buffer), and every chunk is kept with its call time, so the
bot's side can be laid next to the caller's in a time-aligned stereo WAV.

Fast mode skips silence, and only where that cannot change a measured latency: while the
pipeline has been idle for `quiet_s` (nobody speaking, no LLM or TTS work in flight), in a part
of the recording that the offline VAD found silent, stopping `margin_s` before the caller speaks
again. The skipped audio is still pushed, in a burst, so the VAD and STT see exactly the same
samples; only the clock jumps. Every measured interval starts at the end of the caller's speech
and ends with the bot's first audio, and a skip can neither start inside one (the pipeline would
not be idle) nor reach into the next (the margin), so per-turn latencies are the same as in
real time. What fast mode does change is wall-clock timers that fire during silence (a
"are you still there?" idle prompt would come later or not at all).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
from pipecat.frames.frames import CancelFrame, EndFrame, InputAudioRawFrame, OutputAudioRawFrame, StartFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregator
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from voice_agent.latency.truth import Segment

FRAME_S = 0.02
RATE = 16000
FRAME_SAMPLES = int(RATE * FRAME_S)


class CallClock:
    """Seconds since the call started, plus any silence fast mode skipped (the call is ahead of the
    wall clock by that much)."""

    def __init__(self) -> None:
        self._t0: float | None = None
        self.skipped_s = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()

    @property
    def started(self) -> bool:
        return self._t0 is not None

    def now(self) -> float:
        if self._t0 is None:
            return 0.0
        return time.monotonic() - self._t0 + self.skipped_s

    def skip_to(self, t: float) -> None:
        ahead = t - self.now()
        if ahead > 0:
            self.skipped_s += ahead

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)


class FileInputTransport(BaseInputTransport):
    """Feeds the caller's audio, then silence until `hang_up()` (the line stays open while the bot
    finishes its last answer)."""

    def __init__(self, samples: np.ndarray, clock: CallClock, params: TransportParams, *, fast: bool = False,
                 segments: list[Segment] | None = None, idle_for: Callable[[], float] | None = None,
                 quiet_s: float = 1.0, margin_s: float = 1.0, on_progress: Callable[[float], None] | None = None,
                 on_connected: Callable[[], object] | None = None, **kwargs) -> None:
        super().__init__(params, **kwargs)
        self._samples = samples
        self._clock = clock
        self._fast = fast
        self._segments = segments or []
        self._idle_for = idle_for or (lambda: 0.0)
        self._quiet_s, self._margin_s = quiet_s, margin_s
        self._on_progress = on_progress
        self._on_connected = on_connected
        self._feeder: asyncio.Task | None = None
        self.file_done = asyncio.Event()
        self._hang_up = asyncio.Event()
        self._go = asyncio.Event()
        self.fed_s = 0.0
        self.due: dict[int, float] = {}  # frame id -> call time it was due, until the VAD takes it

    def start_feeding(self) -> None:
        """The line opens: called once the whole pipeline has started (models loaded), as a
        live call's audio only starts flowing once the bot is up."""
        self._go.set()

    def hang_up(self) -> None:
        self._hang_up.set()

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        if self._feeder is None:
            self._feeder = self.create_task(self._feed(), name="replay-feeder")

    async def stop(self, frame: EndFrame) -> None:
        await self._stop_feeder()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        await self._stop_feeder()
        await super().cancel(frame)

    async def _stop_feeder(self) -> None:
        self._hang_up.set()
        if self._feeder is not None:
            await self.cancel_task(self._feeder)
            self._feeder = None

    def _may_skip(self, t: float) -> bool:
        """Whether the frame starting at file time `t` may be pushed without waiting for it."""
        if not self._fast or self._idle_for() < self._quiet_s:
            return False
        for seg in self._segments:
            if seg.start_s - self._margin_s <= t <= seg.end_s:
                return False  # too close to (or inside) the caller's speech
        return True

    async def _feed(self) -> None:
        await self._go.wait()
        self._clock.start()
        if self._on_connected:
            result = self._on_connected()
            if asyncio.iscoroutine(result):
                await result
        n = len(self._samples)
        silence = bytes(FRAME_SAMPLES * 2)
        i = 0
        while True:
            start = i * FRAME_SAMPLES
            if start < n:
                chunk = self._samples[start:start + FRAME_SAMPLES]
                audio = chunk.astype("<i2").tobytes().ljust(FRAME_SAMPLES * 2, b"\0")
            else:
                if not self.file_done.is_set():
                    self.file_done.set()
                if self._hang_up.is_set():
                    return
                audio = silence
            due = (i + 1) * FRAME_S
            if self._may_skip(i * FRAME_S):
                self._clock.skip_to(due)
                await asyncio.sleep(0)  # let the pipeline take each frame, as it would live
            else:
                await self._clock.sleep_until(due)
            frame = InputAudioRawFrame(audio=audio, sample_rate=RATE, num_channels=1)
            self.due[frame.id] = due
            await self.push_audio_frame(frame)
            self.fed_s = due
            if self._on_progress and start < n:
                self._on_progress(min(due, n / RATE))
            i += 1


class ReplayProbe(BaseObserver):
    """Opens the line once the pipeline has started, and measures how late each chunk of caller
    audio reaches the VAD (the user aggregator) against the time it was due. On a machine that
    cannot keep up in real time that lag grows, and every latency measured on top of it is
    inflated by it: the report shows it so such a run is not mistaken for the pipeline's speed."""

    def __init__(self, transport: ReplayTransport, **kwargs) -> None:
        super().__init__(observe_every_push=True, **kwargs)
        self._transport = transport
        self.lags_s: list[float] = []

    async def on_pipeline_started(self) -> None:
        self._transport.start_feeding()

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, InputAudioRawFrame) and isinstance(data.destination, LLMUserAggregator):
            due = self._transport.input_due.pop(data.frame.id, None)
            if due is not None:
                self.lags_s.append(self._transport.clock.now() - due)


class CaptureOutputTransport(BaseOutputTransport):
    """Plays bot audio at real-time pace and keeps every chunk with its call time."""

    def __init__(self, clock: CallClock, params: TransportParams, **kwargs) -> None:
        super().__init__(params, **kwargs)
        self._clock = clock
        self._play_end = 0.0
        self.chunks: list[tuple[float, bytes]] = []

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = self._clock.now()
        start = max(now, self._play_end)
        duration = len(frame.audio) / 2 / frame.sample_rate / max(1, frame.num_channels)
        self._play_end = start + duration
        self.chunks.append((start, bytes(frame.audio)))
        await self._clock.sleep_until(start)
        return True

    def bot_track(self, length: int, rate: int = RATE) -> np.ndarray:
        """The bot's side as int16 at `rate`, `length` samples or longer if the bot spoke past it."""
        end = max([int(round(t * rate)) + len(a) // 2 for t, a in self.chunks] + [length])
        track = np.zeros(end, dtype=np.int32)
        for t, audio in self.chunks:
            pcm = np.frombuffer(audio, dtype="<i2")
            at = int(round(t * rate))
            track[at:at + len(pcm)] += pcm
        return np.clip(track, -32768, 32767).astype(np.int16)


class ReplayTransport(BaseTransport):
    """Input from a recording, output captured; both on one `CallClock`. It raises the usual
    "on_client_connected" / "on_client_disconnected" events, so a pipeline that greets the caller
    on connect behaves as on a live line."""

    def __init__(self, samples: np.ndarray, *, fast: bool = False, segments: list[Segment] | None = None,
                 on_progress: Callable[[float], None] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clock = CallClock()
        self._params = TransportParams(
            audio_in_enabled=True, audio_in_sample_rate=RATE, audio_in_channels=1,
            audio_out_enabled=True, audio_out_sample_rate=RATE, audio_out_channels=1,
            audio_out_end_silence_secs=0)
        self._idle_probe: Callable[[], float] = lambda: 0.0
        self._input = FileInputTransport(samples, self.clock, self._params, fast=fast, segments=segments,
                                         idle_for=lambda: self._idle_probe(), on_progress=on_progress,
                                         on_connected=self._connected, name="ReplayInput")
        self._output = CaptureOutputTransport(self.clock, self._params, name="ReplayOutput")
        self._register_event_handler("on_client_connected")
        self._register_event_handler("on_client_disconnected")

    @property
    def params(self) -> TransportParams:
        return self._params

    def set_idle_probe(self, probe: Callable[[], float]) -> None:
        """Fast mode asks this (the latency observer's `idle_for`) whether it may skip."""
        self._idle_probe = probe

    def start_feeding(self) -> None:
        self._input.start_feeding()

    @property
    def input_due(self) -> dict[int, float]:
        return self._input.due

    async def _connected(self) -> None:
        await self._call_event_handler("on_client_connected", "replay")

    async def hang_up(self) -> None:
        self._input.hang_up()
        await self._call_event_handler("on_client_disconnected", "replay")

    @property
    def file_done(self) -> asyncio.Event:
        return self._input.file_done

    @property
    def capture(self) -> CaptureOutputTransport:
        return self._output

    def input(self) -> FrameProcessor:
        return self._input

    def output(self) -> FrameProcessor:
        return self._output
