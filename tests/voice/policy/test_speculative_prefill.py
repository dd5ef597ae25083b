"""The caller's words are prefilled while the turn is still being decided (Pipecat's `run_test`,
the real engine): the turn that follows reuses them, and a turn with other words counts a waste."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from pipecat.frames.frames import ErrorFrame, LLMContextFrame, TranscriptionFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from voice_agent.scenarios import load_scenario
from voice_agent.services.llm import EngineLLMService, tools_schema
from voice_agent.services.speculative_prefill import SpeculativePrefill
from voice_agent.services.stt import EarlyTranscriptFrame

pytestmark = pytest.mark.slow
SCENARIO = load_scenario("dental_clinic")


def heard(*parts: str) -> list[TranscriptionFrame]:
    return [TranscriptionFrame(p, "caller", "2026-12-01T10:00:00") for p in parts]


async def settle(llm: EngineLLMService) -> None:
    for _ in range(300):  # the prefill runs in a worker thread
        if llm.brain._guess is None or llm.brain._guess[1].done():
            return
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("said", ["I'd like a cleaning on Tuesday.", "Actually, do you take Aetna?"])
async def test_the_turn_reuses_the_words_prefilled_while_it_was_decided(base_engine, said):
    llm = EngineLLMService(base_engine, system_instruction=SCENARIO.system_prompt_for(dt.date(2026, 11, 30)),
                           reasoning_effort="instant", max_tokens=8)
    ctx = LLMContext(messages=[], tools=tools_schema(SCENARIO.tools))
    ahead = SpeculativePrefill(llm, ctx)
    down, _ = await run_test(ahead, frames_to_send=heard("I'd like a cleaning", "on Tuesday."))
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == ["I'd like a cleaning", "on Tuesday."]
    await settle(llm)
    assert llm.brain.speculation.started == 2  # one guess per transcript, the second with both parts

    ctx.add_message({"role": "user", "content": said})  # what the user aggregator writes at turn end
    await run_test(llm, frames_to_send=[LLMContextFrame(ctx)])
    m, spec = llm.last_metrics, llm.brain.speculation
    if said == "I'd like a cleaning on Tuesday.":  # the guess, joined as Pipecat joins transcripts
        assert (spec.used, spec.wasted) == (1, 0)
        assert m["prompt_tokens"] - m["cached_tokens"] <= 4, m
    else:
        assert (spec.used, spec.wasted) == (0, 1)
        assert m["prompt_tokens"] - m["cached_tokens"] > 8, m  # the caller's other words were prefilled


async def test_an_early_pass_is_a_guess_and_the_transcript_repeating_it_starts_nothing(base_engine):
    llm = EngineLLMService(base_engine, system_instruction=SCENARIO.system_prompt_for(dt.date(2026, 11, 30)),
                           reasoning_effort="instant", max_tokens=8)
    ctx = LLMContext(messages=[], tools=tools_schema(SCENARIO.tools))
    ahead = SpeculativePrefill(llm, ctx)
    _, up = await run_test(ahead, frames_to_send=[*heard("I'd like a cleaning"), EarlyTranscriptFrame("on Tuesday.")])
    await settle(llm)
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    # the first segment's transcript, then the second segment's early pass, with both segments' words
    assert llm.brain.speculation.started == 2 and ahead._guessed == "I'd like a cleaning on Tuesday."
    _, up = await run_test(ahead, frames_to_send=heard("on Tuesday."))
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    assert llm.brain.speculation.started == 2  # its transcript is the same words: nothing new starts

    ctx.add_message({"role": "user", "content": "I'd like a cleaning on Tuesday."})
    await run_test(llm, frames_to_send=[LLMContextFrame(ctx)])
    spec = llm.brain.speculation
    assert (spec.used, spec.wasted) == (1, 0)
    assert llm.last_metrics["prompt_tokens"] - llm.last_metrics["cached_tokens"] <= 4


async def test_an_early_pass_is_a_guess_only_if_it_finishes_before_the_vads_stop():
    """The STT pushes an early pass's words as a guess when the pass finishes while its stop is still
    pending; a pass that finishes after the stop was confirmed (or after the caller resumed) is not
    pushed: its segment's transcript comes anyway. Deterministic here; the replay tests see either."""
    from voice_agent.services.stt import LocalWhisperSTTService, Transcript

    stt = LocalWhisperSTTService(early=True)  # the model loads at the pipeline's start, not here
    pushed = []

    async def push_frame(frame, direction=None):
        pushed.append(frame)

    stt.push_frame = push_frame

    def transcribe(pcm: bytes) -> Transcript:
        return Transcript(text=pcm.decode(), window="short")

    stt._early._transcribe = transcribe
    first = stt._early.start(b"before", b"before")
    await stt._announce(first)  # finished while the stop is pending: a guess
    assert [f.text for f in pushed if isinstance(f, EarlyTranscriptFrame)] == ["before"]
    assert stt.stats.early_guessed == 1
    stt._early.confirmed()

    second = stt._early.start(b"after", b"after")
    stt._early.confirmed()  # the VAD confirmed the stop before the pass finished
    await stt._announce(second)
    third = stt._early.start(b"resumed", b"resumed")
    stt._early.resumed()  # the caller went on
    await stt._announce(third)
    assert [f.text for f in pushed if isinstance(f, EarlyTranscriptFrame)] == ["before"]
    assert stt.stats.early_guessed == 1
