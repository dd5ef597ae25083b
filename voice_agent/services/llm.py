"""The call's brain as a Pipecat LLMService: streaming, one brain (and engine Session) per call.

The brain is the in-process engine (`EngineBrain`: turns batched with every other call's by the
process's one scheduler, the KV cache kept between turns) or an OpenAI-compatible server (`RemoteBrain`, for
`--llm-url`); voice_agent/brain owns streaming, cancellation, trimming and sessions for both.

For every LLMContextFrame:
- the context becomes OpenAI messages + tools (Pipecat's OpenAI adapter), then engine messages;
- `brain.turn()` streams reasoning/answer events;
- ANSWER text goes out with `_push_llm_text()` (LLMTextFrame -> TTS). Reasoning text is only
  logged: it is never pushed, so it is never spoken;
- tool calls become `FunctionCallFromLLM`s for `run_function_calls()`; the handlers registered
  with `register_tool()` run in a thread. The scenario's filler phrase is spoken (TTSSpeakFrame)
  only when the answer is late: a tool call is under way, or the turn waits behind other calls'
  turns, and no answer text has come `filler_after_s` after the caller's turn reached the LLM.
  Once per caller turn at most; a turn that answers (or asks) at once never gets one;
- the engine's per-turn metrics (ttft_ms, ttfat_ms, prefill_ms, tokens_per_forward, ...) are kept
  in `last_metrics`, pushed downstream as an `EngineMetricsFrame`, and passed to the
  "on_engine_metrics" event; Pipecat's own TTFB/TTFAT/processing/usage metrics are emitted too;
- an LLM error (engine failure, server down or answering garbage, a turn that waited past its limit
  on an overloaded machine) costs one turn, not the call: a non-fatal ErrorFrame goes upstream
  and the caller hears a short apology.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.adapters.llm.services.open_ai_adapter import openai_is_given
from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    SystemFrame,
    TTSSpeakFrame,
)
from pipecat.metrics.metrics import LLMTokenUsage
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import FunctionCallParams, LLMService
from pipecat.services.settings import LLMSettings
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.types import NOT_GIVEN, NotGiven

from engine import EFFORTS
from voice_agent.brain import Brain, BrainError, TurnResult
from voice_agent.brain.ahead import TurnAhead
from voice_agent.brain.engine_bridge import EngineBrain
from voice_agent.config import CallOptions
from voice_agent.scenarios import CallPolicy
from voice_agent.services.speakable import SpeakableFilter

ToolFn = Callable[[dict], dict | Awaitable[dict]]
DEFAULT_APOLOGY = "Sorry, I had a problem there. Could you say that again?"
DEFAULT_NO_ANSWER = "Sorry, could you say that again?"
_DEFAULTS = CallOptions()


@dataclass
class EngineMetricsFrame(SystemFrame):
    """The engine's metrics for one LLM turn (names as in MISSION.md), for observers."""

    metrics: dict = field(default_factory=dict)


@dataclass
class EngineLLMSettings(LLMSettings):
    """LLMSettings plus the engine's `reasoning_effort`, so a call can change it at run time with
    `LLMUpdateSettingsFrame(delta=EngineLLMSettings(reasoning_effort="high"))`."""

    reasoning_effort: str | NotGiven = field(default_factory=lambda: NOT_GIVEN)


