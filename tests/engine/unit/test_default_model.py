"""The embedded default dLLM: loads offline, speaks English, decodes in parallel, calls tools."""

from __future__ import annotations

import re

import yaml

from engine.api import DEFAULT_ADAPTER
from engine.train.prompts import SCENARIOS_DIR

SCENARIO = yaml.safe_load((SCENARIOS_DIR / "dental_clinic" / "scenario.yaml").read_text())
SYSTEM = {"role": "system", "content": SCENARIO["system_prompt"] + "\nToday is Monday, 2026-11-30."}
TOOLS = [{"type": "function", "function": t} for t in SCENARIO["tools"]]


def test_default_model_is_the_trained_adapter(default_engine):
    assert DEFAULT_ADAPTER.exists() and DEFAULT_ADAPTER.stat().st_size < 25 * 2**20
    assert default_engine.info["adapter"]["model_name"] == default_engine.model_name
    assert "untrained" not in default_engine.model_name
    assert default_engine.family.block_size > 1


def test_answers_a_voice_turn_with_english_text(default_engine):
    r = default_engine.chat([SYSTEM, {"role": "user", "content": "Hi, what are your opening hours?"}],
                            reasoning_effort="instant", max_tokens=48)
    words = re.findall(r"[A-Za-z']+", r.text)
    assert len(words) >= 3, r.raw_text
    assert sum(len(w) for w in words) / max(len(r.text.replace(" ", "")), 1) > 0.6  # mostly letters


def test_commits_more_than_one_token_per_forward(default_engine):
    # Since 2026-12-01 `instant` commits only tokens at >= 0.9 confidence (step cap 3B/4): the old
    # 0.3 / B/2 setting decoded 2 tokens a pass but garbled the tool calls, so this measures the
    # parallelism the model earns on its own confidence, not a cap. A verify pass gains from drafts,
    # and an engine that has decoded nothing yet has none: its very first reply went one token a
    # pass (1.0, Intel Xeon with AMX, 2026-12-07), the same turn again 2.1. The turn is asked twice,
    # as a call's later turns are, so the test holds whatever ran before it on the engine.
    msgs = [SYSTEM, {"role": "user", "content": "Sorry, I'm a bit nervous about dentists."}]
    default_engine.chat(msgs, reasoning_effort="instant", max_tokens=48)
    r = default_engine.chat(msgs, reasoning_effort="instant", max_tokens=48)
    assert r.metrics["completion_tokens"] >= 8
    assert r.metrics["tokens_per_forward"] > 1.0, r.metrics


def test_makes_a_valid_tool_call_for_a_clear_request(default_engine):
    msgs = [SYSTEM, {"role": "user", "content": "Hi, this is Maria Lopez, I need to cancel my appointment."}]
    r = default_engine.chat(msgs, tools=TOOLS, reasoning_effort="medium", max_tokens=96)
    assert r.tool_calls, (r.raw_text, r.tool_errors)
    assert r.tool_calls[0]["function"]["name"] in {t["function"]["name"] for t in TOOLS}
