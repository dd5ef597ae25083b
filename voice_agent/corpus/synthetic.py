"""Procedural scenarios: a random business, its tools, argument kinds, phrases and facts, as a pack.

    scenario, handlers_for, roles = synthetic_scenario(rng)
    handlers = handlers_for(today)       # a fresh in-memory backend per call

The model trained on many of them learns the *shape* of a call (ask for the missing argument, call,
read the result back, say the error, answer a fact, decline, close), not one clinic's words. Each
scenario is a pack's YAML as a dict, read by the same `parse_scenario` as a pack on disk, so it is
valid by the same rules. Tool and argument names vary between scenarios on purpose.

No lodging business is among the domains: the hotel pack (scenarios/hotel_front_desk) is the
unseen one, kept out of every corpus.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass

from voice_agent.policy.calendar_words import Hours, spoken_day, spoken_time
from voice_agent.policy.kinds import KindContext, KindError, parse, spoken_digits
from voice_agent.scenarios import Scenario, parse_scenario

Handler = Callable[[dict], dict]


@dataclass(frozen=True)
class Domain:
    kind: str                          # "vet clinic"
    names: tuple[str, ...]             # business names
    thing: str                         # what is booked: "appointment", "table", "lesson"
    choice_arg: str                    # the enum argument's name: "service", "treatment"
    choices: dict[str, tuple[str, ...]]  # enum value -> the caller's words for it
    hours: str
    facts: dict[str, str]
    extra: tuple[str, str, str] | None = None  # (argument, kind, question): a count or a note
    action: tuple[str, str, str, str] | None = None  # (tool, noun, item arg, done word): an order-like tool


DOMAINS = [
    Domain("vet clinic", ("Paws and Claws Vets", "Riverside Animal Clinic", "Oakwood Vet Practice"), "appointment",
           "service", {"checkup": ("check up", "health check", "annual check"), "vaccination": ("vaccine", "jabs", "booster"),
                       "dental": ("teeth cleaning", "dental clean"), "grooming": ("groom", "nail trim")},
           "08:00-18:00", {"parking": "There is free parking behind the clinic.",
                           "emergencies": "For emergencies out of hours, call the animal hospital on Bridge Street."},
           ("pets", "integer", "How many pets are you bringing?")),
    Domain("hair salon", ("Studio Luxe", "The Cutting Room", "Mane Street Salon"), "appointment", "treatment",
           {"haircut": ("cut", "trim", "a cut"), "colour": ("color", "dye", "highlights"), "blow_dry": ("blow dry", "blowout"),
            "beard": ("beard trim", "shave")}, "09:00-19:00",
           {"prices": "A haircut is 35 dollars, colour from 80, a blow dry 25.", "payment": "We take cards and cash."}),
    Domain("physiotherapy clinic", ("Active Recovery Physio", "Northgate Physiotherapy"), "session", "session_type",
           {"assessment": ("first assessment", "initial assessment", "new patient"), "follow_up": ("follow up", "review"),
            "massage": ("sports massage", "deep tissue")}, "08:00-20:00",
           {"prices": "An assessment is 60 pounds and a follow up 45.", "what_to_wear": "Please wear loose clothing."},
           ("notes", "text", "What's the problem, in a few words?")),
    Domain("gym", ("Ironworks Gym", "Peak Fitness", "City Strength Club"), "class", "class_type",
           {"spin": ("spinning", "cycling class"), "yoga": ("yoga class", "stretching"), "hiit": ("circuits", "interval training"),
            "pilates": ("pilates class", "reformer")}, "06:00-22:00",
           {"membership": "Membership is 30 dollars a month, with no contract.", "towels": "Towels are free at the desk."}),
    Domain("restaurant", ("Trattoria Bella", "The Green Fig", "Saffron House"), "table", "seating",
           {"inside": ("indoors", "in the dining room"), "terrace": ("outside", "outdoors", "patio"), "bar": ("at the bar", "bar seats")},
           "12:00-23:00", {"menu": "We serve Italian food, with vegetarian and gluten free options.",
                           "parking": "There is a public car park across the road."},
           ("party_size", "integer", "How many people will there be?")),
    Domain("pharmacy", ("Greenleaf Pharmacy", "Corner Chemist", "Wellway Pharmacy"), "consultation", "consultation",
           {"flu_jab": ("flu jab", "flu shot", "flu vaccine"), "blood_pressure": ("blood pressure check", "bp check"),
            "travel": ("travel vaccines", "travel clinic")}, "08:00-19:00",
           {"delivery": "We deliver prescriptions free within five miles.", "weekend": "On Sundays we open 10 to 4."},
           None, ("refill_prescription", "prescription", "medicine", "refill")),
    Domain("bike repair shop", ("Spoke and Chain", "Two Wheels Workshop"), "repair", "repair",
           {"puncture": ("flat tyre", "flat tire", "a puncture"), "service": ("tune up", "full service"),
            "brakes": ("brake pads", "brake fix"), "gears": ("gear tune", "shifting")}, "09:00-18:00",
           {"prices": "A puncture repair is 15 pounds and a full service 70.", "loan": "We lend a bike while yours is in."}),
    Domain("driving school", ("Green Light Driving School", "Easy Steer Lessons"), "lesson", "lesson_type",
           {"manual": ("manual car", "stick shift", "gears"), "automatic": ("auto", "automatic car"),
            "motorway": ("motorway lesson", "highway")}, "08:00-20:00",
           {"prices": "A two hour lesson is 70 pounds.", "pickup": "We pick you up from home or work."}),
    Domain("tutoring centre", ("Bright Minds Tutoring", "Study Hub"), "lesson", "subject",
           {"maths": ("math", "mathematics", "algebra"), "english": ("reading", "writing", "essay"),
            "science": ("physics", "chemistry", "biology")}, "10:00-20:00",
           {"prices": "A one hour lesson is 40 dollars.", "online": "Lessons can be in person or online."},
           ("students", "integer", "How many students will come?")),
    Domain("pet grooming salon", ("Fluffy Tails Grooming", "The Dog House Spa"), "appointment", "groom",
           {"full_groom": ("full groom", "wash and cut"), "bath": ("bath", "wash"), "nails": ("nail clip", "nail trim")},
           "08:00-17:00", {"prices": "A full groom is from 45 dollars.", "dogs": "We groom dogs and cats, any size."}),
    Domain("optician", ("ClearView Opticians", "Focus Eyecare"), "appointment", "test",
           {"eye_test": ("eye test", "eye exam", "sight test"), "contact_lenses": ("contact lens check", "contacts"),
            "frames": ("frame fitting", "new glasses")}, "09:00-17:30",
           {"prices": "An eye test is 25 pounds, free for children.", "glasses": "Glasses are ready in about a week."}),
    Domain("car rental desk", ("Swift Car Hire", "Roadrunner Rentals"), "rental", "car_size",
           {"small": ("compact", "small car", "economy"), "family": ("estate", "family car", "seven seater"),
            "van": ("a van", "minivan")}, "07:00-21:00",
           {"prices": "A small car is 35 pounds a day, a family car 55.", "licence": "Bring your driving licence and a card."},
           ("days", "integer", "For how many days?")),
    Domain("IT helpdesk", ("Campus IT Service Desk", "Acme IT Support"), "visit", "device",
           {"laptop": ("notebook", "my laptop"), "printer": ("the printer", "printing"), "phone": ("work phone", "mobile"),
            "account": ("password", "my login", "my account")}, "08:00-18:00",
           {"hours": "The desk is staffed 8 to 6 on weekdays.", "remote": "Most fixes can be done remotely."},
           ("issue", "text", "What's the problem, in a few words?"), ("open_ticket", "ticket", "device", "opened")),
    Domain("cleaning service", ("Sparkle Home Cleaning", "Fresh Start Cleaners"), "clean", "clean_type",
           {"regular": ("regular clean", "weekly clean"), "deep": ("deep clean", "spring clean"),
            "end_of_tenancy": ("end of tenancy", "move out clean")}, "08:00-18:00",
           {"prices": "A regular clean is 20 pounds an hour.", "supplies": "We bring all the supplies."},
           ("rooms", "integer", "How many bedrooms is it?")),
    Domain("music school", ("Harmony Music School", "Keynote Lessons"), "lesson", "instrument",
           {"piano": ("keyboard", "piano lessons"), "guitar": ("electric guitar", "acoustic guitar"), "violin": ("fiddle",),
            "singing": ("voice", "vocal lessons")}, "10:00-20:00",
           {"prices": "A half hour lesson is 25 dollars.", "instruments": "We lend instruments for the first month."}),
    Domain("dry cleaner", ("Press and Fold", "Crystal Dry Cleaning"), "collection", "garment",
           {"suit": ("a suit", "suits"), "dress": ("a dress", "gown"), "curtains": ("drapes",), "shirts": ("shirt", "some shirts")},
           "07:30-19:00", {"turnaround": "Most items are ready in two days.", "prices": "A suit is 14 dollars."},
           ("items", "integer", "How many items are there?")),
]

IDENTIFIERS = [  # (argument name, kind, question)
    ("customer_name", "person_name", "Can I have your name, please?"),
    ("full_name", "person_name", "What's your full name, please?"),
    ("client_name", "person_name", "Could I take your name?"),
    ("phone_number", "phone_number", "What's the best phone number for you?"),
    ("mobile", "phone_number", "Can I have your mobile number, please?"),
    ("member_number", "phone_number", "What's your member number?"),
    ("email", "email", "What's your email address?"),
]
AGENTS = ["Sam", "Alex", "Jo", "Riley", "Casey", "Morgan", "Taylor", "Jamie", "Robin", "Kim", "Lee", "Pat"]
DATE_ARGS = [("date", "time"), ("day", "time"), ("date", "start_time"), ("preferred_date", "preferred_time")]
BOOK_VERBS = [("book", ["book", "make a booking", "schedule", "set up"]), ("schedule", ["schedule", "book", "arrange"]),
              ("reserve", ["reserve", "book", "get"]), ("make", ["make", "book"])]
SEARCH_NAMES = ["find_free_slots", "check_availability", "free_times", "search_availability", "list_openings"]
CANCEL = [("cancel", ["cancel", "call off", "cancel my"]), ("delete", ["cancel", "get rid of my", "cancel my"])]
MOVE = [("move", ["move my", "reschedule", "change the time of my"]), ("reschedule", ["reschedule", "move my", "change my"])]
LOOKUP = [("lookup", ["when is my", "check my", "what time is my"]), ("get", ["when is my", "look up my", "remind me when my"])]
ROLES = ("search", "create", "update", "delete", "read", "action")


@dataclass
class Synthetic:
    scenario: Scenario
    roles: dict[str, str]                     # tool -> role
    handlers_for: Callable[[dt.date], dict[str, Handler]]
    domain: str


def synthetic_scenario(rng: random.Random, index: int = 0) -> Synthetic:
    """One random scenario: a domain, its tools (a booking always; search, cancel, move, look up and
    an order-like action sometimes), names and questions drawn from several spellings."""
    d = rng.choice(DOMAINS)
    business, agent = rng.choice(d.names), rng.choice(AGENTS)
    ident_arg, ident_kind, ident_q = rng.choice(IDENTIFIERS)
    name_arg = ident_arg if ident_kind == "person_name" else rng.choice(["customer_name", "name", "full_name"])
    date_arg, time_arg = rng.choice(DATE_ARGS)
    thing = d.thing
    verb, book_phr = rng.choice(BOOK_VERBS)
    choice_spec = {"type": "string", "enum": list(d.choices), "x-kind": "enum",
                   "x-synonyms": {k: list(v) for k, v in d.choices.items()}}
    ident_spec = {"type": "string", "x-kind": ident_kind}
    roles: dict[str, str] = {}
    tools: list[dict] = []
    ask: dict[str, str] = {
        name_arg: rng.choice(["Can I have your name, please?", "Could I take your name?", "What name is it under?"]),
        date_arg: rng.choice(["What day would suit you?", "Which day would you like?", "What day works for you?"]),
        time_arg: rng.choice(["What time would suit you?", "What time works best?", "And what time?"]),
    }
    ask[ident_arg] = ident_q
    intents: dict[str, list[str]] = {}
    instead: dict[str, dict[str, str]] = {}

    def tool(name: str, role: str, description: str, props: dict, required: list[str]) -> None:
        roles[name] = role
        tools.append({"name": name, "description": description,
                      "parameters": {"type": "object", "properties": props, "required": required}})

    search = None
    if rng.random() < 0.6:
        search = rng.choice(SEARCH_NAMES)
        tool(search, "search", f"Free {thing} times on a day.",
             {date_arg: {"type": "string", "x-kind": "date"}, d.choice_arg: choice_spec}, [date_arg])
        intents[search] = ["what do you have", "anything free", "any openings", "what times", "when are you free"]
    book = f"{verb}_{thing}"
    book_props = {name_arg: {"type": "string", "x-kind": "person_name"}}
    if ident_arg != name_arg:
        book_props[ident_arg] = ident_spec
    book_props |= {date_arg: {"type": "string", "x-kind": "date", "description": "the caller's words"},
                   time_arg: {"type": "string", "x-kind": "time", "description": "the caller's words"},
                   d.choice_arg: choice_spec}
    if d.extra and rng.random() < 0.7:
        arg, kind, q = d.extra
        book_props[arg] = {"type": "integer" if kind == "integer" else "string", "x-kind": kind}
        ask[f"{book}.{arg}"] = q
    tool(book, "create", f"Book a {thing}.", book_props, list(book_props))
    ask[f"{book}.{d.choice_arg}"] = rng.choice([
        f"Sure. Which {d.choice_arg.replace('_', ' ')} would you like: {_listed(d.choices)}?",
        f"Of course. Is it {_listed(d.choices)}?"])
    if rng.random() < 0.5:
        intents[book] = [f"{p} a {thing}" for p in book_phr] + [f"book a {thing}", "make a booking", "an appointment"]
    if search:
        instead[search] = {"when_said": "time", "call": book}
    lookup_key = {ident_arg: ident_spec}
    if rng.random() < 0.7:
        cverb, cphr = rng.choice(CANCEL)
        name = f"{cverb}_{thing}"
        tool(name, "delete", f"Cancel the caller's next {thing}.", dict(lookup_key), [ident_arg])
        intents[name] = list(dict.fromkeys(cphr + ["cancel"]))
    if rng.random() < 0.6:
        mverb, mphr = rng.choice(MOVE)
        name = f"{mverb}_{thing}"
        nd, nt = f"new_{date_arg.split('_')[-1]}", f"new_{time_arg.split('_')[-1]}"
        tool(name, "update", f"Move the caller's next {thing}.",
             lookup_key | {nd: {"type": "string", "x-kind": "date"}, nt: {"type": "string", "x-kind": "time"}},
             [ident_arg, nd, nt])
        ask[nd] = ask[nt] = "What day and time would you like instead?"
        intents[name] = [f"{p} {thing}" if p.endswith("my") or p.endswith("of my") else p for p in mphr]
        instead[book] = {"after": book, "call": name}
    if rng.random() < 0.5:
        lverb, lphr = rng.choice(LOOKUP)
        name = f"{lverb}_{thing}"
        tool(name, "read", f"The caller's next {thing}.", dict(lookup_key), [ident_arg])
        intents[name] = [f"{p} {thing}" for p in lphr]
    if d.action and rng.random() < 0.6:
        aname, noun, item_arg, _ = d.action
        item_spec = dict(choice_spec) if item_arg == d.choice_arg else {"type": "string", "x-kind": "text"}
        props = lookup_key | {item_arg: item_spec}
        tool(aname, "action", f"Open a {noun} for the caller.", props, [ident_arg, item_arg])
        if item_spec["x-kind"] == "text":
            ask[f"{aname}.{item_arg}"] = f"Which {item_arg.replace('_', ' ')} is it?"
        intents[aname] = [aname.replace("_", " "), noun]
    open_days = "Monday to Saturday" if rng.random() < 0.6 else "Monday to Friday"
    h = Hours.of(d.hours)
    facts = {"hours": f"{open_days}, {spoken_time(_hhmm(h.open_min))} to {spoken_time(_hhmm(h.close_min))}.",
             "address": f"{rng.randint(2, 180)} {rng.choice(['High Street', 'Mill Lane', 'Station Road', 'Park Avenue', 'Elm Street', 'Harbour Road'])}."}
    facts |= dict(rng.sample(list(d.facts.items()), k=len(d.facts)))
    fact_questions = {"hours": ["opening hours", "when are you open", "what time do you close", "your hours",
                                "open on saturday"],
                      "address": ["your address", "where are you", "how do i find you", "where is it"]}
    for topic in d.facts:
        fact_questions[topic] = _fact_phrases(topic)
    spec = {
        "name": f"synthetic_{index:04d}", "description": f"Front desk of {business}, a {d.kind}.",
        "opening_hours": d.hours, "reasoning_effort": "instant",
        "greeting": rng.choice([f"{business}, this is {agent}. How can I help?", f"Hi, you've reached {business}, {agent} speaking.",
                                f"Thanks for calling {business}. I'm {agent}, how can I help?"]),
        "filler": "One moment.", "greeting_reply": "Hi! How can I help you today?",
        "goodbye_reply": f"Thanks for calling {business}. Goodbye!",
        "system_prompt": (f"You are {agent}, the receptionist at {business}, a {d.kind}, on a phone call.\n"
                          "Speak in one or two short, friendly sentences. Never use lists or markdown.\n"
                          f"Use the tools to {_capabilities(roles, thing)}. Pass days and times in the caller's own words.\n"
                          "Ask for one missing detail at a time."),
        "facts": facts, "fact_questions": fact_questions, "ask": ask,
        "intents": {k: v for k, v in intents.items() if v},
        "instead": instead,
        "tools": tools,
    }
    scenario = parse_scenario(spec)
    ident = (ident_arg, ident_kind)
    return Synthetic(scenario, roles, lambda today: _backend(scenario, roles, ident, d, today, rng.random()), d.kind)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _listed(choices: dict) -> str:
    words = [c.replace("_", " ") for c in choices]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _capabilities(roles: dict[str, str], thing: str) -> str:
    verbs = {"search": "find free times", "create": f"book a {thing}", "update": "move", "delete": "cancel",
             "read": "look up", "action": "open a request"}
    said = list(dict.fromkeys(verbs[r] for r in roles.values()))
    return ", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else said[0]


def _fact_phrases(topic: str) -> list[str]:
    return {"prices": ["how much", "what does it cost", "price", "prices", "cost"],
            "parking": ["parking", "park"], "payment": ["pay by card", "take cards", "payment"],
            "membership": ["membership", "how much a month"], "delivery": ["deliver", "delivery"],
            "weekend": ["on sunday", "on sundays", "weekend"], "menu": ["menu", "vegetarian", "gluten"],
            }.get(topic, [topic.replace("_", " ")])


def _backend(scenario: Scenario, roles: dict[str, str], ident: tuple[str, str], d: Domain, today: dt.date,
             fill: float) -> dict[str, Handler]:
    """A fresh in-memory diary for one call: handlers by role, errors as sentences to read out."""
    hours = scenario.hours or Hours(9 * 60, 17 * 60)
    taken: set[tuple[str, str]] = set()
    rng = random.Random(fill)
    records: dict[str, dict] = {}
    starts = [_hhmm(m) for m in range(hours.open_min, hours.close_min - 30, 30)]
    for _ in range(int(fill * 40)):
        taken.add(((today + dt.timedelta(days=rng.randint(1, 20))).isoformat(), rng.choice(starts)))
    choices = {c: (c, *s) for c, s in d.choices.items()}

    def kind_of(tool: str, arg: str) -> str:
        return scenario.arguments(tool)[arg].get("x-kind") or "text"

    def value(tool: str, arg: str, words: object) -> str:
        kind = kind_of(tool, arg)
        try:
            v = parse(kind, words, KindContext(today=today, hours=hours, choices=choices))
        except KindError as e:
            raise _Refused(f"{arg.replace('_', ' ')}: {e}") from None
        if kind == "date":
            day = dt.date.fromisoformat(str(v))
            if day < today:
                raise _Refused(f"{spoken_day(day)} is in the past.")
            if day.weekday() == 6:
                raise _Refused(f"We're closed on Sundays ({spoken_day(day)}).")
        if kind == "time" and str(v) not in starts:
            raise _Refused(f"{spoken_time(str(v))} is outside our times; we start on the hour or half past, "
                           f"{spoken_time(starts[0])} to {spoken_time(starts[-1])}.")
        return str(v)

    def key(tool: str, args: dict) -> str:
        return value(tool, ident[0], args.get(ident[0]))

    def said_id(k: str) -> str:
        return spoken_digits(k) if ident[1] == "phone_number" else k

    def by_kind(tool: str, args: dict, kind: str) -> str | None:
        for arg, kd in ((a, kind_of(tool, a)) for a in args):
            if kd == kind:
                return value(tool, arg, args[arg])
        return None

    def free(day: str) -> list[str]:
        return [t for t in starts if (day, t) not in taken]

    def handler_for(tool: str, role: str) -> Handler:
        def run(args: dict) -> dict:
            try:
                missing = [a for a in _required(scenario, tool) if args.get(a) in (None, "")]
                if missing:
                    return {"error": f"I still need the {' and '.join(m.replace('_', ' ') for m in missing)}."}
                if role == "search":
                    day = by_kind(tool, args, "date") or ""
                    times = free(day)
                    when = spoken_day(dt.date.fromisoformat(day))
                    if not times:
                        return {"date": day, "free_times": [], "say": f"{when} is fully booked."}
                    return {"date": day, "day": when, "free_times": [spoken_time(t) for t in times[:rng.randint(2, 5)]]}
                if role == "create":
                    k, day, t = key(tool, args), by_kind(tool, args, "date"), by_kind(tool, args, "time")
                    choice = by_kind(tool, args, "enum")
                    if (day, t) in taken:
                        near = ", ".join(spoken_time(x) for x in free(day or "")[:3]) or "nothing"
                        return {"error": f"{spoken_time(t or '')} on {spoken_day(dt.date.fromisoformat(day or ''))} is taken. "
                                         f"Free that day: {near}."}
                    taken.add((day or "", t or ""))
                    records[k] = {"date": day, "time": t, "choice": choice}
                    when = f"{spoken_day(dt.date.fromisoformat(day or ''))} at {spoken_time(t or '')}"
                    return {"booked": True, d.choice_arg: (choice or "").replace("_", " "), "when": when}
                k = key(tool, args)
                if k not in records:
                    return {"error": f"I can't find a {d.thing} for {said_id(k)}."}
                rec = records[k]
                was = f"{spoken_day(dt.date.fromisoformat(rec['date']))} at {spoken_time(rec['time'])}"
                if role == "delete":
                    taken.discard((rec["date"], rec["time"]))
                    del records[k]
                    return {"cancelled": True, "was": was}
                if role == "read":
                    return {d.choice_arg: (rec["choice"] or "").replace("_", " "), "when": was}
                if role == "update":
                    day, t = by_kind(tool, args, "date"), by_kind(tool, args, "time")
                    if (day, t) in taken:
                        return {"error": f"{spoken_time(t or '')} on {spoken_day(dt.date.fromisoformat(day or ''))} is taken."}
                    taken.discard((rec["date"], rec["time"]))
                    taken.add((day or "", t or ""))
                    rec.update(date=day, time=t)
                    return {"moved": True, "when": f"{spoken_day(dt.date.fromisoformat(day or ''))} at {spoken_time(t or '')}"}
                item = next((v for a, v in args.items() if a != ident[0]), "")
                return {"opened": True, "reference": f"{rng.randint(1000, 9999)}", "item": str(item)}
            except _Refused as e:
                return {"error": str(e)}
        return run

    def seed(args: dict) -> None:
        """Put a record for the identifier in `args` before the call (a move, cancel or look-up)."""
        k = key(next(t for t, r in roles.items() if r == "create"), args) if roles else ""
        day = (today + dt.timedelta(days=rng.randint(2, 12)))
        if day.weekday() == 6:
            day += dt.timedelta(days=1)
        t = rng.choice(starts)
        taken.add((day.isoformat(), t))
        records[k] = {"date": day.isoformat(), "time": t, "choice": rng.choice(list(d.choices))}

    handlers: dict[str, Handler] = {t: handler_for(t, r) for t, r in roles.items()}
    handlers["__seed__"] = seed  # type: ignore[assignment]
    return handlers


def _required(scenario: Scenario, tool: str) -> list[str]:
    return scenario.required(tool)


class _Refused(Exception):
    pass


__all__ = ["DOMAINS", "ROLES", "Synthetic", "synthetic_scenario"]
