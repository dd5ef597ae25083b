"""Write callers/heldout.yaml: 40 generated hotel callers (seeded), for `voice-agent simulate`.

    python scenarios/hotel_front_desk/make_callers.py [--seed 2] [--calls 40]

Each call takes an intent, in its share of the calls (book in one breath or over several turns, ask what is
free, change, cancel, look up, a question about the hotel), draws a guest, a phone number said in one of
the ways callers say them, an arrival date, a number of nights and a room, and states what the diary must
hold afterwards.
Held out: this pack is never trained or tuned on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
from pathlib import Path

import yaml

TODAY = dt.date(2026, 12, 1)  # a Tuesday
NAMES = ["Amara Obi", "Bruno Costa", "Chloe Dubois", "Dev Malhotra", "Elif Yilmaz", "Finn Gallagher",
         "Grace Mwangi", "Hugo Lindqvist", "Isla Fraser", "Jonah Weiss", "Keiko Sato", "Liam Doherty",
         "Maria Kowalski", "Nadia Haddad", "Owen Price", "Rosa Alvarez"]
DIGIT_WORDS = ["oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DAYS = [("friday", dt.date(2026, 12, 4)), ("this saturday", dt.date(2026, 12, 5)), ("next monday", dt.date(2026, 12, 7)),
        ("the ninth", dt.date(2026, 12, 9)), ("thursday the 10th", dt.date(2026, 12, 10)),
        ("december 18th", dt.date(2026, 12, 18)), ("the 23rd", dt.date(2026, 12, 23)), ("tomorrow", dt.date(2026, 12, 2)),
        ("the 2nd of january", dt.date(2027, 1, 2))]
NIGHTS = [("one night", 1), ("two nights", 2), ("three nights", 3), ("four nights", 4), ("a couple of nights", 2),
          ("5 nights", 5)]
ROOMS = {"single": ["a single room", "a single"], "double": ["a double room", "a double", "a twin room"],
         "family": ["a family room"]}
FACTS = [("What time is breakfast?", "7"), ("Is there parking at the hotel?", "car park"),
         ("What time can we check in?", "3 pm"), ("Can I bring my dog?", "dogs"), ("Do you have wifi?", "free"),
         ("Where are you exactly?", "Marine Parade"), ("How much is a double room a night?", "110")]


def phone(rng: random.Random) -> str:
    return f"07700900{rng.randint(100, 999)}"


def say_phone(rng: random.Random, p: str) -> str:
    """As callers say a UK mobile: digits, digit words, or digit words with "double" for a repeat."""
    style = rng.randrange(3)
    if style == 0:
        return f"{p[:5]} {p[5:]}"
    words = [DIGIT_WORDS[int(c)] for c in p]
    if style == 1:
        return " ".join(words[:5]) + ", " + " ".join(words[5:])
    out, i = [], 0
    while i < len(words):
        if i + 1 < len(words) and words[i] == words[i + 1]:
            out.append(f"double {words[i]}")
            i += 2
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


def phone_line(rng: random.Random, p: str) -> str:
    return rng.choice(["My number is {}.", "The number is {}.", "It's {}.", "You can reach me on {}.",
                       "My mobile's {}."]).format(say_phone(rng, p))


def stay(name: str, day: dt.date, nights: int, room: str) -> dict:
    return {"guest": name, "check_in": day.isoformat(), "nights": nights, "room_type": room}


KINDS = ["book_one", "book_one", "book_turns", "book_turns", "change", "cancel", "lookup", "fact", "availability"]


def make_call(rng: random.Random, i: int, kind: str) -> dict:
    p, name = phone(rng), rng.choice(NAMES)
    (day_words, day), (nights_words, nights) = rng.choice(DAYS), rng.choice(NIGHTS)
    room = rng.choice(list(ROOMS))
    room_words = rng.choice(ROOMS[room])
    thanks = rng.choice(["Thanks, bye.", "Lovely, thank you.", "Great, cheers.", "Perfect, thanks.", "That's all, thanks."])
    name_line = rng.choice(["My name is {}.", "The name is {}.", "It's for {}.", "It'll be under {}."]).format(name)
    call: dict = {"id": f"gen_{i:03d}_{kind}"}
    if kind == "book_one":
        opener = rng.choice(["Hi, I'd like to book {room} for {nights} from {day}.",
                             "Hello, can I book {room} from {day} for {nights}, please?",
                             "I want to book {room}, arriving {day}, for {nights}."])
        call["caller"] = [f"{opener.format(room=room_words, nights=nights_words, day=day_words)} {name_line} "
                          f"{phone_line(rng, p)}", thanks]
        call["expect"] = {"state": {"bookings": {p: [stay(name, day, nights, room)]}}}
    elif kind == "book_turns":
        call["caller"] = [rng.choice(["I'd like to book {} please.", "Hi, could I book {}?",
                                      "Hello, I need a room. Could I book {}?"]).format(room_words),
                          rng.choice(["Arriving {}.", "From {}.", "{}, please."]).format(day_words).capitalize(),
                          rng.choice(["{}.", "For {}.", "Just {}."]).format(nights_words).capitalize(),
                          f"{name_line} {phone_line(rng, p)}", thanks]
        call["expect"] = {"state": {"bookings": {p: [stay(name, day, nights, room)]}}}
    elif kind in ("change", "cancel", "lookup"):
        old = {"phone_number": p, "guest": name, "check_in": "2026-12-08", "nights": 2, "room_type": room}
        call["setup"] = {"bookings": [old]}
        if kind == "change":
            longer = rng.random() < 0.3
            ask = rng.choice(["I need to change my booking to {}.", "Could I move my booking to {}, please?",
                              "Hi, can we change the dates? We'd like to arrive {} instead."]).format(day_words)
            if longer:
                ask += f" And make it {nights_words}, please."
            call["caller"] = [f"{ask} {phone_line(rng, p)}", thanks]
            call["expect"] = {"state": {"bookings": {p: [stay(name, day, nights if longer else 2, room)]}}}
        elif kind == "cancel":
            call["caller"] = [rng.choice(["I'd like to cancel my booking, please.", "Hi, I need to cancel my room.",
                                          "Something's come up and I have to cancel my stay."]),
                              phone_line(rng, p), rng.choice(["Yes, please cancel it.", thanks])]
            call["expect"] = {"state": {"bookings": {p: []}}, "no_tool_calls": ["book_room"]}
        else:
            call["caller"] = [rng.choice(["Could you check my booking? I can't remember the dates.",
                                          "Hi, when is my booking again?", "Can you confirm my booking please?"])
                              + " " + phone_line(rng, p), thanks]
            call["expect"] = {"tool_calls": ["lookup_booking"], "must_say": ["Tuesday"],
                              "state": {"bookings": {p: [{"check_in": "2026-12-08", "nights": 2}]}}}
    elif kind == "availability":
        call["caller"] = [rng.choice(["Do you have {room} free {day} for {nights}?",
                                      "Hi, is there a room available from {day}? {nights}, {room}.",
                                      "Have you got any rooms free from {day} for {nights}?"]).format(
            room=room_words, day=day_words, nights=nights_words).capitalize(), "Okay, I'll think about it. Thanks."]
        call["expect"] = {"tool_calls": ["check_availability"], "no_tool_calls": ["book_room"]}
    else:
        q, must = rng.choice(FACTS)
        call["caller"], call["expect"] = [q, thanks], {"must_say": [must], "no_tool_calls": ["book_room"]}
    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--calls", type=int, default=40)
    a = p.parse_args()
    rng = random.Random(a.seed)
    kinds = (KINDS * (a.calls // len(KINDS) + 1))[:a.calls]  # every intent in its share, in a seeded order
    rng.shuffle(kinds)
    doc = {"scenario": "hotel_front_desk", "today": TODAY.isoformat(),
           "calls": [make_call(rng, i, kind) for i, kind in enumerate(kinds)]}
    out = Path(__file__).parent / "callers" / "heldout.yaml"
    out.parent.mkdir(exist_ok=True)
    header = f"# Generated by make_callers.py --seed {a.seed} --calls {a.calls}; held out (never trained or tuned on).\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120))
    print(f"wrote {out} ({a.calls} calls)")


if __name__ == "__main__":
    main()
