"""Speak the first clause, not the first sentence.

Pipecat's sentence aggregation holds a reply until its first sentence ends, and then until one more
character arrives (to tell "Dr." from a full stop): measured in the sample-call report as ~290 ms of
`llm_to_tts` wait per turn. `FirstClauseAggregator` releases the first piece of each reply at its
first clause boundary (, ; : or a dash) once it has MIN_WORDS words, or at a word boundary after
MAX_WORDS words, so the TTS starts on "You're booked for a cleaning on Tuesday," while the model is
still writing. The rest of the reply goes by sentences as before (the TTS is ahead by then).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipecat.utils.text.base_text_aggregator import Aggregation, TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

from voice_agent.config import FIRST_CLAUSE_WORDS

MIN_WORDS = 3   # "Sure, ..." alone is too short a clause to be worth a TTS request
MAX_WORDS = FIRST_CLAUSE_WORDS  # a long first clause is cut at a word boundary, not at its end
CLAUSE_MARKS = ",;:"


class FirstClauseAggregator(SimpleTextAggregator):
    def __init__(self, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS, **kwargs) -> None:
        super().__init__(**kwargs)
        self.min_words, self.max_words = min_words, max_words
        self._first = True

    async def aggregate(self, text: str) -> AsyncIterator[Aggregation]:
        if self._aggregation_type == TextType.TOKEN:
            async for a in super().aggregate(text):
                yield a
            return
        for char in text:
            self._text += char
            result = await self._check_sentence_with_lookahead(char)
            if result:
                self._first = False
                yield result
            elif self._first and self._clause_ready(char):
                piece = self._text.strip(" ")
                await super().reset()
                self._first = False
                yield Aggregation(text=piece, type=TextType.SENTENCE)

    def _clause_ready(self, char: str) -> bool:
        words = len(self._text.split())
        if char in CLAUSE_MARKS or (char == " " and self._text.rstrip().endswith((" -", " –"))):
            return words >= self.min_words
        return char == " " and words > self.max_words

    async def reset(self) -> None:
        await super().reset()
        self._first = True  # the next reply's first clause goes early again

    async def handle_interruption(self) -> None:
        await super().handle_interruption()
        self._first = True
