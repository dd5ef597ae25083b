"""The caller's phrases for days and times (voice_agent/said_phrases.py), on words from held-out calls."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.said_phrases import is_phrase, latest_said, phrases_in

TODAY = dt.date(2026, 12, 1)


@pytest.mark.parametrize(("text", "days", "times"), [
    ("could we do the 9th half past one would be great", ["the 9th"], ["half past one"]),
    ("it's for Joseph Zimmermann could we do the 11th make it two thirty pm.", ["the 11th"], ["two thirty pm"]),
    ("Do you have december 3rd at 1 pm?", ["december 3rd"], ["1 pm"]),
    ("can i push my checkup to thursday at half past two", ["thursday"], ["half past two"]),
    ("Monday the fourteenth of December at two in the afternoon then.", ["monday the fourteenth of december"],
     ["two in the afternoon"]),
    ("this coming friday at ten thirty am", ["this coming friday"], ["ten thirty am"]),
    ("sorry i meant eleven not ten", [], ["eleven", "ten"]),
    ("make it one o'clock so", [], ["one o'clock"]),
    ("It's for Fatima Honeycutt.", [], []),
    ("later in the day would be good", [], []),
])
def test_days_and_times_are_found_whole_and_a_day_of_the_month_is_no_time(text, days, times):
    assert phrases_in(text, "day", TODAY) == days
    assert phrases_in(text, "time", TODAY) == times


def test_the_newest_turn_that_names_one_decides_and_two_different_ones_decide_nothing():
    turns = ["I was hoping to book an exam half past ten would be great.", "could we do the 8th",
             "The name is Mikhail Fitzgerald."]
    assert latest_said("time", turns, TODAY) == "half past ten"
    assert latest_said("day", turns, TODAY) == "the 8th"
    assert latest_said("time", turns + ["sorry i meant eleven not ten"], TODAY) is None
    assert latest_said("time", ["at ten", "ten o'clock please"], TODAY) == "ten o'clock"  # one time, said two ways


@pytest.mark.parametrize(("value", "kind", "ok"), [
    ("1:00", "time", True), ("later in the day", "time", False), ("the seventh of december", "time", False),
    ("2026-12-10", "day", True), ("Wednesday, December 9th", "day", True), ("fatima Honeycutt", "day", False),
    ("anything", "text", True),
])
def test_a_value_is_a_phrase_of_its_kind_or_not(value, kind, ok):
    assert is_phrase(value, kind, TODAY) is ok