class EngineLLMService(LLMService):
    Settings = EngineLLMSettings
    _settings: EngineLLMSettings

    def __init__(self, engine: Any, *, session: Any = None, system_instruction: str | None = None,
                 reasoning_effort: str = "low", max_tokens: int = _DEFAULTS.max_tokens,
                 temperature: float = _DEFAULTS.temperature, tools: dict[str, ToolFn] | None = None,
                 filler: str = "", filler_after_s: float = _DEFAULTS.filler_after_s,
                 apology: str = DEFAULT_APOLOGY, no_answer: str = DEFAULT_NO_ANSWER, max_tool_rounds: int = 3,
                 policy: CallPolicy | None = None, decode_ahead: bool = False,
                 read_only_tools: frozenset[str] | set[str] = frozenset(), **kwargs: Any) -> None:
        """`engine`: a Brain (`make_brain`), or an engine (then this call gets an EngineBrain on it,
        with `session` or a fresh one). `policy`: the scenario's ask, instead and intents blocks
        (`Scenario.policy`): a call whose grounded argument nobody said is replaced by its question
        (voice_agent/brain/ask_guard.py), and the tool a turn must call is named where the
        dialogue state has decided it (voice_agent/policy/). `decode_ahead`: `speculate`
        decodes the turn as heard, not only prefills it (voice_agent/brain/ahead.py; the in-process
        engine only). `read_only_tools`: the tools with no side effects (`Scenario.read_only`); a
        guess decoded ahead that calls only these runs them at once and decodes the answer from
        their results too."""
        _check_effort(reasoning_effort)
        self.brain: Brain = engine if isinstance(engine, Brain) else EngineBrain(engine, session)
        settings = EngineLLMSettings(
            model=self.brain.model_name, system_instruction=system_instruction, temperature=temperature,
            max_tokens=max_tokens, top_p=None, top_k=None, frequency_penalty=None, presence_penalty=None,
            seed=None, filter_incomplete_user_turns=False, user_turn_completion_config=None,
            use_provider_thinking_default=False, reasoning_effort=reasoning_effort, extra={})
        super().__init__(settings=settings, **kwargs)
        self.filler, self.filler_after_s = filler, filler_after_s
        self.apology, self.no_answer = apology, no_answer
        self.max_tool_rounds = max_tool_rounds
        if policy is not None:
            self.brain.policy = policy
        self.last_metrics: dict | None = None
        self.turn_metrics: list[dict] = []
        self.last_reasoning = ""
        self.fillers_spoken = 0
        self.decode_ahead = decode_ahead and self.brain.session is not None
        self._ahead: TurnAhead | None = None  # the latest guess at the turn being heard
        self.read_only_tools = frozenset(read_only_tools)
        self._tool_fns: dict[str, ToolFn] = {}
        self._taken: TurnAhead | None = None  # the guess this turn took, with its tools run ahead
        self._turn_started = 0.0  # when this caller turn reached the LLM (perf_counter)
        self._turn_answered = False  # answer text went to the TTS this caller turn
        self._held_turn = False   # the filler was spoken (or is due) this caller turn
        self._filler_task: asyncio.Task | None = None
        self._register_event_handler("on_engine_metrics")
        for name, fn in (tools or {}).items():
            self.register_tool(name, fn)

    @property
    def session(self) -> Any:
        """This call's engine session (KV cache); None when the brain is a remote server."""
        return self.brain.session

    # -- settings ---------------------------------------------------------------------------
    @property
    def reasoning_effort(self) -> str:
        return str(self._settings.reasoning_effort)

    @reasoning_effort.setter
    def reasoning_effort(self, value: str) -> None:
        _check_effort(value)
        self._settings.reasoning_effort = value

    async def _update_settings(self, delta: LLMSettings) -> dict[str, Any]:
        effort = getattr(delta, "reasoning_effort", NOT_GIVEN)
        if isinstance(effort, str) and effort not in EFFORTS:
            await self.push_error(f"ignored reasoning_effort {effort!r}: must be one of {', '.join(EFFORTS)}",
                                  category=ErrorCategory.APPLICATION)
            delta.reasoning_effort = NOT_GIVEN
        return await super()._update_settings(delta)

    def can_generate_metrics(self) -> bool:
        return True

    async def cleanup(self) -> None:
        self._cancel_filler()
        await self._drop_ahead()
        await self._release_taken()
        await super().cleanup()
        await self.brain.aclose()  # the call is over: a remote brain's connections go

    # -- tools ------------------------------------------------------------------------------
    def register_tool(self, name: str, fn: ToolFn) -> None:
        """Register a plain tool function (arguments dict -> JSON-able dict) with Pipecat's
        function calling. It runs in a worker thread; errors become an error dict for the model."""

        async def handler(params: FunctionCallParams) -> None:
            result = await self.run_tool(name, fn, dict(params.arguments or {}), call_id=params.tool_call_id)
            await params.result_callback(result)

        self._tool_fns[name] = fn
        self.register_function(name, handler)

    async def run_tool(self, name: str, fn: ToolFn, args: dict, call_id: str | None = None) -> Any:
        ran_ahead = await self._result_ahead(call_id, name, args)
        if ran_ahead is not None:
            return ran_ahead[0]
        return await self._call_tool(name, fn, args)

    async def _call_tool(self, name: str, fn: ToolFn, args: dict) -> Any:
        """Run one tool in a worker thread (or as a coroutine); an error becomes an error dict."""
        if inspect.iscoroutinefunction(fn):
            task = asyncio.ensure_future(fn(args))
        else:
            task = asyncio.ensure_future(asyncio.to_thread(fn, args))
        t0 = time.perf_counter()
        try:
            result = await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception as e:
            logger.warning(f"{self}: tool {name} failed: {type(e).__name__}: {e}")
            result = {"error": f"{name} failed: {type(e).__name__}: {e}"}
        logger.debug(f"{self}: tool {name}({args}) -> {result} in {(time.perf_counter() - t0) * 1000:.0f} ms")
        return result

    # -- read-only tools run ahead ---------------------------------------------------------------
    async def _run_tools_ahead(self, calls: list[dict]) -> dict[str, Any] | None:
        """A guess's calls, run now when every one is a read-only tool; None (skipped) otherwise."""
        names = [c["function"]["name"] for c in calls]
        try:
            args = [json.loads(c["function"]["arguments"] or "{}") for c in calls]
        except ValueError:
            args = None
        if args is None or not all(n in self.read_only_tools and n in self._tool_fns for n in names):
            self._count("tools_skipped", len(calls))
            return None
        results = {}
        for c, name, a in zip(calls, names, args, strict=True):
            results[c["id"]] = await self._call_tool(name, self._tool_fns[name], a)
            self._count("tools_run")
        return results

    async def _result_ahead(self, call_id: str | None, name: str, args: dict) -> tuple[Any] | None:
        """The result of this very call, run ahead by the guess the turn took (then counted used)."""
        taken = self._taken
        if taken is None or call_id is None:
            return None
        await taken.follow_ready.wait()
        call = next((c for c in taken.tool_calls if c["id"] == call_id), None)
        if call is None or call_id not in taken.tool_results or call["function"]["name"] != name:
            return None
        try:
            same = json.loads(call["function"]["arguments"] or "{}") == args
        except ValueError:
            same = False
        if not same:
            return None
        self._count("tools_used")
        return (taken.tool_results.pop(call_id),)

    async def _release_taken(self) -> None:
        """Done with the guess this turn took: results it ran that the turn never used were wasted."""
        taken, self._taken = self._taken, None
        if taken is not None:
            await taken.cancel()
            self._count("tools_wasted", len(taken.tool_results))

    def _params_after_tools(self, messages: list[dict], params: dict[str, Any]) -> dict[str, Any]:
        return {**params, "tool_choice": choice_after(messages, params.get("tool_choice"), self.max_tool_rounds)}

    async def warm(self, context: LLMContext) -> None:
        """Start prefilling the system prompt and tools of `context` (the call's, before anyone
        spoke) into the call's KV cache, so the first turn prefills only the caller's words."""
        messages, tools, _ = await self._request(context)
        self.brain.warm(messages, tools=tools, reasoning_effort=self.reasoning_effort)

    async def speculate(self, context: LLMContext, heard: str) -> None:
        """Start a speculative prefill of the turn `context` will get if the caller's words so far
        (`heard`, joined as the user aggregator joins them) end it; with `decode_ahead`, decode that
        turn too, held until the turn is decided (`_stream` takes it when the turn is this guess)."""
        messages, tools, choice = await self._request(context, heard=heard)
        if self.decode_ahead and getattr(self.brain, "backlogged", False):
            self._count("skipped")  # other calls' turns wait for the engine: a guess must not delay them
            return
        if not self.decode_ahead:
            self.brain.prefill_ahead(messages, tools=tools, reasoning_effort=self.reasoning_effort)
            return
        if self._ahead is not None:
            self._count("decode_wasted")  # the caller said more: the guess before this one is dropped
            self._count("tools_wasted", len(self._ahead.tool_results))
        run_tools = self._run_tools_ahead if self.read_only_tools else None
        self._ahead = TurnAhead(self.brain, messages, self._turn_kwargs(tools, choice), after=self._ahead,
                                run_tools=run_tools, params_after_tools=self._params_after_tools)
        self._count("decoded")

    def _count(self, what: str, n: int = 1) -> None:
        stats = getattr(self.brain, "speculation", None)
        if stats is not None and n:
            setattr(stats, what, getattr(stats, what) + n)

    async def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._count("decode_wasted")
            await ahead.cancel()
            self._count("tools_wasted", len(ahead.tool_results))

    # -- the filler ----------------------------------------------------------------------------
    def _arm_filler(self) -> None:
        """A tool call is under way: the filler is due at `filler_after_s` after the turn reached
        the LLM, unless answer text comes first. Spoken now when that moment has passed."""
        if not self.filler or self._held_turn or self._turn_answered:
            return
        self._held_turn = True
        delay = self._turn_started + self.filler_after_s - time.perf_counter()
        self._filler_task = asyncio.ensure_future(self._filler_after(max(0.0, delay)))

    async def _filler_after(self, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        if not self._turn_answered:
            self.fillers_spoken += 1
            await self.push_frame(TTSSpeakFrame(self.filler, append_to_context=False))

    def _cancel_filler(self) -> None:
        task, self._filler_task = self._filler_task, None
        if task is not None and not task.done():
            task.cancel()

    async def _push_answer_text(self, text: str) -> None:
        """Answer text to the TTS: the turn is answered, so a filler not yet spoken never is."""
        self._turn_answered = True
        self._cancel_filler()
        await self._push_llm_text(text)

    # -- frames -----------------------------------------------------------------------------
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._cancel_filler()  # the caller spoke over the wait: nothing left to hold the line for
        if isinstance(frame, LLMContextFrame):
            await self._respond(frame.context)
        else:
            await self.push_frame(frame, direction)

    async def _respond(self, context: LLMContext) -> None:
        await self.push_frame(LLMFullResponseStartFrame())
        await self.start_processing_metrics()
        try:
            await self._generate(context)
        except Exception as e:
            # One failed turn: report it (non-fatal, the service stays usable) and apologise.
            caller_fault = isinstance(e, BrainError) and e.caller_fault
            category = ErrorCategory.APPLICATION if caller_fault else ErrorCategory.SERVER
            where = "LLM server" if self.brain.session is None else "engine"
            await self.push_error(error_msg=f"{where} turn failed: {e}", exception=e, category=category)
            if self.apology:
                await self._push_answer_text(self.apology)
        finally:
            await self.stop_processing_metrics()
            await self.push_frame(LLMFullResponseEndFrame())

    async def _generate(self, context: LLMContext) -> None:
        messages, tools, tool_choice = await self._request(context)
        if not messages or messages[-1]["role"] == "user":
            # A new caller turn (a round after a tool result is the same turn).
            await self._release_taken()
            self._cancel_filler()
            self._turn_started, self._turn_answered, self._held_turn = time.perf_counter(), False, False
        kwargs = self._turn_kwargs(tools, tool_choice)
        await self.start_ttfb_metrics()
        result, answered = await self._stream(messages, kwargs)
        await self._report(result)
        if result.tool_calls:
            self._arm_filler()  # (a call the policy wrote opened no "tool_call" event while decoding)
            await self.stop_ttfat_metrics()  # the call is what the caller gets from this turn
            await self.run_function_calls([
                FunctionCallFromLLM(function_name=c["function"]["name"], tool_call_id=c["id"],
                                    arguments=json.loads(c["function"]["arguments"] or "{}"), context=context)
                for c in result.tool_calls])
        elif not answered and self.no_answer:
            # Nothing speakable came out (only reasoning, or a tool call that failed validation):
            # silence on a phone line is worse than asking again.
            if result.tool_errors:
                logger.warning(f"{self}: invalid tool call(s): {result.tool_errors}")
            await self._push_answer_text(self.no_answer)

    def _turn_kwargs(self, tools: list[dict] | None, tool_choice: Any) -> dict[str, Any]:
        return dict(tools=tools, tool_choice=tool_choice, reasoning_effort=self.reasoning_effort,
                    max_tokens=int(self._settings.max_tokens or _DEFAULTS.max_tokens),
                    temperature=float(self._settings.temperature or 0.0))

    async def _request(self, context: LLMContext, heard: str | None = None) -> tuple[list[dict], list[dict] | None, Any]:
        """The engine messages, tools and tool_choice of `context` (with the caller's words `heard`
        as one more user message, for a guess at the turn being heard)."""
        params = await self.get_llm_adapter().get_llm_invocation_params(
            context, system_instruction=self._settings.system_instruction or None, convert_developer_to_user=True)
        messages = to_engine_messages(params["messages"])
        if heard is not None:
            messages.append({"role": "user", "content": heard})
        tools = list(params["tools"]) if openai_is_given(params["tools"]) else None
        choice = params["tool_choice"] if openai_is_given(params["tool_choice"]) else None
        if tools:
            choice = choice_after(messages, choice, self.max_tool_rounds)
        return messages, tools or None, (choice if tools else None)

    async def _stream(self, messages: list[dict], kwargs: dict) -> tuple[TurnResult, bool]:
        """One brain turn; answer text is pushed as it is committed. Cancelling the task (barge-in)
        closes the stream, which stops the model after its current pass. A guess decoded ahead with
        exactly these messages and parameters is the turn's stream (voice_agent/brain/ahead.py)."""
        result, answered, first = None, False, True
        speakable = SpeakableFilter()
        if self._ahead is None and self._taken is not None:
            # The round after the tools the taken guess ran: its answer may be decoding already.
            await self._taken.follow_ready.wait()
            self._ahead, self._taken.follow = self._taken.follow, None
            await self._release_taken()
        ahead, ahead_ms = self._ahead, None
        if ahead is not None and ahead.matches(messages, kwargs):
            self._ahead = None
            self._count("answers_ahead_used" if ahead.after_tools else "decode_used")
            ahead_ms = round(ahead.ahead_ms(), 1)
        else:
            ahead = None
            await self._drop_ahead()  # a guess at other words (or none): the turn decodes its own
        source = ahead.events() if ahead is not None else self.brain.turn(messages, **kwargs)
        try:
            async with contextlib.aclosing(source) as events:
                async for item in events:
                    if item.type == "done" and item.result is not None and ahead_ms is not None:
                        item.result.metrics["decoded_ahead_ms"] = ahead_ms  # started this long before the turn
                    result, answered, first = await self._on_event(item, result, answered, first, speakable)
        finally:
            if ahead is not None and ahead.consumed:
                self._taken = ahead  # its read-only calls may have run ahead, and their answer be decoding
            elif ahead is not None:
                await ahead.cancel()  # a barge-in mid-answer stops the decode it was reading
        if result is None:
            raise BrainError(BrainError.BAD_RESPONSE, "the LLM stream ended without a result")
        return result, answered

    async def _on_event(self, item: Any, result: TurnResult | None, answered: bool, first: bool,
                        speakable: SpeakableFilter) -> tuple[TurnResult | None, bool, bool]:
        """One event of a turn: the first token's metrics, the filler at a call, speakable answer
        text to the TTS, the result kept."""
        if item.type in ("reasoning", "answer") and first:
            first = False
            await self.stop_ttfb_metrics()
        if item.type in ("tool_call", "queued") and not answered:
            # Decoding the call and answering from its result take a while, as does a turn waiting
            # behind other calls' turns: the filler is due if the answer is late.
            self._arm_filler()
        elif item.type == "answer" and item.text:
            text = speakable.feed(item.text)
            text = text if answered else text.lstrip()
            if text.strip() or (answered and text):
                answered = True
                await self._push_answer_text(text)
        elif item.type == "done":
            result = item.result  # reasoning is logged in _report, never pushed
        return result, answered, first

    async def _report(self, result: TurnResult) -> None:
        m = dict(result.metrics)
        m["finish_reason"] = result.finish_reason
        m["tool_calls"] = [c["function"]["name"] for c in result.tool_calls]
        if result.reasoning:
            m["reasoning"] = result.reasoning  # the note (never spoken): kept with the round's numbers
        self.last_metrics = m
        self.turn_metrics.append(m)
        self.last_reasoning = result.reasoning
        if result.reasoning:
            logger.info(f"{self}: reasoning (not spoken, {m.get('reasoning_tokens')} tokens): {result.reasoning!r}")
        logger.debug(f"{self}: turn metrics {m}")
        await self.push_frame(EngineMetricsFrame(metrics=m))
        await self._call_event_handler("on_engine_metrics", m)
        await self.start_llm_usage_metrics(LLMTokenUsage(
            prompt_tokens=m.get("prompt_tokens") or 0, completion_tokens=m.get("completion_tokens") or 0,
            total_tokens=(m.get("prompt_tokens") or 0) + (m.get("completion_tokens") or 0),
            cache_read_input_tokens=m.get("cached_tokens"), reasoning_tokens=m.get("reasoning_tokens")))


def tools_schema(tools: list[dict]) -> ToolsSchema:
    """OpenAI-shaped tool dicts (as scenarios hold them) -> Pipecat's ToolsSchema for LLMContext."""
    schemas = []
    for t in tools:
        fn = t.get("function", t)
        params = fn.get("parameters") or {}
        schemas.append(FunctionSchema(name=fn["name"], description=fn.get("description", ""),
                                      properties=params.get("properties") or {}, required=params.get("required") or []))
    return ToolsSchema(standard_tools=schemas)


def _check_effort(value: str) -> None:
    if value not in EFFORTS:
        raise ValueError(f"reasoning_effort must be one of {', '.join(EFFORTS)}; got {value!r}")


def to_engine_messages(messages: list[Any]) -> list[dict]:
    """OpenAI chat messages (as Pipecat's adapter produces them) -> the engine's message dicts:
    text-only content, assistant tool_calls and tool results kept, anything else dropped."""
    out: list[dict] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        content = _text(m.get("content"))
        if role in ("system", "user"):
            out.append({"role": role, "content": content})
        elif role == "assistant":
            msg: dict = {"role": "assistant", "content": content}
            calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict) and c.get("function")]
            if calls:
                msg["tool_calls"] = [{"id": c.get("id", ""), "type": "function", "function": {
                    "name": c["function"].get("name", ""),
                    "arguments": _json_text(c["function"].get("arguments", "{}"))}} for c in calls]
            if content or calls:
                out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "content": content, "tool_call_id": str(m.get("tool_call_id", ""))})
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return _json_text(content)


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def choice_after(messages: list[dict], choice: Any, max_tool_rounds: int) -> Any:
    """The tool_choice of a round: a forced call answers the caller, so after its result the model
    speaks ("auto"); past `max_tool_rounds` calls since the caller spoke, no more ("none")."""
    if messages and messages[-1]["role"] == "tool" and choice not in (None, "auto", "none"):
        choice = "auto"
    if _tool_rounds_since_user(messages) >= max_tool_rounds:
        choice = "none"  # stop a model that keeps calling tools instead of answering
    return choice


def _tool_rounds_since_user(messages: list[dict]) -> int:
    n = 0
    for m in reversed(messages):
        if m["role"] == "user":
            break
        if m["role"] == "assistant" and m.get("tool_calls"):
            n += 1
    return n
