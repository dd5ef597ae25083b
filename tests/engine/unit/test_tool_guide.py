"""Schema-guided tool calls: the guide's grammar on text, and the engine infilling a call's skeleton."""

from __future__ import annotations

import json

import pytest
import torch

from engine import Engine
from engine.text.tool_calls import parse_tool_calls, validate_tools
from engine.text.tool_guide import ToolCallGuide, heard_continuation, snap
from engine.train.prompts import load_scenario_tools
from tests.tiny_models import save_tiny

DENTAL_TOOLS = validate_tools(load_scenario_tools("dental_clinic")[1])
CALL = [{"role": "system", "content": "You are a receptionist."}, {"role": "user", "content": "Cancel for Tom Smith."}]


def _continue_from(out: str, target: str) -> int:
    """Where a model that means to write `target` carries on after the text so far (forced skeleton
    included): just after the longest tail of `out` found in `target`."""
    if target.startswith(out):
        return len(out)
    for n in range(min(len(out), 30), 2, -1):
        i = target.rfind(out[-n:])
        if i >= 0:
            return i + n
    return len(target)


def guide_text(target: str, block_chars: int, **kw) -> tuple[str, ToolCallGuide]:
    """Feed a model that writes `target` in blocks of `block_chars` characters through a guide."""
    g, out = ToolCallGuide(DENTAL_TOOLS, **kw), ""
    for _ in range(100):
        pos = _continue_from(out, target)
        block = target[pos : pos + block_chars] or "<|im_end|>"
        edit = g.feed(block)
        out += block if edit is None else block[: edit.keep] + edit.forced
        if g.done:
            break
    return out, g


def _call(out: str) -> dict:
    parsed = parse_tool_calls("<tool_call>" + out, DENTAL_TOOLS)
    assert not parsed.errors, parsed.errors
    fn = parsed.calls[0]["function"]
    return {"name": fn["name"], "arguments": json.loads(fn["arguments"])}


@pytest.mark.parametrize("block_chars", [1, 3, 7, 40])
def test_a_well_formed_call_passes_through_unchanged(block_chars):
    target = ('\n{"name": "book_appointment", "arguments": {"patient_name": "Maria Lopez", '
              '"date": "2026-12-03", "time": "10:00", "service": "cleaning"}}\n</tool_call>')
    out, g = guide_text(target, block_chars)
    assert out == target and g.done


@pytest.mark.parametrize("block_chars", [3, 5, 11])
def test_wrong_names_keys_and_enums_are_snapped_into_the_schema(block_chars):
    out, g = guide_text('\n{"name": "cancelation", "args": {"name": "Tom Smith"}}', block_chars)
    assert g.done and _call(out) == {"name": "cancel_appointment", "arguments": {"patient_name": "Tom Smith"}}
    out, _ = guide_text('\n{"name": "find_free_slots", "arguments": {"date": "2026-12-02", "service": "clean"}}',
                        block_chars)
    assert _call(out)["arguments"] == {"date": "2026-12-02", "service": "cleaning"}


def test_a_call_closed_too_early_still_gets_every_required_argument():
    out, g = guide_text('\n{"name": "move_appointment", "arguments": {"patient_name": "Wei Chen"}}', 5)
    args = _call(out)["arguments"]
    assert g.done and set(args) == {"patient_name", "new_date", "new_time"}


def test_optional_arguments_are_the_models_choice():
    out, _ = guide_text('\n{"name": "find_free_slots", "arguments": {"date": "2026-12-02"}}\n</tool_call>', 4)
    assert _call(out)["arguments"] == {"date": "2026-12-02"}


def test_runaway_values_and_junk_end_in_a_parseable_call():
    out, g = guide_text('\n{"name": "lookup_patient", "arguments": {"patient_name": "' + "la " * 80, 6)
    assert g.done and len(_call(out)["arguments"]["patient_name"]) <= 100
    out, g = guide_text("  umm I think book it", 5)
    assert g.done and _call(out)["name"] in {t["function"]["name"] for t in DENTAL_TOOLS}


