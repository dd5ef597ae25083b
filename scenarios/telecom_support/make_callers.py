"""Write callers/heldout.yaml: 40 generated telecom callers (seeded), for `voice-agent simulate`.

    python scenarios/telecom_support/make_callers.py [--seed 1] [--calls 40]

Each call draws an intent, one of the seeded accounts, a way of saying the number and a phrasing,
and states what the accounts must look like afterwards. Held out: nothing was tuned on them.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import yaml

ACCOUNTS = {"5550142": "basic", "5550199": "plus", "5550117": "unlimited", "5550175": "basic", "5550163": "plus",
            "5550128": "basic"}
WORDS = {"0": ["oh", "zero"], "1": ["one"], "2": ["two"], "3": ["three"], "4": ["four"], "5": ["five"], "6": ["six"],
         "7": ["seven"], "8": ["eight"], "9": ["nine"]}
PLAN_WORDS = {"basic": ["the basic plan", "basic", "the cheapest plan"], "plus": ["the plus plan", "plus"],
              "unlimited": ["unlimited", "the unlimited plan", "unlimited data"]}
PLACES = {"europe": ["Spain", "France", "Italy", "Portugal", "Greece"], "usa": ["the States", "New York", "Florida"],
          "world": ["Japan", "Australia", "Mexico"]}
CHECKS = [("airplane mode", "airplane mode is off", "Oh, airplane mode was on! It works now."),
          ("mobile data", "mobile data is on", "Mobile data was switched off. It's working now, thanks."),
          ("apn", "the APN settings look fine", "I reset the APN and it works now."),
          ("restart", "I restarted it and it still doesn't work", "I restarted it and now it works.")]


def say_number(rng: random.Random, phone: str) -> str:
    style = rng.randrange(3)
    if style == 0:
        return f"{phone[:3]} {phone[3:]}"
    spoken = [rng.choice(WORDS[d]) for d in phone]
    if style == 1:
        return " ".join(spoken[:3]) + ", " + " ".join(spoken[3:])
    return " ".join(spoken)


def number_line(rng: random.Random, phone: str) -> str:
    return rng.choice(["My number is {}.", "It's {}.", "The number's {}.", "{}", "Sure, it's {}."]).format(
        say_number(rng, phone))


def make_call(rng: random.Random, i: int) -> dict:
    kind = rng.choice(["usage", "plan", "plan", "roaming", "roaming", "data_fixed", "data_ticket", "fact"])
    phone = rng.choice(list(ACCOUNTS))
    thanks = rng.choice(["Thanks, bye.", "Great, thank you.", "Perfect, that's all.", "Cheers."])
    if kind == "usage":
        ask = rng.choice(["How much data do I have left?", "Can you check my balance please?",
                          "I'd like to know how much data I've used this month."])
        caller = [ask, number_line(rng, phone), thanks]
        expect = {"tool_calls": ["check_usage"], "state": {"tickets": []}}
    elif kind == "plan":
        new = rng.choice([p for p in PLAN_WORDS if p != ACCOUNTS[phone]])
        words = rng.choice(PLAN_WORDS[new])
        if rng.random() < 0.5:
            caller = [rng.choice(["I'd like to switch to {}.", "Can you move me to {} please?",
                                  "I want to change my plan to {}."]).format(words), number_line(rng, phone), thanks]
        else:
            caller = [rng.choice(["I want to change my plan.", "Can I change my plan please?"]),
                      number_line(rng, phone), f"{words.capitalize()}, please.", thanks]
        expect = {"state": {"customers": {phone: {"plan": new}}}}
    elif kind == "roaming":
        region = rng.choice(list(PLACES))
        place = rng.choice(PLACES[region])
        caller = [rng.choice(["I'm travelling to {} next week and need roaming.", "Can I get a roaming pass for {}?",
                              "I'm going to {} on Friday, can you add a travel pass?"]).format(place),
                  number_line(rng, phone), thanks]
        expect = {"state": {"customers": {phone: {"passes": [{"region": region}]}}}}
    elif kind in ("data_fixed", "data_ticket"):
        caller = [rng.choice(["My mobile data isn't working.", "My data stopped working today.",
                              "I can't get online on my phone, the data's not working."]), number_line(rng, phone)]
        if kind == "data_fixed":
            k = rng.randrange(len(CHECKS))
            caller += [c[1] for c in CHECKS[:k]] + [CHECKS[k][2], thanks]
            expect = {"no_tool_calls": ["open_ticket"], "state": {"tickets": []}}
        else:
            caller += [c[1] for c in CHECKS] + [thanks]
            expect = {"tool_calls": ["open_ticket"], "state": {"tickets": [{"phone": phone}]}}
    else:
        q, must = rng.choice([("What plans do you offer?", "Unlimited"), ("How much is a roaming pass?", "dollars"),
                              ("When are your phone lines open?", "8 pm"), ("Where's your nearest store?", "Market")])
        caller, expect = [q, thanks], {"must_say": [must], "no_tool_calls": ["change_plan", "add_roaming_pass"]}
    return {"id": f"gen_{i:03d}_{kind}", "caller": caller, "expect": expect}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "callers" / "heldout.yaml")
    a = p.parse_args()
    rng = random.Random(a.seed)
    doc = {"scenario": "telecom_support", "today": "2026-12-01", "calls": [make_call(rng, i) for i in range(a.calls)]}
    out = a.out
    header = f"# Generated by make_callers.py --seed {a.seed} --calls {a.calls}; held out (never tuned on).\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120))
    print(f"wrote {out} ({a.calls} calls)")


if __name__ == "__main__":
    main()
