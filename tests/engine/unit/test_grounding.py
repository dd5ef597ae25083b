"""Grounded tool arguments (engine/text/grounding.py): a value that copies the conversation is mended to
what was said, and only then."""

from __future__ import annotations

import json

from engine.text.chat_format import ChatFormat
from engine.text.grounding import ground_calls, nearest_span, source_texts
from voice_agent.scenarios import load_scenario

BOOK = {"type": "function", "function": {"name": "book_appointment", "parameters": {
    "type": "object", "required": ["patient_name", "date", "time"], "properties": {
        "patient_name": {"type": "string", "x-grounded": True},
        "date": {"type": "string", "x-grounded": True},
        "time": {"type": "string", "x-grounded": True},
        "note": {"type": "string"}}}}}


def _call(**args) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": "book_appointment", "arguments": json.dumps(args)}}


def _messages(*user: str) -> list[dict]:
    return [{"role": "system", "content": "You are Maya, the receptionist at Bright Smile Dental."},
            {"role": "assistant", "content": "Bright Smile Dental, this is Maya. How can I help?"},
            *({"role": "user", "content": u} for u in user)]


def test_slips_of_copying_are_mended_to_the_callers_words():
    src = ["could we do december 11th the name is adebayo dang", "Let's say this monday.",
           "Could we do december fourth the name is Folake Maalouf?"]
    assert nearest_span("adebayo dango", src) == "adebayo dang"
    assert nearest_span("thisonday", src) == "this monday"
    assert nearest_span("folak Maalouf", src) == "Folake Maalouf"
    assert nearest_span("Adebayo Dang", src) == "Adebayo Dang"  # already a span: kept as written
    assert nearest_span("one past ten", ["i was hoping to book an exam half past ten"]) is None  # not close


def test_a_name_with_its_surname_copied_right_takes_the_first_name_that_was_said():
    msgs = _messages("it's for deepa suzuki", "could we do the seventh", "it's marcus oyelaran and jordan lee")
    calls = [_call(patient_name="Diana Suzuki", date="the seventh", time="9"),
             _call(patient_name="Maja Oyelaran", date="the seventh", time="9"),
             _call(patient_name="sarah lee", date="the sixth", time="9")]
    repairs = ground_calls(calls, [BOOK], msgs)
    assert [(r.written, r.grounded) for r in repairs] == [("Diana Suzuki", "deepa suzuki"),
                                                          ("Maja Oyelaran", "marcus oyelaran")]
    assert json.loads(calls[2]["function"]["arguments"])["patient_name"] == "sarah lee"  # 0.53: not the same name
    # only names (free text) get the looser rule; the strict one still holds for everything else
    assert nearest_span("Diana Suzuki", ["deepa suzuki"]) is None


def test_only_grounded_keys_change_and_names_nobody_said_stay_for_the_tool_to_refuse():
    msgs = _messages("i'd like a cleaning on the ninth at ten thirty", "it's for jun khan")
    calls = [_call(patient_name="jun kahn", date="the nineth", time="ten thirty", note="the nineth")]
    repairs = ground_calls(calls, [BOOK], msgs)
    args = json.loads(calls[0]["function"]["arguments"])
    assert args == {"patient_name": "jun khan", "date": "the ninth", "time": "ten thirty", "note": "the nineth"}
    assert [(r.key, r.written, r.grounded) for r in repairs] == [
        ("patient_name", "jun kahn", "jun khan"), ("date", "the nineth", "the ninth")]
    # The receptionist's own name (system prompt, greeting) is not a source: "Maya" is left as written.
    calls = [_call(patient_name="Maya", date="the ninth", time="ten thirty")]
    assert ground_calls(calls, [BOOK], msgs) == []
    assert json.loads(calls[0]["function"]["arguments"])["patient_name"] == "Maya"


def test_tool_results_and_earlier_calls_are_sources_newest_first():
    msgs = _messages("a cleaning on friday please") + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "find_free_slots", "arguments": json.dumps({"date": "friday"})}}]},
        {"role": "tool", "tool_call_id": "c", "content": json.dumps({"date": "2026-12-04", "free_times": ["9 am", "9:30 am"]})},
        {"role": "user", "content": "nine thirty works it's ana ruiz"}]
    srcs = source_texts(msgs)
    assert srcs[0] == "nine thirty works it's ana ruiz" and "friday" in srcs
    calls = [_call(patient_name="ana ruiz", date="2026-12-4", time="9:30 am")]
    ground_calls(calls, [BOOK], msgs)
    assert json.loads(calls[0]["function"]["arguments"])["date"] == "2026-12-04"


def test_the_scenario_grounds_every_free_string_argument_and_the_prompt_never_shows_the_mark():
    sc = load_scenario("dental_clinic")
    for t in sc.tools:
        for key, spec in t["function"]["parameters"]["properties"].items():
            # free strings copy the conversation; an enum is the caller's choice where the pack gives
            # it a kind (x-kind: enum, with the caller's synonyms), as the service and the part of day
            chosen = spec.get("x-kind") == "enum"
            assert bool(spec.get("x-grounded")) is ("enum" not in spec or chosen), (t["function"]["name"], key)
            # days, times and choices name their kind, so the ask guard can take the caller's own phrase
            if "enum" not in spec or chosen:
                kind = ("day" if key.endswith("date") else "time" if key.endswith("time")
                        else "choice" if chosen else True)
                assert spec["x-grounded"] == kind and type(spec["x-grounded"]) is type(kind), key
    for fmt in (ChatFormat(tool_style="json"), ChatFormat(tool_style="compact")):
        text = fmt.render([{"role": "system", "content": "hi"}, {"role": "user", "content": "hello"}], sc.tools)
        assert "x-grounded" not in text and "patient_name" in text
