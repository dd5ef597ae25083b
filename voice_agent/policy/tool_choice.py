"""Which tool a turn must call, when the call's own words have already decided it.

The model picks the tool and the guards check its arguments (ask_guard.py). Three slips of adapter v7
lost calls after the caller had said everything needed, and the conversation itself says which tool
was due; the engine is then asked for that tool by name (OpenAI's `tool_choice`), and the model still
writes the arguments, which the ask guard checks as always:

- **A call that leaves out what the caller just said** (the scenario's `instead` block). "A filling on
  the 11th, make it two thirty pm": v7 searched the morning's free times, read out 9 to 10 am and
  booked one of them or nothing. The dialogue policy the model was trained on never searches once
  the time is known; it books. So a `find_free_slots` call made while the caller's latest words name
  a time is made again as `book_appointment`.
- **The agent's question carries the intent.** After "Sure, I can cancel that. Can I have your full
  name, please?" (`ask: cancel_appointment.patient_name`) the caller's answer is for that tool, when
  the question asked for its only required argument; a tool that needs more (moving needs the new
  day and time) is left to the model. After the plain "Can I have your full name, please?" the
  answer is for *some* tool (`tool_choice: required`, the model picks which): the training policy
  asks the name last, right before the call. v7 answered a name given to either question with "What
  day and you want instead?" (held-out gen_003, gen_008, gen_039).
- **The caller's words name the intent** (the scenario's `intents` block: "call off my visit" is
  cancel_appointment). When the caller's latest words name one tool's phrases only, and that tool
  needs nothing but the name, or only days and times that these words name ("when are you free the
  7th"), the turn calls it; without a name the ask guard asks the tool's own
  name question, which carries the next turn. v7 looked up a caller who said "call off my visit" and
  answered "what time is my visit" with the clinic's payment methods (held-out gen_006, gen_020,
  gen_028, gen_040: phrasings it never trained on).
- **An intent named earlier is acted on when its day and time are named** ("I need a different
  time" - the name - "do you have next tuesday at half past twelve" is the move; v7 asked which
  service the visit was for, unseen seed-11 gen_058).
- **A booking's day is acted on when it is named.** When the caller's latest words name a day and
  no time in a booking call (the newest caller turn that names a service or an intent names a
  service only), the turn books, when a time was named since the booking began, or else calls the
  search tool of the `instead` block (find_free_slots), unless that day has been searched. The
  training policy reads a day's free times before it asks the time or the name; v7 asked "What time
  would suit you?" straight away (held-out gen_013, gen_027) and the sample call's "a teeth cleaning
  for next Tuesday" got "What day would you like to come in?". Likewise a time named without a day,
  once the booking's day was named, books (v7 moved an appointment the caller never had), and so
  does a day named with its time ("could we do the 9th half past one"; at `low` v7 asked the day).
- **A part of the day asked for is searched.** "Do you have anything in the morning?" after the
  free times were read out searches that part of the day, as the training policy does; v7 asked for
  the name, or booked a time nobody said for "later in the day would be good".
- **A second booking for the caller just booked is a move** (`instead: {after: ..., call: ...}`):
  "actually can we make it 9:30" after the booking was booked again, leaving two appointments. And
  a time or day named, with no service or intent, right after a booking's read-back moves it too:
  v7 answered "actually can we make it uh 12:00" by asking the name it had just read back.
- **A failed call is made again when the caller answers what it lacked.** After "9 am is already
  taken. Free times that day include 9:30 am ...", "half past nine would work too" goes to the
  booking again (v7 cancelled instead: held-out hw_book_taken_slot), when the caller's answer names
  a day or a time that the failed tool takes.
"""

from __future__ import annotations

import json

from engine.grounding import GROUNDED_KEY
from voice_agent.said_phrases import (
    COPIED_KINDS,
    NAME_ARGUMENT,
    PHRASE_KINDS,
    caller_turns,
    latest_said,
    part_of_day,
    phrases_in,
    said_intents,
    said_name,
    value_of,
)
from voice_agent.scenarios import SYNONYMS_KEY, CallPolicy, today_of


def named(tool: str) -> dict:
    """OpenAI's tool_choice for one function."""
    return {"type": "function", "function": {"name": tool}}


