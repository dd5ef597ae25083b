"""A caller's turn carried across a pause (voice_agent/services/turn_carry.py): a segment that
resumes the turn within TURN_PAUSE_MAX_S is heard behind the turn's earlier audio and gives only its
new words; after a longer silence, or when the longer clip reads differently, it is heard alone."""

from __future__ import annotations

from dataclasses import dataclass

from voice_agent.services.turn_carry import TurnCarry, words_after

RATE = 16000
SECOND = RATE * 2  # bytes of 16-bit mono PCM


@dataclass(frozen=True)
class Heard:
    text: str


class FakeWhisper:
    """Transcribes by lookup: each clip is named by its bytes."""

    def __init__(self, texts: dict[bytes, str]) -> None:
        self.texts, self.clips = texts, []

    def __call__(self, clip: bytes) -> Heard:
        self.clips.append(clip)
        return Heard(self.texts[clip])


def test_words_after_skips_the_earlier_words_whatever_their_case_and_marks():
    assert words_after("Hi, I'd like a cleaning. For next Tuesday, please.", "hi i'd like a cleaning") == \
        "For next Tuesday, please."
    assert words_after("Book a teeth cleaning.", "Hi, I'd like to book a teeth cleaning.") is None
    assert words_after("hi there", "hello there") is None
    assert words_after("Thank you.", "thank you") == ""


def test_a_segment_that_resumes_the_turn_is_heard_behind_it():
    first, second = b"A" * SECOND, b"B" * SECOND
    whisper = FakeWhisper({first: "I'd like a cleaning.", first + second: "I'd like a cleaning for next Tuesday.",
                           second: "Tuesday."})
    carry = TurnCarry(RATE)
    carry.segment_started()
    assert carry.transcribe(first, whisper).text == "I'd like a cleaning."
    carry.segment_ended(first, "I'd like a cleaning.")
    carry.silence(int(0.6 * SECOND))  # a pause inside the turn
    carry.segment_started()
    assert carry.transcribe(second, whisper).text == "For next Tuesday."
    assert whisper.clips[-1] == first + second
    carry.segment_ended(second, "For next Tuesday.")
    assert carry.text == "I'd like a cleaning. For next Tuesday."


def test_after_a_longer_silence_a_segment_is_a_new_turn_heard_alone():
    first, second = b"A" * SECOND, b"B" * SECOND
    whisper = FakeWhisper({second: "Bye."})
    carry = TurnCarry(RATE)
    carry.segment_ended(first, "I'd like a cleaning.")
    carry.silence(3 * SECOND)  # the bot answered; the caller speaks again later
    carry.segment_started()
    assert carry.transcribe(second, whisper).text == "Bye."
    assert whisper.clips == [second]


def test_when_the_longer_clip_reads_differently_the_fragment_is_heard_alone():
    first, second = b"A" * SECOND, b"B" * SECOND
    whisper = FakeWhisper({first + second: "Book a teeth cleaning.", second: "Tuesday, please."})
    carry = TurnCarry(RATE)
    carry.segment_ended(first, "Hi, I'd like to book a teeth cleaning.")
    carry.silence(int(0.5 * SECOND))
    carry.segment_started()
    assert carry.transcribe(second, whisper).text == "Tuesday, please."


def test_a_first_word_too_short_to_read_is_heard_with_the_words_after_it():
    hi, rest = b"H" * (SECOND // 2), b"R" * SECOND
    whisper = FakeWhisper({hi + rest: "Hi, I'd like a cleaning."})
    carry = TurnCarry(RATE)
    carry.segment_ended(hi, "")  # Whisper read nothing in "Hi" alone
    carry.silence(int(0.4 * SECOND))
    carry.segment_started()
    assert carry.transcribe(rest, whisper).text == "Hi, I'd like a cleaning."


def test_a_long_unread_clip_is_noise_and_a_long_turn_is_not_re_heard():
    carry = TurnCarry(RATE)
    carry.segment_ended(b"A" * 3 * SECOND, "")  # over MAX_UNHEARD_S with no words: not carried
    assert carry.audio == b"" and carry.text == ""
    carry.segment_ended(b"A" * 8 * SECOND, "one")
    carry.segment_ended(b"B" * 8 * SECOND, "two")  # past MAX_CARRY_S: only the last segment is kept
    assert carry.text == "two" and len(carry.audio) == 8 * SECOND
