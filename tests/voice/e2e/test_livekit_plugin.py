"""The LiveKit Agents plugin on the real engine, in text mode (no LiveKit server, no audio).

The engine is "smollm2-base" (the AR base of the default model) so that the text is coherent
while the default model's adapter is still being trained; the plugin code is model-agnostic.
The function-call test gives the model three earlier cancellations in the chat history (real
FunctionCall / FunctionCallOutput items, which also exercises their conversion) so that a
135M model makes the call deterministically; the tool then really runs against SQLite.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from livekit.agents import Agent, AgentSession, APIStatusError, function_tool, llm
from livekit.agents.metrics import LLMMetrics

from engine import Engine
from tests.dental_pack import ClinicDB
from voice_agent.livekit import EngineLLM, EngineTurnMetrics, ScenarioAgent
from voice_agent.livekit.llm import chat_ctx_to_messages, tools_to_schemas
from voice_agent.policy.calendar_words import spoken_day, spoken_time
from voice_agent.scenarios import load_scenario

TODAY = dt.date(2026, 12, 1)  # a Tuesday; the seeded diary starts here


@pytest.fixture(scope="module")
def engine(base_engine: Engine) -> Engine:
    return base_engine  # conftest: "smollm2-base", one torch thread, loaded once per test session


def collect_metrics(lm: EngineLLM) -> tuple[list[LLMMetrics], list[EngineTurnMetrics]]:
    lk: list[LLMMetrics] = []
    ours: list[EngineTurnMetrics] = []
    lm.on("metrics_collected", lk.append)
    lm.on("engine_metrics", ours.append)
    return lk, ours


async def test_plain_answer_in_an_agent_session_with_ttft_metrics(engine: Engine) -> None:
    lm = EngineLLM(engine, reasoning_effort="instant", max_tokens=16)
    lk, ours = collect_metrics(lm)
    async with AgentSession(llm=lm) as session:
        await session.start(Agent(instructions="You are a friendly dental receptionist. Answer in one sentence."))
        result = await session.run(user_input="Hello, are you open on Mondays?")
        msg = result.expect.next_event().is_message(role="assistant").event().item
        assert msg.text_content and msg.text_content.strip()
        result.expect.no_more_events()
    assert len(lk) == 1 and lk[0].label.endswith("EngineLLM")
    assert 0 < lk[0].ttft <= lk[0].duration  # livekit's ttft: first spoken (answer) chunk
    assert lk[0].completion_tokens > 0 and lk[0].prompt_tokens > 0
    assert ours[0].request_id == lk[0].request_id
    assert ours[0].ttfat is not None and 0 < ours[0].ttfat <= lk[0].duration


async def test_streamed_chunks_carry_answer_text_only_never_reasoning(engine: Engine) -> None:
    # "low" effort makes the model think first (up to 64 tokens), then answer.
    lm = EngineLLM(engine, reasoning_effort="low", max_tokens=76)
    _, ours = collect_metrics(lm)
    ctx = llm.ChatContext()
    ctx.add_message(role="system", content="You are a dental receptionist on the phone.")
    ctx.add_message(role="user", content="Hi! Can I bring my child to a checkup?")
    stream = lm.chat(chat_ctx=ctx)
    contents: list[str] = []
    async with stream:
        async for chunk in stream:
            if chunk.delta and chunk.delta.content:
                contents.append(chunk.delta.content)
    spoken = "".join(contents)
    reasoning = ours[0].reasoning
    assert reasoning, "the model should have reasoned at effort=low"
    assert stream.result is not None and spoken.strip() == stream.result.text
    assert "<think>" not in spoken and "</think>" not in spoken
    assert reasoning not in spoken and reasoning[:40] not in spoken
    assert ours[0].ttft is not None and ours[0].ttfat is not None and ours[0].ttft < ours[0].ttfat


def few_shot_cancellations() -> llm.ChatContext:
    ctx = llm.ChatContext()
    for i, (name, day) in enumerate([("Maria Garcia", "2026-12-03"), ("Wei Chen", "2026-12-04"),
                                     ("Tom Baker", "2026-12-07")]):
        ctx.add_message(role="user", content=f"Cancel the appointment of {name}.")
        args = json.dumps({"patient_name": name})
        out = json.dumps({"cancelled": True, "patient_name": name, "date": day, "time": "10:00"})
        ctx.insert(llm.FunctionCall(call_id=f"call_{i}", name="cancel_appointment", arguments=args))
        ctx.insert(llm.FunctionCallOutput(call_id=f"call_{i}", name="cancel_appointment", output=out, is_error=False))
        ctx.add_message(role="assistant", content="Done.")
    return ctx


async def test_function_call_runs_the_sqlite_tool_and_reuses_the_kv_cache(engine: Engine, tmp_path) -> None:
    db = ClinicDB(tmp_path / "clinic.sqlite", today=TODAY)
    before = db.appointments("John Smith")
    assert before, "the seeded diary gives John Smith appointments"
    agent = ScenarioAgent(load_scenario("dental_clinic"), db.handlers(), greet=False)
    await agent.update_chat_ctx(few_shot_cancellations())
    lm = EngineLLM(engine, reasoning_effort="instant", max_tokens=40)
    _, ours = collect_metrics(lm)
    async with AgentSession(llm=lm) as session:
        await session.start(agent)
        result = await session.run(user_input="Cancel the appointment of John Smith.")
        result.expect.next_event().is_function_call(name="cancel_appointment", arguments={"patient_name": "John Smith"})
        out = result.expect.next_event().is_function_call_output(is_error=False).event().item
        result.expect.next_event().is_message(role="assistant")
    # The tool really ran: its answer came from the database, and the earliest booking is gone.
    assert json.loads(out.output) == {"cancelled": True, "patient_name": "John Smith", "service": before[0]["service"],
                                      "date": before[0]["date"], "time": before[0]["time"],
                                      "when": f"{spoken_day(dt.date.fromisoformat(before[0]['date']))} at "
                                              f"{spoken_time(before[0]['time'])}"}
    after = db.appointments("John Smith")
    assert len(after) == len(before) - 1 and before[0] not in after
    # Entering the call prefilled the instructions and tools: the first turn started from them.
    assert lm.brain.warm_tokens > 300 and ours[0].metrics["cached_tokens"] == lm.brain.warm_tokens
    # The reply after the tool reused the call's KV cache instead of prefilling everything again.
    assert len(ours) == 2 and ours[1].metrics["cached_tokens"] > 0.8 * ours[0].metrics["prompt_tokens"]


async def test_an_abandoned_stream_frees_the_session_for_the_next_turn(engine: Engine) -> None:
    lm = EngineLLM(engine, reasoning_effort="instant", max_tokens=16)
    ctx = llm.ChatContext()
    ctx.add_message(role="user", content="Tell me about teeth whitening.")
    stream = lm.chat(chat_ctx=ctx)
    async with stream:  # barge-in: the consumer leaves after the first words
        async for chunk in stream:
            if chunk.delta and chunk.delta.content:
                break
    ctx.add_message(role="user", content="Sorry, I meant cleaning. How long does a cleaning take?")
    answer = await lm.chat(chat_ctx=ctx).collect()
    assert answer.text
    assert lm.session.history and lm.session.history[-1]["role"] == "assistant"


async def test_bad_request_fails_the_turn_with_a_clear_error(engine: Engine) -> None:
    lm = EngineLLM(engine)
    ctx = llm.ChatContext()
    ctx.add_message(role="user", content="Hi")
    with pytest.raises(APIStatusError, match="reasoning_effort must be one of"):
        await lm.chat(chat_ctx=ctx, extra_kwargs={"reasoning_effort": "extreme"}).collect()
    with pytest.raises(ValueError, match="unknown extra_kwargs key 'top_k'"):
        lm.chat(chat_ctx=ctx, extra_kwargs={"top_k": 3})


def test_chat_context_and_tools_convert_to_openai_shape() -> None:
    ctx = llm.ChatContext()
    ctx.add_message(role="developer", content="Be brief.")
    ctx.add_message(role="user", content="Find Wei Chen.")
    ctx.insert(llm.FunctionCall(call_id="c1", name="lookup_patient", arguments='{"patient_name": "Wei Chen"}'))
    ctx.insert(llm.FunctionCallOutput(call_id="c1", name="lookup_patient", output='{"phone": "555-0103"}', is_error=False))
    assert chat_ctx_to_messages(ctx) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find Wei Chen."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "lookup_patient", "arguments": '{"patient_name": "Wei Chen"}'}}]},
        {"role": "tool", "content": '{"phone": "555-0103"}', "tool_call_id": "c1"},
    ]

    @function_tool
    async def get_opening_hours(day: str) -> str:
        """Opening hours on a day.

        Args:
            day: the weekday
        """
        return "9 to 5"

    scenario = load_scenario("dental_clinic")
    agent = ScenarioAgent(scenario, {"lookup_patient": lambda a: {}}, greet=False)
    schemas = tools_to_schemas([get_opening_hours, *agent.tools])
    by_name = {s["function"]["name"]: s["function"] for s in schemas}
    assert set(by_name) == {"get_opening_hours", "lookup_patient"}  # tools without handlers are left out
    assert by_name["get_opening_hours"]["parameters"]["required"] == ["day"]
    yaml_tool = next(t["function"] for t in scenario.tools if t["function"]["name"] == "lookup_patient")
    assert by_name["lookup_patient"]["parameters"] == yaml_tool["parameters"]  # the YAML schema, verbatim
