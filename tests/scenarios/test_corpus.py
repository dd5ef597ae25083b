"""The pack-driven corpus: values read back by the runtime's parsers, synthetic scenarios valid as
packs, scripted calls that run on every pack with the runtime's policy, and the splits held apart."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest

from voice_agent.corpus.build import UNSEEN_PACKS, build_corpus
from voice_agent.corpus.desk import pack_source, synthetic_source
from voice_agent.corpus.play import play
from voice_agent.corpus.readback import error_reply, success_reply
from voice_agent.corpus.roles import infer_roles
from voice_agent.corpus.synthetic import DOMAINS, synthetic_scenario
from voice_agent.corpus.values import ValueBank, held_out
from voice_agent.policy.calendar_words import Hours
from voice_agent.policy.kinds import KindContext, parse
from voice_agent.scenarios import load_scenario

TODAY = dt.date(2026, 12, 1)


@pytest.mark.parametrize("kind", ["date", "time", "phone_number", "plate", "email", "person_name", "integer"])
def test_every_spoken_value_parses_back_to_its_canonical_value(kind):
    bank, rng, hours = ValueBank("train"), random.Random(1), Hours(8 * 60, 18 * 60)
    for _ in range(200):
        v = bank.draw(kind, rng, TODAY, hours)
        got = parse(kind, v.words, KindContext(today=TODAY, hours=hours))
        assert str(got) == v.canonical, (kind, v)


def test_held_out_names_never_appear_in_training_draws():
    train, held = ValueBank("train"), ValueBank("heldout")
    assert not set(train.firsts) & set(held.firsts) and not set(train.lasts) & set(held.lasts)
    assert len(train.firsts) * len(train.lasts) > 20_000  # thousands of names
    assert all(held_out(n) for n in held.firsts)


def test_synthetic_scenarios_are_valid_packs_with_varied_tools():
    names, roles_seen = set(), set()
    for i in range(60):
        syn = synthetic_scenario(random.Random(i), i)
        assert "create" in syn.roles.values()
        names.add(tuple(sorted(syn.scenario.tool_names)))
        roles_seen |= set(syn.roles.values())
        for t in syn.scenario.tools:  # every argument has a kind the state reads
            assert all(spec.get("x-kind") for spec in t["function"]["parameters"]["properties"].values())
    assert len(names) > 30 and roles_seen == {"search", "create", "update", "delete", "read", "action"}


def test_no_synthetic_domain_is_the_unseen_hotel():
    for d in DOMAINS:
        assert not any(w in d.kind for w in ("hotel", "hostel", "inn", "lodging")), d.kind
        assert "room" not in d.choices


def test_roles_of_the_shipped_packs_are_read_from_tool_names():
    assert infer_roles(load_scenario("car_garage")) == {
        "find_free_slots": "search", "book_job": "create", "move_job": "update", "cancel_job": "delete",
        "lookup_job": "read"}
    assert infer_roles(load_scenario("telecom_support"))["open_ticket"] == "action"


@pytest.mark.parametrize("pack", ["dental_clinic", "telecom_support", "car_garage"])
def test_scripted_calls_run_on_each_shipped_pack_with_its_real_backend(pack, tmp_path):
    source = pack_source(load_scenario(pack), tmp_path)
    rng, bank = random.Random(0), ValueBank("train")
    records, decided, tools_ok = 0, 0, 0
    for _ in range(25):
        call = play(source, bank, rng, TODAY, "train")
        records += len(call.records)
        decided += sum(1 for r in call.records if r["decided_by"])
        for m in call.messages:
            if m["role"] == "tool":
                tools_ok += "error" not in json.loads(m["content"])
        assert call.records[-1]["prompt"].endswith("<|im_start|>assistant\n") or "<think>" in call.records[-1]["prompt"]
    assert records > 60 and 0 < decided < records  # the runtime policy decides some turns, the script the rest
    assert tools_ok >= 10  # the real backend answered, mostly without an error


def test_a_call_uses_the_runtime_decision_where_there_is_one(tmp_path):
    source = pack_source(load_scenario("car_garage"), tmp_path)
    rng = random.Random(4)
    names = set()
    for _ in range(30):
        names |= {r["decided_by"] for r in play(source, ValueBank("train"), rng, TODAY, "train").records}
    assert {"call_when_ready", "ask_missing"} <= names


def test_synthetic_calls_book_and_read_back(tmp_path):
    rng = random.Random(3)
    booked = 0
    for i in range(20):
        source = synthetic_source(synthetic_scenario(random.Random(i), i))
        call = play(source, ValueBank("train"), rng, TODAY, "train")
        booked += any('"booked": true' in m.get("content", "") for m in call.messages if m["role"] == "tool")
    assert booked >= 5


def test_the_note_is_the_compact_state_and_the_next_act(tmp_path):
    source = pack_source(load_scenario("car_garage"), tmp_path)
    rng = random.Random(2)
    notes = [r["target"].split("\n</think>")[0] for _ in range(20)
             for r in play(source, ValueBank("train"), rng, TODAY, "train", think_share=1.0).records]
    assert notes and all(" -> " in n for n in notes)
    assert any(n.startswith("want ") and "; need " in n for n in notes)


def test_read_back_and_errors_are_generic():
    text, why = success_reply({"date": "2026-12-09", "day": "Wednesday, December 9th", "free_times": ["9 am", "10 am"]})
    assert why == "options" and "9 am or 10 am" in text
    text, _ = success_reply({"free_times": ["9 am", "10 am", "11 am", "12 pm", "1 pm"]})
    assert "I have 9 am, 10 am or 11 am." in text and "12 pm" not in text  # three at most
    text, why = success_reply({"booked": True, "when": "Monday at 9 am", "service": "mot"})
    assert text.startswith("You're booked for Monday at 9 am") and why == "read_back"
    text, why = success_reply({"plan": "basic", "roaming_passes": []})
    assert why == "read_back" and "Plan basic" in text  # a list that is no set of times is not offered
    assert error_reply("There's no booking for AB12CDE.", "plate", True)[1] == "not_found"
    assert error_reply("9 am on Monday is taken.", None, True)[1] == "slot"
    said, _ = error_reply("No account has that number. Could you check the number?", "phone number", False)
    assert said.count("?") == 1  # the error's own question is not asked twice


def test_corpus_splits_by_scenario_template_and_entity(tmp_path):
    stats = build_corpus(tmp_path / "c", ["car_garage"], 20, 20, 3, seed=0, heldout_calls=5, progress=False)
    train = [json.loads(x) for x in (tmp_path / "c" / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "c" / "heldout" / "train.jsonl").read_text().splitlines()]
    assert stats["train_records"] == len(train) and held
    held_syn = {r["scenario"] for r in held if r["scenario"].startswith("synthetic_")}
    assert held_syn and not held_syn & {r["scenario"] for r in train}  # whole scenarios held out
    assert {r["split"] for r in held} == {"heldout"} and {r["split"] for r in train} == {"train"}


def test_the_unseen_pack_is_refused_in_a_generalist_corpus(tmp_path):
    with pytest.raises(ValueError, match="unseen"):
        build_corpus(tmp_path / "c", [UNSEEN_PACKS[0]], 5, 0, 1, progress=False)


def test_a_boolean_argument_is_passed_as_true_or_false_and_enum_words_have_no_underscores(tmp_path):
    source = pack_source(load_scenario("telecom_support"), tmp_path)
    rng, seen = random.Random(5), []
    for _ in range(60):
        call = play(source, ValueBank("train"), rng, TODAY, "train")
        for m in call.messages:
            for c in m.get("tool_calls") or []:
                args = json.loads(c["function"]["arguments"])
                if c["function"]["name"] == "record_check" and "fixed" in args:
                    seen.append(args["fixed"])
        assert not any("_" in t for t in call.caller_turns if "airplane" in t or "mobile" in t)
    assert seen and all(isinstance(v, bool) for v in seen)


def test_no_note_is_a_decisions_name(tmp_path):
    source = pack_source(load_scenario("dental_clinic"), tmp_path)
    rng = random.Random(8)
    notes = [r["target"].split("\n</think>")[0] for _ in range(15)
             for r in play(source, ValueBank("train"), rng, TODAY, "train", think_share=1.0).records if r["decided_by"]]
    assert notes and not any(n.startswith(("ask_missing", "call_when_ready", "search_first")) for n in notes)