@pytest.mark.parametrize("block_chars", [1, 4, 9])
def test_a_string_the_model_never_closed_ends_at_the_objects_close(block_chars):
    """Seen on a held-out call: '"Thabo Shevchenko}}' and the name swallowed the close, the text
    after it and the call; the turn spoke the leftovers."""
    out, g = guide_text('{"patient_name": "Thabo Shevchenko}}\n</tool_call>\ntool__call>\n{"}}', block_chars,
                        forced_name="cancel_appointment")
    assert g.done and json.loads(out[: out.rindex("}")]) == {"patient_name": "Thabo Shevchenko"}
    out, g = guide_text('\n{"name": "lookup_patient", "arguments": {"patient_name": "Ana Ruiz\nok', block_chars)
    assert g.done and _call(out)["arguments"] == {"patient_name": "Ana Ruiz"}


def test_prompt_opened_calls_resume_where_the_prompt_stopped():
    out, g = guide_text('{"date": "2026-12-01"}}\n</tool_call>', 4, forced_name="find_free_slots")
    assert g.done and json.loads(out[: out.rindex("}")]) == {"date": "2026-12-01"}
    out, g = guide_text('{"name": "lookup_patient", "arguments": {"patient_name": "Wei Chen"}}', 4, opened=True)
    assert g.done and _call("\n" + out)["arguments"] == {"patient_name": "Wei Chen"}


def test_a_key_with_one_allowed_answer_costs_no_pass():
    """Whatever key the model wrote there would snap to the one allowed, so the guide writes it: a
    named cancel's prompt ends inside the name's value, and its first pass decodes the name."""
    assert ToolCallGuide(DENTAL_TOOLS, forced_name="cancel_appointment").take_opening() == '{"patient_name": "'
    # book_appointment has three required keys: the model picks the order, the prompt ends at '{"'
    assert ToolCallGuide(DENTAL_TOOLS, forced_name="book_appointment").take_opening() == '{"'
    assert ToolCallGuide(DENTAL_TOOLS, opened=True).take_opening() == '{"name": "'
    out, g = guide_text('{"patient_name": "Wei Chen"}}\n</tool_call>', 3, forced_name="cancel_appointment")
    assert g.done and json.loads(out[: out.rindex("}")]) == {"patient_name": "Wei Chen"}


def test_a_whole_key_the_model_wrote_stays_with_what_it_wrote_after_it():
    """A pass that wrote a key, its skeleton and the value's start keeps all of it (the value's start
    was thrown away and decoded again one pass later)."""
    g = ToolCallGuide(DENTAL_TOOLS, forced_name="book_appointment")
    g.take_opening()
    assert g.feed('date": "next tue') is None
    assert (g.slot, g.slot_text, g.key) == ("string", "next tue", "date")
    edit = g.feed('sday", "tme": "10')  # a key misspelled is still snapped, from where it began
    assert edit is not None and edit.forced == 'time": "'
    assert g.feed('ten", "patient_name": "Ana Ruiz"}}') is not None and g.done


def test_the_guide_drafts_the_key_it_expects_and_the_callers_words():
    heard = "hi um this is Oliver Wagner. can I move it to december 3rd at 1 pm"
    g = ToolCallGuide(DENTAL_TOOLS, forced_name="move_appointment")
    g.take_opening()
    assert g.draft(heard) == 'patient_name": "'  # the first required key, then its skeleton
    assert g.feed('patient_name": "O') is None
    assert g.draft(heard) == "liver Wagner"
    assert g.feed('liver Wagner", "new_') is None  # new_date or new_time: the model's to say
    assert g.draft(heard) == 'date": "'
    assert g.feed('date": "de') is None
    assert g.draft(heard) == "cember 3rd at 1 pm"
    assert ToolCallGuide(DENTAL_TOOLS).draft(heard) == '\n{"name": "'  # the skeleton it expects


def test_heard_continuation_takes_the_latest_phrase_begun_and_stops_at_its_clause():
    heard = "it's for oliver. Oliver Wagner, sorry! on the ninth"
    assert heard_continuation("Ol", heard) == "iver Wagner"  # as written first
    assert heard_continuation("wa", heard) == "gner"  # else in any case
    assert heard_continuation("ni", heard) == "nth"
    assert heard_continuation("iver", heard) == ""  # inside a word is no word begun
    assert heard_continuation("", heard) == "" and heard_continuation("zz", heard) == ""


def test_snap_prefers_a_prefix_match():
    assert snap("book", ["find_free_slots", "book_appointment"]) == "book_appointment"
    assert snap("cancellation", ["cancel_appointment", "lookup_patient"]) == "cancel_appointment"


