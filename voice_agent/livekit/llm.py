"""`EngineLLM`: a LiveKit Agents `llm.LLM` plugin backed by the in-process diffusion engine (or,
given a `RemoteBrain`, by an OpenAI-compatible server: `livekit-worker --llm-url`).

    from livekit.agents import AgentSession
    from voice_agent.livekit import EngineLLM

    session = AgentSession(llm=EngineLLM("default", reasoning_effort="low"), stt=..., tts=..., vad=...)

What it does, per `chat()`:
- converts the ChatContext (messages, function calls and their outputs) to OpenAI messages and
  the FunctionTools to OpenAI tool schemas, with livekit's own provider-format helpers;
- runs the turn on the call's brain (voice_agent/brain: the engine in a worker thread, one
  policy for barge-in, trimming and sessions, shared with the Pipecat service) and streams ANSWER
  text as `ChatChunk(delta=ChoiceDelta(content=...))`. Reasoning is never put in `content` (it would be
  spoken); it is logged at DEBUG and reported in the `engine_metrics` event;
- sends each tool call as a `FunctionToolCall`, then a last chunk carrying `CompletionUsage`;
- keeps one engine `Session` per EngineLLM, so the turns of one call reuse the KV cache (also
  after a barge-in). Create one EngineLLM per AgentSession (per room / call); they can share one
  `Engine`.

Metrics: livekit's `LLMMetrics.ttft` (via `session.on("metrics_collected")`) is the time to the
first chunk with content, which for us is the first ANSWER text, i.e. our `ttfat`. The engine's
own numbers (`ttft_ms` counts thinking tokens too, `ttfat_ms`, prefill/decode split, cached
tokens, tokens per forward) arrive as `EngineTurnMetrics` in `llm.on("engine_metrics", cb)`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.agents import APIConnectionError, APIStatusError, APITimeoutError, llm, utils
from livekit.agents.llm import ToolChoice
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions, NotGivenOr

from voice_agent.brain import Brain, BrainError, TurnResult
from voice_agent.brain.engine_bridge import EngineBrain
from voice_agent.config import CallOptions
from voice_agent.engine_host import shared_engine
from voice_agent.services.speakable import SpeakableFilter

logger = logging.getLogger("voice_agent.livekit.llm")

_DEFAULTS = CallOptions()
TOOL_ERROR_RETRIES = 1  # a turn that produced only invalid tool calls is retried once, with the error
ENGINE_KWARGS = ("reasoning_effort", "max_tokens", "temperature", "seed", "stop")  # extra_kwargs we accept
__all__ = ["EngineLLM", "EngineLLMStream", "EngineTurnMetrics", "shared_engine"]


@dataclass
class EngineTurnMetrics:
    """The engine's own numbers for one `chat()` (seconds, like livekit's metrics)."""

    request_id: str
    ttft: float | None  # first token of any kind, thinking included
    ttfat: float | None  # first answer token: what a caller waits for
    reasoning: str  # never spoken; here so it can be logged or inspected
    tool_errors: list[str]
    metrics: dict = field(default_factory=dict)  # the engine's raw metrics dict (milliseconds)


class EngineLLM(llm.LLM[Literal["engine_metrics"]]):
    def __init__(
        self,
        engine: Any = "default",
        *,
        reasoning_effort: str = "low",
        max_tokens: int = _DEFAULTS.max_tokens,
        temperature: float = _DEFAULTS.temperature,
        tool_choice: NotGivenOr[ToolChoice] = NOT_GIVEN,
        session: Any = None,
    ) -> None:
        """`engine`: an Engine, a model name for `Engine.load` ("default", "smollm2-base", a folder),
        or a Brain (`voice_agent.brain.make_brain`, e.g. a RemoteBrain on an OpenAI-compatible
        server). `tool_choice` is the default for every turn (a `chat(tool_choice=...)` overrides it)."""
        super().__init__()
        if isinstance(engine, Brain):
            self._brain: Brain = engine
        else:
            self._brain = EngineBrain(shared_engine(engine) if isinstance(engine, str) else engine, session)
        self._opts = {"reasoning_effort": reasoning_effort, "max_tokens": max_tokens, "temperature": temperature}
        self._tool_choice = tool_choice

    @property
    def model(self) -> str:
        return self._brain.model_name

    @property
    def provider(self) -> str:
        return "voice-agent"

    @property
    def brain(self) -> Brain:
        return self._brain

    @property
    def engine(self) -> Any:
        """The in-process engine (None when the brain is a remote server)."""
        return getattr(self._brain, "engine", None)

    @property
    def session(self) -> Any:
        """The engine session (KV cache) this LLM's turns share (None when remote)."""
        return self._brain.session

    def warm(self, instructions: str, tools: list[llm.Tool]) -> None:
        """Start prefilling the agent's instructions and tools into the call's KV cache (e.g. while
        the greeting plays), so the first turn prefills only the caller's words."""
        self._brain.warm([{"role": "system", "content": instructions}], tools=tools_to_schemas(tools) or None,
                         reasoning_effort=self._opts["reasoning_effort"])

    async def aclose(self) -> None:
        await self._brain.aclose()  # a remote brain's connections
        await super().aclose()

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> EngineLLMStream:
        # parallel_tool_calls is accepted and ignored: the engine returns every call it parsed.
        kwargs = dict(self._opts)
        for k, v in (extra_kwargs or {}).items() if utils.is_given(extra_kwargs) else ():
            if k not in ENGINE_KWARGS:
                raise ValueError(f"EngineLLM.chat: unknown extra_kwargs key {k!r}; known: {', '.join(ENGINE_KWARGS)}")
            kwargs[k] = v
        choice = tool_choice if utils.is_given(tool_choice) else self._tool_choice
        if utils.is_given(choice):
            kwargs["tool_choice"] = choice
        return EngineLLMStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options,
                               engine_kwargs=kwargs)


