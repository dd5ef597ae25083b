"""Scenario packs: a scenario is a folder of data plus a tool backend (docs/scenarios.md).

    scenarios/<name>/scenario.yaml   prompt, greeting, filler, facts, tools with argument kinds, ...
    scenarios/<name>/backend.py      the tools (a `Backend` subclass), unless the YAML names a webhook
    scenarios/<name>/callers/*.yaml  scripted callers for `voice-agent simulate`

    scenario = load_scenario("dental_clinic")         # a shipped pack, a pack folder, or its YAML path
    backend = scenario.open_backend(store, today)     # one per call: tools + setup() + snapshot()
    handlers = scenario.bind_handlers(backend)        # {"book_appointment": fn(args) -> dict, ...}
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine import GROUNDED_BY_KIND, GROUNDED_KEY, KIND_KEY
from voice_agent.config import EFFORT_NAMES  # engine.EFFORTS
from voice_agent.policy.calendar_words import Hours
from voice_agent.policy.kinds import KINDS, kind_for
from voice_agent.said_phrases import PHRASE_KINDS

_TODAY_RE = re.compile(r"\nToday is \w+, (\d{4}-\d{2}-\d{2})\.")

SCENARIOS_DIR = Path(__file__).resolve().parent.parent / "scenarios"
PACK_FILE = "scenario.yaml"
DEFAULT_SCENARIO = "dental_clinic"
# What a caller hears when every line is taken (a pack's `busy_message` replaces it).
DEFAULT_BUSY_MESSAGE = "Sorry, all our lines are busy right now. Please call back in a few minutes. Goodbye."

ToolHandler = Callable[[dict], dict]


class ScenarioError(ValueError):
    """A scenario that does not exist or whose YAML is malformed. The message says which and why."""


@dataclass(frozen=True)
class CallPolicy:
    """The scenario's rules for a call's turns (scenario.yaml), the same in every framework:
    `ask` (argument -> the question to ask when nobody said it: brain/ask_guard.py), `instead` (tool ->
    {when_said: kind, call: other tool} or {after: tool, call: other tool}) and `intents` (tool -> the caller's phrases that ask for it),
    read by the dialogue state and the policy (voice_agent/policy/)."""

    ask: dict[str, str] = field(default_factory=dict)
    instead: dict[str, dict[str, str]] = field(default_factory=dict)
    intents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # topic -> fact, and topic -> the caller's phrases that ask about it (policy/facts.py)
    facts: dict[str, str] = field(default_factory=dict)
    fact_questions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    greeting_reply: str = ""  # said to a caller who only greets (policy/greeting.py)
    goodbye_reply: str = ""  # said to a caller who only closes the call (policy/closing.py)
    # enum value -> the caller's words for it, from the tools' `x-synonyms` ("a clean" is a cleaning)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    agent_name: str = ""  # the name the agent greets with ("..., this is Sam."): a caller may greet it back


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
    # a phrase of that kind is made as the other tool (voice_agent/policy/instead.py, decisions.py)
    instead: dict[str, dict[str, str]] = field(default_factory=dict)
    # tool -> the caller's phrases that ask for it ("call off" for a cancel; policy/state.py)
    intents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # topic -> the caller's phrases that ask about that fact ("how much" for prices; policy/facts.py)
    fact_questions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    greeting_reply: str = ""  # said to a caller who only greets ("Good morning."; policy/greeting.py)
    goodbye_reply: str = ""  # said to a caller who only closes ("that's all I needed"; policy/closing.py)
    # said to a caller who rings while every line is taken (the machine's call capacity), who is then hung up on
    busy_message: str = DEFAULT_BUSY_MESSAGE
    folder: Path | None = None        # the pack's folder: backend.py, callers/
    backend: str | None = None        # "Class" in the pack's backend.py, "file.py:Class" or "package.module:Class"
    webhook: dict | None = None       # {url, timeout_s, retries, headers}: tools over HTTP instead
    hours: Hours | None = None        # opening hours: an hour said without am/pm is read inside them
    # tools marked `read_only: true`: no side effects, so they may run while the caller is still
    # speaking (voice_agent/brain/ahead.py); a tool that changes anything never runs ahead
    read_only: frozenset[str] = frozenset()

    @property
    def policy(self) -> CallPolicy:
        """The ask, instead, intents and fact_questions blocks (with the facts): what every brain of a
        call applies to its turns."""
        return CallPolicy(ask=dict(self.ask), instead=dict(self.instead), intents=dict(self.intents),
                          facts=dict(self.facts), fact_questions=dict(self.fact_questions),
                          greeting_reply=self.greeting_reply, goodbye_reply=self.goodbye_reply,
                          choices=choice_words(self.tools), agent_name=_agent_name(self.greeting))

    @property
    def callers_dir(self) -> Path | None:
        """The pack's scripted callers (`voice-agent simulate`), if it ships any."""
        return self.folder / "callers" if self.folder and (self.folder / "callers").is_dir() else None

    def open_backend(self, store: str | Path | None = None, today: dt.date | None = None) -> Any:
        """A new backend for one call (voice_agent/packs): the pack's Python class on `store` (a folder;
        unset: ~/.cache/voice-agent/stores/<name>), or its webhook."""
        from voice_agent.packs.loading import open_backend

        return open_backend(self, store, today)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    # -- one tool's schema: the single place its parts are read from ---------------------------
    def tool(self, name: str) -> dict | None:
        """The function schema of the tool `name` ({name, description, parameters}); None if unknown."""
        return next((t["function"] for t in self.tools if t["function"]["name"] == name), None)

    def arguments(self, name: str) -> dict[str, dict]:
        """The tool's arguments: name -> JSON schema ({} for an unknown tool)."""
        return ((self.tool(name) or {}).get("parameters") or {}).get("properties") or {}

    def required(self, name: str) -> list[str]:
        return list(((self.tool(name) or {}).get("parameters") or {}).get("required") or [])

    def kind_of(self, tool: str, arg: str) -> str | None:
        """The argument's `x-kind` in `tool`, else in the first tool that has it with a kind."""
        for name in (tool, *self.tool_names):
            spec = self.arguments(name).get(arg)
            if isinstance(spec, dict) and spec.get(KIND_KEY):
                return spec[KIND_KEY]
        return None

    @property
    def facts(self) -> dict[str, str]:
        """The scenario's `facts` block (hours, address, prices, ...): what the agent answers questions from."""
        return {str(k): str(v) for k, v in (self.extra.get("facts") or {}).items()}

    def system_prompt_for(self, today: dt.date | None = None) -> str:
        """The system prompt with the facts and today's date (the tools resolve "tomorrow" against it)."""
        today = today or dt.date.today()
        facts = "".join(f"\n{k.capitalize()}: {v}" for k, v in self.facts.items())
        return f"{self.system_prompt.rstrip()}{facts}\nToday is {today:%A}, {today.isoformat()}."

    def bind_handlers(self, backend: Any) -> dict[str, ToolHandler]:
        """Each tool name -> a handler over the backend's method of that name (`open_backend`), made
        total: bad arguments, a missing method or a failing tool answer with an error the agent can
        say, rather than the call crashing (voice_agent/packs/backend.py)."""
        from voice_agent.packs.backend import bind_tools

        return bind_tools(backend, self.tools)


def _agent_name(greeting: str) -> str:
    """The name the agent introduces itself with in its greeting ("this is Sam", "I'm Sam", "Sam speaking")."""
    found = re.search(r"\b(?:this is|i'm|i am|my name is)\s+([A-Z][a-z]+)", greeting) or re.search(
        r"\b([A-Z][a-z]+) speaking\b", greeting)
    return found.group(1) if found else ""


def today_of(messages: list[dict]) -> dt.date:
    """The call's today as its system prompt states it (`Scenario.system_prompt_for`); else the date."""
    for m in messages:
        if m.get("role") == "system" and isinstance(m.get("content"), str):
            found = _TODAY_RE.search(m["content"])
            if found:
                return dt.date.fromisoformat(found.group(1))
    return dt.date.today()


def list_scenarios(scenarios_dir: Path = SCENARIOS_DIR) -> list[str]:
    """The packs shipped in `scenarios_dir`: its folders that hold a scenario.yaml."""
    return sorted(p.parent.name for p in scenarios_dir.glob(f"*/{PACK_FILE}"))


def scenario_path(name_or_path: str | Path, scenarios_dir: Path = SCENARIOS_DIR) -> Path:
    """The YAML of a pack given by name (scenarios/<name>/), by folder, or by its YAML file."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path / PACK_FILE
    if path.suffix in (".yaml", ".yml"):
        return path
    return scenarios_dir / str(name_or_path) / PACK_FILE


def load_scenario(name_or_path: str | Path, scenarios_dir: Path = SCENARIOS_DIR) -> Scenario:
    """Load a scenario pack by name (scenarios/<name>/), by folder, or from its YAML file's path."""
    path = scenario_path(name_or_path, scenarios_dir)
    if not path.is_file():
        known = ", ".join(list_scenarios(scenarios_dir)) or "none"
        raise ScenarioError(f"unknown scenario {str(name_or_path)!r}: no {path}; shipped scenarios: {known} "
                            f"(or give a pack folder, or its {PACK_FILE})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read it ({e})") from None
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
    for key in ("greeting", "filler", "description", "greeting_reply", "goodbye_reply", "busy_message"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ScenarioError(f"{where}: '{key}' must be a string")
    known = {"name", "description", "system_prompt", "tools", "greeting", "filler", "reasoning_effort", "ask", "instead",
             "intents", "fact_questions", "greeting_reply", "goodbye_reply", "busy_message", "backend", "webhook",
             "opening_hours"}
    tools = _parse_tools(data.get("tools") or [], where)
    backend, webhook = data.get("backend"), data.get("webhook")
    if backend is not None and (not isinstance(backend, str) or not backend.strip()):
        raise ScenarioError(f"{where}: 'backend' must name a class: Class (in the pack's backend.py), "
                            "file.py:Class or package.module:Class")
    if backend is not None and webhook is not None:
        raise ScenarioError(f"{where}: give 'backend' or 'webhook', not both")
    if webhook is not None:
        webhook = {"url": webhook} if isinstance(webhook, str) else webhook
        if not isinstance(webhook, dict) or not str(webhook.get("url", "")).startswith(("http://", "https://")):
            raise ScenarioError(f"{where}: 'webhook' must be a URL or {{url: http..., timeout_s, retries, headers}}")
        unknown = set(webhook) - {"url", "timeout_s", "retries", "headers"}
        if unknown:
            raise ScenarioError(f"{where}: webhook: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        hours = Hours.of(data["opening_hours"]) if data.get("opening_hours") is not None else None
    except ValueError as e:
        raise ScenarioError(f"{where}: opening_hours: {e}") from None
    return Scenario(
        name=name,
        description=data.get("description") or "",
        system_prompt=prompt,
        tools=tools,
        greeting=data.get("greeting") or "",
        filler=data.get("filler") or "",
        greeting_reply=data.get("greeting_reply") or "",
        goodbye_reply=data.get("goodbye_reply") or "",
        busy_message=data.get("busy_message") or DEFAULT_BUSY_MESSAGE,
        reasoning_effort=effort,
        source=source,
        extra={k: v for k, v in data.items() if k not in known},
        ask=_parse_ask(data.get("ask"), tools, where),
        instead=_parse_instead(data.get("instead"), tools, where),
        intents=_parse_intents(data.get("intents"), tools, where),
        fact_questions=_parse_fact_questions(data.get("fact_questions"), data.get("facts"), where),
        folder=source.parent if source else None,
        backend=backend.strip() if backend else None,
        webhook=webhook,
        hours=hours,
        read_only=_read_only_tools(data.get("tools") or [], where),
    )


def _read_only_tools(tools: list, where: str) -> frozenset[str]:
    """The names of the tools marked `read_only: true` (a boolean, when given)."""
    out = set()
    for i, t in enumerate(tools):
        t = t["function"] if isinstance(t.get("function"), dict) else t
        mark = t.get("read_only", False)
        if not isinstance(mark, bool):
            raise ScenarioError(f"{where}: tools[{i}] ({t['name']}).read_only must be true or false; got {mark!r}")
        if mark:
            out.add(t["name"])
    return frozenset(out)


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
    shape = "{when_said: kind, call: tool}, {after: tool, call: tool} or {when_result: field, call: tool}"
    if not isinstance(instead, dict):
        raise ScenarioError(f"{where}: 'instead' must map a tool name to {shape}")
    props = {t["function"]["name"]: t["function"]["parameters"].get("properties") or {} for t in tools}
    out = {}
    for tool, rule in instead.items():
        if tool not in props:
            raise ScenarioError(f"{where}: instead.{tool}: no tool named {tool!r}; known: {', '.join(sorted(props))}")
        if not isinstance(rule, dict) or set(rule) not in ({"when_said", "call"}, {"after", "call"},
                                                           {"when_result", "call"}):
            raise ScenarioError(f"{where}: instead.{tool} must be {shape}")
        other = rule["call"]
        if other not in props or other == tool:
            raise ScenarioError(f"{where}: instead.{tool}.call: no other tool named {other!r}")
        if "when_result" in rule:
            if not isinstance(rule["when_result"], str) or not rule["when_result"].strip():
                raise ScenarioError(f"{where}: instead.{tool}.when_result must name a field of {tool}'s result")
            out[str(tool)] = {"when_result": rule["when_result"].strip(), "call": str(other)}
            continue
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


SYNONYMS_KEY = "x-synonyms"  # enum value -> the caller's words for it


def _check_kind(spec: dict, at: str) -> None:
    kind = spec.get(KIND_KEY)
    if kind is not None and kind not in KINDS:
        raise ScenarioError(f"{at}: {KIND_KEY} must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "enum" and not isinstance(spec.get("enum"), list):
        raise ScenarioError(f"{at}: {KIND_KEY}: enum needs the schema's 'enum' list of values")
    synonyms = spec.get(SYNONYMS_KEY)
    if synonyms is None:
        return
    values = set(spec.get("enum") or [])
    if not isinstance(synonyms, dict) or not all(
            k in values and isinstance(v, list) and all(isinstance(w, str) and w.strip() for w in v)
            for k, v in synonyms.items()):
        raise ScenarioError(f"{at}: {SYNONYMS_KEY} must map values of the 'enum' list to lists of the caller's words")


def choice_words(tools: list[dict]) -> dict[str, tuple[str, ...]]:
    """Every enum value that a caller chooses (`x-grounded: choice`) -> its words: the value itself and
    its `x-synonyms`, over all the tools."""
    out: dict[str, tuple[str, ...]] = {}
    for t in tools:
        for spec in (t["function"].get("parameters", {}).get("properties") or {}).values():
            if isinstance(spec, dict) and spec.get(GROUNDED_KEY) == "choice":
                for value in spec.get("enum") or []:
                    words = (str(value), *(spec.get(SYNONYMS_KEY) or {}).get(value, ()))
                    out[str(value)] = tuple(dict.fromkeys((*out.get(str(value), ()), *words)))
    return out


def argument_choices(tools: list[dict], tool: str, argument: str) -> dict[str, tuple[str, ...]]:
    """The choices of one enum argument: value -> its words (the value and its `x-synonyms`)."""
    fn = next((t["function"] for t in tools if t["function"]["name"] == tool), None)
    spec = ((fn or {}).get("parameters", {}).get("properties") or {}).get(argument) or {}
    synonyms = spec.get(SYNONYMS_KEY) or {}
    return {str(v): (str(v), *synonyms.get(v, ())) for v in spec.get("enum") or []}


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
            at = f"{where}: tools[{i}] ({t['name']}).{key}"
            if not isinstance(spec, dict):
                raise ScenarioError(f"{at}: must be a JSON schema (a mapping)")
            if KIND_KEY not in spec and GROUNDED_KEY not in spec and (kind := kind_for(key, spec)):
                spec[KIND_KEY] = kind  # left out: the name and schema say it ("x-kind: null" opts out)
            _check_kind(spec, at)
            if GROUNDED_KEY not in spec and spec.get(KIND_KEY) in GROUNDED_BY_KIND:
                spec[GROUNDED_KEY] = GROUNDED_BY_KIND[spec[KIND_KEY]]
            mark = spec.get(GROUNDED_KEY)
            if mark is not None and mark is not True and mark not in PHRASE_KINDS:
                raise ScenarioError(f"{at}: {GROUNDED_KEY} must be true or one of {', '.join(PHRASE_KINDS)}; "
                                    f"got {mark!r}")
        out.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description") or "", "parameters": params}})
    return out
