"""The scripted receptionist: what a good agent does next, given what the caller has said so far.

State is the caller's intent and slots (service, day, time, name), filled as they arrive in any
order. `next_action` returns one act: a tool call (with the caller's own words as arguments) or a
reply to speak; after a tool call, `absorb` reads the real ClinicDB result and the policy is asked
again. Every act also carries a short reasoning note (at most ~30 tokens) for `low`/`medium`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voice_agent.scenarios import ask_question, load_scenario

_SCENARIO_ASK = load_scenario("dental_clinic").ask  # one home: the agent asks in the same words
INTENT_TOOL = {"book": "book_appointment", "move": "move_appointment", "cancel": "cancel_appointment",
               "lookup": "lookup_patient"}
ASK = {
    "service": _SCENARIO_ASK["book_appointment.service"],
    "day": _SCENARIO_ASK["date"],
    "time": _SCENARIO_ASK["time"],
    "name": _SCENARIO_ASK["patient_name"],
    "new_when": _SCENARIO_ASK["new_date"],
}


@dataclass
class Act:
    kind: str                        # "say" | "call"
    text: str = ""                   # what to say
    tool: str = ""                   # the tool to call
    args: dict = field(default_factory=dict)
    note: str = ""                   # the reasoning note at low/medium effort


@dataclass
class State:
    intent: str | None = None        # book | move | cancel | lookup | free
    service: str | None = None
    day: str | None = None           # the caller's words, or the canonical date once a tool gave it
    time: str | None = None
    name: str | None = None
    part: str | None = None          # morning | afternoon
    checked_day: str | None = None   # the day whose free times were read out
    checked_part: str | None = None  # ... and for which part of the day
    booked: dict | None = None       # the last booking result (a correction moves it)
    done: bool = False               # the intent was carried out
    pending_say: str | None = None   # what to answer first (a question, a goodbye)

    def note(self, action: str) -> str:
        def v(x: str | None) -> str:
            return x if x else "?"
        return (f"{self.intent or 'none'}; service {v(self.service)}; day {v(self.day)}; time {v(self.time)}; "
                f"name {v(self.name)} -> {action}")


def ask_name(intent: str | None) -> str:
    """The name question in the intent's own words ("Sure, I can cancel that. Can I have ...")."""
    return ask_question(_SCENARIO_ASK, INTENT_TOOL.get(intent or "", ""), "patient_name") or ASK["name"]


def first_name(name: str) -> str:
    return name.split()[0]


def next_action(s: State) -> Act:
    """The one next act for state `s` (no tool result pending)."""
    if s.pending_say:
        text, s.pending_say = s.pending_say, None
        return Act("say", text=text, note=s.note("answer"))
    if s.intent == "book" and not s.done:
        if s.service is None:
            return Act("say", text=ASK["service"], note=s.note("ask service"))
        if s.day is None:
            return Act("say", text=ASK["day"], note=s.note("ask day"))
        if s.time is None:
            if s.checked_day == s.day and s.checked_part == s.part:
                return Act("say", text=ASK["time"], note=s.note("ask time"))
            args = {"date": s.day, **({"part_of_day": s.part} if s.part else {}), "service": s.service}
            return Act("call", tool="find_free_slots", args=args, note=s.note("find_free_slots"))
        if s.name is None:
            return Act("say", text=ask_name(s.intent), note=s.note("ask name"))
        return Act("call", tool="book_appointment", note=s.note("book_appointment"),
                   args={"patient_name": s.name, "date": s.day, "time": s.time, "service": s.service})
    if s.intent == "free" and not s.done:
        if s.day is None:
            return Act("say", text=ASK["day"], note=s.note("ask day"))
        args = {"date": s.day, **({"part_of_day": s.part} if s.part else {})}
        return Act("call", tool="find_free_slots", args=args, note=s.note("find_free_slots"))
    if s.intent in ("cancel", "lookup") and not s.done:
        if s.name is None:
            return Act("say", text=ask_name(s.intent), note=s.note("ask name"))
        tool = INTENT_TOOL[s.intent]
        return Act("call", tool=tool, args={"patient_name": s.name}, note=s.note(tool))
    if s.intent == "move" and not s.done:
        if s.name is None:
            return Act("say", text=ask_name(s.intent), note=s.note("ask name"))
        if s.day is None or s.time is None:
            return Act("say", text=ASK["new_when"], note=s.note("ask new day and time"))
        return Act("call", tool="move_appointment", note=s.note("move_appointment"),
                   args={"patient_name": s.name, "new_date": s.day, "new_time": s.time})
    return Act("say", text="Is there anything else I can help you with?", note=s.note("offer help"))


