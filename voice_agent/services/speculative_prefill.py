"""`SpeculativePrefill`: between the STT and the user aggregator, each transcript of a turn not yet
decided goes to the LLM as a speculative prefill of the turn as heard so far. The end-of-turn
wait (the VAD's stop and the turn-stop hold) then overlaps the prefill, and at turn end the engine
has only the last tokens left. A guess the turn does not confirm is counted as wasted
(`EngineBrain.speculation`); what it computed past the common prefix is dropped, exactly.

The STT's early pass (`EarlyTranscriptFrame`, before the VAD confirms the stop) is a guess too,
made ~50-100 ms before the segment's transcript; the transcript that then repeats its words
starts nothing new.
"""

from __future__ import annotations

from pipecat.frames.frames import Frame, TranscriptionFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.string import TextPartForConcatenation, concatenate_aggregated_text

from voice_agent.services.llm import EngineLLMService
from voice_agent.services.stt import EarlyTranscriptFrame


class SpeculativePrefill(FrameProcessor):
    def __init__(self, llm: EngineLLMService, context: LLMContext) -> None:
        super().__init__()
        self._llm, self._context = llm, context
        self._parts: list[TextPartForConcatenation] = []
        self._messages_seen = len(context.get_messages())
        self._guessed: str | None = None  # the words of the latest guess this turn

    def heard(self, frame: TranscriptionFrame | EarlyTranscriptFrame) -> str:
        """The turn's words so far, joined by Pipecat's rule (the one its user aggregator uses),
        an early pass's words included but not kept (its segment's transcript will repeat them).
        A context that changed since the last transcript means a new turn began."""
        n = len(self._context.get_messages())
        if n != self._messages_seen:
            self._parts, self._messages_seen, self._guessed = [], n, None
        if isinstance(frame, EarlyTranscriptFrame):
            # joined as its segment's TranscriptionFrame will be (Pipecat's STT frames carry no spaces)
            early = TextPartForConcatenation(frame.text, includes_inter_part_spaces=False)
            return concatenate_aggregated_text([*self._parts, early])
        self._parts.append(TextPartForConcatenation(frame.text, includes_inter_part_spaces=frame.includes_inter_frame_spaces))
        return concatenate_aggregated_text(self._parts)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if (isinstance(frame, TranscriptionFrame | EarlyTranscriptFrame) and direction == FrameDirection.DOWNSTREAM
                and frame.text.strip()):
            heard = self.heard(frame)
            if heard != self._guessed:  # the transcript that repeats the early pass's words starts nothing
                self._guessed = heard
                await self._llm.speculate(self._context, heard)
