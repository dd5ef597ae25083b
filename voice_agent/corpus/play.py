"""One scripted call over any scenario: the caller (caller.py) and the scripted agent take turns,
tools run on the scenario's backend (desk.py), and every agent act becomes a training record.

The scripted agent is the runtime's policy first: it reads the same `DialogueState` through the
same `StateTracker` and asks `policy.decisions.decide`; only where that leaves the turn to the
model does the script say what a good agent does (read a result back, say an error with the
question that moves the call on, ask for the first missing argument, make the call, answer a fact,
decline, close). So the model is trained on exactly the turns the runtime leaves to it, in the
runtime's own words around them.

Each act carries a note for `low` and above: the compact state and the next act
("want book_job; have plate, date; need time -> ask time").
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from dataclasses import dataclass, field

from voice_agent.corpus import caller as C
from voice_agent.corpus.desk import Desk, Source, identity_value, result_of
from voice_agent.corpus.readback import error_reply, success_reply
from voice_agent.corpus.roles import identity_argument
from voice_agent.corpus.values import Value, ValueBank
from voice_agent.policy.decisions import _ASK_ORDER, decide, needed
from voice_agent.policy.facts import FOLLOW_UP
from voice_agent.policy.kinds import KindContext, KindError, parse
from voice_agent.policy.state import StateTracker
from voice_agent.scenarios import argument_choices, ask_question

MAX_TURNS = 10
MAX_ROUNDS = 4


@dataclass
class Act:
    say: str | None = None
    call: tuple[str, dict] | None = None
    why: str = ""                 # ask:<arg> | options | slot | not_found | read_back | goodbye | ...
    note: str = ""
    decided_by: str = ""          # the runtime decision that made it ("" when the script did)
    asked_tool: str = ""          # the tool whose argument a question asks for


@dataclass
class Call:
    source: Source
    plan: C.CallerPlan
    desk: Desk
    messages: list[dict]
    split: str
    records: list[dict] = field(default_factory=list)
    caller_turns: list[str] = field(default_factory=list)
    tools_used: list[str] = field(default_factory=list)
    target: str | None = None        # the tool the call is after now (the goal, or the fix after a correction)
    searched: set[str] = field(default_factory=set)


def plan_call(source: Source, desk: Desk, bank: ValueBank, rng: random.Random, today: dt.date, split: str) -> C.CallerPlan:
    """A goal tool and the values the caller will give for it."""
    sc, roles = source.scenario, source.roles
    goals = [t for t, r in roles.items() if r != "search"] + [t for t, r in roles.items() if r == "search"]
    weights = [3 if roles[t] == "create" else 1 for t in goals]
    goal: str | None = rng.choices(goals, weights)[0] if rng.random() < 0.9 else None
    values: dict[str, Value] = {}
    kinds: dict[str, str] = {}
    wrong = None
    if goal:
        props = sc.arguments(goal)
        for arg in needed_args(sc, goal):
            kind = props[arg].get("x-kind") or "text"
            kinds[arg] = kind
            values[arg] = _draw(source, bank, rng, today, goal, arg, kind)
        ident = identity_argument(sc, goal)
        if ident and roles[goal] not in ("create", "search"):
            arg, kind = ident
            have = desk.existing(kind)
            if not have and desk.seed(goal, arg, values[arg], rng):
                have = [values[arg].canonical]
            if have and rng.random() < 0.9:
                values[arg] = identity_value(kind, rng.choice(have), rng)
                if rng.random() < 0.12:
                    wrong = _draw(source, bank, rng, today, goal, arg, kind)
    plan = C.CallerPlan(goal, values, kinds, greet_first=rng.random() < 0.12, offtopic=rng.random() < 0.06,
                        in_one_breath=rng.choice([0, 0, 1, 1, 2, 3, 9]), wrong_id=wrong)
    topics = list(sc.policy.fact_questions)
    if topics and (goal is None or rng.random() < 0.12):
        plan.fact_before = rng.choice(topics)
    elif topics and rng.random() < 0.2:
        plan.fact_after = rng.choice(topics)
    if goal and rng.random() < 0.2:  # a second request once the first is done
        same = [t for t in goals if t != goal and roles[t] in ("read", "update", "delete", "create")
                and (roles[goal] == "create" or roles[t] == "create")]
        plan.then = rng.choice(same) if same else None
    if goal and roles[goal] == "create" and _fix_tool(source, goal) and rng.random() < 0.15:
        time_arg = next((a for a, k in kinds.items() if k == "time"), None)
        if time_arg:
            plan.correction = bank.time(rng, sc.hours)
    return plan


def play(source: Source, bank: ValueBank, rng: random.Random, today: dt.date, split: str,
         think_share: float = 0.5) -> Call:
    desk = source.open(today)
    plan = plan_call(source, desk, bank, rng, today, split)
    sc = source.scenario
    messages = [{"role": "system", "content": sc.system_prompt_for(today)}]
    if rng.random() < 0.8:
        messages.append({"role": "assistant", "content": sc.greeting})
    call = Call(source, plan, desk, messages, split, target=plan.goal)
    tracker = StateTracker(sc.policy)
    line, caller_act = first_line(call, rng)
    try:
        for _ in range(MAX_TURNS):
            call.caller_turns.append(line)
            messages.append({"role": "user", "content": line})
            said = agent_turn(call, tracker, caller_act, rng, think_share)
            if said is None:
                break
            nxt = caller_reply(call, said, rng)
            if nxt is None:
                break
            line, caller_act = nxt
    finally:
        desk.close()
    return call


# -- the agent ---------------------------------------------------------------------------------------
def agent_turn(call: Call, tracker: StateTracker, caller_act: str, rng: random.Random, think_share: float) -> Act | None:
    for _ in range(MAX_ROUNDS):
        act = next_act(call, tracker, caller_act)
        _record(call, act, rng, think_share)
        if act.say is not None:
            call.messages.append({"role": "assistant", "content": act.say})
            return act
        tool, args = act.call or ("", {})
        result = call.desk.handlers[tool](dict(args))
        call.tools_used.append(tool)
        cid = f"call_{len(call.messages)}"
        call.messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        call.messages.append({"role": "tool", "tool_call_id": cid, "content": json.dumps(result, ensure_ascii=False)})
    return None


def next_act(call: Call, tracker: StateTracker, caller_act: str) -> Act:
    sc, plan = call.source.scenario, call.plan
    state = tracker.read(call.messages, sc.tools)
    last = call.messages[-1]
    if last.get("role") == "tool":
        return _about_result(call, last)
    decision = decide(state, call.messages)
    if decision is not None:
        if decision.say is not None:
            why = f"ask:{decision.metrics['asked']['argument']}" if "asked" in decision.metrics else \
                {"greeting_only": "greeting", "closing_only": "goodbye", "facts_only": "fact"}.get(decision.name, decision.name)
            asked = decision.metrics.get("asked") or {}
            return Act(say=decision.say, why=why, decided_by=decision.name, note=_decided_note(call, decision, why),
                       asked_tool=asked.get("tool", ""))
        tool, args = decision.call or ("", {})
        if tool in call.searched and call.source.roles.get(tool) == "search":
            pass  # searched already: the script goes on below
        else:
            return Act(call=(tool, args), why="call", decided_by=decision.name,
                       note=_note(call, tool, _have(call, tool), [], f"call {tool}"))
    if caller_act == "greet":
        return Act(say=sc.greeting_reply or "Hi! How can I help you today?", why="greeting", note="greeting -> say hello")
    if caller_act == "close":
        return Act(say=sc.goodbye_reply or "Thanks for calling. Goodbye!", why="goodbye", note="caller done -> goodbye")
    if caller_act.startswith("fact:"):
        topic = caller_act[5:]
        return Act(say=f"{sc.facts.get(topic, '')} {FOLLOW_UP}".strip(), why="fact", note=f"question {topic} -> answer")
    if caller_act == "offtopic":
        return Act(say=f"Sorry, I can't help with that here. I can {_capabilities(call)}.", why="decline",
                   note="off topic -> decline")
    target = call.target
    if target is None or plan.done and target == plan.goal:
        return Act(say=FOLLOW_UP, why="follow_up", note="nothing pending -> offer help")
    have = _have(call, target)
    missing = [a for a in needed(state, target) if a not in have]
    search = _search_for(call, target)
    if search and any(_kind(call, target, a) == "time" for a in missing):
        sargs = {a: have[a] if a in have else None for a in needed(state, search)}
        sargs |= {a: v for a, v in _have(call, search).items() if _kind(call, search, a) == "enum"}
        key = json.dumps(sargs, sort_keys=True)
        if all(v is not None for v in sargs.values()) and key not in call.searched:
            call.searched.add(key)
            return Act(call=(search, sargs), why="search", note=_note(call, target, have, missing, f"call {search}"))
    if missing:
        kinds = {a: _kind(call, target, a) for a in missing}
        own = [k for k in sc.ask if k.startswith(f"{target}.")]  # the runtime's order (decisions.ask_missing)
        missing.sort(key=lambda a: (f"{target}.{a}" not in own, own.index(f"{target}.{a}") if f"{target}.{a}" in own
                                    else 0, _ASK_ORDER.get(kinds[a], 9)))
        arg = missing[0]
        q = ask_question(sc.ask, target, arg) or _generic_question(call, target, arg)
        return Act(say=q, why=f"ask:{arg}", note=_note(call, target, have, missing, f"ask {arg}"), asked_tool=target)
    args = {a: have[a] for a in needed(state, target)}
    return Act(call=(target, args), why="call", note=_note(call, target, have, [], f"call {target}"))


def _about_result(call: Call, message: dict) -> Act:
    tool = _last_tool(call.messages)
    result = result_of(message)
    if "error" in result:
        ident = identity_argument(call.source.scenario, tool)
        retimes = any(_kind(call, tool, a) in ("date", "time") for a in call.source.scenario.arguments(tool))
        text, why = error_reply(str(result["error"]), ident[0].replace("_", " ") if ident else None, retimes)
        return Act(say=text, why=why, note=f"{tool} error -> say it, {why}")
    text, why = success_reply(result)
    if tool == call.target and call.source.roles.get(tool) != "search":
        call.plan.done = True
        call.target = call.plan.goal
    return Act(say=text, why=why, note=f"{tool} ok -> {why.replace('_', ' ')}")


_SAY_NOTES = {"greeting": "greeting -> say hello", "goodbye": "caller done -> goodbye", "fact": "question -> answer"}


def _decided_note(call: Call, decision, why: str) -> str:
    """The note of a turn the runtime decided, in the script's own form: a question's note is the
    state and the argument asked (the model never learns a decision's name as a note)."""
    asked = decision.metrics.get("asked") or {}
    if asked:
        tool = asked.get("tool", "")
        have = _have(call, tool)
        missing = [a for a in needed_args(call.source.scenario, tool) if a not in have] or [asked["argument"]]
        return _note(call, tool, have, missing, f"ask {asked['argument']}")
    return _SAY_NOTES.get(why, f"{why} -> say")


def _generic_question(call: Call, tool: str, arg: str) -> str:
    """The question for an argument the scenario wrote none for."""
    words = arg.replace("_", " ")
    spec = call.source.scenario.arguments(tool).get(arg) or {}
    if spec.get("type") == "boolean":
        return f"Is it {words} now, yes or no?"
    if spec.get("enum"):
        options = [str(v).replace("_", " ") for v in spec["enum"]]
        return f"Which {words}: {', '.join(options[:-1])} or {options[-1]}?" if len(options) > 1 else f"Which {words}?"
    return f"What's the {words}, please?"


def _note(call: Call, tool: str, have: dict, missing: list[str], nxt: str) -> str:
    got = ", ".join(have) or "-"
    return f"want {tool}; have {got}; need {', '.join(missing) or '-'} -> {nxt}"


def _have(call: Call, tool: str) -> dict[str, object]:
    """The tool's arguments the caller has said, in their words (by argument, else by kind)."""
    out = {}
    by_kind = {call.plan.kinds.get(a) or call.source.scenario.kind_of("", a): w for a, w in call.plan.said.items()}
    for arg in call.source.scenario.arguments(tool):
        if arg in call.plan.said:
            out[arg] = call.plan.said[arg]
        elif (k := _kind(call, tool, arg)) not in ("enum", "text", "integer") and k in by_kind:
            out[arg] = by_kind[k]
    return out


def _search_for(call: Call, tool: str) -> str | None:
    for search, rule in call.source.scenario.instead.items():
        if rule.get("call") == tool and "when_said" in rule:
            return search
    return None


def _fix_tool(source: Source, tool: str) -> str | None:
    rule = source.scenario.instead.get(tool) or {}
    return rule.get("call") if rule.get("after") == tool else None


def _capabilities(call: Call) -> str:
    a = f"an {call.source.thing}" if call.source.thing[:1] in "aeiou" else f"a {call.source.thing}"
    verbs = {"search": "check free times", "create": f"book {a}", "update": f"change {a}", "delete": f"cancel {a}",
             "read": f"look up {a}"}
    said = list(dict.fromkeys(verbs.get(r, t.replace("_", " ")) for t, r in call.source.roles.items()))
    return ", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else said[0]


# -- the caller --------------------------------------------------------------------------------------
def first_line(call: Call, rng: random.Random) -> tuple[str, str]:
    plan = call.plan
    if plan.greet_first:
        plan.greet_first = False
        return C.asr(C.bank(C.GREETS, call.split, rng), rng), "greet"
    if plan.fact_before:
        topic, plan.fact_before = plan.fact_before, None
        return C.asr(C.fact_line(call.source.scenario.fact_questions[topic], call.split, rng), rng), f"fact:{topic}"
    if plan.offtopic:
        plan.offtopic = False
        return C.asr(C.bank(C.OFFTOPIC, call.split, rng) + "?", rng), "offtopic"
    if plan.goal is None:
        return C.asr(C.bank(C.CLOSES, call.split, rng), rng), "close"
    return request_line(call, rng), "request"


def request_line(call: Call, rng: random.Random) -> str:
    sc, plan, goal = call.source.scenario, call.plan, call.plan.goal or ""
    choice_words = []
    for arg, kind in plan.kinds.items():
        if kind == "enum" and (goal not in sc.intents or rng.random() < 0.3):
            choice_words.append(plan.values[arg].words)
            plan.said[arg] = plan.values[arg].canonical
            break
    text = C.opener(goal, tuple(sc.intents.get(goal, ())), choice_words, call.source.thing, call.split, rng)
    parts = [text]
    order = [a for a in plan.values if a not in plan.said]
    rng.shuffle(order)
    for arg in order[:plan.in_one_breath]:
        parts.append(_give(call, arg, rng, asked=False))
    return C.asr(", ".join(parts), rng)


def _give(call: Call, arg: str, rng: random.Random, asked: bool) -> str:
    plan = call.plan
    kind = plan.kinds.get(arg) or call.source.scenario.kind_of("", arg) or "text"
    value = plan.values[arg]
    if arg == _identity(call) and plan.wrong_id is not None:
        value, plan.wrong_id = plan.wrong_id, None
        plan.values[f"__real_{arg}"] = plan.values[arg]
    boolean = (call.source.scenario.arguments(call.target or plan.goal or "").get(arg) or {}).get("type") == "boolean"
    plan.said[arg] = (value.canonical == "true") if boolean else _as_argument(kind, value)
    return value.words if boolean else C.says(kind, arg, value, rng, asked)


def _identity(call: Call) -> str | None:
    ident = identity_argument(call.source.scenario, call.plan.goal) if call.plan.goal else None
    return ident[0] if ident else None


def _as_argument(kind: str, value: Value) -> str:
    """What the agent passes for a value: the caller's words for days, times, names and texts (the
    tools parse them), the canonical value for choices, counts and numbers."""
    return value.words if kind in ("date", "time", "person_name", "text") else value.canonical


def caller_reply(call: Call, act: Act, rng: random.Random) -> tuple[str, str] | None:
    plan, split, sc = call.plan, call.split, call.source.scenario
    why = act.why
    if why == "goodbye":
        return None
    if why.startswith("ask:"):
        arg = why[4:]
        tool = act.asked_tool or call.target or plan.goal or ""
        if arg not in plan.values:
            kind = _kind(call, tool, arg)
            plan.kinds[arg] = kind
            plan.values[arg] = _draw(call.source, ValueBank(split), rng, _today(call), tool, arg, kind)
        line = _give(call, arg, rng, asked=True)
        rest = [a for a in plan.values if a not in plan.said and not a.startswith("__")]
        if rest and rng.random() < 0.25:
            line += ", " + _give(call, rng.choice(rest), rng, asked=False)
        return C.asr(line, rng), "answer"
    if why == "options":
        offered = _offered_times(act.say or "")
        time_arg = next((a for a, k in plan.kinds.items() if k == "time"), None)
        if time_arg and offered:
            planned = plan.values[time_arg]
            hit = next((w for w, c in offered if c == planned.canonical), None)
            words = hit or rng.choice(offered)[0]
            plan.values[time_arg] = Value(_canon_time(words, call), words.lower())
            plan.said.pop(time_arg, None)
            return C.asr(rng.choice(["{w} please", "{w} works", "I'll take {w}", "{w} would be great", "{w}"]).format(
                w=_give(call, time_arg, rng, asked=True)), rng), "pick"
        return C.asr(C.bank(C.THANKS_ANYWAY, split, rng), rng), "close"
    if why in ("slot", "nothing_free"):
        if rng.random() < 0.15:
            return C.asr(C.bank(C.THANKS_ANYWAY, split, rng), rng), "close"
        return _new_when(call, act, rng)
    if why == "not_found":
        ident = _identity(call)
        real = plan.values.pop(f"__real_{ident}", None) if ident else None
        if real is not None:
            plan.values[ident or ""] = real
            plan.said[ident or ""] = _as_argument(plan.kinds.get(ident or "", "text"), real)
            return C.asr(C.bank(C.RETRY, split, rng).format(w=real.words), rng), "answer"
        return C.asr(C.bank(C.THANKS_ANYWAY, split, rng), rng), "close"
    if why == "other":
        return C.asr(C.bank(C.THANKS_ANYWAY, split, rng), rng), "close"
    if why == "read_back" and plan.correction is not None and plan.goal and (fix := _fix_tool(call.source, plan.goal)):
        new, plan.correction = plan.correction, None
        time_arg = next(a for a, k in plan.kinds.items() if k == "time")
        plan.values[time_arg] = new
        plan.said[time_arg] = new.words
        fix_time = next((a for a in sc.arguments(fix) if _kind(call, fix, a) == "time"), None)
        if fix_time:
            plan.said[fix_time] = new.words
        call.target, plan.done = fix, False
        return C.asr(C.bank(C.CORRECTIONS, split, rng).format(w=new.words), rng), "correction"
    if why == "read_back" and plan.done and plan.then:
        return _second_request(call, rng), "request"
    if plan.fact_after and (plan.done or plan.goal is None):
        topic, plan.fact_after = plan.fact_after, None
        return C.asr(C.fact_line(sc.fact_questions[topic], split, rng), rng), f"fact:{topic}"
    if plan.fact_before:
        topic, plan.fact_before = plan.fact_before, None
        return C.asr(C.fact_line(sc.fact_questions[topic], split, rng), rng), f"fact:{topic}"
    if plan.offtopic:
        plan.offtopic = False
        return C.asr(C.bank(C.OFFTOPIC, split, rng) + "?", rng), "offtopic"
    if why in ("greeting", "fact", "decline") and plan.goal and not plan.done and not call.tools_used:
        return request_line(call, rng), "request"
    return C.asr(C.bank(C.CLOSES, split, rng), rng), "close"


def _second_request(call: Call, rng: random.Random) -> str:
    """The caller's next request in the same call: the same person (their identity and name
    carry over by kind), new values for the rest."""
    plan, sc = call.plan, call.source.scenario
    tool, plan.then = plan.then or "", None
    by_kind = {plan.kinds[a]: v for a, v in plan.values.items() if a in plan.kinds
               and plan.kinds[a] in ("person_name", "phone_number", "plate", "email")}
    values, kinds = {}, {}
    for arg in needed_args(sc, tool):
        kinds[arg] = _kind(call, tool, arg)
        values[arg] = by_kind.get(kinds[arg]) or _draw(call.source, ValueBank(call.split), rng, _today(call), tool, arg,
                                                         kinds[arg])
    plan.goal, plan.values, plan.kinds, plan.said, plan.done = tool, values, kinds, {}, False
    call.target = tool
    line = request_line(call, rng)
    return C.asr(C.bank(C.THEN, call.split, rng).format(r=line), rng)


def _new_when(call: Call, act: Act, rng: random.Random) -> tuple[str, str]:
    plan = call.plan
    time_arg = next((a for a in plan.kinds if plan.kinds[a] == "time"), None)
    date_arg = next((a for a in plan.kinds if plan.kinds[a] == "date"), None)
    free = _offered_times(act.say or "")
    bank = ValueBank(call.split)
    parts = []
    if act.why == "nothing_free" or re.search(r"closed|past|only goes|sunday", act.say or "", re.I) or not free:
        if date_arg:
            plan.values[date_arg] = bank.date(rng, _today(call))
            plan.said.pop(date_arg, None)
            parts.append(_give(call, date_arg, rng, asked=False))
    if time_arg:
        if free:
            words = rng.choice(free)[0]
            plan.values[time_arg] = Value(_canon_time(words, call), words.lower())
        else:
            plan.values[time_arg] = bank.time(rng, call.source.scenario.hours)
        plan.said.pop(time_arg, None)
        parts.append(_give(call, time_arg, rng, asked=False))
    if not parts:
        return C.asr(C.bank(C.THANKS_ANYWAY, call.split, rng), rng), "close"
    return C.asr(rng.choice(["ok, how about ", "then ", "hmm, ", "ok, "]) + " ".join(parts), rng), "answer"


def _offered_times(text: str) -> list[tuple[str, str]]:
    out = []
    for m in re.finditer(r"\b(\d{1,2}(?::\d{2})? ?[ap]m|noon)\b", text, re.I):
        try:
            out.append((m.group(1), str(parse("time", m.group(1), KindContext()))))
        except KindError:
            pass
    return out


def _canon_time(words: str, call: Call) -> str:
    try:
        return str(parse("time", words, KindContext(hours=call.source.scenario.hours)))
    except KindError:
        return words


def _today(call: Call) -> dt.date:
    m = re.search(r"Today is \w+, (\d{4}-\d{2}-\d{2})", call.messages[0]["content"])
    return dt.date.fromisoformat(m.group(1)) if m else dt.date.today()


# -- shared --------------------------------------------------------------------------------------
def _kind(call: Call, tool: str, arg: str) -> str:
    """The argument's kind in `tool`, else in any tool that takes it."""
    return call.source.scenario.kind_of(tool, arg) or "text"


def needed_args(sc, tool: str) -> list[str]:
    req = sc.required(tool)
    return req + [a for a in sc.arguments(tool) if a not in req and ask_question(sc.ask, tool, a)]


def _draw(source: Source, bank: ValueBank, rng: random.Random, today: dt.date, tool: str, arg: str, kind: str) -> Value:
    sc = source.scenario
    spec = sc.arguments(tool).get(arg) or {}
    if spec.get("type") == "boolean":
        yes = rng.random() < 0.5
        return Value("true" if yes else "false", rng.choice(["yes", "yeah it works now"] if yes else ["no", "still not working"]))
    choices = argument_choices(sc.tools, tool, arg) if kind == "enum" else None
    return bank.draw(kind, rng, today, sc.hours, choices=choices, texts=source.texts.get(arg) or source.texts.get(""))


def _last_tool(messages: list[dict]) -> str:
    for m in reversed(messages):
        for c in m.get("tool_calls") or []:
            return c["function"]["name"]
    return ""


def _record(call: Call, act: Act, rng: random.Random, think_share: float) -> None:
    from engine import ChatFormat, tool_call_text

    think = rng.random() < think_share
    prompt = ChatFormat(tool_style="compact").render(call.messages, call.source.scenario.tools, thinking=think)
    if act.say is not None:
        body = act.say
    else:
        tool, args = act.call or ("", {})
        body = tool_call_text({"name": tool, "arguments": args})
    target = (f"{act.note}\n</think>\n\n" if think else "") + body + "<|im_end|>"
    call.records.append({"prompt": prompt, "target": target, "think": think, "scenario": call.source.scenario.name,
                         "act": (act.call or ("say",))[0], "why": act.why, "decided_by": act.decided_by,
                         "split": call.split})


__all__ = ["Act", "Call", "next_act", "plan_call", "play"]