def absorb(s: State, tool: str, args: dict, result: dict) -> None:
    """Update the state from a real tool result, and queue what to say about it."""
    err = result.get("error")
    if tool == "find_free_slots":
        if err:
            s.day, s.checked_day = None, None
            s.pending_say = f"{_sentence(err)} What other day would suit you?"
            return
        times = result.get("free_times") or []
        s.day = result["date"]
        s.checked_day, s.checked_part = s.day, args.get("part_of_day")
        if not times:
            nxt = result.get("next_free")
            s.day = s.checked_day = None
            s.pending_say = (f"Sorry, {result['day']} is fully booked. The next free time is {nxt}. Would that work?"
                             if nxt else f"Sorry, {result['day']} is fully booked. What other day would suit you?")
            return
        pick = times[:3]
        listed = pick[0] if len(pick) == 1 else ", ".join(pick[:-1]) + " or " + pick[-1]
        if s.intent == "free":
            s.intent, s.done = "book", False
            s.pending_say = f"On {result['day']} I have {listed}. Would you like one of those?"
        else:
            s.pending_say = f"On {result['day']} I have {listed}. Which would you like?"
        return
    if tool == "book_appointment":
        if err:
            if "already taken" in err:
                s.time = None
                s.checked_day = s.day
                s.pending_say = f"Sorry, {_sentence(err)} Would one of those work?"
            elif "time" in err.split(":")[0] or "appointment time" in err:
                s.time = None
                s.pending_say = f"{_sentence(err)} What time would you like?"
            else:
                s.day = s.checked_day = None
                s.pending_say = f"{_sentence(err)} What other day would suit you?"
            return
        s.done, s.booked = True, result
        s.day = result["date"]
        s.pending_say = (f"You're booked for a {result['service']} on {result['when']}, "
                         f"{first_name(result['patient_name'])}. Anything else?")
        return
    if tool == "move_appointment":
        if err:
            if "already taken" in err:
                s.time = None
                s.pending_say = f"Sorry, {_sentence(err)} Would one of those work?"
            elif "No patient named" in err or "no upcoming" in err:
                s.name = None
                s.pending_say = f"{_sentence(err)} Could you give me the full name on the booking?"
                s.intent = "move"
            else:
                s.day = s.time = None
                s.pending_say = f"{_sentence(err)} What day and time would you like instead?"
            return
        if not result.get("moved"):
            s.done = True
            s.pending_say = f"{_sentence(result.get('message', 'Nothing to move.'))} Anything else?"
            return
        s.done, s.booked = True, result
        s.day = result["date"]
        s.pending_say = f"Done, {first_name(result['patient_name'])}. Your appointment is now on {result['when']}."
        return
    if tool == "cancel_appointment":
        if err:
            s.name = None
            s.pending_say = f"{_sentence(err)} Could you give me the full name on the booking?"
            return
        s.done = True
        s.pending_say = (f"I've cancelled your {result['service']} on {result['when']}, "
                         f"{first_name(result['patient_name'])}. Anything else?")
        return
    if tool == "lookup_patient":
        if err:
            s.name = None
            s.pending_say = f"{_sentence(err)} Could you give me the full name again?"
            return
        s.done = True
        nxt = result.get("next_appointment")
        s.pending_say = (f"Your next appointment is a {nxt['service']} on {nxt['when']}."
                         if nxt else "You have no upcoming appointments. Would you like to book one?")


def _sentence(text: str) -> str:
    text = text.strip()
    for prefix in ("date: ", "new_date: ", "time: ", "new_time: ", "service: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."
