"""Ask, do not guess: a tool call whose argument the caller never said is replaced by the question.

A small model sometimes calls `book_appointment` before it has every detail, and the tool-call guide
makes it fill every required argument, so it invents one: a name nobody gave ("sarah", or the
receptionist's own "Maya"), "one" for a time the caller never named. Running such a call books the
wrong patient or the wrong hour. The scenario's `ask` block says what to say for each argument
that must come from the caller (the same questions the training dialogues ask). When a call's
grounded argument (engine/text/grounding.py) is neither close to a span of what was said nor made of
words that were said ("december the ninth" after "the ninth of december" is), that question is
spoken instead and the call does not run.

A typed argument (`x-grounded: day` or `time`) must also be a phrase of its kind. One that is not, or
that nobody said ("1:00" for "half past one"), first takes the caller's own phrase of that kind from
their latest words that name one (voice_agent/said_phrases.py); only when there is none, or two
different ones, is the question asked; a phrase the caller refused ("eleven, not ten") does not
count as said, and a day or time that was said but is not the one the caller's newest words name
("noon would be great", booked at 12:30 read from the tool's free times: seed-1 gen_005) takes
theirs. An enum (`x-kind: enum`, `x-grounded: choice`) is a choice,
not a copy: when the caller's latest words that name a value name another one, theirs is taken;
when the caller never named one and the `ask` block has a question for it, that is asked (a dental
booking that left the service out was booked as a checkup).
A copied name loses the hesitations ASR wrote into it ("karin um das"); one that is only a
hesitation, a day or a time, or only day words ("december of december"), is no name. A name argument (`name` or `*_name`) the caller never said, or
no name, takes the name the caller gave ("the name is karin das", said_phrases.said_name) and is
asked for only when they gave none; a copy of part of it ("tomasz" for "it's tomasz nowak") takes it
whole, since a backend finds people by their full name (the dental pack books patients so).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from dataclasses import replace

from loguru import logger

from engine import WORD_RE, ground_calls, grounded_arguments, grounded_kinds, nearest_span, source_texts
from voice_agent.brain.mends import Mended, Unsaid
from voice_agent.brain.types import TurnEvent, TurnResult
from voice_agent.said_phrases import (
    CHOSEN_KINDS,
    COPIED_KINDS,
    HESITATIONS,
    NAME_ARGUMENT,
    PHRASE_KINDS,
    Choices,
    as_argument,
    caller_turns,
    is_phrase,
    latest_said,
    only_calendar_words,
    only_common_words,
    refused_latest,
    said_name,
    value_of,
)
from voice_agent.scenarios import argument_choices, ask_question, today_of

# Words a value may add to what was said: "december the ninth" for "the ninth of december".
LINK_WORDS = frozenset({"the", "of", "at", "on", "in", "a", "an"})


def check_calls(calls: list[dict], tools: list[dict], messages: list[dict],
                ask: dict[str, str], finished: bool = True) -> tuple[list[Mended], Unsaid | None]:
    """Mend, in place, each typed grounded argument (`x-grounded: day|time|choice`) that is not the
    caller's phrase of its kind (for a choice: not their latest), when the caller's latest
    words of that kind name one (said_phrases.py), and drop hesitations from copied names; then
    return the first grounded argument with a question in `ask` (`argument` or `tool.argument`)
    whose value nobody said, if any."""
    if not calls or not ask:  # the scenario's ask block switches the whole policy on
        return [], None
    from voice_agent.brain.kind_guard import mend_kinds  # numbers, plates, emails, counts: by their parsers

    # A call still being written has a half-written number in it: only a finished call is read by kind.
    mended, unsaid = mend_kinds(calls, tools, messages, ask) if finished else ([], None)
    if unsaid is not None:
        return mended, unsaid
    sources = source_texts(messages)
    heard = {w.lower() for src in sources for w in WORD_RE.findall(src)}
    today = today_of(messages)
    users = caller_turns(messages)
    for fn, args, kinds in grounded_arguments(calls, tools):
        changed = False
        for key, kind in kinds.items():
            ch = argument_choices(tools, fn["name"], key) if kind in CHOSEN_KINDS else None
            question = ask_question(ask, fn["name"], key)
            asked_choice = kind in CHOSEN_KINDS and question is not None  # asked for even when left out
            if (key not in args and not asked_choice) or (question is None and kind not in PHRASE_KINDS):
                continue
            value = args.get(key)
            if kind == "text" and isinstance(value, str) and (fluent := _without_fillers(value)) != value:
                mended.append(Mended(fn["name"], key, value, fluent))
                args[key] = value = fluent
                changed = True
            given = said_name(users) if kind == "text" and NAME_ARGUMENT.search(key) else None
            if kind in CHOSEN_KINDS:  # a choice, not a copy: what the caller's latest words chose wins
                said = latest_said(kind, users, today, ch)
                if said is None and asked_choice:  # the caller never chose: ask, as the policy does
                    return mended, Unsaid(fn["name"], key, _written(value), question)
                if said is None or _same(value, said, kind, today, ch):
                    continue
            elif (isinstance(value, str) and _was_said(value, sources, heard) and is_phrase(value, kind, today)
                  and not (kind == "text" and _no_name(value, today)) and not _refused(value, kind, users, today)):
                own = latest_said(kind, users[-1:], today) if kind in COPIED_KINDS else None
                whole = latest_said(kind, users, today) if kind in COPIED_KINDS and own is None else None
                if own is not None and not _same(value, own, kind, today):
                    said = own  # a time read from the tool's free list is not the one the caller just chose
                elif whole is not None and _part_of(value, whole) and not _same(value, whole, kind, today):
                    said = whole  # a copy cut short: "eleven" of "eleven thirty am" (seed-5 gen_016)
                elif given is None or not _part_of(value, given):
                    continue
                else:
                    said = given
            else:
                said = latest_said(kind, users, today, ch) if kind in PHRASE_KINDS else given
            if said is not None:
                taken = as_argument(said, kind, today, ch)
                mended.append(Mended(fn["name"], key, _written(value), taken))
                args[key], changed = taken, True
            elif question is not None:
                return mended, Unsaid(fn["name"], key, _written(value), question)
        if changed:
            fn["arguments"] = json.dumps(args) if isinstance(fn.get("arguments"), str) else args
    return mended, None


def _written(value: object) -> str:
    """An argument's value as written; "" for one the call left out."""
    return "" if value is None else str(value)