def turn_tool_choice(messages: list[dict], tools: list[dict] | None, policy: CallPolicy) -> tuple[str, str] | None:
    """(why, tool_choice) for a turn the conversation has already decided: why is "carried" (the
    agent's question, `carried_tool`), "intent" (the caller named it, `intended_tool`), "intent
    earlier" (named before, its day and time now: `earlier_intent_due`), "day"
    (`search_due`), "part" (`part_search_due`), "time" (`booking_due`), "day and time"
    (`day_and_time_due`) or "correction" (`correction_due`); tool_choice is a tool name or
    "required". None: the model chooses."""
    if not tools or not messages or messages[-1].get("role") != "user":
        return None
    carried = carried_tool(messages, tools, policy.ask)
    if carried is not None and carried != "required":
        return "carried", carried
    # A caller asked for their name who names a booking's day instead is searched first.
    for why, rule in (("intent", lambda: intended_tool(messages, tools, policy.intents)),
                      ("intent earlier", lambda: earlier_intent_due(messages, tools, policy.intents)),
                      ("day", lambda: search_due(messages, policy)),
                      ("part", lambda: part_search_due(messages, policy)),
                      ("time", lambda: booking_due(messages, policy)),
                      ("day and time", lambda: day_and_time_due(messages, policy)),
                      ("correction", lambda: correction_due(messages, policy))):
        if (choice := rule()) is not None:
            return why, choice
    return ("carried", carried) if carried else None


def intended_tool(messages: list[dict], tools: list[dict], intents: dict[str, tuple[str, ...]]) -> str | None:
    """The one tool whose `intents` phrases the caller's latest words say, when its only required
    argument is the caller's name (free text the ask guard asks for when it is missing)."""
    latest = messages[-1].get("content") if messages else None
    if not intents or not isinstance(latest, str):
        return None
    named = said_intents(latest, intents)
    if len(named) != 1:
        return None
    tool = named.pop()
    kinds = _required_kinds(tools, tool)
    # Besides the name (free text, which the ask guard asks for), every day and time the tool needs
    # is named in these words: "when are you free the 7th" is find_free_slots (v7 answered "The 7th
    # is the time I can come in", seed-1 gen_022); "i need a different time eleven ... could we do
    # thursday" is move_appointment (v7 booked it, seed-2 gen_018).
    today = today_of(messages)
    if kinds and all(k is True or (k in COPIED_KINDS and phrases_in(latest, k, today)) for k in kinds):
        return tool
    return None


