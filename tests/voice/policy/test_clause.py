"""The TTS gets a reply's first clause as soon as it is written, then sentences as before."""

from __future__ import annotations

import pytest
from pipecat.services.tts_service import TextAggregationMode

from voice_agent.services.clause import FirstClauseAggregator


async def _pieces(agg: FirstClauseAggregator, chunks: list[str]) -> list[str]:
    out = []
    for c in chunks:
        out += [a.text async for a in agg.aggregate(c)]
    rest = await agg.flush()
    return out + ([rest.text] if rest else [])


@pytest.mark.asyncio
async def test_first_clause_goes_before_the_sentence_ends_and_the_rest_by_sentences():
    agg = FirstClauseAggregator(aggregation_type=TextAggregationMode.SENTENCE, max_words=8)
    chunks = ["You're booked for", " a cleaning on Tuesday,", " December 8th at 10 am, Jordan.", " Anything else?"]
    got = await _pieces(agg, chunks)
    assert got == ["You're booked for a cleaning on Tuesday,", "December 8th at 10 am, Jordan.", "Anything else?"]
    # the next reply (after the flush at the response end) gets its first clause early again
    assert (await _pieces(agg, ["Sorry, I can only help with appointments, and questions."]))[0] == \
        "Sorry, I can only help with appointments,"


@pytest.mark.asyncio
async def test_a_long_first_clause_is_cut_after_max_words_and_short_ones_wait():
    agg = FirstClauseAggregator(aggregation_type=TextAggregationMode.SENTENCE, min_words=3, max_words=5)
    got = await _pieces(agg, ["Hi, thanks for calling the clinic today about your visit."])
    assert got == ["Hi, thanks for calling the clinic", "today about your visit."]


@pytest.mark.asyncio
async def test_by_default_a_reply_without_a_clause_mark_starts_after_four_words():
    agg = FirstClauseAggregator(aggregation_type=TextAggregationMode.SENTENCE)
    got = await _pieces(agg, ["What", " day", " would", " you", " like", " to", " come", " in?"])
    assert got == ["What day would you like", "to come in?"]


def test_the_first_clause_words_flag_reaches_the_options():
    import argparse

    from voice_agent.config import CallOptions, add_flags

    p = argparse.ArgumentParser()
    add_flags(p, ("first_clause_words",))
    assert CallOptions.from_args(p.parse_args(["--first-clause-words", "6"])).first_clause_words == 6
    assert CallOptions.from_args(p.parse_args([])).first_clause_words == 4
    with pytest.raises(SystemExit):
        p.parse_args(["--first-clause-words", "0"])
