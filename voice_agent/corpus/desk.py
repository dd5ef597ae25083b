"""A corpus source: one scenario with its roles, and a fresh backend ("desk") for each call.

    source = pack_source(load_scenario("car_garage"), workdir)     # the pack's real backend
    source = synthetic_source(synthetic_scenario(rng, i))          # an in-memory one
    desk = source.open(today)
    desk.handlers["book_job"]({...})     # the tool result, as the runtime gets it
    desk.existing("plate", rng)          # an identity the backend knows (seeded by its create tool)
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from voice_agent.corpus.roles import identity_argument, infer_roles
from voice_agent.corpus.synthetic import Synthetic
from voice_agent.corpus.values import Value, ValueBank, spoken_number
from voice_agent.policy.kinds import KindContext, KindError, parse
from voice_agent.scenarios import Scenario, argument_choices

Handler = Callable[[dict], dict]


@dataclass
class Desk:
    handlers: dict[str, Handler]
    snapshot: Callable[[], dict]
    seed: Callable[[str, str, Value, random.Random], bool]   # (tool, identity arg, value, rng) -> seeded?
    close: Callable[[], None] = lambda: None

    def existing(self, kind: str) -> list[str]:
        """Identities of `kind` the backend holds now (phone numbers, plates, names in its state)."""
        found: list[str] = []
        _walk(self.snapshot(), kind, found)
        return sorted(set(found))


@dataclass
class Source:
    scenario: Scenario
    roles: dict[str, str]
    open: Callable[[dt.date], Desk]
    thing: str = "booking"
    synthetic: bool = False
    texts: dict[str, list[str]] = field(default_factory=dict)  # text argument -> what callers say for it


def pack_source(scenario: Scenario, workdir: Path) -> Source:
    """The pack's own backend, one fresh store per call under `workdir`."""
    roles = infer_roles(scenario)

    def open_desk(today: dt.date) -> Desk:
        store = Path(tempfile.mkdtemp(prefix="desk-", dir=workdir))
        backend = scenario.open_backend(store, today)
        handlers = scenario.bind_handlers(backend)

        def seed(tool: str, arg: str, value: Value, rng: random.Random) -> bool:
            return _seed_by_create(scenario, roles, handlers, arg, value, rng, today)

        return Desk(handlers, backend.snapshot, seed, getattr(backend, "close", lambda: None))

    create = next((t for t, r in roles.items() if r == "create"), "")
    thing = create.split("_", 1)[1] if "_" in create else "booking"
    return Source(scenario, roles, open_desk, thing=thing.replace("_", " "), texts=_TEXTS)


def synthetic_source(s: Synthetic) -> Source:
    def open_desk(today: dt.date) -> Desk:
        handlers = s.handlers_for(today)
        seeder = handlers.pop("__seed__")

        def seed(tool: str, arg: str, value: Value, rng: random.Random) -> bool:
            seeder({arg: value.canonical})
            return True

        return Desk(handlers, dict, seed)

    create = next((t for t, r in s.roles.items() if r == "create"), "")
    return Source(s.scenario, s.roles, open_desk, thing=create.split("_", 1)[1].replace("_", " "), synthetic=True,
                  texts=_TEXTS)


# What callers say for a free-text argument ("the problem in a few words").
_TEXTS = {"": ["it keeps crashing", "the screen went black", "it won't turn on", "no signal since this morning",
               "the data keeps dropping", "it's really slow", "I can't log in", "it makes a strange noise",
               "the battery dies fast", "calls keep cutting out", "it won't connect", "a cracked screen"]}


def _seed_by_create(scenario: Scenario, roles: dict[str, str], handlers: dict[str, Handler], arg: str, value: Value,
                    rng: random.Random, today: dt.date) -> bool:
    """Put a record for `value` in the pack's store through its create tool (a booking made
    before the call), with other arguments drawn at random; False when no create tool takes it."""
    bank = ValueBank("train")
    for tool, role in roles.items():
        if role != "create":
            continue
        ident = identity_argument(scenario, tool)
        kinds = _kinds(scenario, tool)
        target = next((a for a, k in kinds.items() if k == scenario.kind_of("", arg)), None)
        if ident is None or target is None:
            continue
        for _ in range(6):
            args = {}
            for a, k in kinds.items():
                if a == target:
                    args[a] = value.canonical
                elif k == "enum":
                    args[a] = rng.choice(list(argument_choices(scenario.tools, tool, a)))
                else:
                    args[a] = bank.draw(k, rng, today, scenario.hours).canonical
            if "error" not in handlers[tool](args):
                return True
    return False


def _kinds(scenario: Scenario, tool: str) -> dict[str, str]:
    props = scenario.arguments(tool)
    required = scenario.required(tool) or list(props)
    return {a: props[a].get("x-kind") or "text" for a in required if a in props}


def _walk(node: object, kind: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _check(str(k), kind, out)
            _walk(v, kind, out)
    elif isinstance(node, list):
        for v in node:
            _walk(v, kind, out)
    elif isinstance(node, str):
        _check(node, kind, out)


def _check(text: str, kind: str, out: list[str]) -> None:
    if kind == "phone_number" and re.fullmatch(r"\d{7,12}", text):
        out.append(text)
    elif kind == "plate" and re.fullmatch(r"[A-Z]{2}\d{2}[A-Z]{3}", text):
        out.append(text)
    elif kind == "email" and re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", text):
        out.append(text)
    elif kind == "person_name" and re.fullmatch(r"[A-Z][a-z'-]+( [A-Z][a-zA-Z'-]+){1,2}", text):
        out.append(text)


def identity_value(kind: str, canonical: str, rng: random.Random) -> Value:
    """An identity the backend holds, in a caller's words."""
    if kind == "phone_number":
        return Value(canonical, spoken_number(canonical, rng))
    if kind == "plate":
        return Value(canonical, f"{canonical[:4]} {canonical[4:]}" if rng.random() < 0.5 else " ".join(canonical))
    if kind == "email":
        return Value(canonical, canonical.replace("@", " at ").replace(".", " dot "))
    try:
        return Value(str(parse(kind, canonical, KindContext())), canonical if rng.random() < 0.5 else canonical.lower())
    except KindError:
        return Value(canonical, canonical)


def result_of(message: dict) -> dict:
    try:
        out = json.loads(message.get("content") or "{}")
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {"result": out}


__all__ = ["Desk", "Source", "identity_value", "pack_source", "result_of", "synthetic_source"]
