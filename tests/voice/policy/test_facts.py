"""Questions about the clinic are answered from the scenario's facts (voice_agent/policy/facts.py)."""

from __future__ import annotations

import pytest

from voice_agent.brain import Brain, TurnResult
from voice_agent.brain.types import TurnEvent
from voice_agent.policy.facts import FOLLOW_UP, fact_answer
from voice_agent.scenarios import ScenarioError, load_scenario, parse_scenario

SCENARIO = load_scenario("dental_clinic")


def _ask(text: str):
    return fact_answer([{"role": "user", "content": text}], SCENARIO.policy)


@pytest.mark.parametrize(("question", "topics"), [
    ("good afternoon how much is a filling", ["prices"]),            # held-out gen_022: the model misquoted it
    ("Hi, quick question: what time do you open on Fridays?", ["hours"]),  # hw_faq_hours: it searched Friday
    ("do you have a car park", ["parking"]),
    ("can i pay by card and is there parking", ["parking", "payment"]),
])
def test_a_question_about_facts_alone_is_answered_with_the_facts_word_for_word(question, topics):
    got, text = _ask(question)
    assert got == topics
    assert text == " ".join([*(SCENARIO.facts[t] for t in topics), FOLLOW_UP])


@pytest.mark.parametrize("words", [
    "i'd like to book a cleaning how much is it",   # a booking first: the model handles it
    "I need to cancel my appointment",
    "Do you have anything in the morning?",
    "what are your prices and where are you and do you take cash",  # three topics: left to the model
    "hi there do you know a good plumber",
    # unseen seed-11 gen_045: the name held a fact's word ("Park"), and the booking got the parking
    "I'm looking to get a routine checkup done let's say the tenth of december make it 3:00 the name is Grace Park.",
])
def test_requests_and_other_questions_are_left_to_the_model(words):
    assert _ask(words) is None


def test_a_fact_asked_by_a_caller_who_gives_a_name_is_still_answered():
    got, _ = _ask("hi this is john parker is there parking")
    assert got == ["parking"]


def test_only_the_callers_latest_words_count():
    msgs = [{"role": "user", "content": "how much is a filling"},
            {"role": "assistant", "content": "A filling is from 120 dollars."},
            {"role": "user", "content": "ok book me in for one on friday"}]
    assert fact_answer(msgs, SCENARIO.policy) is None
    assert fact_answer(msgs[:1] + [{"role": "tool", "content": "{}"}], SCENARIO.policy) is None


class NoModel(Brain):
    @property
    def model_name(self) -> str:
        return "none"

    async def _attempt(self, messages, params):
        yield TurnEvent("done", result=TurnResult(text="a model answer", reasoning="", tool_calls=[], tool_errors=[],
                                                  finish_reason="stop"))


async def test_the_brain_answers_a_fact_question_without_a_decode():
    brain = NoModel()
    brain.policy = SCENARIO.policy
    events = [e async for e in brain.turn([{"role": "user", "content": "is cigna ok"}], tools=SCENARIO.tools)]
    assert [e.type for e in events] == ["answer", "done"]
    assert events[0].text.startswith(SCENARIO.facts["insurance"])
    m = events[-1].result.metrics
    assert m["answered_from_facts"] == ["insurance"] and m["decided_by"] == "facts_only"
    assert m["forward_passes"] == 0 and m["ttft_ms"] == m["ttfat_ms"] >= 0  # said at once, nothing decoded
    events = [e async for e in brain.turn([{"role": "user", "content": "i have a question about my teeth"}],
                                          tools=SCENARIO.tools)]
    assert events[-1].result.text == "a model answer"


def test_fact_questions_name_real_facts():
    data = {"name": "x", "system_prompt": "hi", "facts": {"hours": "9 to 5"}, "fact_questions": {"hour": ["open"]}}
    with pytest.raises(ScenarioError, match="fact_questions.hour: the facts block has no 'hour'"):
        parse_scenario(data)
    data["fact_questions"] = {"hours": []}
    with pytest.raises(ScenarioError, match="fact_questions.hours must be a non-empty list"):
        parse_scenario(data)
