"""`turn_ending`: how a transcript so far ends, as Whisper writes it."""

from __future__ import annotations

import pytest

from voice_agent.services.turn_text import turn_ending


@pytest.mark.parametrize("text", [
    "Hi, I'd like to book a teeth cleaning for next Tuesday.",
    "Do you have anything in the morning?",
    "10 in the morning works. And my name is Jordan Lee.",
    "Great. Thank you so much. Bye.",
    "What is that for?",  # a question may end on a preposition
    "I think so.",
    '"Yes, please."',
])
def test_finished_lines_are_complete(text):
    assert turn_ending(text) == "complete"


@pytest.mark.parametrize("text", [
    "I'd like to book an appointment for...",
    "My name is, um,",
    "Could I come in on Tuesday and",
    "book it for the.",  # Whisper's period after a cut-off article
    "It's for my",
    "Um",
    "I'd like a cleaning -",
])
def test_lines_broken_off_mid_clause_are_incomplete(text):
    assert turn_ending(text) == "incomplete"


@pytest.mark.parametrize("text", ["", "   ", "ten in the morning works", "Hi, I'd like to book a teeth cleaning", "..."])
def test_no_words_or_no_closing_mark_is_unsure(text):
    assert turn_ending(text) == "unsure"
