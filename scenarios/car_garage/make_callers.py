"""Write callers/heldout.yaml: 40 generated garage callers (seeded), for `voice-agent simulate`.

    python scenarios/car_garage/make_callers.py [--seed 1] [--calls 40]

Each call draws an intent (book in one breath or over turns, move, cancel, look up, a question), a
registration spelled out in one of the ways callers say them, a name, a day and a time, and states
what the diary must hold afterwards. Held out: nothing was tuned on them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import string
from pathlib import Path

import yaml

TODAY = dt.date(2026, 12, 1)  # a Tuesday
NAMES = ["Amara Obi", "Felix Brandt", "Ines Duarte", "Kwame Mensah", "Lucy Hartley", "Mateo Rossi", "Niamh Byrne",
         "Oskar Nilsson", "Ruth Adeyemi", "Theo Marsh", "Yuki Tanaka", "Zainab Hussain"]
DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
DAYS = [("next monday", dt.date(2026, 12, 7)), ("thursday", dt.date(2026, 12, 3)), ("friday", dt.date(2026, 12, 4)),
        ("saturday", dt.date(2026, 12, 5)), ("the ninth", dt.date(2026, 12, 9)), ("tomorrow", dt.date(2026, 12, 2)),
        ("wednesday the ninth", dt.date(2026, 12, 9)), ("december 10th", dt.date(2026, 12, 10))]
TIMES = [("nine", "09:00"), ("ten thirty", "10:30"), ("half past eight", "08:30"), ("two pm", "14:00"),
         ("eleven", "11:00"), ("three", "15:00"), ("one thirty", "13:30"), ("noon", "12:00")]
JOBS = {"service": ["a service", "a full service", "my car serviced", "an oil change and service"],
        "mot": ["an MOT", "the MOT", "its annual MOT test"], "tyres": ["new tyres", "a tyre change", "two new tires"]}


def plate(rng: random.Random) -> str:
    letters = string.ascii_uppercase.replace("I", "").replace("O", "").replace("Q", "")
    return (rng.choice(letters) + rng.choice(letters) + f"{rng.randint(10, 79):02d}"
            + "".join(rng.choice(letters) for _ in range(3)))


def say_plate(rng: random.Random, p: str) -> str:
    style = rng.randrange(3)
    if style == 0:
        return f"{p[:4]} {p[4:]}"
    out = [DIGIT_WORDS[int(c)] if c.isdigit() else c for c in p]
    return " ".join(out) if style == 1 else " ".join(out[:4]) + ", " + " ".join(out[4:])


def make_call(rng: random.Random, i: int) -> dict:
    kind = rng.choice(["book_one", "book_one", "book_turns", "book_turns", "move", "cancel", "lookup", "fact"])
    p, name = plate(rng), rng.choice(NAMES)
    (day_words, day), (time_words, hhmm) = rng.choice(DAYS), rng.choice(TIMES)
    job = rng.choice(list(JOBS))
    thanks = rng.choice(["Thanks, bye.", "Great, cheers.", "Lovely, thank you.", "Perfect."])
    reg = rng.choice(["The reg is {}.", "Registration {}.", "It's {}.", "The car is {}."]).format(say_plate(rng, p))
    call: dict = {"id": f"gen_{i:03d}_{kind}"}
    if kind == "book_one":
        call["caller"] = [f"Hi, can I book {rng.choice(JOBS[job])} for {day_words} at {time_words}? {reg} "
                          f"My name is {name}.", thanks]
        call["expect"] = {"state": {"bookings": {p: [{"date": day.isoformat(), "time": hhmm, "job": job}]}}}
    elif kind == "book_turns":
        call["caller"] = [f"I'd like to book {rng.choice(JOBS[job])} please.", f"{day_words.capitalize()} would be good.",
                          f"{time_words.capitalize()}, please.", f"{reg} And it's {name}.", thanks]
        call["expect"] = {"state": {"bookings": {p: [{"date": day.isoformat(), "time": hhmm, "job": job}]}}}
    elif kind in ("move", "cancel", "lookup"):
        old = {"plate": p, "customer": name, "date": "2026-12-08", "time": "10:00", "job": job}
        call["setup"] = {"bookings": [old]}
        if kind == "move":
            call["caller"] = [f"I need to move my booking to {day_words} at {time_words}. {reg}", thanks]
            call["expect"] = {"state": {"bookings": {p: [{"date": day.isoformat(), "time": hhmm, "job": job}]}}}
        elif kind == "cancel":
            call["caller"] = [f"I'd like to cancel my booking please. {reg}", thanks]
            call["expect"] = {"state": {"bookings": {p: []}}}
        else:
            call["caller"] = [f"Can you tell me when my car is booked in? {reg}", thanks]
            call["expect"] = {"tool_calls": ["lookup_job"], "must_say": ["Tuesday"],
                              "state": {"bookings": {p: [{"date": "2026-12-08", "time": "10:00"}]}}}
    else:
        q, must = rng.choice([("How much is a full service?", "150"), ("What time do you close?", "6 pm"),
                              ("Where are you based?", "Canal Road"), ("How long does an MOT take?", "hour")])
        call["caller"], call["expect"] = [q, thanks], {"must_say": [must], "no_tool_calls": ["book_job"]}
    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--calls", type=int, default=40)
    a = p.parse_args()
    rng = random.Random(a.seed)
    doc = {"scenario": "car_garage", "today": TODAY.isoformat(), "calls": [make_call(rng, i) for i in range(a.calls)]}
    out = Path(__file__).parent / "callers" / "heldout.yaml"
    header = f"# Generated by make_callers.py --seed {a.seed} --calls {a.calls}; held out (never tuned on).\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120))
    print(f"wrote {out} ({a.calls} calls)")


if __name__ == "__main__":
    main()