def unsaid_argument(calls: list[dict], tools: list[dict], messages: list[dict], ask: dict[str, str]) -> Unsaid | None:
    """The first grounded argument of `calls` with a question in `ask` whose value nobody said
    (typed ones are first mended from the caller's words where they can be: `check_calls`)."""
    return check_calls(calls, tools, messages, ask)[1]


def ask_instead(result: TurnResult, tools: list[dict] | None, messages: list[dict],
                ask: dict[str, str]) -> list[TurnEvent]:
    """The turn's last events: its own "done" (with typed arguments mended from the caller's words,
    `metrics["said_phrase_repairs"]`), or, when a call carries an argument nobody said, the question
    as the answer and a "done" without the calls (`metrics["asked_instead_of_call"]`)."""
    calls = copy.deepcopy(result.tool_calls)
    mended, unsaid = check_calls(calls, tools or [], messages, ask)
    if unsaid is None:
        if not mended:
            return [TurnEvent("done", result=result)]
        logger.info(f"typed arguments taken from the caller's words: {mended}")
        metrics = {**result.metrics, "said_phrase_repairs": [vars(m) for m in mended]}
        return [TurnEvent("done", result=replace(result, tool_calls=calls, metrics=metrics))]
    logger.info(f"{unsaid.tool} had {unsaid.argument}={unsaid.value!r}, which the caller never said; asking instead")
    metrics = {**result.metrics, "asked_instead_of_call": {"tool": unsaid.tool, "argument": unsaid.argument,
                                                           "value": unsaid.value}}
    asked = replace(result, text=unsaid.question, tool_calls=[], finish_reason="stop", metrics=metrics)
    return [TurnEvent("answer", unsaid.question), TurnEvent("done", result=asked)]


# A call still being written: its function, then each string argument once its closing quote is there.
CALL_HEAD = re.compile(r'\{"name": "(\w+)", "arguments": \{')
CLOSED_STRING = re.compile(r'"(\w+)": ("(?:[^"\\]|\\.)*")\s*[,}]')


def partial_call(text: str) -> tuple[str, dict[str, str]] | None:
    """The function and the string arguments already closed in a call's text so far, or None
    before the function's name is complete."""
    head = CALL_HEAD.search(text)
    if head is None:
        return None
    args = {}
    for m in CLOSED_STRING.finditer(text, head.end()):
        try:
            args[m.group(1)] = json.loads(m.group(2))
        except json.JSONDecodeError:
            return None
    return head.group(1), args


