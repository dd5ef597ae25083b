"""Echo cancellation for the mic demo: WebRTC's audio processing module (AEC3, noise suppression,
high-pass filter), as the `livekit` package ships it (`livekit.rtc.AudioProcessingModule`).

On open laptop speakers the microphone hears the bot; without this the VAD takes the bot's own
voice for the caller and the bot answers itself. The output stream hands every block it plays to
`far_end`, the input stream passes every block it records through `near_end`, and the module
subtracts what it predicts of the first from the second. Both run on PortAudio's callback threads,
so one lock guards the module. WebRTC takes exactly 10 ms per call: odd-sized blocks are carried
over to the next call.
"""

from __future__ import annotations

import threading

FRAME_S = 0.01  # the module's frame: 10 ms


class EchoCanceller:
    """`far_end(pcm, rate)`: what the speaker is about to play; `near_end(pcm, rate) -> pcm`: the
    microphone's block with the echo of the far end removed (same length, int16 mono)."""

    def __init__(self, delay_ms: int = 60, noise_suppression: bool = True) -> None:
        from livekit import rtc

        self._rtc = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, noise_suppression=noise_suppression,
                                              high_pass_filter=True, auto_gain_control=False)
        self._lock = threading.Lock()
        self._far_rest = b""
        self._near_rest = b""
        self._near_out = bytearray()  # cleaned audio not yet handed back (at most one frame behind)
        self.delay_ms = delay_ms      # render + capture latency: the module's delay estimate starts here
        self._latency_s = {"render": delay_ms / 2000, "capture": delay_ms / 2000}

    def set_latency(self, side: str, seconds: float) -> None:
        """A stream's own latency as PortAudio reports it ("render" or "capture"): their sum is the
        delay from a far-end block to its echo in the near end."""
        self._latency_s[side] = max(0.0, seconds)
        self.delay_ms = round(1000 * sum(self._latency_s.values()))

    def far_end(self, pcm: bytes, sample_rate: int) -> None:
        with self._lock:
            frames, self._far_rest = _frames(self._far_rest + pcm, sample_rate)
            for buf in frames:
                self._apm.process_reverse_stream(self._rtc.AudioFrame(buf, sample_rate, 1, len(buf) // 2))

    def near_end(self, pcm: bytes, sample_rate: int) -> bytes:
        """The block with the echo removed. A block that is not a whole number of 10 ms frames comes
        back delayed by the part carried over (silence at the very start), so lengths always match."""
        with self._lock:
            frames, self._near_rest = _frames(self._near_rest + pcm, sample_rate)
            for buf in frames:  # the module writes each cleaned frame back into its buffer
                self._apm.set_stream_delay_ms(self.delay_ms)  # WebRTC wants it before every frame
                self._apm.process_stream(self._rtc.AudioFrame(buf, sample_rate, 1, len(buf) // 2))
                self._near_out += buf
            if len(self._near_out) < len(pcm):  # only while the first partial frame fills
                self._near_out[:0] = bytes(len(pcm) - len(self._near_out))
            out = bytes(self._near_out[:len(pcm)])
            del self._near_out[:len(pcm)]
        return out


def _frames(data: bytes, sample_rate: int) -> tuple[list[bytearray], bytes]:
    """`data` (int16 mono) cut into whole 10 ms frames, and the rest, carried to the next call."""
    step = int(sample_rate * FRAME_S) * 2
    whole = len(data) - len(data) % step
    return [bytearray(data[i:i + step]) for i in range(0, whole, step)], data[whole:]
