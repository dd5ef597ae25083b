"""A caller who only greets is greeted back (voice_agent/policy/greeting.py), without a decode."""

from __future__ import annotations

import pytest

from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.types import TurnEvent
from voice_agent.policy.greeting import greeting_answer, greeting_only
from voice_agent.scenarios import CallPolicy, load_scenario

SCENARIO = load_scenario("dental_clinic")


@pytest.mark.parametrize("words", ["Good morning.", "hi yes um", "Hello?", "Hey there!",
                                   "Hi Maya, good afternoon to you too.",
                                   # a bare ask for help names nothing to act on either
                                   "hi yes um i need some help", "Hi, can you help me with something?",
                                   "Hi, I have a question."])
def test_greetings_alone_are_greetings(words):
    assert greeting_only(words, frozenset({SCENARIO.policy.agent_name.lower()}))  # the agent's own name, from its greeting


def test_the_agents_name_comes_from_the_scenarios_greeting():
    assert SCENARIO.policy.agent_name == "Maya"
    assert not greeting_only("Hi Maya")  # another scenario's agent


@pytest.mark.parametrize("words", ["Hi, I'd like to book a cleaning", "yes", "good", "morning works for me",
                                   "I need help with my appointment", "can you help me book a cleaning",
                                   "i have a quick question how much is a filling"])
def test_anything_a_turn_could_act_on_is_not(words):
    assert not greeting_only(words)


def test_only_the_callers_latest_words_and_only_with_a_reply_configured():
    msgs = [{"role": "user", "content": "Good morning."}]
    assert greeting_answer(msgs, SCENARIO.policy) == SCENARIO.greeting_reply == "Hi! How can I help you today?"
    assert greeting_answer(msgs, CallPolicy()) is None
    assert greeting_answer(msgs + [{"role": "assistant", "content": "Hi!"}], SCENARIO.policy) is None


class SaysGoodbye(Brain):
    """What v7 answered "Good morning." with."""

    @property
    def model_name(self) -> str:
        return "v7-like"

    async def _attempt(self, messages, params):
        text = "Thanks for calling Bright Smile Dental. Goodbye!"
        yield TurnEvent("answer", text)
        yield TurnEvent("done", result=TurnResult(text=text, reasoning="", tool_calls=[], tool_errors=[],
                                                  finish_reason="stop"))


async def test_the_brain_greets_back_instead_of_decoding():
    brain = SaysGoodbye()
    brain.policy = SCENARIO.policy
    events = [e async for e in brain.turn([{"role": "assistant", "content": SCENARIO.greeting},
                                           {"role": "user", "content": "Good morning."}], tools=SCENARIO.tools)]
    assert [(e.type, e.text) for e in events] == [("answer", SCENARIO.greeting_reply), ("done", "")]
    m = events[-1].result.metrics
    assert m["answered_greeting"] is True and m["decided_by"] == "greeting_only"
    assert m["forward_passes"] == 0 and m["ttft_ms"] == m["ttfat_ms"] >= 0  # said at once, nothing decoded


async def test_a_tool_choice_the_client_set_is_left_alone():
    brain = SaysGoodbye()
    brain.policy = SCENARIO.policy
    events = [e async for e in brain.turn([{"role": "user", "content": "Good morning."}], tools=SCENARIO.tools,
                                          tool_choice="none")]
    assert events[-1].result.text.endswith("Goodbye!")  # the model's turn, as asked
