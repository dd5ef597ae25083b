"""`PauseAwareSileroVAD`: Pipecat's Silero VAD analyzer, plus word of the moments in between.

Pipecat's VADController reports only confirmed changes: speech started (after `start_secs`) and
stopped (after `stop_secs` of silence). The analyzer's own states say more: SPEAKING -> STOPPING
is the first silent frame of a pause, STOPPING -> SPEAKING the caller going on before the stop was
confirmed. Listeners (the STT, to transcribe during the stop wait) hear about both, on the event
loop, in the order the audio was analysed. Nothing about the VAD's decisions changes.
"""

from __future__ import annotations

from typing import Protocol

from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADState


class PauseListener(Protocol):
    def on_vad_pause(self) -> None: ...

    def on_vad_resume(self) -> None: ...


class PauseAwareSileroVAD(SileroVADAnalyzer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._listeners: list[PauseListener] = []
        self._state = VADState.QUIET

    def add_listener(self, listener: PauseListener) -> None:
        self._listeners.append(listener)

    @property
    def state(self) -> VADState:
        """The state after the last analysed chunk (STARTING: speech heard, not yet confirmed)."""
        return self._state

    async def analyze_audio(self, buffer: bytes) -> VADState:
        state = await super().analyze_audio(buffer)
        before, self._state = self._state, state
        if before == VADState.SPEAKING and state == VADState.STOPPING:
            for listener in self._listeners:
                listener.on_vad_pause()
        elif before == VADState.STOPPING and state == VADState.SPEAKING:
            for listener in self._listeners:
                listener.on_vad_resume()
        return state