def call_of(name: str, args: dict) -> dict:
    """An OpenAI-shaped call to `name` with `args` (a call still being written, as far as it goes)."""
    return {"id": "partial", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def unsaid_before_decoded(name: str, args: dict[str, str], tools: list[dict], messages: list[dict],
                          ask: dict[str, str]) -> Unsaid | None:
    """The question a call still being written will be replaced by, once the arguments already
    written decide it: the call's first unsaid argument (`check_calls`, after the engine's own
    grounding) is written, or is a choice asked whatever its value, and every grounded argument
    before it is written too (one of those could still be the one asked about). The model's
    remaining passes over the call's other arguments then change nothing: a name nobody gave,
    written first, meant ~20 more passes (~1.5 s on a call) before the question was spoken.
    `name` and `args`: the call so far (`partial_call`)."""
    tool = next((t for t in tools if t["function"]["name"] == name), None)
    if tool is None or not ask:
        return None
    calls = [call_of(name, args)]
    ground_calls(calls, tools, messages)  # as the engine mends a finished call before the guard sees it
    unsaid = check_calls(calls, tools, messages, ask, finished=False)[1]
    kinds = grounded_kinds(tool)
    if unsaid is None or unsaid.argument not in kinds:
        return None
    keys = list(kinds)
    if any(k not in args for k in keys[: keys.index(unsaid.argument)]):
        return None
    if unsaid.argument not in args and kinds[unsaid.argument] not in CHOSEN_KINDS:
        return None
    return unsaid


def asked_early(partial: TurnResult, unsaid: Unsaid) -> list[TurnEvent]:
    """The turn's last events when `unsaid_before_decoded` decided it: the question, and a "done"
    whose metrics are the decode's so far (it is stopped here)."""
    logger.info(f"{unsaid.tool} had {unsaid.argument}={unsaid.value!r}, which the caller never said; "
                "asking before the rest of the call is decoded")
    metrics = {**partial.metrics, "asked_instead_of_call": {"tool": unsaid.tool, "argument": unsaid.argument,
                                                            "value": unsaid.value, "before_decoded": True}}
    asked = replace(partial, text=unsaid.question, tool_calls=[], finish_reason="stop", metrics=metrics)
    return [TurnEvent("answer", unsaid.question), TurnEvent("done", result=asked)]


def _without_fillers(value: str) -> str:
    """A copied name without the caller's hesitations ("karin um das" was booked as "Karin Um Das"; now
    "karin das"); unchanged when nothing else is left."""
    words = value.split()
    kept = [w for w in words if w.lower().strip(",.") not in HESITATIONS]
    return " ".join(kept) if kept and len(kept) < len(words) else value


def _part_of(value: str, name: str) -> bool:
    """`value`'s words are some, not all, of `name`'s ("tomasz" of "tomasz nowak")."""
    words, whole = set(value.lower().split()), set(name.lower().split())
    return bool(words) and words < whole


def _refused(value: str, kind: str, users: list[str], today: dt.date) -> bool:
    """The caller's latest words of this kind refuse `value` ("eleven, not ten" refuses ten)."""
    if kind not in COPIED_KINDS:
        return False
    try:
        return value_of(value, kind, today) in refused_latest(kind, users, today)
    except ValueError:
        return False


def _no_name(value: str, today: dt.date) -> bool:
    """Free text that is only hesitations, or a day or a time: "December 7th", copied from a tool
    result into `patient_name` (held-out hw_weekend_request), booked a patient of that name; or
    day words alone ("december of december", seed-1 gen_035, gen_058); or common words alone ("yes"
    of "hi yes I'm looking to get a filling", booked as the patient: seed-4 gen_012)."""
    return (all(w.lower().strip(",.") in HESITATIONS for w in value.split())
            or is_phrase(value, "day", today) or is_phrase(value, "time", today) or only_calendar_words(value)
            or only_common_words(value))


def _same(value: object, said: str, kind: str, today: dt.date, choices: Choices | None = None) -> bool:
    """`value` means what the caller's phrase `said` means."""
    try:
        return isinstance(value, str) and value_of(value, kind, today, choices) == value_of(said, kind, today, choices)
    except ValueError:
        return False


def _was_said(value: str, sources: list[str], heard: set[str]) -> bool:
    """A span of what was said (engine/text/grounding.py's rule), or its words in another order."""
    words = {w.lower() for w in WORD_RE.findall(value)} - LINK_WORDS
    return bool(words) and (words <= heard or nearest_span(value, sources) is not None)


__all__ = ["LINK_WORDS", "Mended", "Unsaid", "ask_instead", "asked_early", "call_of", "check_calls", "partial_call",
           "unsaid_argument", "unsaid_before_decoded"]
