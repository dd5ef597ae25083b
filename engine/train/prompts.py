"""A generated, varied set of voice-agent turns (fixed seed): the prompts the teacher answers.

Each sample is a chat (system + history + user turn) plus, for tool turns, the tool call that a
good receptionist would make; for about half the samples a short reasoning note in `<think>`.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"
# Samples written before scenario packs name the dental pack by its old id.
_RENAMED = {"dental_receptionist": "dental_clinic"}
TODAY = dt.date(2026, 11, 30)

FIRST = ["Maria", "James", "Aisha", "Tom", "Priya", "Daniel", "Sofia", "Wei", "Olga", "Carlos", "Emma",
         "Noah", "Fatima", "Liam", "Grace", "Omar", "Hannah", "Lucas", "Mei", "Jack", "Chloe", "Ravi",
         "Zoe", "Ben", "Nina", "Peter", "Laura", "Sam", "Ines", "Kofi"]
LAST = ["Lopez", "Smith", "Khan", "Nguyen", "Patel", "Brown", "Garcia", "Chen", "Ivanova", "Okafor",
        "Miller", "Rossi", "Kim", "Murphy", "Silva", "Haddad", "Novak", "Taylor", "Schmidt", "Wilson"]
SERVICES = ["checkup", "cleaning", "filling", "whitening", "emergency"]
SERVICE_WORDS = {"checkup": ["a checkup", "a check-up", "my yearly checkup"],
                 "cleaning": ["a cleaning", "a teeth cleaning", "a hygiene appointment"],
                 "filling": ["a filling", "a cavity filled"], "whitening": ["whitening", "teeth whitening"],
                 "emergency": ["an emergency visit", "something urgent, my tooth really hurts"]}
TIMES = ["09:00", "09:30", "10:00", "10:30", "11:00", "11:30", "13:00", "13:30", "14:00", "14:30",
         "15:00", "15:30", "16:00", "16:30"]
OPENERS = ["Hi", "Hello", "Hey there", "Good morning", "Good afternoon", "Hi, um", "Yes hello", "Hi there"]
PERSONAS = [
    "You are Alex, a friendly support agent for Northwind Mobile, on a phone call. Keep answers to one or two short sentences.",
    "You are Sam, the host at Luna Bistro, taking phone calls. Be brief and warm.",
    "You are a helpful phone assistant. Answer in one or two short spoken sentences, no lists.",
    "You are Jo, at the front desk of City Fitness, answering the phone. Keep it short and friendly.",
]


@dataclass
class Sample:
    id: str
    category: str
    messages: list[dict]
    tools_scenario: str | None = None
    think: str | None = None  # reasoning note, or None for an answer without thinking
    tool_call: dict | None = None  # the target call for tool turns (synthetic, schema-valid)
    extra: dict = field(default_factory=dict)


def load_scenario_tools(name: str) -> tuple[str, list[dict]]:
    data = yaml.safe_load((SCENARIOS_DIR / _RENAMED.get(name, name) / "scenario.yaml").read_text())
    tools = [{"type": "function", "function": t} for t in data["tools"]]
    return data["system_prompt"].strip(), tools


def _date_phrase(rng: random.Random) -> tuple[str, str]:
    d = TODAY + dt.timedelta(days=rng.randint(1, 30))
    while d.weekday() >= 5:
        d += dt.timedelta(days=1)
    day = d.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    phrase = rng.choice([f"{d:%B} {day}{suffix}", f"{d:%A} {d:%B} {day}", f"the {day}{suffix} of {d:%B}", f"{d:%B} {day}"])
    return phrase, d.isoformat()


def _time_phrase(rng: random.Random) -> tuple[str, str]:
    t = rng.choice(TIMES)
    h, m = map(int, t.split(":"))
    h12 = h if h <= 12 else h - 12
    ampm = "am" if h < 12 else "pm"
    phrase = f"{h12}:{m:02d} {ampm}" if m else rng.choice([f"{h12} {ampm}", f"{h12} o'clock", f"{h12} {ampm}"])
    return phrase, t


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _tool_turn(rng: random.Random) -> tuple[str, str, dict, str]:
    """(category, user text, tool call, think note)."""
    kind = rng.choice(["find", "book", "move", "cancel", "lookup", "find", "book"])
    name = _name(rng)
    dphr, date = _date_phrase(rng)
    tphr, time = _time_phrase(rng)
    svc = rng.choice(SERVICES)
    sw = rng.choice(SERVICE_WORDS[svc])
    op = rng.choice(OPENERS)
    if kind == "find":
        user = rng.choice([f"{op}, do you have anything free on {dphr}?", f"{op}, I need {sw}. What times are open on {dphr}?",
                           f"Are there any openings {dphr} for {sw}?", f"{op}, when can I come in on {dphr}?"])
        args = {"date": date} | ({"service": svc} if "for" in user or "need" in user else {})
        note = f"The caller wants free times on {date}. I should call find_free_slots."
        return "tool_find", user, {"name": "find_free_slots", "arguments": args}, note
    if kind == "book":
        user = rng.choice([f"{op}, this is {name}. Can I book {sw} on {dphr} at {tphr}?",
                           f"Please book me in for {dphr} at {tphr}. My name is {name}.",
                           f"{op}, I'm {name} and I'd like {sw} on {dphr} at {tphr}, please."])
        args = {"patient_name": name, "date": date, "time": time} | ({"service": svc} if sw in user else {})
        note = f"{name} asked for {date} at {time}. I should book it."
        return "tool_book", user, {"name": "book_appointment", "arguments": args}, note
    if kind == "move":
        user = rng.choice([f"{op}, it's {name}. Can I move my appointment to {dphr} at {tphr}?",
                           f"I need to reschedule. This is {name}, could we do {dphr} at {tphr} instead?"])
        args = {"patient_name": name, "new_date": date, "new_time": time}
        note = f"{name} wants to move to {date} at {time}. I should call move_appointment."
        return "tool_move", user, {"name": "move_appointment", "arguments": args}, note
    if kind == "cancel":
        user = rng.choice([f"{op}, this is {name}, I need to cancel my appointment.",
                           f"Can you cancel my next visit? The name is {name}.",
                           f"{op}, {name} here. I can't make it, please cancel."])
        note = f"{name} wants to cancel. I should call cancel_appointment."
        return "tool_cancel", user, {"name": "cancel_appointment", "arguments": {"patient_name": name}}, note
    user = rng.choice([f"{op}, when is my next appointment? It's {name}.", f"Can you check if I have a booking? My name is {name}.",
                       f"{op}, this is {name}, am I booked in for anything?"])
    note = f"{name} asks about their booking. I should call lookup_patient."
    return "tool_lookup", user, {"name": "lookup_patient", "arguments": {"patient_name": name}}, note


CHAT_TURNS = {
    "greeting": (["Hi!", "Hello?", "Hi, is this the dental clinic?", "Good morning.", "Hey, how's it going?", "Hello, can you hear me?"],
                 "The caller is greeting me. I should greet back and offer help."),
    "scheduling": (["What are your opening hours?", "Are you open on Saturdays?", "How long does a cleaning take?",
                    "Do I need to bring anything to my first visit?", "Can I come in during my lunch break?",
                    "How early should I arrive for my appointment?"],
                   "The caller asks about hours or visits. I should answer briefly."),
    "account": (["Do you take Delta Dental insurance?", "How much does a checkup cost without insurance?",
                 "Can I update my phone number?", "I got a bill I don't understand.", "Do you offer payment plans?",
                 "Can I get a copy of my x-rays?"],
                "The caller has an account or billing question. I should help or offer to check."),
    "confirmation": (["Yes, that works.", "Okay, perfect.", "No, that's all, thanks.", "Sure, go ahead.", "Yeah, thanks!", "Great, see you then."],
                     "The caller is confirming. I should acknowledge briefly."),
    "small_talk": (["How are you today?", "Lovely weather today, isn't it?", "You sound very friendly.", "Sorry, I'm a bit nervous about dentists.",
                    "Thanks for being so patient with me."],
                   "Small talk. I should reply warmly and steer back to how I can help."),
    "off_topic": (["What's the capital of France?", "Can you recommend a good pizza place?", "Who won the game last night?",
                   "Can you tell me a joke?", "What's the weather tomorrow?"],
                  "This is off topic. I should answer briefly or redirect politely."),
}


def build_samples(n: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    dental_sys, dental_tools = load_scenario_tools("dental_clinic")
    out: list[Sample] = []
    for i in range(n):
        r = rng.random()
        think = rng.random() < 0.5
        if r < 0.4:
            cat, user, call, note = _tool_turn(rng)
            sys_text = dental_sys + f"\nToday is {TODAY:%A}, {TODAY.isoformat()}."
            msgs = [{"role": "system", "content": sys_text}]
            if rng.random() < 0.3:
                msgs += [{"role": "user", "content": rng.choice(CHAT_TURNS["greeting"][0])},
                         {"role": "assistant", "content": "Hi, thanks for calling Bright Smile Dental. How can I help?"}]
            msgs.append({"role": "user", "content": user})
            out.append(Sample(f"s{i}", cat, msgs, "dental_clinic", note if think else None, call))
            continue
        cat = rng.choice(list(CHAT_TURNS))
        user = rng.choice(CHAT_TURNS[cat][0])
        if rng.random() < 0.55:
            msgs = [{"role": "system", "content": dental_sys}]
            scen = "dental_clinic"
        else:
            msgs = [{"role": "system", "content": rng.choice(PERSONAS)}]
            scen = None
        if rng.random() < 0.35:  # a multi-turn history
            msgs += [{"role": "user", "content": rng.choice(CHAT_TURNS["greeting"][0])},
                     {"role": "assistant", "content": rng.choice(["Hello! How can I help you today?", "Hi there, what can I do for you?"])}]
            cat = f"multi_{cat}"
        msgs.append({"role": "user", "content": user})
        out.append(Sample(f"s{i}", cat, msgs, scen, CHAT_TURNS[cat.removeprefix('multi_')][1] if think else None))
    return out


def tools_for(sample: Sample) -> list[dict]:
    return load_scenario_tools(sample.tools_scenario)[1] if sample.tools_scenario else []


def write_jsonl(samples: list, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s) if not isinstance(s, dict) else s) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
