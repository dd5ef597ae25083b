"""`ScenarioAgent`: a LiveKit `Agent` built from a scenario pack (scenarios/<name>/).

Its instructions are the scenario's system prompt (with today's date), and its tools are the
scenario's tool schemas, as `@function_tool(raw_schema=...)` tools bound to the handlers of the
pack's backend. The schemas stay data: nothing about a tool is restated in code. While a tool runs
longer than `filler_delay`, the scenario's filler phrase is spoken (LiveKit's `RunContext.with_filler`).

    scenario = load_scenario("dental_clinic")
    agent = ScenarioAgent(scenario, handlers=scenario.bind_handlers(scenario.open_backend()))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping

from livekit.agents import Agent, RunContext, function_tool, llm

from voice_agent.scenarios import Scenario

logger = logging.getLogger("voice_agent.livekit.agent")

FILLER_DELAY_S = 0.7  # a tool quicker than this needs no "one moment"


class ScenarioAgent(Agent):
    def __init__(self, scenario: Scenario, handlers: Mapping[str, Callable[[dict], dict]], *,
                 greet: bool = True, warm: bool = True, filler_delay: float = FILLER_DELAY_S) -> None:
        self.scenario = scenario
        self._greet, self._warm = greet, warm
        tools = [scenario_tool(t["function"], handlers[t["function"]["name"]],
                               filler=scenario.filler, filler_delay=filler_delay)
                 for t in scenario.tools if t["function"]["name"] in handlers]
        missing = [n for n in scenario.tool_names if n not in handlers]
        if missing:
            logger.warning("scenario %s: no handler for %s; those tools are left out", scenario.name, missing)
        super().__init__(instructions=scenario.system_prompt_for(), tools=tools)

    async def on_enter(self) -> None:
        warm = getattr(self.session.llm, "warm", None)  # our engine's LLM: prefill while the greeting plays
        if self._warm and warm is not None:
            warm(self.instructions, self.tools)
        # The greeting is fixed text: say it straight away instead of waiting for the LLM.
        if self._greet and self.scenario.greeting:
            self.session.say(self.scenario.greeting)


def scenario_tool(schema: dict, handler: Callable[[dict], dict], *, filler: str = "",
                  filler_delay: float = FILLER_DELAY_S) -> llm.RawFunctionTool:
    """One scenario tool as a raw function tool. The handler is blocking (SQLite), so it runs in a
    thread; whatever it returns (including {"error": ...}) goes back to the model as JSON."""
    name = schema["name"]

    async def call(raw_arguments: dict[str, object], context: RunContext) -> str:
        logger.info("tool %s(%s)", name, json.dumps(raw_arguments))
        fill = context.with_filler(filler, delay=filler_delay) if filler else contextlib.nullcontext()
        async with fill:
            result = await asyncio.to_thread(handler, dict(raw_arguments))
        return json.dumps(result)

    call.__name__ = name
    return function_tool(call, raw_schema={"name": name, "description": schema.get("description", ""),
                                           "parameters": schema["parameters"]})
