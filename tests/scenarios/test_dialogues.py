"""The scripted-dialogue generator: repeatable, covers every tool and failure case, held-out is unseen."""

from __future__ import annotations

import json

import pytest

from tests.dental_pack import TOOL_NAMES
from voice_agent.dialogues import generate as gen
from voice_agent.dialogues.generate import day_phrases, generate, reserved_names, time_phrases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("dlg")
    stats = generate(out / "a", n_calls=120, n_heldout=20, seed=3)
    return out, stats


def test_a_fixed_seed_gives_the_same_corpus(corpus, tmp_path):
    out, _ = corpus
    generate(tmp_path / "b", n_calls=120, n_heldout=20, seed=3)
    assert (out / "a" / "train.jsonl").read_bytes() == (tmp_path / "b" / "train.jsonl").read_bytes()
    assert (out / "a" / "heldout_calls.json").read_text() == (tmp_path / "b" / "heldout_calls.json").read_text()


def test_every_tool_and_every_failure_case_appears(corpus):
    out, stats = corpus
    assert set(TOOL_NAMES) <= set(stats["acts"])
    recs = [json.loads(x) for x in (out / "a" / "train.jsonl").read_text().splitlines()]
    text = "\n".join(r["prompt"] + r["target"] for r in recs)
    for case in ("already taken", "closed on weekends", "No patient named", "Goodbye", "I can only help with",
                 "Free parking", "You're booked", "Your appointment is now on", "I've cancelled"):
        assert case in text, case
    assert any(r["think"] for r in recs) and not all(r["think"] for r in recs)
    for r in recs:  # targets are what the engine expects: an answer or a tool call, then end of turn
        assert r["target"].endswith("<|im_end|>")
        assert r["prompt"].endswith("<think>\n") == r["think"]


def test_heldout_calls_use_unseen_names(corpus):
    out, _ = corpus
    recs = (out / "a" / "train.jsonl").read_text()
    held = json.loads((out / "a" / "heldout_calls.json").read_text())
    turns = [json.loads(x) for x in (out / "a" / "heldout" / "train.jsonl").read_text().splitlines()]
    assert turns and {r["split"] for r in turns} == {"heldout"}  # their scripted turns, for the probe
    callers = [n for c in held for n in c["expect"]["appointments"]
               if not any(a["patient_name"] == n for a in c["db"]["appointments"])]
    assert callers and all(n not in recs for n in callers)


def test_no_training_call_uses_a_hand_written_calls_patient(monkeypatch):
    reserved = reserved_names()
    assert {"mei tanaka", "tomasz nowak"} <= reserved  # read from scenarios/dental_clinic/callers/handwritten.yaml
    # A name bank of one reserved pair and one free pair: the reserved one is always drawn again.
    monkeypatch.setattr(gen, "_RESERVED", frozenset({"mei tanaka"}))
    rng = gen.random.Random(0)
    assert {gen._draw_name(rng, (["Mei", "Ana"], ["Tanaka"])) for _ in range(50)} == {"Ana Tanaka"}


def test_generated_words_resolve_to_the_intended_day_and_time():
    import datetime as dt

    from voice_agent.policy.calendar_words import parse_day, parse_time

    today = dt.date(2026, 12, 1)
    for k in range(1, 20):
        d = today + dt.timedelta(days=k)
        assert all(parse_day(p, today) == d for p in day_phrases(d, today)) and day_phrases(d, today)
    for hhmm in ("09:00", "09:30", "12:00", "13:30", "16:30"):
        assert time_phrases(hhmm) and all(parse_time(p) == hhmm for p in time_phrases(hhmm))


def test_a_caller_who_gives_the_name_first_is_never_asked_for_it(corpus):
    """"hi, this is Maria Lopez, I need to cancel": the next act uses the name, never asks for it."""
    import re

    out, _ = corpus
    recs = [json.loads(x) for x in (out / "a" / "train.jsonl").read_text().splitlines()]
    first = [r for r in recs if r["prompt"].count("<|im_start|>user") == 1]
    intro = re.compile(r"<\|im_start\|>user\n(?:\w+ ){0,3}(?:this is|my name is|it's|i'm|the name is) ([a-z]+ [a-z]+)"
                       r"(?: here| calling)?,? (?:i|i'd|can|could|please|call|scrap|take|when|what|do)\b", re.I)
    named = [(r, m.group(1)) for r in first if (m := intro.search(r["prompt"]))]
    assert len(named) >= 20
    assert not any("your full name" in r["target"] for r, _ in named)
    calls = [(r, n) for r, n in named if r["act"] in ("cancel_appointment", "lookup_patient", "book_appointment",
                                                      "move_appointment")]
    assert calls and all(n.lower() in r["target"].lower() for r, n in calls)


def test_the_name_question_names_the_intent_and_the_next_act_follows_it(tmp_path):
    """A caller who asked to cancel (move, look up) is asked for the name in that tool's words, so the
    act after the name is found in the agent's own last words, not three turns back."""
    import random

    from voice_agent.dialogues import lexicon
    from voice_agent.dialogues.policy import ASK, ask_name
    from voice_agent.scenarios import load_scenario

    assert len({ask_name("cancel"), ask_name("move"), ask_name("lookup"), ASK["name"]}) == 4
    assert ask_name("book") == ASK["name"]
    rng, scenario = random.Random(5), load_scenario("dental_clinic")
    names = lexicon.split_names(random.Random(0))["train"]
    after: dict[str, list[dict]] = {"cancel": [], "move": [], "lookup": []}
    for _ in range(400):
        call = gen.play(gen.plan_call(rng, names, "train"), scenario, rng, 0.0, tmp_path)
        for intent, recs in after.items():
            # the agent's message before the caller's last one is that intent's question
            recs += [r for r in call.records
                     if r["prompt"].split("<|im_start|>")[-3] == f"assistant\n{ask_name(intent)}<|im_end|>\n"]
        if all(len(v) >= 2 for v in after.values()):
            break
    assert all(after.values()), {k: len(v) for k, v in after.items()}
    assert {r["act"] for r in after["cancel"]} == {"cancel_appointment"}
    assert {r["act"] for r in after["lookup"]} == {"lookup_patient"}
    # a move still needs the new day and time (or has them all, and moves)
    assert all(r["act"] == "move_appointment" or "instead" in r["target"] for r in after["move"])


def test_a_caller_told_the_time_is_taken_books_one_of_the_offered_times(tmp_path):
    """The taken-slot error names the taken time; the caller must pick from the free times listed
    after it (before, it asked for the taken time again until the call ran out of turns)."""
    from voice_agent.dialogues import lexicon as lex
    from voice_agent.scenarios import load_scenario

    said = ("Sorry, Wednesday, December 2nd at 12 pm is already taken. Free times that day include "
            "11 am, 11:30 am and 12:30 pm. Would one of those work?")
    assert gen._offered(said) == ["11:00", "11:30", "12:30"]
    rng = gen.random.Random(5)
    names, scenario = lex.split_names(rng), load_scenario("dental_clinic")
    played = 0
    while played < 5:
        plan = gen.plan_call(rng, names["train"], "train")
        if plan.kind != "book_taken":
            continue
        taken = next((a["date"], a["time"]) for a in plan.existing if a["service"] == "checkup"
                     and (a["date"], a["time"]) == (plan.day.isoformat(), plan.time))
        call = gen.play(plan, scenario, rng, 0.5, tmp_path)
        booked = [(a["date"], a["time"]) for a in call.db.appointments(plan.name)]
        assert len(booked) == 1 and booked[0] != taken, (call.caller_turns, booked)
        assert len(call.caller_turns) < 10
        played += 1
