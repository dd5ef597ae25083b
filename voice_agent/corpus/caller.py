"""The scripted caller of a corpus call: what they want, the values they will give, and what they
say back to each thing the agent says, in ASR-style words.

A caller is planned from the pack alone: a goal tool, one value per argument it needs (drawn per
kind, `values.py`), and a few habits (greets first, gives everything in one breath, asks a question,
goes off topic, corrects a value, gives a wrong number first). Its lines come from phrase banks
per intent and per kind; `split` keeps the held-out phrasings apart from the training ones.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from voice_agent.corpus.values import Value, held_out

GREETS = ["hi there", "hello", "good morning", "hi, good afternoon", "hey, how are you", "hello, is this the right number",
          "hi, um, hello", "good evening"]
CLOSES = ["no that's all, thanks", "great, thank you, bye", "perfect, thanks so much, goodbye", "that's everything, cheers",
          "ok lovely, bye now", "no, that's it, thank you", "brilliant, thanks, bye", "all good, thanks, have a nice day",
          "that's all I needed, thanks", "thanks a lot, goodbye"]
THANKS_ANYWAY = ["oh ok, never mind then, thanks", "right, I'll check and call back, bye", "ok, no worries, thanks anyway",
                 "hmm ok, I'll sort it out later, bye"]
OFFTOPIC = ["can you recommend a good restaurant nearby", "what's the weather going to be like tomorrow",
            "can you order me a taxi", "do you know the football score", "can you tell me a joke",
            "what's the capital of australia", "can you help me with my tax return", "is the motorway busy right now",
            "can you book me a flight to rome", "what's a good film to watch tonight", "how do I fix my wifi at home",
            "can you transfer me to the bank"]
ASK_OPENERS = ["hi, I'd like to {p}", "{p}, please", "yeah hi, um, I need to {p}", "hello, I want to {p}",
               "I'm calling to {p}", "could you help me {p}", "hi there, can I {p}", "um, I'd like to {p} if possible",
               "so I was hoping to {p}", "hi, I need to {p} please", "good morning, I'd like to {p}",
               "can you {p} for me"]
QUESTION_OPENERS = ["{p}", "hi, {p}", "hello, um, {p}", "quick question, {p}", "yeah hi, {p}", "hey, {p}"]
STATEMENT_OPENERS = ["hi, {p}", "hello, {p}", "yeah so {p}", "um hi, {p}", "hi there, {p}, can you help", "{p}"]
CHOICE_OPENERS = ["hi, I'd like {w}", "can I get {w}", "I need {w} please", "hello, I'm after {w}", "um, {w} please",
                  "I'd like to book {w}", "hi, could I have {w}", "I'm calling about {w}", "yeah hi, I want {w}",
                  "looking for {w}"]
FACT_WRAPS = ["{p}?", "and {p}?", "oh, also, {p}?", "before that, {p}?", "um, {p}?", "one more thing, {p}?"]
CORRECTIONS = ["actually, can we make it {w} instead", "oh wait, sorry, make that {w}", "sorry, I meant {w}",
               "hmm, actually {w} would be better", "can I change that to {w}"]
RETRY = ["oh sorry, it's {w}", "sorry, I mean {w}", "ah, let me check, it's {w}", "my mistake, {w}"]
_VERBS = {"cancel", "move", "book", "reschedule", "change", "push", "bring", "reserve", "make", "call", "get", "check",
          "look", "refill", "open", "add", "schedule", "arrange", "set", "order", "renew", "delete", "report", "switch"}
_QUESTION = {"when", "what", "how", "is", "do", "does", "can", "any", "are", "have", "which", "where", "who"}
FILLERS = ["um", "uh", "so", "yeah", "ok so", "right"]
THEN = ["great, and {r}", "thanks, and while I'm on, {r}", "perfect. oh, and {r}", "lovely, also {r}", "ok and {r}",
        "cheers. one more thing, {r}"]


def says(kind: str, arg: str, value: Value, rng: random.Random, asked: bool) -> str:
    """The words a caller uses to give one value: bare when asked, with a cue when volunteered."""
    w = value.words
    if asked:
        return rng.choice([w, w, f"it's {w}", f"yeah, {w}", f"um, {w}", f"{w} please"] if kind != "person_name"
                          else [w, w, f"it's {w}", f"my name is {w}", f"{w}", f"yeah it's {w}"])
    noun = arg.replace("_", " ")
    if kind == "date":
        return rng.choice([f"for {w}", f"on {w}", f"{w} if you can", f"for {w} ideally"])
    if kind == "time":
        return rng.choice([f"at {w}", f"around {w}", f"at {w} if possible"])
    if kind == "person_name":
        return rng.choice([f"my name is {w}", f"this is {w}", f"it's for {w}", f"the name's {w}"])
    if kind == "phone_number":
        return rng.choice([f"my {noun} is {w}", f"the {noun} is {w}", f"my number is {w}"])
    if kind == "plate":
        return rng.choice([f"the reg is {w}", f"registration {w}", f"the car is {w}"])
    if kind == "email":
        return rng.choice([f"my email is {w}", f"email {w}"])
    if kind == "integer":
        unit = {"party_size": "people", "pets": "pets", "students": "students"}.get(arg, noun)
        return rng.choice([f"for {w} {unit}", f"{w} {unit}"])
    if kind == "text":
        return rng.choice([f"it's about {w}", f"the thing is {w}"])
    return w


def asr(text: str, rng: random.Random) -> str:
    """An ASR-style transcript: often lowercase and bare of punctuation, a hesitation now and then."""
    if rng.random() < 0.2:
        text = f"{rng.choice(FILLERS)} {text}"
    if rng.random() < 0.5:
        text = text.lower()
    if rng.random() < 0.4:
        text = re.sub(r"[,.?!]", "", text)
    elif not text.endswith(("?", ".", "!")):
        text += "."
    return text[0].upper() + text[1:] if text and rng.random() < 0.5 else text


def bank(items: list[str], split: str, rng: random.Random) -> str:
    """One phrasing of a bank for the split: held-out calls use the held-out fifth of each bank."""
    mine = [t for t in items if held_out(t) == (split == "heldout")] or items
    return rng.choice(mine)


@dataclass
class CallerPlan:
    goal: str | None                        # the tool the caller is after (None: a question or off-topic call)
    values: dict[str, Value]                # argument -> the value they will give
    kinds: dict[str, str]                   # argument -> kind
    greet_first: bool = False
    fact_before: str | None = None          # a fact topic asked before the request
    fact_after: str | None = None           # ... or after it
    offtopic: bool = False
    in_one_breath: int = 0                  # values volunteered in the first line
    correction: Value | None = None         # a new time after the booking, for the move tool
    wrong_id: Value | None = None           # an identity given first that the backend does not know
    said: dict[str, object] = field(default_factory=dict)   # argument -> what the agent passes for it
    done: bool = False
    then: str | None = None                 # a second request once the first is done (same caller)


def opener(goal: str, intents: tuple[str, ...], choice_words: list[str], thing: str, split: str,
           rng: random.Random) -> str:
    """The caller's request for a tool: one of its intent phrases in a sentence, or a choice it takes."""
    if intents and (not choice_words or rng.random() < 0.7):
        p = rng.choice(intents)
        first = p.split()[0] if p.split() else ""
        if p.endswith((" my", " the", " a", " of")):
            p = f"{p} {thing}"
        elif p.endswith((" off", " up")) or (len(p.split()) == 1 and first in _VERBS and rng.random() < 0.7):
            p = f"{p} my {thing}"
        if first in _QUESTION:
            return bank(QUESTION_OPENERS, split, rng).format(p=p + ("" if p.endswith("?") else "?"))
        if first in _VERBS:
            return bank(ASK_OPENERS, split, rng).format(p=p)
        return bank(STATEMENT_OPENERS, split, rng).format(p=p)
    if choice_words:
        w = rng.choice(choice_words)
        return bank(CHOICE_OPENERS, split, rng).format(w=w if w.split()[0] in ("a", "an", "the", "my", "some")
                                                         else f"{rng.choice(['a', 'the', 'some'])} {w}"
                                                         if rng.random() < 0.5 else w)
    return bank(ASK_OPENERS, split, rng).format(p=goal.replace("_", " "))


def fact_line(phrases: tuple[str, ...], split: str, rng: random.Random) -> str:
    return bank(FACT_WRAPS, split, rng).format(p=rng.choice(phrases))


__all__ = ["THEN", "CLOSES", "CORRECTIONS", "CallerPlan", "GREETS", "OFFTOPIC", "RETRY", "THANKS_ANYWAY", "asr", "bank",
           "fact_line", "opener", "says"]
