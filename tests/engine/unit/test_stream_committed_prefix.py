"""Answer text streams as soon as a block's left part is committed, and says exactly what the
finished blocks say (engine/text/request.py `_absorb_committed_prefix`, `safe_stream_cut`)."""

from __future__ import annotations

import pytest

from engine.text.request import safe_stream_cut

SYSTEM = "You are the receptionist of Bright Smile Dental. Answer briefly."


@pytest.mark.parametrize(
    ("full", "start", "stops", "cut"),
    [
        ("Sure, I can help", 0, [], 16),             # plain text streams whole
        ("Sure <tool_call>", 0, [], 5),              # never a tag: block_rewrite may repair it
        ("Sure </th", 0, [], 5),
        ("ok a > b", 0, [], 5),
        ("Let me tool_call", 0, [], 7),              # a bare "tool_call" becomes a call opener
        ("Let me tool", 0, [], 7),                   # ...and so may a tail that begins one
        ("Let me tools", 0, [], 12),                 # not a prefix of it any more
        ("Bye now\nUser: hi", 0, ["\nUser:"], 7),   # never a stop string
        ("Bye now\nUs", 0, ["\nUser:"], 7),          # nor a tail that may begin one
        ("caf\ufffd", 0, [], 3),                     # nor half a character
        ("Hello <x> there", 9, [], 15),              # rules apply after what already streamed
        ("Hello th", 8, [], 8),                      # nothing new: stays at start
    ],
)
def test_safe_stream_cut(full, start, stops, cut):
    assert safe_stream_cut(full, start, stops) == cut


def _stream(eng, messages, early: bool, **kw):
    """Stream a turn; return (each answer event's text with the forward passes run before it, the result)."""
    eng.stream_committed_prefix = early
    passes = 0
    out, result = [], None
    forward = eng.runner.forward

    def counting(plan, rows):
        nonlocal passes
        passes += 1
        return forward(plan, rows)

    eng.runner.forward = counting
    try:
        for ev in eng.stream(messages, **kw):
            if ev.type == "answer":
                out.append((passes, ev.text))
            elif ev.type == "done":
                result = ev.result
    finally:
        del eng.runner.forward  # the instance attribute: the method is the class's again
        eng.stream_committed_prefix = True
    return out, result


@pytest.mark.parametrize("question", [
    "How long does a filling usually take?",
    "Can you cancel my appointment tomorrow? I'm sick.",
    "Do I need to bring anything to my first visit?",
])
def test_the_default_model_streams_committed_words_before_their_block_is_complete(default_engine, question):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    # Order "prefix": a block's committed left part exists before the block is final. (Order
    # "verify", the default, finalises what it commits in the pass that commits it.)
    kw = {"reasoning_effort": "instant", "max_tokens": 32, "order": "prefix"}
    whole, r_whole = _stream(default_engine, msgs, early=False, **kw)
    early, r_early = _stream(default_engine, msgs, early=True, **kw)
    # The same decode: the same tokens, the same answer, and the stream says exactly the answer.
    assert r_early.raw_text == r_whole.raw_text
    assert r_early.metrics["forward_passes"] == r_whole.metrics["forward_passes"]
    assert "".join(t for _, t in early).strip() == r_early.text
    assert "".join(t for _, t in whole).strip() == r_whole.text
    # Every character streams no later than it did with whole blocks, and some stream passes earlier.
    def pass_per_char(evs):
        return [p for p, t in evs for _ in t]

    at_early, at_whole = pass_per_char(early), pass_per_char(whole)
    assert len(at_early) == len(at_whole)
    assert all(e <= w for e, w in zip(at_early, at_whole, strict=True))
    assert len(early) > len(whole)
    assert sum(at_early) < sum(at_whole)


def test_streaming_early_keeps_tool_calls_intact(default_engine):
    tools = [{"type": "function", "function": {
        "name": "cancel_appointment", "description": "Cancel the caller's appointment.",
        "parameters": {"type": "object", "properties": {"patient_name": {"type": "string"}},
                       "required": ["patient_name"]}}}]
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "this is dana whitfield please cancel my appointment"}]
    whole, r_whole = _stream(default_engine, msgs, early=False, tools=tools, reasoning_effort="instant", max_tokens=48)
    early, r_early = _stream(default_engine, msgs, early=True, tools=tools, reasoning_effort="instant", max_tokens=48)
    assert r_early.raw_text == r_whole.raw_text
    assert r_whole.tool_calls  # the default model cancels for a caller who gave the name
    # The same message; only the call ids differ, as they are fresh per call.
    calls = [[c["function"] for c in r.tool_calls] for r in (r_early, r_whole)]
    strip = [{k: v for k, v in r.message().items() if k != "tool_calls"} for r in (r_early, r_whole)]
    assert calls[0] == calls[1] and strip[0] == strip[1]
    # What streams early is what streams whole, markup the model wrote itself included.
    assert "".join(t for _, t in early) == "".join(t for _, t in whole)
    assert "".join(t for _, t in early).strip() == r_early.text


SAMPLE_TURN_1 = [
    {"role": "system", "content": "{system}"},
    {"role": "user", "content": "Hi, I'd like to book a teeth cleaning for next Tuesday."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "find_free_slots", "arguments": "{\"date\": \"next Tuesday\", \"service\": \"cleaning\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"date\": \"2026-12-08\", \"day\": \"Tuesday, December 8th\", "
                                                       "\"free_times\": [\"9 am\", \"9:30 am\", \"10 am\"]}"},
    {"role": "assistant", "content": "On Tuesday, December 8th I have 9 am, 9:30 am or 10 am. Which would you like?"},
    {"role": "user", "content": "Do you have anything in the morning?"},
]


@pytest.mark.parametrize("order", ["prefix", "verify"])
def test_a_reply_that_begins_a_call_is_announced_before_the_opener_is_whole(default_engine, order):
    """The opener "<tool_call>" is five tokens: under "prefix" the parser sees it only when its
    second block finishes. A reply whose committed text begins "<tool" is announced at once (one
    pass sooner on the sample call's second turn, where the model opens a booking), and only once.
    Under "verify" the pass that makes "<" final predicts "tool_call>" after it: announced then."""
    import datetime as dt

    from voice_agent.scenarios import load_scenario

    sc = load_scenario("dental_clinic")
    msgs = [dict(m) for m in SAMPLE_TURN_1]
    msgs[0]["content"] = sc.system_prompt_for(dt.date(2026, 12, 1))
    passes = {"n": 0}
    forward = default_engine.runner.forward

    def counted(*a, **k):
        passes["n"] += 1
        return forward(*a, **k)

    default_engine.runner.forward = counted
    try:
        events = [(e, passes["n"]) for e in default_engine.stream(msgs, tools=sc.tools, reasoning_effort="instant",
                                                                   call_progress=True, order=order)]
    finally:
        default_engine.runner.forward = forward
    announced = [n for e, n in events if e.type == "tool_call"]
    first_args = next(n for e, n in events if e.type == "tool_args")
    assert len(announced) == 1 and announced[0] < first_args
    assert events[-1][0].result.tool_calls  # it was a call
