"""The one engine bridge both frameworks use (voice_agent/brain): its trimming rule, and what a
barge-in leaves behind, on the real engine.

- trimming drops whole oldest turns, keeps the system prompt and the latest turn, and remembers
  its cut so that the next turn's prompt keeps the same prefix (and reuses the KV cache);
- a turn abandoned mid-stream (barge-in) keeps the session's cache: the next turn reuses it and
  says exactly what a fresh session says for the same messages (fp32, where the two are equal).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from voice_agent.brain import Brain, BrainError, HistoryTrimmer, TurnEvent, TurnResult, drop_oldest_turn
from voice_agent.brain.engine_bridge import EngineBrain

SYSTEM = {"role": "system", "content": "You are a dental receptionist. Answer in one short sentence."}


def turn(i: int, with_tool: bool = False) -> list[dict]:
    msgs = [{"role": "user", "content": f"question {i}"}]
    if with_tool:
        msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                  "function": {"name": "lookup_patient", "arguments": "{}"}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": "{}"}]
    return msgs + [{"role": "assistant", "content": f"answer {i}"}]


async def run_turn(brain: Brain, messages: list[dict], **params) -> TurnResult:
    async with contextlib.aclosing(brain.turn(messages, **params)) as events:
        async for ev in events:
            if ev.type == "done":
                return ev.result
    raise AssertionError("no result")


# -- the trimming rule (no model) ------------------------------------------------------------------
def test_dropping_a_turn_takes_its_replies_and_tool_results_and_keeps_the_system_prompt():
    history = [SYSTEM, *turn(0, with_tool=True), *turn(1), {"role": "user", "content": "now"}]
    assert drop_oldest_turn(history) == [SYSTEM, *turn(1), {"role": "user", "content": "now"}]
    assert drop_oldest_turn([SYSTEM, {"role": "user", "content": "now"}]) is None  # the latest turn stays
    assert drop_oldest_turn([SYSTEM, *turn(0)]) is None


def test_the_cut_is_remembered_for_the_next_turn_and_forgotten_for_another_history():
    trimmer = HistoryTrimmer()
    first = [SYSTEM, *turn(0), *turn(1), *turn(2), {"role": "user", "content": "now"}]
    assert trimmer.apply(first) == first  # nothing cut yet
    cut = trimmer.shorter(trimmer.shorter(first))
    assert cut == [SYSTEM, *turn(2), {"role": "user", "content": "now"}] and trimmer.dropped == 4
    # The call goes on: the next request starts where the last one did, so its prefix is unchanged.
    grown = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]
    assert trimmer.apply(grown) == [*cut, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]
    other = [SYSTEM, *turn(7), {"role": "user", "content": "hi"}]
    assert trimmer.apply(other) == other and trimmer.dropped == 0


class ContextLimit(Brain):
    """A brain whose server accepts at most `limit` messages (a context_length_exceeded otherwise),
    to check how Brain.turn applies the rule; it answers with how many messages it got."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.requests = limit, []

    @property
    def model_name(self) -> str:
        return "limit"

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        self.requests.append(len(messages))
        if len(messages) > self.limit:
            raise BrainError(BrainError.CONTEXT_TOO_LONG, f"{len(messages)} messages")
        yield TurnEvent("answer", "ok")
        yield TurnEvent("done", result=TurnResult(str(len(messages)), "", [], [], "stop"))


async def test_a_turn_too_long_is_retried_shorter_and_the_next_turn_starts_at_the_cut():
    brain = ContextLimit(limit=6)
    history = [SYSTEM, *turn(0), *turn(1), *turn(2), {"role": "user", "content": "now"}]  # 8 messages
    assert (await run_turn(brain, history)).text == "6"
    assert brain.requests == [8, 6]
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert (await run_turn(brain, history)).text == "6"
    assert brain.requests[2:] == [8, 6]  # started at the remembered cut (10 -> 8), then one more turn
    with pytest.raises(BrainError) as e:
        await run_turn(ContextLimit(limit=1), [SYSTEM, {"role": "user", "content": "x"}])
    assert e.value.code == BrainError.CONTEXT_TOO_LONG  # nothing left to drop: the error stands
    with pytest.raises(BrainError, match="unknown turn parameter"):
        await run_turn(brain, history, top_k=3)


# -- on the real engine ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(base_engine_fp32):
    return base_engine_fp32  # conftest: smollm2-base in fp32 (session reuse == scratch holds in fp32)


async def test_a_history_over_the_context_is_trimmed_and_the_next_turn_reuses_the_cache(engine, monkeypatch):
    old = [m for i in range(4) for m in ({"role": "user", "content": f"Question {i}: " + "teeth " * 40},
                                         {"role": "assistant", "content": f"Answer {i} is short."})]
    history = [SYSTEM, *old, {"role": "user", "content": "Are you open on Friday?"}]
    one_turn_less = drop_oldest_turn(history)
    size = len(engine.prepare(one_turn_less, reasoning_effort="instant", max_tokens=8).tokens)
    monkeypatch.setattr(engine, "max_context", size + 8 + 40)  # the whole history no longer fits
    with pytest.raises(Exception, match="context too long"):
        engine.prepare(history, reasoning_effort="instant", max_tokens=8)

    brain = EngineBrain(engine)
    first = await run_turn(brain, history, reasoning_effort="instant", max_tokens=8)
    assert first.metrics["prompt_tokens"] == size and brain.trimmer.dropped == 2
    history += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Thanks!"}]
    second = await run_turn(brain, history, reasoning_effort="instant", max_tokens=8)
    # Same cut, same prefix: all of the first prompt came from the cache.
    assert brain.trimmer.dropped == 2
    assert second.metrics["cached_tokens"] >= first.metrics["prompt_tokens"]


async def test_a_barge_in_keeps_the_cache_and_the_next_turn_answers_as_a_fresh_session_would(engine):
    brain = EngineBrain(engine)
    messages = [SYSTEM, {"role": "user", "content": "Tell me everything about teeth whitening."}]
    heard = []
    async with contextlib.aclosing(brain.turn(messages, reasoning_effort="instant", max_tokens=64)) as events:
        async for ev in events:
            if ev.type == "answer" and ev.text.strip():
                heard.append(ev.text)
                break  # the caller barged in after the first words
    assert heard
    nxt = [*messages, {"role": "assistant", "content": "".join(heard)},
           {"role": "user", "content": "Sorry, I meant cleaning. How long does it take?"}]
    after = await run_turn(brain, nxt, reasoning_effort="instant", max_tokens=16)
    fresh = await run_turn(EngineBrain(engine), nxt, reasoning_effort="instant", max_tokens=16)
    assert after.text and after.text == fresh.text
    assert after.metrics["cached_tokens"] > 0.5 * after.metrics["prompt_tokens"]  # kept, not reset
    assert fresh.metrics["cached_tokens"] == 0
    assert brain.session.history[-1] == {"role": "assistant", "content": after.text}
