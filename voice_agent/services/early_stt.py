"""Early transcription: start Whisper during the VAD's stop wait, not after it.

The VAD confirms the end of speech only after `stop_secs` of silence (0.2 s). The audio the STT
will transcribe is (nearly) all there at the first silent frame, so `EarlyPasses` starts
transcribing it during the wait (the STT service starts it a little way in: EARLY_AFTER_S). When the stop is confirmed, the segment Pipecat hands to `run_stt` begins with exactly the
bytes the early pass heard (the rest is what the VAD called silence), and its result is used.
If the caller speaks again during the wait, the early pass is dropped (and counted): its words
will be part of a longer segment. A pass cannot be cancelled inside CTranslate2, so a dropped one
runs to its end and its result is thrown away.

No Pipecat import: the STT service (`voice_agent.services.stt`) drives this from VAD events.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

MAX_CONFIRMED = 4  # confirmed passes waiting for their segment; more means segments were lost


@dataclass
class STTStats:
    """Per call: how the STT's segments were transcribed."""

    segments: int = 0          # segments transcribed
    early_started: int = 0     # passes started at the first silent frame
    early_used: int = 0        # ... whose result was the segment's transcript
    early_dropped: int = 0     # ... dropped: the caller resumed during the VAD's stop wait
    early_guessed: int = 0     # ... whose words went to the LLM as a guess before the stop was confirmed
    short_fallbacks: int = 0   # short-window transcripts not trusted: the 30 s window redid them

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class EarlyPass:
    snapshot: bytes             # the segment's audio when the pause began
    future: asyncio.Future[Any]


class EarlyPasses:
    """The early passes of one STT service. All methods run on the event loop."""

    def __init__(self, transcribe: Callable[[bytes], Any], stats: STTStats) -> None:
        self._transcribe = transcribe  # blocking: pcm bytes -> result; run in a worker thread
        self._stats = stats
        self._pending: EarlyPass | None = None        # started, stop not yet confirmed
        self._confirmed: deque[EarlyPass] = deque(maxlen=MAX_CONFIRMED)

    @property
    def pending(self) -> EarlyPass | None:
        return self._pending

    def start(self, snapshot: bytes, pcm: bytes) -> EarlyPass | None:
        """The VAD heard the first silent frame: transcribe `pcm` (the snapshot plus padding).
        Returns the pass started (None: one is already running, or there is no audio)."""
        if self._pending is not None or not snapshot:
            return None
        future = asyncio.get_running_loop().run_in_executor(None, self._transcribe, pcm)
        future.add_done_callback(_retrieve)
        self._pending = EarlyPass(snapshot, future)
        self._stats.early_started += 1
        return self._pending

    def resumed(self) -> None:
        """The caller spoke again before the stop was confirmed: the pass heard only part of it."""
        if self._pending is not None:
            self._pending = None
            self._stats.early_dropped += 1

    def confirmed(self) -> None:
        """The VAD confirmed the stop: the pending pass belongs to the segment now queued."""
        if self._pending is not None:
            self._confirmed.append(self._pending)
            self._pending = None

    def reset(self) -> None:
        self._pending = None
        self._confirmed.clear()

    def take(self, segment: bytes) -> EarlyPass | None:
        """The confirmed pass for this segment: one whose snapshot the segment starts with. Passes
        confirmed before it belong to segments that never came, and are dropped."""
        for i, early in enumerate(self._confirmed):
            if segment.startswith(early.snapshot):
                for _ in range(i + 1):
                    self._confirmed.popleft()
                return early
        return None


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A dropped pass's error is nobody's to handle; reading it keeps asyncio from warning."""
    if not future.cancelled():
        future.exception()