@pytest.fixture(scope="module")
def tiny_dllm(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", seed=1)
    return Engine.load(folder, dtype=torch.float32, family="smollm2-dllm", block_size=4)


def test_the_engine_infills_a_schema_valid_call_even_from_random_weights(tiny_dllm):
    """A random-weight model writes junk; with the guide a required call is still schema-valid,
    the infilled skeleton is counted, and it is not counted as decoded tokens."""
    res = tiny_dllm.chat(CALL, tools=DENTAL_TOOLS, tool_choice="required", max_tokens=200, reasoning_effort="instant")
    assert res.finish_reason == "tool_calls" and not res.tool_errors
    assert res.metrics["infilled_tokens"] > 0
    decoded = res.metrics["completion_tokens"] - res.metrics["infilled_tokens"]
    assert res.metrics["tokens_per_forward"] == pytest.approx(decoded / res.metrics["forward_passes"], abs=1e-3)
    named = tiny_dllm.chat(CALL, tools=DENTAL_TOOLS, max_tokens=200, reasoning_effort="instant",
                           tool_choice={"type": "function", "function": {"name": "cancel_appointment"}})
    assert [c["function"]["name"] for c in named.tool_calls] == ["cancel_appointment"] and not named.tool_errors
    raw = tiny_dllm.chat(CALL, tools=DENTAL_TOOLS, tool_choice="required", max_tokens=40,
                         reasoning_effort="instant", guided_tools=False)
    assert not raw.tool_calls  # unguided, random weights do not write a valid call


def test_a_forced_call_is_announced_in_the_stream_before_its_body_is_decoded(tiny_dllm):
    """A call the prompt opened (tool_choice) streams a "tool_call" event first, as one the model opens
    does, so a voice agent says its filler at once instead of after the call and its read-back."""
    for choice in ("required", {"type": "function", "function": {"name": "cancel_appointment"}}):
        events = list(tiny_dllm.stream(CALL, tools=DENTAL_TOOLS, tool_choice=choice, max_tokens=200,
                                       reasoning_effort="instant"))
        assert [e.type for e in events].count("tool_call") == 1 and events[0].type == "tool_call", choice
        assert events[-1].type == "done" and events[-1].result.tool_calls
    plain = list(tiny_dllm.stream(CALL, max_tokens=8, reasoning_effort="instant"))  # no tools: nothing announced
    assert "tool_call" not in [e.type for e in plain]


def test_a_forced_call_is_announced_before_its_prompt_is_prefilled(tiny_dllm, monkeypatch):
    """The filler can start while the prompt is still prefilling: the forced call is known already.
    (The prompt's new tokens go in with the first decoding pass: no pass of either kind ran yet.)"""
    prefills = []
    for name in ("prefill", "forward"):
        real = getattr(tiny_dllm.runner, name)
        monkeypatch.setattr(tiny_dllm.runner, name, lambda *a, _real=real, **k: prefills.append(1) or _real(*a, **k))
    stream = tiny_dllm.stream(CALL, tools=DENTAL_TOOLS, max_tokens=200, reasoning_effort="instant",
                              tool_choice={"type": "function", "function": {"name": "cancel_appointment"}})
    first = next(stream)
    assert first.type == "tool_call" and prefills == []
    rest = list(stream)
    assert prefills and rest[-1].type == "done" and rest[-1].result.tool_calls


def test_mangled_control_tags_are_repaired_only_where_they_mean_something():
    from engine.text.block_rewrite import repair_tags

    assert repair_tags("wants a slot.\n</>\n\nSure", reasoning=True, tools=False) == "wants a slot.\n</think>\n\nSure"
    assert repair_tags("a </b> tag", reasoning=False, tools=False) == "a </b> tag"  # not reasoning: left alone
    assert repair_tags("\n<toolcall>\n{", reasoning=False, tools=True) == "\n<tool_call>\n{"
    assert repair_tags("\ntool_call>\n{", reasoning=False, tools=True) == "\n<tool_call>\n{"
    assert repair_tags("}\n</tool_call>", reasoning=False, tools=True) == "}\n</tool_call>"
    assert repair_tags("\n<toolcall>\n{", reasoning=False, tools=False) == "\n<toolcall>\n{"  # no tools: no call


def test_an_opener_split_between_two_passes_is_not_repaired_into_two():
    """A pass can end after "<" and the next begin "tool_call>" (order "verify" commits runs of any
    length): that is a whole opener, and adding a "<" made "<<tool_call>" (seed-8 gen_007)."""
    from engine.text.block_rewrite import repair_tags

    assert repair_tags("tool_call>\n{", reasoning=False, tools=True, before="<") == "tool_call>\n{"
    assert repair_tags("tool_call>\n{", reasoning=False, tools=True, before="Sure ") == "<tool_call>\n{"
    assert repair_tags("/tool_call>", reasoning=False, tools=True, before="}}\n<") == "/tool_call>"


def test_a_rewrite_keeps_the_models_own_tokens_for_the_text_it_keeps(tiny_dllm):
    """The kept text is not encoded again where the model's tokens spell it: "Dec" "ember" stays
    two tokens even where the tokenizer would read "December" as one."""
    from engine.text.block_rewrite import _own_tokens

    tok = tiny_dllm.tokenizer
    whole = tok.encode("December", add_special_tokens=False).ids
    split = tok.encode("Dec", add_special_tokens=False).ids + tok.encode("ember", add_special_tokens=False).ids
    assert split != whole
    assert _own_tokens(tok, split + tok.encode('",', add_special_tokens=False).ids, 'December"') == split
    assert _own_tokens(tok, split, "Decimal") == split[:1] and _own_tokens(tok, split, "November") == []


def test_a_reply_whose_first_word_took_the_openers_place_becomes_a_call_only_at_the_reply_start():
    from engine.text.block_rewrite import repair_tags

    start = {"reasoning": False, "tools": True, "answer_start": True}
    # Held-out calls, adapter v6 at instant: "Cantool_call>\n{...", "Suretool_call>", "Thetool>>\n".
    assert repair_tags("Cantool_call>", **start) == "<tool_call>"
    assert repair_tags("Suretool_call>\n{", **start) == "<tool_call>\n{"
    assert repair_tags("Thetool>>\n", **start) == "<tool_call>\n"
    assert repair_tags("ok.\n</think>\n\nCantool_call>", reasoning=True, tools=True) == "ok.\n</think>\n\n<tool_call>"
    # Speech that caught a stray token stays speech, and so does a later block or a call-less turn.
    assert repair_tags("Sorrytool_call, I can", **start) == "Sorrytool_call, I can"
    assert repair_tags("Cantool_call>", reasoning=False, tools=True, answer_start=False) == "Cantool_call>"
    assert repair_tags("Cantool_call>", reasoning=False, tools=False, answer_start=True) == "Cantool_call>"
    assert repair_tags("Sure, what day", **start) == "Sure, what day"


def test_call_progress_streams_the_call_text_as_it_grows_and_only_when_asked(tiny_dllm):
    choice = {"type": "function", "function": {"name": "cancel_appointment"}}
    events = list(tiny_dllm.stream(CALL, tools=DENTAL_TOOLS, tool_choice=choice, max_tokens=200,
                                   reasoning_effort="instant", call_progress=True))
    texts = [e.text for e in events if e.type == "tool_args"]
    assert texts and texts[0].startswith('<tool_call>\n{"name": "cancel_appointment", "arguments": ')
    assert all(b.startswith(a) and b != a for a, b in zip(texts, texts[1:], strict=False))  # each one grows
    snap = next(e for e in events if e.type == "tool_args").result
    assert snap.finish_reason == "partial" and snap.metrics["forward_passes"] >= 1
    assert events[-1].type == "done" and events[-1].result.tool_calls
    quiet = list(tiny_dllm.stream(CALL, tools=DENTAL_TOOLS, tool_choice=choice, max_tokens=200,
                                  reasoning_effort="instant"))
    assert "tool_args" not in [e.type for e in quiet]  # the OpenAI server never asks for them


def test_the_default_model_writes_a_named_call_from_the_callers_words_in_three_passes(default_engine):
    """The prompt ends inside the one key's value, and the name's rest is drafted from what the caller
    said: three passes (the name's first token, the rest and the close, the end), where the call
    took five before (a pass for the brace, one for the key, one for each token of the name)."""
    msgs = [{"role": "system", "content": "You are Maya, the receptionist at Bright Smile Dental."},
            {"role": "user", "content": "hi this is oliver wagner i need to cancel my appointment"}]
    r = default_engine.chat(msgs, tools=DENTAL_TOOLS, reasoning_effort="instant", max_tokens=80,
                            tool_choice={"type": "function", "function": {"name": "cancel_appointment"}})
    assert [json.loads(c["function"]["arguments"]) for c in r.tool_calls] == [{"patient_name": "oliver wagner"}]
    assert r.metrics["forward_passes"] <= 3, r.metrics