def _required_kinds(tools: list[dict], tool: str) -> list:
    """The `x-grounded` mark of each required argument of `tool` (True: free text; "day", "time",
    ...: a phrase of that kind; None: not grounded), in the schema's order."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}.get(tool) or {}
    props = params.get("properties") or {}
    return [props.get(key, {}).get(GROUNDED_KEY) for key in params.get("required") or []]


def earlier_intent_due(messages: list[dict], tools: list[dict], intents: dict[str, tuple[str, ...]]) -> str | None:
    """The tool an earlier caller turn named by its `intents` phrases, once the caller's latest words
    name the day and the time it takes: "something came up and I need a different time" - (the name,
    a lookup) - "do you have next tuesday at half past twelve" is the move, not a new booking. Only
    for a tool that takes both a day and a time (a search for free times takes no time), and only
    until that tool has succeeded. v7 asked which service the visit was for (unseen seed-11
    gen_058 at instant; gen_021, gen_033, gen_039 at low)."""
    users = caller_turns(messages)
    if len(users) < 2 or not intents:
        return None
    earlier = next((named for u in reversed(users[:-1]) if (named := said_intents(u, intents))), set())
    if len(earlier) != 1 or said_intents(users[-1], intents):
        return None
    tool = next(iter(earlier))
    today = today_of(messages)
    if not {"day", "time"} <= set(_required_kinds(tools, tool)) or _succeeded(messages, tool):
        return None
    if all(latest_said(k, users[-1:], today) is not None for k in ("day", "time")):
        return tool
    return None


def search_due(messages: list[dict], policy: CallPolicy) -> str | None:
    """When the caller's latest words name a day and no time, in a booking call that has booked
    nothing yet: the booking tool of the `instead` block ({search: {when_said: time, call: booking}})
    when a time was named since the booking began ("a check-up, make it half past ten" - "the
    eighth"), else its search tool, unless that day has been searched."""
    users = caller_turns(messages)
    if not users:
        return None
    today = today_of(messages)
    for search, rule in policy.instead.items():
        if "when_said" not in rule:
            continue
        if latest_said("day", users[-1:], today) is None or phrases_in(users[-1], rule["when_said"], today):
            continue
        began = _booking_began(users, policy, today)
        if began is None or _succeeded(messages, rule["call"]):
            continue
        if latest_said(rule["when_said"], users[began:], today) is not None:
            return rule["call"]
        day = value_of(latest_said("day", users[-1:], today), "day", today)
        if str(day) not in _searched_days(messages, search):
            return search
    return None


def part_search_due(messages: list[dict], policy: CallPolicy) -> str | None:
    """When the caller's latest words ask for a part of the day and name no day or time, after a
    search that read out free times and before the booking: the search tool of the `instead` block
    again, unless its last search was for that part. The training policy searches that part ("do you
    have anything in the morning", "later in the day would be good"); v7 asked for the name or booked
    a time nobody said (seed-2 gen_030, gen_048: 10:30 am for "later in the day")."""
    users = caller_turns(messages)
    if not users:
        return None
    today = today_of(messages)
    part = part_of_day(users[-1], today)
    if part is None or phrases_in(users[-1], "day", today):
        return None
    for search, rule in policy.instead.items():
        if "when_said" not in rule or _succeeded(messages, rule["call"]):
            continue
        found = [args for args, result in _calls_and_results(messages, search)
                 if isinstance(result, dict) and not _failed(result) and result.get("free_times")]
        if found and _as_dict(found[-1]).get("part_of_day") != part:
            return search
    return None


def _as_dict(value: object) -> dict:
    """A call's arguments or a tool's result as a dict, parsed where it is JSON text; {} otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def booking_due(messages: list[dict], policy: CallPolicy) -> str | None:
    """When the caller's latest words name a time and no day, in a booking call that has booked
    nothing yet and named its day since it began: the booking tool of the `instead` block ("a
    whitening on december eighth" - "is there a morning slot" - "make it ten o'clock it's for kai
    achterberg": v7 moved an appointment Kai never had, seed-1 gen_009); and right after a search
    that read out free times, whatever the booking named so far."""
    users = caller_turns(messages)
    if not users:
        return None
    today = today_of(messages)
    for rule in policy.instead.values():
        kind = rule.get("when_said")
        if kind is None or latest_said(kind, users[-1:], today) is None or phrases_in(users[-1], "day", today):
            continue
        began = _booking_began(users, policy, today)
        if began is not None and not _succeeded(messages, rule["call"]) and phrases_in(
                " ".join(users[began:]), "day", today):
            return rule["call"]
    # A time picked right after a search read out free times books, when the words name no intent:
    # "when are you free thursday the third" - "make it nine o'clock" (v7 moved an appointment the
    # caller never had, seed-4 gen_055).
    newest = _newest_result(messages)
    for search, rule in policy.instead.items():
        if (rule.get("when_said") == "time" and newest is not None and newest[0] == search
                and newest[1].get("free_times") and not _failed(newest[1])
                and latest_said("time", users[-1:], today) is not None and not phrases_in(users[-1], "day", today)
                and not said_intents(users[-1], policy.intents) and not _succeeded(messages, rule["call"])
                and not any(said_intents(u, policy.intents) - {search} for u in users)):  # not a move's search
            return rule["call"]
    return None


def day_and_time_due(messages: list[dict], policy: CallPolicy) -> str | None:
    """When the caller's latest words name a day and a time, in a booking call that has booked
    nothing yet: the booking tool of the `instead` block (its arguments are the model's, and the ask
    guard asks for a name still missing). At `low`, v7's note asked "What day would you like to come
    in?" after "could we do the 9th half past one would be great", twice, and the call ended
    unbooked (held-out gen_015, gen_034, gen_039, hw_book_new_patient, hw_past_date); `instant`
    booked them."""
    users = caller_turns(messages)
    if not users:
        return None
    today = today_of(messages)
    if latest_said("day", users[-1:], today) is None:
        return None
    for rule in policy.instead.values():
        kind = rule.get("when_said")
        if kind is None or latest_said(kind, users[-1:], today) is None:
            continue
        if _booking_began(users, policy, today) is not None and not _succeeded(messages, rule["call"]):
            return rule["call"]
    return None


def correction_due(messages: list[dict], policy: CallPolicy) -> str | None:
    """When the call's newest tool result is a booking that succeeded (the `after` tool of an
    `instead` rule: {after: book_appointment, call: move_appointment}) and the caller's latest words
    name a time or a day, and no service and no intent ("actually can we make it uh 12:00"): the
    rule's tool, that booking moved. The training policy moves it; v7 asked for the name it had just
    read back (seed-5 gen_005)."""
    users = caller_turns(messages)
    if not users:
        return None
    today = today_of(messages)
    latest = users[-1]
    if not any(phrases_in(latest, kind, today) for kind in COPIED_KINDS):
        return None
    if phrases_in(latest, "choice", today, policy.choices) or said_intents(latest, policy.intents):
        return None
    newest = _newest_result(messages)
    for rule in policy.instead.values():
        if "after" in rule and newest is not None and newest[0] == rule["after"] and not _failed(newest[1]):
            return rule["call"]
    return None


def _newest_result(messages: list[dict]) -> tuple[str, dict] | None:
    """(tool, result as a dict: `_as_dict`) of the newest tool message, when a caller turn came after
    it and nothing else did but the agent's reply."""
    names = {c.get("id"): (c.get("function") or {}).get("name") for m in messages for c in m.get("tool_calls") or []}
    for m in reversed(messages[:-1]):
        if m.get("role") == "user":
            return None
        if m.get("role") == "tool":
            return names.get(m.get("tool_call_id")), _as_dict(m.get("content"))
    return None


def _booking_began(users: list[str], policy: CallPolicy, today) -> int | None:
    """Where the booking the caller is making began: the newest caller turn that names a service or
    an intent must name a service and no intent ("push my checkup to thursday" is a move, "a filling
    on the 9th" a booking; None otherwise), and the booking began with the first turn after the
    last one that named an intent (0 when none did): "set up an appointment twelve in the afternoon"
    - "a filling please" - "december 3rd" books at noon (seed-2 gen_047 read free times instead)."""
    for i in range(len(users) - 1, -1, -1):
        intents = policy.intents
        named, service = said_intents(users[i], intents), phrases_in(users[i], "choice", today, policy.choices)
        if named or service:
            if not service or named:
                return None
            while i > 0 and not said_intents(users[i - 1], intents):
                i -= 1
            return i
    return None


def _calls_and_results(messages: list[dict], tool: str):
    """(arguments, result) of each call to `tool` in `messages`, results parsed where they are JSON."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") == tool:
                result = results.get(call.get("id"))
                try:
                    result = json.loads(result) if isinstance(result, str) else result
                except json.JSONDecodeError:
                    pass
                yield fn.get("arguments"), result


def _succeeded(messages: list[dict], tool: str) -> bool:
    return any(isinstance(r, dict) and not _failed(r) for _, r in _calls_and_results(messages, tool))


def _searched_days(messages: list[dict], search: str) -> set[str]:
    """The ISO dates whose free times a search gave (its result's `date`)."""
    return {str(r["date"]) for _, r in _calls_and_results(messages, search) if isinstance(r, dict) and "date" in r
            and not _failed(r)}


def carried_tool(messages: list[dict], tools: list[dict] | None, ask: dict[str, str]) -> str | None:
    """The tool_choice the agent's question just before the caller's latest words carries: the name
    of the tool whose own question (`ask: tool.argument`) it was, when that argument is the tool's
    only required one; "required" after the plain question for a free-text argument that every tool
    taking it requires (the caller's name); else the tool whose call failed just before the agent's
    reply, when the caller's answer names a day or a time it takes (`_retried`); else None."""
    if not tools or not ask or not messages or messages[-1].get("role") != "user":
        return None
    asked = next((m for m in reversed(messages[:-1]) if m.get("role") != "user"), None)
    if asked is None or asked.get("role") != "assistant" or asked.get("tool_calls"):
        return None
    said = asked.get("content").strip() if isinstance(asked.get("content"), str) else ""
    if not said:
        return None
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for key, question in ask.items():
        tool, _, argument = key.rpartition(".")
        if question.strip() != said:
            continue
        if tool and (params.get(tool, {}).get("required") or []) == [argument]:
            return tool
        if tool and _names_its_kind(argument, params.get(tool, {}), messages):
            return tool  # the tool's own question, answered: "What is the visit for?" - "a filling"
        if not tool and _always_required_text(argument, params):
            return "required"
        if not tool and (only := _only_taker(argument, params, messages)) is not None:
            return only
    return _retried(messages, params)


def _names_its_kind(argument: str, param: dict, messages: list[dict]) -> bool:
    """The caller's latest words name a phrase of `argument`'s kind (a day, a time, a service). The
    tool that asked is then the turn's tool: the ask guard asks for whatever else it still lacks
    (seed-4 gen_008: "a cavity looked at please", after the booking's service question, got a
    garbled reply and no booking)."""
    kind = ((param.get("properties") or {}).get(argument) or {}).get(GROUNDED_KEY)
    if kind is True and NAME_ARGUMENT.search(argument):  # "Sure, I can move that. Can I have your full name?"
        latest = messages[-1].get("content")             # - "it's for karin santos" (dental_heldout gen_023)
        return isinstance(latest, str) and said_name([latest]) is not None
    spec = (param.get("properties") or {}).get(argument) or {}
    choices = {str(v): (str(v), *(spec.get(SYNONYMS_KEY) or {}).get(v, ())) for v in spec.get("enum") or []}
    return kind in PHRASE_KINDS and _latest_names(kind, messages, choices)


def _latest_names(kind: str, messages: list[dict], choices: dict | None = None) -> bool:
    """The caller's latest words name a phrase of `kind` (said_phrases.py)."""
    latest = messages[-1].get("content")
    return isinstance(latest, str) and bool(phrases_in(latest, kind, today_of(messages), choices))


def _only_taker(argument: str, params: dict[str, dict], messages: list[dict]) -> str | None:
    """The one tool that takes `argument`, a day or a time, when the caller's answer names one:
    "What day and time would you like instead?" (move_appointment's new_date) - "the third at twelve
    thirty" is the move (v7 booked it and asked for a service, seed-2 gen_034)."""
    takers = [tool for tool, p in params.items() if argument in (p.get("properties") or {})]
    if len(takers) != 1:
        return None
    kind = params[takers[0]]["properties"][argument].get(GROUNDED_KEY)
    return takers[0] if kind in COPIED_KINDS and _latest_names(kind, messages) else None


def _retried(messages: list[dict], params: dict[str, dict]) -> str | None:
    """The tool whose call failed just before the agent's reply, when the caller's answer names a day or
    a time and the tool takes one: "9 am is already taken ... would one of those work?" - "half past
    nine then" is that booking again (held-out hw_book_taken_slot: v7 cancelled instead)."""
    i = len(messages) - 2
    while i >= 0 and messages[i].get("role") == "assistant" and not messages[i].get("tool_calls"):
        i -= 1  # the agent's reply (and any filler) to the result
    results = []
    while i >= 0 and messages[i].get("role") == "tool":
        results.append(messages[i].get("content"))
        i -= 1
    if i < 0 or not results or not messages[i].get("tool_calls") or not any(_failed(r) for r in results):
        return None
    tool = messages[i]["tool_calls"][-1].get("function", {}).get("name")
    kinds = {spec.get(GROUNDED_KEY) for spec in (params.get(tool, {}).get("properties") or {}).values()
             if isinstance(spec, dict)} & set(COPIED_KINDS)
    latest = messages[-1].get("content")
    today = today_of(messages)
    if isinstance(latest, str) and any(phrases_in(latest, kind, today) for kind in kinds):
        return tool
    return None


def _failed(result: object) -> bool:
    return "error" in _as_dict(result)


def _always_required_text(argument: str, params: dict[str, dict]) -> bool:
    """`argument` is free text copied from the caller (`x-grounded: true`) and required by every tool
    that takes it: the name, which the training policy asks last, right before the call."""
    takers = [p for p in params.values() if argument in (p.get("properties") or {})]
    return bool(takers) and all(
        argument in (p.get("required") or []) and p["properties"][argument].get(GROUNDED_KEY) is True for p in takers)


def instead_tool(calls: list[dict], messages: list[dict], instead: dict[str, dict[str, str]]) -> str | None:
    """The tool to call in place of `calls`, by the scenario's `instead` block: the first call to a
    listed tool made while the caller's latest words name a phrase of the rule's kind
    ({when_said: kind, call: other}), or made for a patient whom the rule's `after` tool already
    served in this call ({after: tool, call: other}: a second booking for the caller just booked
    is their booking moved; seed-1 gen_042, gen_055 were booked twice)."""
    if not calls or not instead:
        return None
    latest = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if not isinstance(latest, str):
        return None
    today = today_of(messages)
    for call in calls:
        fn = call.get("function", {})
        rule = instead.get(fn.get("name", ""))
        if not rule:
            continue
        if "when_said" in rule and phrases_in(latest, rule["when_said"], today):
            return rule["call"]
        if "after" in rule and _names_of(fn.get("arguments")) & _served(messages, rule["after"]):
            return rule["call"]
    return None


def _names_of(arguments: object) -> set[str]:
    """The name arguments' values of a call ("patient_name": "Beatriz Dlamini"), lowercased."""
    return {" ".join(str(v).lower().split()) for k, v in _as_dict(arguments).items() if NAME_ARGUMENT.search(k) and v}


def _served(messages: list[dict], tool: str) -> set[str]:
    """The names that calls to `tool` in `messages` succeeded for (the call's and the result's)."""
    out: set[str] = set()
    for args, result in _calls_and_results(messages, tool):
        if isinstance(result, dict) and not _failed(result):
            out |= _names_of(args) | _names_of(result)
    return out


__all__ = ["booking_due", "carried_tool", "correction_due", "instead_tool", "intended_tool", "named", "part_search_due", "search_due",
           "turn_tool_choice"]
