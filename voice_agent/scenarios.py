"""Scenarios are data: prompts/<name>.yaml holds a system prompt, tool schemas, a greeting, a filler
phrase and a default reasoning_effort. This module loads them and binds tool names to handlers.

    scenario = load_scenario("dental_receptionist")
    handlers = scenario.bind_handlers(ClinicDB(path))   # {"book_appointment": fn(args) -> dict, ...}
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.grounding import GROUNDED_KEY
from voice_agent.config import EFFORT_NAMES  # engine.EFFORTS
from voice_agent.said_phrases import PHRASE_KINDS

_TODAY_RE = re.compile(r"\nToday is \w+, (\d{4}-\d{2}-\d{2})\.")

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"

ToolHandler = Callable[[dict], dict]


class ScenarioError(ValueError):
    """A scenario that does not exist or whose YAML is malformed. The message says which and why."""


@dataclass(frozen=True)
class CallPolicy:
    """The scenario's rules for a call's turns (prompts/*.yaml), the same in every framework:
    `ask` (argument -> the question to ask when nobody said it: brain/ask_guard.py), `instead` (tool ->
    {when_said: kind, call: other tool} or {after: tool, call: other tool}) and `intents` (tool -> the caller's phrases that ask for it),
    both read by brain/tool_choice.py."""

    ask: dict[str, str] = field(default_factory=dict)
    instead: dict[str, dict[str, str]] = field(default_factory=dict)
    intents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # topic -> fact, and topic -> the caller's phrases that ask about it (brain/facts.py)
    facts: dict[str, str] = field(default_factory=dict)
    fact_questions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    greeting_reply: str = ""  # said to a caller who only greets (brain/greeting.py)
    goodbye_reply: str = ""  # said to a caller who only closes the call (brain/closing.py)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    system_prompt: str
    tools: list[dict]  # OpenAI shape: {"type": "function", "function": {name, description, parameters}}
    greeting: str
    filler: str
    reasoning_effort: str
    source: Path | None = None
    extra: dict = field(default_factory=dict)
    # argument -> what to ask when a call's value for it was never said (voice_agent/brain/ask_guard.py)
    ask: dict[str, str] = field(default_factory=dict)
    # tool -> {when_said: kind, call: other tool}: such a call made while the caller's latest words name
    # a phrase of that kind is made as the other tool (voice_agent/brain/tool_choice.py)
    instead: dict[str, dict[str, str]] = field(default_factory=dict)
    # tool -> the caller's phrases that ask for it ("call off" for cancel_appointment; tool_choice.py)
    intents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # topic -> the caller's phrases that ask about that fact ("how much" for prices; brain/facts.py)
    fact_questions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    greeting_reply: str = ""  # said to a caller who only greets ("Good morning."; brain/greeting.py)
    goodbye_reply: str = ""  # said to a caller who only closes ("that's all I needed"; brain/closing.py)

    @property
    def policy(self) -> CallPolicy:
        """The ask, instead, intents and fact_questions blocks (with the facts): what every brain of a
        call applies to its turns."""
        return CallPolicy(ask=dict(self.ask), instead=dict(self.instead), intents=dict(self.intents),
                          facts=dict(self.facts), fact_questions=dict(self.fact_questions),
                          greeting_reply=self.greeting_reply, goodbye_reply=self.goodbye_reply)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def facts(self) -> dict[str, str]:
        """The scenario's `facts` block (hours, address, prices, ...): what the agent answers questions from."""
        return {str(k): str(v) for k, v in (self.extra.get("facts") or {}).items()}

    def system_prompt_for(self, today: dt.date | None = None) -> str:
        """The system prompt with the facts and today's date (the tools resolve "tomorrow" against it)."""
        today = today or dt.date.today()
        facts = "".join(f"\n{k.capitalize()}: {v}" for k, v in self.facts.items())
        return f"{self.system_prompt.rstrip()}{facts}\nToday is {today:%A}, {today.isoformat()}."

    def bind_handlers(self, *backends: Any) -> dict[str, ToolHandler]:
        """Map each tool name to the backend method of the same name.

        A backend is any object with methods named like the tools (e.g. ClinicDB). A tool that no
        backend implements gets a handler that answers with a clear error, so the model hears
        "not available" rather than the call crashing.
        """
        bound: dict[str, ToolHandler] = {}
        for name in self.tool_names:
            for backend in backends:
                fn = getattr(backend, name, None)
                if callable(fn):
                    bound[name] = fn
                    break
            else:
                bound[name] = _unavailable(name)
        return bound


def today_of(messages: list[dict]) -> dt.date:
    """The call's today as its system prompt states it (`Scenario.system_prompt_for`); else the date."""
    for m in messages:
        if m.get("role") == "system" and isinstance(m.get("content"), str):
            found = _TODAY_RE.search(m["content"])
            if found:
                return dt.date.fromisoformat(found.group(1))
    return dt.date.today()


def _unavailable(name: str) -> ToolHandler:
    def handler(_args: dict) -> dict:
        return {"error": f"The tool {name} is not available right now."}

    return handler


def list_scenarios(prompts_dir: Path = PROMPTS_DIR) -> list[str]:
    return sorted(p.stem for p in prompts_dir.glob("*.yaml"))


def load_scenario(name_or_path: str | Path, prompts_dir: Path = PROMPTS_DIR) -> Scenario:
    """Load a scenario by name (prompts/<name>.yaml) or from a YAML file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = prompts_dir / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(list_scenarios(prompts_dir)) or "none"
        raise ScenarioError(f"unknown scenario {str(name_or_path)!r}; known scenarios: {known}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    return parse_scenario(data, source=path)


def parse_scenario(data: Any, source: Path | None = None) -> Scenario:
    where = str(source) if source else "scenario"
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: must be a mapping with name, system_prompt and tools")
    name = data.get("name") or (source.stem if source else None)
    prompt = data.get("system_prompt")
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"{where}: 'name' must be a non-empty string")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ScenarioError(f"{where}: 'system_prompt' must be a non-empty string")
    effort = data.get("reasoning_effort", "low")
    if effort not in EFFORT_NAMES:
        raise ScenarioError(f"{where}: reasoning_effort must be one of {', '.join(EFFORT_NAMES)}; got {effort!r}")
    for key in ("greeting", "filler", "description", "greeting_reply", "goodbye_reply"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ScenarioError(f"{where}: '{key}' must be a string")
    known = {"name", "description", "system_prompt", "tools", "greeting", "filler", "reasoning_effort", "ask", "instead",
             "intents", "fact_questions", "greeting_reply", "goodbye_reply"}
    tools = _parse_tools(data.get("tools") or [], where)
    return Scenario(
        name=name,
        description=data.get("description") or "",
        system_prompt=prompt,
        tools=tools,
        greeting=data.get("greeting") or "",
        filler=data.get("filler") or "",
        greeting_reply=data.get("greeting_reply") or "",
        goodbye_reply=data.get("goodbye_reply") or "",
        reasoning_effort=effort,
        source=source,
        extra={k: v for k, v in data.items() if k not in known},
        ask=_parse_ask(data.get("ask"), tools, where),
        instead=_parse_instead(data.get("instead"), tools, where),
        intents=_parse_intents(data.get("intents"), tools, where),
        fact_questions=_parse_fact_questions(data.get("fact_questions"), data.get("facts"), where),
    )


def _parse_fact_questions(questions: Any, facts: Any, where: str) -> dict[str, tuple[str, ...]]:
    """`topic: [phrase, ...]`, each topic one of the `facts` block's."""
    if questions is None:
        return {}
    if not isinstance(questions, dict):
        raise ScenarioError(f"{where}: 'fact_questions' must map a fact's topic to a list of the caller's phrases")
    topics = set(facts) if isinstance(facts, dict) else set()
    out = {}
    for topic, phrases in questions.items():
        if topic not in topics:
            raise ScenarioError(f"{where}: fact_questions.{topic}: the facts block has no {topic!r}; "
                                f"known: {', '.join(sorted(topics)) or 'none'}")
        if (not isinstance(phrases, list) or not phrases
                or not all(isinstance(p, str) and p.strip() for p in phrases)):
            raise ScenarioError(f"{where}: fact_questions.{topic} must be a non-empty list of phrases")
        out[str(topic)] = tuple(p.strip() for p in phrases)
    return out


def _parse_ask(ask: Any, tools: list[dict], where: str) -> dict[str, str]:
    """`argument: question`, or `tool.argument: question` for one tool's own wording (it wins for
    that tool: "Sure, I can cancel that. Can I have your full name?")."""
    if ask is None:
        return {}
    if not isinstance(ask, dict):
        raise ScenarioError(f"{where}: 'ask' must map argument names to the question to ask for them")
    props = {t["function"]["name"]: set(t["function"]["parameters"].get("properties") or {}) for t in tools}
    args = set().union(*props.values()) if props else set()
    for key, question in ask.items():
        tool, _, arg = str(key).rpartition(".")
        if tool and tool not in props:
            raise ScenarioError(f"{where}: ask.{key}: no tool named {tool!r}; known: {', '.join(sorted(props))}")
        known = props[tool] if tool else args
        if arg not in known:
            what = f"{tool} has no argument {arg!r}" if tool else f"no tool has an argument {arg!r}"
            raise ScenarioError(f"{where}: ask.{key}: {what}; known: {', '.join(sorted(known))}")
        if not isinstance(question, str) or not question.strip():
            raise ScenarioError(f"{where}: ask.{key} must be a non-empty question")
    return {str(k): str(v) for k, v in ask.items()}


def _parse_instead(instead: Any, tools: list[dict], where: str) -> dict[str, dict[str, str]]:
    """`tool: {when_said: kind, call: other}` (`other` must take a grounded argument of that kind) or
    `tool: {after: done, call: other}` (a call to `tool` for the patient `done` already succeeded for
    in this call is made as `other`)."""
    if instead is None:
        return {}
    shape = "{when_said: kind, call: tool} or {after: tool, call: tool}"
    if not isinstance(instead, dict):
        raise ScenarioError(f"{where}: 'instead' must map a tool name to {shape}")
    props = {t["function"]["name"]: t["function"]["parameters"].get("properties") or {} for t in tools}
    out = {}
    for tool, rule in instead.items():
        if tool not in props:
            raise ScenarioError(f"{where}: instead.{tool}: no tool named {tool!r}; known: {', '.join(sorted(props))}")
        if not isinstance(rule, dict) or set(rule) not in ({"when_said", "call"}, {"after", "call"}):
            raise ScenarioError(f"{where}: instead.{tool} must be {shape}")
        other = rule["call"]
        if other not in props or other == tool:
            raise ScenarioError(f"{where}: instead.{tool}.call: no other tool named {other!r}")
        if "after" in rule:
            if rule["after"] not in props:
                raise ScenarioError(f"{where}: instead.{tool}.after: no tool named {rule['after']!r}")
            out[str(tool)] = {"after": str(rule["after"]), "call": str(other)}
            continue
        kind = rule["when_said"]
        if kind not in PHRASE_KINDS:
            raise ScenarioError(f"{where}: instead.{tool}.when_said must be one of {', '.join(PHRASE_KINDS)}; got {kind!r}")
        if not any(isinstance(spec, dict) and spec.get(GROUNDED_KEY) == kind for spec in props[other].values()):
            raise ScenarioError(f"{where}: instead.{tool}.call: {other} takes no argument marked {GROUNDED_KEY}: {kind}")
        out[str(tool)] = {"when_said": str(kind), "call": str(other)}
    return out


def _parse_intents(intents: Any, tools: list[dict], where: str) -> dict[str, tuple[str, ...]]:
    """`tool: [phrase, ...]`: the caller's words that ask for that tool."""
    if intents is None:
        return {}
    if not isinstance(intents, dict):
        raise ScenarioError(f"{where}: 'intents' must map a tool name to a list of the caller's phrases")
    names = {t["function"]["name"] for t in tools}
    out = {}
    for tool, phrases in intents.items():
        if tool not in names:
            raise ScenarioError(f"{where}: intents.{tool}: no tool named {tool!r}; known: {', '.join(sorted(names))}")
        if (not isinstance(phrases, list) or not phrases
                or not all(isinstance(p, str) and p.strip() for p in phrases)):
            raise ScenarioError(f"{where}: intents.{tool} must be a non-empty list of phrases")
        out[str(tool)] = tuple(p.strip() for p in phrases)
    return out


def ask_question(ask: dict[str, str], tool: str, argument: str) -> str | None:
    """What to ask for `argument` of `tool`: the tool's own wording, else the argument's."""
    return ask.get(f"{tool}.{argument}") or ask.get(argument)


def _parse_tools(tools: Any, where: str) -> list[dict]:
    """Accept the simple form {name, description, parameters} or the OpenAI form; return OpenAI form."""
    if not isinstance(tools, list):
        raise ScenarioError(f"{where}: 'tools' must be a list")
    out, names = [], set()
    for i, t in enumerate(tools):
        if isinstance(t, dict) and isinstance(t.get("function"), dict):
            t = t["function"]
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise ScenarioError(f"{where}: tools[{i}] needs a 'name'")
        if t["name"] in names:
            raise ScenarioError(f"{where}: duplicate tool name {t['name']!r}")
        names.add(t["name"])
        params = t.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ScenarioError(f"{where}: tools[{i}] ({t['name']}): 'parameters' must be an object schema")
        params = {"type": "object", "properties": params.get("properties") or {}, **{
            k: v for k, v in params.items() if k not in ("type", "properties")}}
        for key, spec in params["properties"].items():
            mark = spec.get(GROUNDED_KEY) if isinstance(spec, dict) else None
            if mark is not None and mark is not True and mark not in PHRASE_KINDS:
                raise ScenarioError(f"{where}: tools[{i}] ({t['name']}).{key}: {GROUNDED_KEY} must be true or one "
                                    f"of {', '.join(PHRASE_KINDS)}; got {mark!r}")
        out.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description") or "", "parameters": params}})
    return out
