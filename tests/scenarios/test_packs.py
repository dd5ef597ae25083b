"""Scenario packs: a folder of data plus a backend (a Python class or a webhook), loaded with no code
change, graded by the backend's snapshot."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.api import ChatResult, StreamEvent
from tests.library_pack import write_library_pack
from tests.scripted_brain import ScriptedBrain
from voice_agent.packs import Backend, ToolError, bind_tools
from voice_agent.packs.state_match import state_mismatches
from voice_agent.packs.webhook import APOLOGY
from voice_agent.scenarios import ScenarioError, list_scenarios, load_scenario
from voice_agent.simulate.callfile import load_callfile, parse_callfile
from voice_agent.simulate.grade import grade
from voice_agent.simulate.readable import readable_transcript
from voice_agent.simulate.runner import RunOptions, run_call
from voice_agent.simulate.summary import summarize

TODAY = dt.date(2026, 12, 1)
TOOLS = [{"type": "function", "function": {"name": "greet", "parameters": {
    "type": "object", "properties": {"who": {"type": "string"}, "times": {"type": "integer"}}, "required": ["who"]}}}]


# -- a backend's tools are total ------------------------------------------------------------------

class Greeter(Backend):
    def greet(self, who: str, times: int = 1) -> dict:
        if who == "nobody":
            raise ToolError("Nobody is not a member.")
        if who == "crash":
            raise RuntimeError("disk on fire")
        if who == "set":
            return {("a", "b"): 1}  # not JSON: a key that is no string
        return {"said": " ".join([f"hi {who}"] * int(times))}


@pytest.fixture
def greet(tmp_path):
    return bind_tools(Greeter(tmp_path), TOOLS)["greet"]


def test_a_tool_gets_its_arguments_as_keywords(greet):
    assert greet({"who": "jo", "times": 2}) == {"said": "hi jo hi jo"}


def test_an_argument_the_schema_does_not_declare_is_dropped(greet):
    assert greet({"who": "jo", "colour": "red"}) == {"said": "hi jo"}


@pytest.mark.parametrize(("args", "error"), [
    ({}, "I still need the who"),
    ("not a dict", "not understood"),
    ({"who": "nobody"}, "Nobody is not a member."),       # ToolError: read out as is
    ({"who": "crash"}, "system had a problem with that (RuntimeError)"),
    ({"who": "set"}, "cannot read"),
])
def test_a_failing_tool_answers_with_an_error_the_agent_can_say(greet, args, error):
    assert error in greet(args)["error"]


def test_a_tool_the_backend_lacks_is_not_available(tmp_path):
    assert "not available" in bind_tools(Backend(tmp_path), TOOLS)["greet"]({"who": "jo"})["error"]


def test_the_base_backend_refuses_a_setup_it_cannot_take(tmp_path):
    with pytest.raises(ToolError, match="takes no setup"):
        Backend(tmp_path).setup({"rows": 1})
    assert Backend(tmp_path).snapshot() == {}


# -- packs are folders ----------------------------------------------------------------------------

def test_the_shipped_packs_are_listed():
    assert "dental_clinic" in list_scenarios()


def test_a_pack_outside_the_repository_loads_by_folder_and_its_backend_imports_its_own_files(tmp_path):
    folder = write_library_pack(tmp_path / "library")
    for way in (folder, folder / "scenario.yaml"):
        scenario = load_scenario(way)
        assert scenario.name == "city_library" and scenario.folder == folder
    backend = scenario.open_backend(tmp_path / "store", TODAY)
    backend.setup({"members": {"4471": [{"title": "Dune", "due": "2026-12-03"}]}})
    tools = scenario.bind_handlers(backend)
    assert tools["renew_book"]({"card_number": "four four seven one", "title": "dune"}) == {
        "renewed": "Dune", "due": "2026-12-17"}
    assert tools["list_loans"]({"card_number": "1234"}) == {"error": "No member has that card number."}
    assert backend.snapshot() == {"members": {"4471": [{"title": "Dune", "due": "2026-12-17"}]}}
    # the pack's x-kind marks reach the guards (a person's name would be grounded; digits are not)
    assert scenario.tools[1]["function"]["parameters"]["properties"]["title"]["x-kind"] == "text"


@pytest.mark.parametrize(("extra", "match"), [
    ("backend: NoSuchClass\n", "has no class 'NoSuchClass'"),
    ("backend: nowhere.py:Thing\n", "no .*nowhere.py"),
    ("backend: not_a_module_anywhere:Thing\n", "cannot import"),
])
def test_a_backend_that_cannot_be_found_says_which(tmp_path, extra, match):
    folder = write_library_pack(tmp_path / "lib")
    text = (folder / "scenario.yaml").read_text().replace("backend: LoanDesk\n", extra)
    (folder / "scenario.yaml").write_text(text)
    with pytest.raises(ValueError, match=match):
        load_scenario(folder).open_backend(tmp_path / "s")


@pytest.mark.parametrize(("yaml_text", "match"), [
    ("name: a\nsystem_prompt: hi\nbackend: A\nwebhook: http://x\n", "not both"),
    ("name: a\nsystem_prompt: hi\nwebhook: ftp://x\n", "'webhook' must be a URL"),
    ("name: a\nsystem_prompt: hi\nopening_hours: nine to five\n", "opening_hours"),
    ("name: a\nsystem_prompt: hi\ntools:\n  - {name: t, parameters: {properties: {x: {type: string, x-kind: colour}}}}\n",
     "x-kind must be one of"),
    ("name: a\nsystem_prompt: hi\ntools:\n  - {name: t, parameters: {properties: {x: {type: string, x-kind: enum}}}}\n",
     "needs the schema's 'enum'"),
    ("name: a\nsystem_prompt: hi\ntools:\n  - {name: t, parameters: {properties: {x: {type: string, enum: [a],"
     " x-synonyms: {b: [c]}}}}}\n", "x-synonyms must map values"),
])
def test_a_malformed_pack_is_a_clear_error(tmp_path, yaml_text, match):
    (tmp_path / "scenario.yaml").write_text(yaml_text)
    with pytest.raises(ScenarioError, match=match):
        load_scenario(tmp_path)


def test_argument_kinds_mark_the_guards_phrase_kinds():
    dental = load_scenario("dental_clinic")
    props = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in dental.tools}
    assert props["book_appointment"]["date"]["x-grounded"] == "day"
    assert props["book_appointment"]["time"]["x-grounded"] == "time"
    assert props["book_appointment"]["patient_name"]["x-grounded"] is True
    assert props["book_appointment"]["service"]["x-grounded"] == "choice"
    assert "hygiene" in dental.policy.choices["cleaning"]


# -- expect: state ---------------------------------------------------------------------------------

SNAPSHOT = {"appointments": {"Jordan Lee": [{"date": "2026-12-08", "time": "10:00", "service": "cleaning"}]},
            "plan": "basic", "balance": 12.5}


@pytest.mark.parametrize(("expected", "ok"), [
    ({"appointments": {"jordan  lee": [{"time": "10:00"}]}}, True),     # keys without case; items as subsets
    ({"appointments": {"Ana Ruiz": []}}, True),                          # [] matches a key that is not there
    ({"appointments": {"Jordan Lee": []}}, False),
    ({"appointments": {"Jordan Lee": [{"time": "11:00"}]}}, False),
    ({"appointments": {"Jordan Lee": [{"time": "10:00"}, {"time": "10:00"}]}}, False),  # lists match exactly
    ({"plan": "Basic", "balance": "12.5"}, True),
    ({"plan": "premium"}, False),
    ({"missing": 1}, False),
])
def test_state_is_a_subset_match(expected, ok):
    assert (state_mismatches(expected, SNAPSHOT) == []) is ok


# -- simulate runs any pack ------------------------------------------------------------------------

class LibraryEngine:
    """Stands in for the model: renews the book the caller names, then answers."""

    model_name = "scripted"

    def session(self):
        return SimpleNamespace(lock=threading.Lock())

    def stream(self, messages, **kw):
        last = messages[-1]
        calls, text = [], ""
        if last["role"] == "tool":
            result = json.loads(last["content"])
            text = f"Done, it's due {result['due']}." if "due" in result else result.get("error", "Sorry.")
        elif "renew" in last["content"]:
            calls = [{"id": "c1", "type": "function", "function": {
                "name": "renew_book", "arguments": json.dumps({"card_number": "4471", "title": "Dune"})}}]
        else:
            text = "You're welcome."
        if text:
            yield StreamEvent("answer", text)
        yield StreamEvent("done", result=ChatResult(
            text=text, reasoning="", tool_calls=calls, tool_errors=[], finish_reason="tool_calls" if calls else "stop",
            metrics={"ttfat_ms": 5.0, "completion_tokens": 4, "infilled_tokens": 0, "forward_passes": 2},
            model="scripted"))


async def test_simulate_runs_a_pack_from_outside_and_grades_it_by_its_snapshot(tmp_path):
    folder = write_library_pack(tmp_path / "library")
    scenario = load_scenario(folder)
    calls = load_callfile(folder / "callers" / "calls.yaml")
    record = await run_call(calls.calls[0], scenario, ScriptedBrain(LibraryEngine()), calls.today, RunOptions(), db_dir=tmp_path)
    assert record.error is None and grade(calls.calls[0], record) == []
    assert record.state["members"]["4471"][0]["due"] == "2026-12-17"


# -- a webhook pack ---------------------------------------------------------------------------------

class _Hook(BaseHTTPRequestHandler):
    mode = "ok"
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "500":
            self.send_response(500)
            self.end_headers()
            return
        answer = ({"members": {}} if body.get("snapshot") else {} if "setup" in body
                  else {"renewed": body["arguments"].get("title"), "due": "2026-12-17"})
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (the timeout case)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_pack(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = write_library_pack(tmp_path / "hooked")
    text = (folder / "scenario.yaml").read_text().replace(
        "backend: LoanDesk\n", f"webhook: {{url: 'http://127.0.0.1:{server.server_port}/tools', timeout_s: 0.3}}\n")
    (folder / "scenario.yaml").write_text(text)
    _Hook.seen = []
    yield load_scenario(folder)
    server.shutdown()


def test_a_webhook_tool_posts_the_call_and_returns_the_answer(hook_pack, tmp_path):
    _Hook.mode = "ok"
    backend = hook_pack.open_backend(tmp_path / "s", TODAY)
    tools = hook_pack.bind_handlers(backend)
    assert tools["renew_book"]({"card_number": "4471", "title": "Dune"}) == {"renewed": "Dune", "due": "2026-12-17"}
    assert _Hook.seen[-1]["tool"] == "renew_book" and _Hook.seen[-1]["arguments"]["title"] == "Dune"
    assert backend.snapshot() == {"members": {}}


@pytest.mark.parametrize(("mode", "named"), [("500", "HTTP 500"), ("slow", "within 0.3 s")])
async def test_a_failing_webhook_is_an_apology_the_call_goes_on_and_the_report_names_it(hook_pack, tmp_path,
                                                                                      mode, named):
    _Hook.mode = mode
    call = parse_callfile({"today": "2026-12-01", "calls": [
        {"id": "renew", "caller": ["please renew Dune, card four four seven one", "thanks bye"]}]}).calls[0]
    record = await run_call(call, hook_pack, ScriptedBrain(LibraryEngine()), TODAY, RunOptions(), db_dir=tmp_path)
    assert record.error is None and len(record.turns) == 2            # the call went on
    (tool,) = record.turns[0].tool_calls
    assert tool.result["error"] == APOLOGY and named in tool.result["webhook_failure"]
    assert len([b for b in _Hook.seen if b.get("tool")]) == 2          # one retry
    assert record.turns[0].spoken == APOLOGY and record.turns[1].answered
    summary = summarize([record], [grade(call, record)])
    assert summary["tool_errors"] == 1
    assert named in readable_transcript(record, ["the renewal failed"])


@pytest.mark.slow
def test_voice_agent_simulate_runs_a_pack_it_has_never_seen(tmp_path, capsys):
    """The real CLI and model on a pack outside the repository: no code knows about libraries."""
    from voice_agent.cli import main as cli_main

    folder = write_library_pack(tmp_path / "library")
    out = tmp_path / "out"
    code = cli_main(["simulate", str(folder / "callers" / "calls.yaml"), "--out", str(out), "--no-progress",
                     "--max-tokens", "48"])
    assert code in (0, 1), capsys.readouterr().err                       # ran; 2 would be an unusable pack
    report = json.loads((out / "simulate.json").read_text())
    assert report["summary"]["scenario"] == "city_library" and report["summary"]["calls"] == 2
    assert all(c["error"] is None and c["turns"] for c in report["calls"])
    assert report["summary"]["policy_share"] is not None
    hours = next(c for c in report["calls"] if c["id"] == "hours")
    assert hours["success"]  # a fact question is answered from the pack's facts
    for failed in (c for c in report["calls"] if not c["success"]):
        assert (out / "failed" / f"{failed['id']}.txt").read_text().startswith(f"call {failed['id']}")


def test_a_call_file_in_a_packs_callers_folder_runs_that_pack(tmp_path):
    from voice_agent.simulate.batch import scenario_for

    folder = write_library_pack(tmp_path / "library")
    assert scenario_for(load_callfile(folder / "callers" / "calls.yaml")).name == "city_library"
    assert Path(load_scenario(folder).callers_dir) == folder / "callers"


# -- the shipped packs --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dental_clinic", "telecom_support", "car_garage"])
def test_every_shipped_pack_loads_its_callers_set_up_its_backend_and_names_only_its_tools(name, tmp_path):
    from voice_agent.simulate.batch import scenario_for

    scenario = load_scenario(name)
    files = sorted(scenario.callers_dir.glob("*.yaml"))
    assert {"handwritten.yaml", "heldout.yaml"} <= {f.name for f in files}
    for f in files:
        calls = load_callfile(f)
        assert scenario_for(calls).name == name  # also checks every tool the file names
        for call in calls.calls:
            backend = scenario.open_backend(tmp_path / call.id, calls.today)
            backend.setup(dict(call.setup or {}))
            assert isinstance(backend.snapshot(), dict)
    assert len(load_callfile(scenario.callers_dir / "heldout.yaml").calls) >= 40
    assert len(load_callfile(scenario.callers_dir / "handwritten.yaml").calls) >= 12


def test_the_telecom_pack_changes_a_plan_adds_a_pass_and_opens_a_ticket(tmp_path):
    scenario = load_scenario("telecom_support")
    backend = scenario.open_backend(tmp_path, TODAY)
    backend.setup({})
    tools = scenario.bind_handlers(backend)
    assert tools["lookup_customer"]({"phone_number": "five five five oh one four two"})["name"] == "Priya Natarajan"
    assert tools["change_plan"]({"phone_number": "555 0142", "plan": "unlimited"})["new_plan"] == "unlimited"
    assert "already on" in tools["change_plan"]({"phone_number": "5550142", "plan": "unlimited"})["error"]
    assert tools["add_roaming_pass"]({"phone_number": "5550142", "region": "europe"})["valid_until"] == "2026-12-08"
    for check in ("airplane_mode", "data_switch", "apn"):
        assert not tools["record_check"]({"phone_number": "5550142", "check": check, "fixed": False})["open_a_ticket"]
    assert tools["record_check"]({"phone_number": "5550142", "check": "restart", "fixed": "no"})["open_a_ticket"]
    assert tools["open_ticket"]({"phone_number": "5550142", "issue": "no data"})["ticket"] == "T1001"
    assert "5 5 5, 1 2 3 4" in tools["check_usage"]({"phone_number": "5551234"})["error"]  # read back digit by digit
    state = backend.snapshot()
    assert state["customers"]["5550142"]["plan"] == "unlimited" and state["tickets"] == [
        {"phone": "5550142", "issue": "no data"}]


def test_the_garage_pack_books_moves_and_cancels_by_plate(tmp_path):
    scenario = load_scenario("car_garage")
    backend = scenario.open_backend(tmp_path, TODAY)
    backend.setup({"bookings": [{"plate": "XX11XXX", "customer": "A B", "date": "2026-12-03", "time": "09:00",
                                 "job": "service"}]})
    tools = scenario.bind_handlers(backend)
    booked = tools["book_job"]({"customer_name": "sam patel", "plate": "L C two zero H J K", "date": "thursday",
                                "time": "nine", "job": "mot"})
    assert "taken" in booked["error"] and "9:30 am" in booked["error"]
    assert tools["book_job"]({"customer_name": "sam patel", "plate": "lc20 hjk", "date": "thursday",
                              "time": "half past nine", "job": "mot"})["booked"]
    assert "closed on Sundays" in tools["move_job"]({"plate": "LC20HJK", "new_date": "sunday", "new_time": "ten"})["error"]
    assert tools["move_job"]({"plate": "LC20HJK", "new_date": "friday", "new_time": "two"})["when"] == \
        "Friday, December 4th at 2 pm"
    assert tools["cancel_job"]({"plate": "X X one one X X X"})["cancelled"]
    assert backend.snapshot() == {"bookings": {"LC20HJK": [{"date": "2026-12-04", "time": "14:00", "job": "mot",
                                                            "customer": "Sam Patel"}]}}


async def test_a_setup_the_backend_refuses_fails_that_call_with_its_reason(tmp_path):
    call = parse_callfile({"today": "2026-12-01", "calls": [
        {"id": "bad", "setup": {"rooms": 3}, "caller": ["hello"]}]}).calls[0]
    record = await run_call(call, load_scenario("dental_clinic"), ScriptedBrain(LibraryEngine()), TODAY, RunOptions(), db_dir=tmp_path)
    assert record.error.startswith("setup:") and "rooms" in record.error and not record.turns
    assert grade(call, record) and "setup" in grade(call, record)[0]
