"""EngineLLMService through Pipecat's own test harness (`run_test`), on the real engine.

- only answer text becomes LLMTextFrames; the model's reasoning is never pushed (never spoken);
- a tool call goes through Pipecat function calling and books a row in the real SQLite store,
  then the result runs the model again;
- an engine failure in one turn is an ErrorFrame plus an apology, and the next turn works.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    FunctionCallResultFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    LLMUpdateSettingsFrame,
    MetricsFrame,
    TTSSpeakFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.tests.utils import run_test

from tests.pipeline_taps import StopAfterResponses
from voice_agent.policy.calendar_words import parse_time
from voice_agent.scenarios import load_scenario
from voice_agent.services.llm import EngineLLMService, EngineLLMSettings, EngineMetricsFrame, tools_schema

pytestmark = pytest.mark.slow
TODAY = dt.date(2026, 11, 30)
SCENARIO = load_scenario("dental_clinic")


def texts(frames: list[Frame]) -> str:
    return "".join(f.text for f in frames if isinstance(f, LLMTextFrame))


def make_llm(engine, **kw) -> EngineLLMService:
    kw.setdefault("system_instruction", SCENARIO.system_prompt_for(TODAY))
    return EngineLLMService(engine, **kw)


def responses(frames: list[Frame]) -> list[str]:
    """The text of each complete response (start .. end) the LLM pushed, in order."""
    out, cur = [], None
    for f in frames:
        if isinstance(f, LLMFullResponseStartFrame):
            cur = []
        elif isinstance(f, LLMTextFrame) and cur is not None:
            cur.append(f.text)
        elif isinstance(f, LLMFullResponseEndFrame):
            out.append("".join(cur or []))
    return out


def tool_call_to_copy(call: dict) -> LLMContext:
    """A context asking for `call` verbatim: the base model is weak at tools but copies text
    faithfully, so it emits a real tool call."""
    return LLMContext(
        [{"role": "user", "content": f"Repeat exactly this text and nothing else:\n<tool_call>\n{json.dumps(call)}\n</tool_call>"}],
        tools=tools_schema(SCENARIO.tools))


async def test_only_answer_text_is_pushed_never_reasoning(base_engine):
    # At "low" effort the model thinks first; that text must stay out of the LLMTextFrames.
    llm = make_llm(base_engine, reasoning_effort="low", max_tokens=76)
    ctx = LLMContext([{"role": "user", "content": "Hi! Are you open on Fridays?"}])
    down, up = await run_test(
        llm, frames_to_send=[LLMContextFrame(ctx)],
        pipeline_params=PipelineParams(enable_metrics=True, enable_usage_metrics=True))

    kinds = [type(f) for f in down if isinstance(f, (LLMFullResponseStartFrame, LLMFullResponseEndFrame, LLMTextFrame))]
    assert kinds[0] is LLMFullResponseStartFrame and kinds[-1] is LLMFullResponseEndFrame
    assert set(kinds[1:-1]) == {LLMTextFrame}
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    m = llm.last_metrics
    assert m["reasoning_tokens"] > 0 and llm.last_reasoning, "the model was expected to reason at low effort"
    spoken = texts(down)
    assert spoken.strip()
    assert llm.last_reasoning not in spoken
    for chunk in (llm.last_reasoning[i:i + 40] for i in range(0, len(llm.last_reasoning) - 40, 40)):
        assert chunk not in spoken, f"reasoning leaked into speech: {chunk!r}"

    engine_frames = [f for f in down if isinstance(f, EngineMetricsFrame)]
    assert len(engine_frames) == 1
    for key in ("ttft_ms", "ttfat_ms", "prefill_ms", "tokens_per_forward", "reasoning_tokens", "reasoning_effort"):
        assert key in engine_frames[0].metrics
    assert engine_frames[0].metrics["reasoning_effort"] == "low"
    ttfb = [d.value for f in down if isinstance(f, MetricsFrame) for d in f.data
            if isinstance(d, TTFBMetricsData) and d.model]  # (the first one is Pipecat's initial empty report)
    assert len(ttfb) == 1 and abs(ttfb[0] * 1000 - m["ttft_ms"]) < 250


@pytest.mark.slow
async def test_tool_call_books_a_row_in_sqlite_and_runs_the_model_again(base_engine, tmp_path):
    backend = SCENARIO.open_backend(tmp_path / "store", TODAY)
    db = backend.db
    day = "2026-12-02"
    t = db.find_free_slots({"date": day})["free_times"][0]
    assert {"patient_name": "John Smith", "date": day, "time": t} not in [
        {k: a[k] for k in ("patient_name", "date", "time")} for a in db.appointments()]

    def slow_book(args: dict) -> dict:
        time.sleep(0.7)  # slower than filler_after_s: the caller must hear the filler
        return db.book_appointment(args)

    handlers = SCENARIO.bind_handlers(backend) | {"book_appointment": slow_book}
    llm = make_llm(base_engine, reasoning_effort="instant", max_tokens=64, tools=handlers,
                   filler=SCENARIO.filler, filler_after_s=0.4)
    call = {"name": "book_appointment", "arguments": {"patient_name": "John Smith", "date": day, "time": t}}
    ctx = tool_call_to_copy(call)
    tap = StopAfterResponses(2)
    down, up = await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]),
                              frames_to_send=[LLMContextFrame(ctx)], send_end_frame=False)

    assert llm.turn_metrics[0]["tool_calls"] == ["book_appointment"], llm.turn_metrics
    booked = [a for a in db.appointments("John Smith") if (a["date"], a["time"]) == (day, parse_time(t))]
    assert len(booked) == 1
    results = [f for f in tap.frames if isinstance(f, FunctionCallResultFrame)]
    assert results and results[0].result["booked"] is True
    assert [f.text for f in tap.frames if isinstance(f, TTSSpeakFrame)] == [SCENARIO.filler]
    # The result went back into the context, and the model ran a second time on it.
    assert any(m.get("role") == "tool" and '"booked": true' in m.get("content", "") for m in ctx.get_messages())
    assert len(llm.turn_metrics) == 2 and llm.turn_metrics[1]["cached_tokens"] > 0
    assert not [f for f in up if isinstance(f, ErrorFrame)]


async def test_engine_error_is_an_error_frame_and_the_next_turn_works(base_engine, monkeypatch):
    llm = make_llm(base_engine, reasoning_effort="low", max_tokens=8)
    real_prepare = base_engine.prepare
    calls = {"n": 0}

    def flaky_prepare(messages, **kw):  # fault injection: the engine dies in the first turn only
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated engine crash")
        return real_prepare(messages, **kw)

    monkeypatch.setattr(base_engine, "prepare", flaky_prepare)
    too_long = LLMContext([{"role": "user", "content": "tooth " * 5000}])  # a real EngineInputError
    ok = LLMContext([{"role": "user", "content": "Hello."}])
    down, up = await run_test(llm, frames_to_send=[
        LLMContextFrame(ok),
        LLMContextFrame(too_long),
        LLMUpdateSettingsFrame(delta=EngineLLMSettings(reasoning_effort="instant")),
        LLMContextFrame(ok),
    ])
    errors = [f for f in up if isinstance(f, ErrorFrame)]
    assert len(errors) == 2
    assert "simulated engine crash" in errors[0].error and "context too long" in errors[1].error
    assert not any(e.fatal for e in errors) and llm.is_usable

    answers = responses(down)
    assert answers[0] == llm.apology and answers[1] == llm.apology
    assert answers[2].strip() and answers[2] != llm.apology  # the third turn ran on the engine
    assert llm.last_metrics["reasoning_effort"] == "instant"  # changed for this call at run time


async def test_fast_tool_needs_no_filler_and_a_raising_tool_becomes_an_error_dict(base_engine):
    llm = make_llm(base_engine, filler="One moment.", filler_after_s=0.4)
    assert await llm.run_tool("lookup", lambda a: {"ok": a["x"]}, {"x": 1}) == {"ok": 1}
    assert llm.fillers_spoken == 0

    def broken(_args: dict) -> dict:
        raise KeyError("patient_name")

    r = await llm.run_tool("lookup_patient", broken, {})
    assert "lookup_patient failed" in r["error"]


def test_bad_reasoning_effort_is_refused_at_construction(base_engine):
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        EngineLLMService(base_engine, reasoning_effort="extreme")


async def test_forced_tool_choice_applies_to_the_user_turn_only(base_engine):
    """A forced tool_choice answers the caller's request; once its result is in, the model may
    speak (no endless forced calls), and after max_tool_rounds it must."""
    llm = make_llm(base_engine, max_tool_rounds=2)
    forced = {"type": "function", "function": {"name": "lookup_patient"}}
    user = {"role": "user", "content": "When is my appointment? I'm John Smith."}
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "lookup_patient", "arguments": '{"patient_name": "John Smith"}'}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"next_appointment": null}'}

    def ctx(*msgs: dict) -> LLMContext:
        return LLMContext(list(msgs), tools=tools_schema(SCENARIO.tools), tool_choice=forced)

    messages, tools, choice = await llm._request(ctx(user))
    assert choice == forced and len(tools) == 5
    assert messages[0] == {"role": "system", "content": SCENARIO.system_prompt_for(TODAY)}
    assert messages[1] == user
    messages, _, choice = await llm._request(ctx(user, call, result))
    assert choice == "auto"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "lookup_patient" and messages[3] == result
    _, _, choice = await llm._request(ctx(user, call, result, call, result))
    assert choice == "none"


def test_pipecat_messages_become_engine_messages():
    from voice_agent.services.llm import to_engine_messages

    out = to_engine_messages([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "image_url", "image_url": {}},
                                     {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": ""},  # an empty turn (e.g. interrupted before any word) is dropped
        {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "x", "content": {"ok": True}},
        "not a message",
    ])
    assert out == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi there"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "content": '{"ok": true}', "tool_call_id": "x"},
    ]


async def test_a_warmed_call_prefills_only_the_callers_words_and_says_the_same(base_engine):
    tools = tools_schema(SCENARIO.tools)
    said = {}
    for name in ("cold", "warm"):
        llm = make_llm(base_engine, reasoning_effort="instant", max_tokens=12)
        if name == "warm":
            await llm.warm(LLMContext(messages=[], tools=tools))  # the call's context before anyone spoke
        ctx = LLMContext([{"role": "user", "content": "Hi! Are you open on Fridays?"}], tools=tools)
        down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(ctx)])
        said[name] = (responses(down), llm.last_metrics, llm.brain)
    (cold, _, _), (warm, m, brain) = said["cold"], said["warm"]
    assert brain.warm_tokens > 300  # the system prompt with its facts and the tools
    assert m["cached_tokens"] == brain.warm_tokens
    assert m["prompt_tokens"] - m["cached_tokens"] < 40, m  # the user turn and the reply header
    assert warm == cold  # the cache is exact: warming changes when, never what
