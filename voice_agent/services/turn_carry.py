"""`TurnCarry`: a caller's turn so far, carried across a pause inside it.

A caller who pauses mid-thought ("I'd like to book a teeth cleaning ... for next Tuesday") ends one
VAD segment and starts another. Whisper transcribes each segment alone, and on a short fragment
that starts mid-sentence it drops words: tiny.en heard "Tuesday, please." for "for next Tuesday,
please." after a 0.6 s pause, and the whole line read as one clip came out right. So when speech
resumes within `TURN_PAUSE_MAX_S` of the last segment (the observer's rule for one turn), the new
segment is transcribed behind the turn's earlier audio, and only the words after the earlier
transcript are kept. When the longer clip's transcript does not begin with the earlier words
(Whisper heard the first part differently), the fragment is transcribed alone, as before.

A segment Whisper heard no words in is carried too (at most `MAX_UNHEARD_S`): a caller's first
word alone ("Hi", then a breath) is often too short to read, and the words after it then carry it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from voice_agent.latency.timeline import TURN_PAUSE_MAX_S

MAX_CARRY_S = 12.0  # a longer turn is not re-heard: the clip would cost too much on the turn's path
MAX_UNHEARD_S = 2.0  # the most audio with no words read carried in front of the next segment
_WORD = re.compile(r"[A-Za-z0-9']+")


class TurnCarry:
    """The audio and transcript of the caller's turn so far (16-bit PCM at `sample_rate`)."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.audio = b""
        self.text = ""
        self._gap_bytes = 0  # audio since the last segment ended

    def clear(self) -> None:
        self.audio, self.text = b"", ""

    def silence(self, n_bytes: int) -> None:
        """Audio heard outside a segment."""
        self._gap_bytes += n_bytes

    def segment_started(self) -> None:
        """Speech again: the same turn when it resumed within TURN_PAUSE_MAX_S, else a new one."""
        if self._gap_bytes > TURN_PAUSE_MAX_S * self.sample_rate * 2:
            self.clear()

    def segment_ended(self, audio: bytes, text: str) -> None:
        """A segment's audio (without padding) and the words kept from it."""
        self._gap_bytes = 0
        if not text:
            # No words read: carried in front of the next segment (a first word too short to read
            # alone), unless the turn already has words or the clip is long (then it was noise).
            if not self.text and len(self.audio) + len(audio) <= MAX_UNHEARD_S * self.sample_rate * 2:
                self.audio += audio
            return
        if len(self.audio) + len(audio) > MAX_CARRY_S * self.sample_rate * 2:
            self.clear()
            self.audio, self.text = audio, text
            return
        self.audio += audio
        self.text = f"{self.text} {text}".strip()

    def transcribe(self, segment: bytes, transcribe: Callable[[bytes], Any]) -> Any:
        """`transcribe(segment)`, heard behind the turn's earlier audio when there is some. The
        result's `.text` is only the new words."""
        audio, text = self.audio, self.text  # an early pass runs in a thread: read the carry once
        if audio:
            whole = transcribe(audio + segment)
            rest = words_after(whole.text, text) if text else whole.text
            if rest is not None:
                return replace(whole, text=rest)
        return transcribe(segment)


def words_after(whole: str, prefix: str) -> str | None:
    """The text of `whole` after its first words, when those are `prefix`'s words (case and
    punctuation aside); None when `whole` does not begin with them."""
    want = [w.lower() for w in _WORD.findall(prefix)]
    found = list(_WORD.finditer(whole))
    if not want or len(found) < len(want) or [m.group().lower() for m in found[: len(want)]] != want:
        return None
    rest = whole[found[len(want) - 1].end():].lstrip(" .,;:!?-")
    return rest[:1].upper() + rest[1:] if rest else ""
