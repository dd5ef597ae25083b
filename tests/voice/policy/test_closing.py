"""A caller who only closes the call is said goodbye to (voice_agent/policy/closing.py), without a decode."""

from __future__ import annotations

import pytest

from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.types import TurnEvent
from voice_agent.policy.closing import closing_only, goodbye_answer
from voice_agent.scenarios import CallPolicy, load_scenario

SCENARIO = load_scenario("dental_clinic")


@pytest.mark.parametrize("words", ["great that's all i needed", "so great that's all i needed", "cheers bye",
                                   "ok thank you bye bye", "no that's it thanks bye", "thank you that's everything",
                                   "wonderful thanks have a good day", "Perfect, thank you. Goodbye!",
                                   "That's all, thanks.", "nope nothing else thanks"])
def test_closings_alone_are_closings(words):
    assert closing_only(words)


@pytest.mark.parametrize("words", ["thanks", "thank you", "great", "that's all for tuesday then",
                                   "that's it, can you also book my son in", "bye the way i need to move my visit",
                                   "actually can we make it uh 12:00", "no, that's wrong, I said eleven",
                                   "thanks, and what are your hours?"])
def test_anything_else_is_not(words):
    assert not closing_only(words)


def test_only_the_callers_latest_words_and_only_with_a_reply_configured():
    msgs = [{"role": "user", "content": "great that's all i needed"}]
    assert goodbye_answer(msgs, SCENARIO.policy) == SCENARIO.goodbye_reply
    assert SCENARIO.goodbye_reply == "Thanks for calling Bright Smile Dental. Goodbye!"
    assert goodbye_answer(msgs, CallPolicy()) is None
    assert goodbye_answer(msgs + [{"role": "assistant", "content": "Bye!"}], SCENARIO.policy) is None


class MovesTheBooking(Brain):
    """What v7 answered "great that's all i needed" with, after a booking (seed-5 gen_021)."""

    @property
    def model_name(self) -> str:
        return "v7-like"

    async def _attempt(self, messages, params):
        call = {"id": "c1", "type": "function", "function": {"name": "move_appointment", "arguments":
                '{"patient_name": "Tomas Mancini", "new_date": "2026-12-03", "new_time": "09:30"}'}}
        yield TurnEvent("done", result=TurnResult(text="", reasoning="", tool_calls=[call], tool_errors=[],
                                                  finish_reason="tool_calls"))


async def test_the_brain_says_goodbye_instead_of_decoding():
    brain = MovesTheBooking()
    brain.policy = SCENARIO.policy
    msgs = [{"role": "assistant", "content": "You're booked for a whitening on Thursday at 9:30 am. Anything else?"},
            {"role": "user", "content": "so great that's all i needed"}]
    events = [e async for e in brain.turn(msgs, tools=SCENARIO.tools)]
    assert [(e.type, e.text) for e in events] == [("answer", SCENARIO.goodbye_reply), ("done", "")]
    m = events[-1].result.metrics
    assert m["answered_goodbye"] is True and m["decided_by"] == "closing_only"
    assert m["forward_passes"] == 0 and m["ttft_ms"] == m["ttfat_ms"] >= 0  # said at once, nothing decoded
    assert events[-1].result.tool_calls == []
    # a client that set tool_choice gets the decode it asked for (here the ask guard then asks
    # for the name nobody said), not the goodbye
    forced = [e async for e in brain.turn(msgs, tools=SCENARIO.tools, tool_choice="required")]
    assert "answered_goodbye" not in (forced[-1].result.metrics or {})
    assert all(e.text != SCENARIO.goodbye_reply for e in forced)
