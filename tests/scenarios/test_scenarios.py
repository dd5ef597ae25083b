"""Scenarios load from prompts/*.yaml into OpenAI-shaped tools, and their tool names bind to handlers."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.scenarios import ScenarioError, list_scenarios, load_scenario


def test_dental_clinic_loads_with_openai_shaped_tools():
    s = load_scenario("dental_clinic")
    assert "dental_clinic" in list_scenarios()
    assert s.name == "dental_clinic" and s.reasoning_effort in ("instant", "low", "medium", "high")
    assert s.greeting and s.filler and "Maya" in s.system_prompt
    assert s.tool_names == ["find_free_slots", "book_appointment", "move_appointment",
                            "cancel_appointment", "lookup_patient"]
    for t in s.tools:
        assert t["type"] == "function"
        assert t["function"]["parameters"]["type"] == "object"
    book = next(t for t in s.tools if t["function"]["name"] == "book_appointment")
    assert book["function"]["parameters"]["required"] == ["patient_name", "date", "time"]


def test_tools_pass_the_engines_schema_check():
    from engine.text.tool_calls import validate_tools

    s = load_scenario("dental_clinic")
    assert len(validate_tools(s.tools)) == len(s.tools)


def test_system_prompt_carries_todays_date():
    s = load_scenario("dental_clinic")
    p = s.system_prompt_for(dt.date(2026, 12, 2))
    assert p.startswith(s.system_prompt.rstrip()) and p.endswith("Today is Wednesday, 2026-12-02.")


def test_tool_names_bind_to_the_clinic_store(tmp_path):
    s = load_scenario("dental_clinic")
    handlers = s.bind_handlers(s.open_backend(tmp_path / "store", dt.date(2026, 11, 30)))
    assert set(handlers) == set(s.tool_names)
    r = handlers["lookup_patient"]({"patient_name": "John Smith"})
    assert r["patient_name"] == "John Smith"


def test_a_tool_without_a_backend_answers_with_an_error(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "name: x\nsystem_prompt: hi\ntools:\n  - name: teleport\n    description: go\n")
    s = load_scenario(tmp_path / "x.yaml")
    r = s.bind_handlers(object())["teleport"]({})
    assert "not available" in r["error"]


def test_unknown_scenario_names_the_known_ones():
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'.*dental_clinic"):
        load_scenario("nope")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("name: a\n", "system_prompt"),
        ("name: a\nsystem_prompt: hi\nreasoning_effort: extreme\n", "reasoning_effort"),
        ("name: a\nsystem_prompt: hi\ntools: {a: 1}\n", "'tools' must be a list"),
        ("name: a\nsystem_prompt: hi\ntools:\n  - description: no name\n", r"tools\[0\] needs a 'name'"),
        ("name: a\nsystem_prompt: hi\ntools:\n  - {name: t}\n  - {name: t}\n", "duplicate tool name"),
        ("name: a\nsystem_prompt: hi\ntools:\n  - {name: t, parameters: {type: string}}\n", "object schema"),
    ],
)
def test_malformed_yaml_gives_a_clear_error(tmp_path, text, match):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ScenarioError, match=match):
        load_scenario(tmp_path / "bad.yaml")


def test_read_only_must_be_a_boolean(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: a\nsystem_prompt: hi\ntools:\n  - {name: t, read_only: sometimes}\n")
    with pytest.raises(ScenarioError, match=r"tools\[0\] \(t\)\.read_only must be true or false"):
        load_scenario(tmp_path / "bad.yaml")


_SAMPLE = {"date": lambda today: (today + dt.timedelta(days=1)).isoformat(), "time": lambda _: "10:00",
           "person_name": lambda _: "Jordan Lee", "phone_number": lambda _: "5550100", "plate": lambda _: "AB12CDE",
           "email": lambda _: "jordan@example.com", "integer": lambda _: 2, "boolean": lambda _: True}


@pytest.mark.parametrize("pack", ["dental_clinic", "car_garage", "telecom_support", "hotel_front_desk"])
def test_a_shipped_packs_read_only_tools_leave_its_store_as_it_was(tmp_path, pack):
    """What may run while the caller is still speaking must change nothing, whatever it is asked."""
    scenario = load_scenario(pack)
    assert scenario.read_only, f"{pack} marks no tool read-only"
    today = dt.date(2026, 12, 7)
    backend = scenario.open_backend(tmp_path / "store", today)
    handlers = scenario.bind_handlers(backend)
    before = backend.snapshot()
    for tool in scenario.tools:
        fn = tool["function"]
        if fn["name"] not in scenario.read_only:
            continue
        args = {}
        for arg, spec in fn["parameters"]["properties"].items():
            kind = spec.get("x-kind")
            args[arg] = (spec["enum"][0] if spec.get("enum") else _SAMPLE[kind](today) if kind in _SAMPLE else "x")
        handlers[fn["name"]](args)
        handlers[fn["name"]]({})
    assert backend.snapshot() == before


def test_one_tools_schema_is_read_through_the_scenario():
    s = load_scenario("dental_clinic")
    assert s.tool("book_appointment")["name"] == "book_appointment" and s.tool("nope") is None
    assert s.required("book_appointment") == ["patient_name", "date", "time"]
    assert set(s.arguments("find_free_slots")) == {"date", "part_of_day", "service"}
    assert s.kind_of("book_appointment", "time") == "time"
    assert s.kind_of("", "patient_name") == "person_name"  # from any tool that has it
    assert s.arguments("nope") == {} and s.required("nope") == [] and s.kind_of("nope", "x") is None