class EngineLLMStream(llm.LLMStream):
    def __init__(self, llm_: EngineLLM, *, chat_ctx: llm.ChatContext, tools: list[llm.Tool],
                 conn_options: APIConnectOptions, engine_kwargs: dict) -> None:
        super().__init__(llm_, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._engine_llm = llm_
        self._engine_kwargs = engine_kwargs
        self.result: TurnResult | None = None  # the last result, once the turn is done

    async def _run(self) -> None:
        request_id = utils.shortuuid("engine_")
        messages = chat_ctx_to_messages(self._chat_ctx)
        schemas = tools_to_schemas(self._tools)
        kwargs = dict(self._engine_kwargs, tools=schemas or None)
        if not schemas:
            kwargs.pop("tool_choice", None)  # nothing to choose from: plain answer
        streamed_text = False
        for attempt in range(TOOL_ERROR_RETRIES + 1):
            result = await self._stream_turn(request_id, messages, kwargs)
            streamed_text = streamed_text or bool(result.text)
            if result.tool_calls or streamed_text or not result.tool_errors or attempt == TOOL_ERROR_RETRIES:
                break
            # Only invalid tool calls and nothing to say: tell the model what was wrong, once.
            logger.warning("invalid tool call, retrying with the error: %s", "; ".join(result.tool_errors))
            messages = [*messages, {"role": "system", "content": "Your tool call was rejected: "
                                    + "; ".join(result.tool_errors)
                                    + ". Call the tool again with valid arguments, or answer the caller."}]
        self.result = result
        for call in result.tool_calls:
            fn = call["function"]
            self._event_ch.send_nowait(llm.ChatChunk(id=request_id, delta=llm.ChoiceDelta(
                role="assistant", tool_calls=[llm.FunctionToolCall(
                    name=fn["name"], arguments=fn["arguments"], call_id=call["id"])])))
        m = result.metrics
        prompt, completion = int(m.get("prompt_tokens") or 0), int(m.get("completion_tokens") or 0)
        self._event_ch.send_nowait(llm.ChatChunk(id=request_id, usage=llm.CompletionUsage(
            completion_tokens=completion, prompt_tokens=prompt, prompt_cached_tokens=int(m.get("cached_tokens") or 0),
            reasoning_tokens=int(m.get("reasoning_tokens") or 0), total_tokens=prompt + completion)))
        self._engine_llm.emit("engine_metrics", EngineTurnMetrics(
            request_id=request_id, ttft=_seconds(m.get("ttft_ms")), ttfat=_seconds(m.get("ttfat_ms")),
            reasoning=result.reasoning, tool_errors=list(result.tool_errors), metrics=dict(m)))

    async def _stream_turn(self, request_id: str, messages: list[dict], kwargs: dict) -> TurnResult:
        """One brain turn; answer text goes out as chunks as soon as each block commits."""
        speakable = SpeakableFilter()  # this plugin's text goes to a TTS: no markup
        try:
            async with contextlib.aclosing(self._engine_llm.brain.turn(messages, **kwargs)) as events:
                async for ev in events:
                    if ev.type == "answer" and ev.text and (text := speakable.feed(ev.text)):
                        self._event_ch.send_nowait(llm.ChatChunk(
                            id=request_id, delta=llm.ChoiceDelta(role="assistant", content=text)))
                    elif ev.type == "reasoning":
                        logger.debug("reasoning [%s]: %s", request_id, ev.text)
                    elif ev.type == "done" and ev.result is not None:
                        if ev.result.reasoning:
                            logger.info("reasoning [%s] (not spoken): %s", request_id, ev.result.reasoning)
                        return ev.result
        except BrainError as e:
            raise livekit_error(e) from None
        raise APIStatusError("the LLM stream ended without a result", retryable=False)


def livekit_error(e: BrainError) -> Exception:
    """A failed turn as the APIError livekit's LLMStream expects (it reports it and the session
    goes on; a caller-side error is not retried)."""
    if e.code == BrainError.UNREACHABLE:
        return APIConnectionError(str(e), retryable=False)
    if e.code == BrainError.TIMEOUT:
        return APITimeoutError(str(e), retryable=False)
    status = e.status or (400 if e.caller_fault else 500)
    return APIStatusError(f"{'engine rejected the request' if e.caller_fault else 'LLM turn failed'}: {e}",
                          status_code=status, retryable=False)


def chat_ctx_to_messages(chat_ctx: llm.ChatContext) -> list[dict]:
    """ChatContext -> OpenAI chat messages the engine accepts (system/user/assistant/tool)."""
    raw, _ = chat_ctx.to_provider_format("openai")
    out: list[dict] = []
    for m in raw:
        role = "system" if m.get("role") == "developer" else m.get("role")
        msg: dict = {"role": role, "content": _text(m.get("content"))}
        if m.get("tool_calls"):
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": dict(c["function"])}
                                 for c in m["tool_calls"]]
            msg["content"] = msg["content"] or None
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "")
        out.append(msg)
    return out


def tools_to_schemas(tools: list[llm.Tool]) -> list[dict]:
    """FunctionTools (typed or raw) -> OpenAI tool schemas. Non-strict: a small model reads plain
    optional fields better than strict mode's nullable unions."""
    return llm.ToolContext(tools).parse_function_tools("openai", strict=False) if tools else []


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # a list of parts (images are dropped: the engine reads text only)
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0
