"""`RemoteBrain`: a call's turns sent to an OpenAI-compatible server (`voice-agent serve` on
another machine, vLLM, SGLang) with the `openai` SDK: streaming chat.completions with tools.

- answer text streams from `content` deltas; reasoning from `reasoning_content` (or vLLM's
  `reasoning`) deltas, never spoken;
- tool calls are gathered from their deltas and checked (known tool, JSON-object arguments); a bad
  one becomes a `tool_errors` entry, as the in-process engine reports it;
- metrics are measured here, from the request to the stream's first token / first answer token
  (network included: what the caller waits for); a server that sends our `metrics` extension
  (ours does) adds its prefill/decode numbers, with its own timings as `server_ttfat_ms` etc.;
- the call is named with `X-Session-Id`, so our server keeps its KV cache between turns;
- a server that is down, slow or answers garbage fails the turn with a BrainError, not the call.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from loguru import logger

from voice_agent.brain.base import Brain
from voice_agent.brain.types import BrainError, TurnEvent, TurnResult
from voice_agent.config import EFFORT_NAMES

API_KEY_ENV = "VOICE_AGENT_API_KEY"
CONNECT_TIMEOUT_S = 5.0
_OWN = ("ttft_ms", "ttfat_ms", "total_ms")  # measured here; a server's own are kept as server_<name>


def api_base(url: str) -> str:
    """'http://host:8000' -> 'http://host:8000/v1' (where OpenAI-compatible servers answer); a URL
    with a path is used as given."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--llm-url must be an http(s) URL like http://127.0.0.1:8000/v1; got {url!r}")
    return url.rstrip("/") + ("/v1" if parts.path in ("", "/") else "")


class RemoteBrain(Brain):
    def __init__(self, url: str, model: str | None = None, *, api_key: str | None = None,
                 timeout_s: float = 30.0, session_id: str | None = None) -> None:
        super().__init__()
        self.base_url = api_base(url)
        self._model = model
        self._api_key = api_key or os.environ.get(API_KEY_ENV) or "none"
        self._timeout_s = timeout_s
        self.session_id = session_id or f"call-{uuid.uuid4().hex[:16]}"
        self._send_effort = True  # cleared when the server rejects reasoning_effort (vLLM knows fewer names)
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The call's AsyncOpenAI client, opened on first use (and again after `aclose`)."""
        if self._client is None or self._client.is_closed():
            from openai import AsyncOpenAI, Timeout  # the SDK's own Timeout: its HTTP library is not httpx

            self._client = AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key,
                max_retries=0,  # a caller is waiting: fail this turn now rather than back off and retry
                timeout=Timeout(self._timeout_s, connect=min(CONNECT_TIMEOUT_S, self._timeout_s)))
        return self._client

    @property
    def model_name(self) -> str:
        return self._model or self.base_url

    async def _resolve_model(self) -> str:
        if self._model is None:
            try:
                models = await self.client.models.list()
            except Exception as e:
                raise api_error(e, self.base_url) from None
            if not models.data:
                raise BrainError(BrainError.BAD_RESPONSE, f"{self.base_url}/models lists no model; pass --llm-model")
            self._model = models.data[0].id
        return self._model

    async def _attempt(self, messages: list[dict], params: dict) -> AsyncIterator[TurnEvent]:
        t0 = time.perf_counter()
        model = await self._resolve_model()
        while True:
            try:
                stream = await self.client.chat.completions.create(**self._request(model, messages, params))
                break
            except Exception as e:
                err = api_error(e, self.base_url)
                if (self._send_effort and err.caller_fault and "reasoning_effort" in err.message
                        and params.get("reasoning_effort") in EFFORT_NAMES):  # one of ours the server does not know
                    logger.warning(f"{self.base_url} rejects reasoning_effort ({err.message}); sending none from now on")
                    self._send_effort = False
                    continue
                raise err from None
        acc = _Accumulator(t0, set(_tool_names(params.get("tools"))))
        try:
            async with stream:
                async for chunk in stream:
                    for ev in acc.feed(chunk):
                        yield ev
        except BrainError:
            raise
        except Exception as e:
            raise api_error(e, self.base_url) from None
        metrics = acc.metrics()
        metrics.setdefault("reasoning_effort", params.get("reasoning_effort"))  # the server's own, if it says
        metrics.setdefault("model", model)
        metrics["llm_url"] = self.base_url
        yield TurnEvent("done", "", metrics["total_ms"], acc.result(metrics))

    def _request(self, model: str, messages: list[dict], params: dict) -> dict:
        req: dict[str, Any] = {
            "model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "extra_headers": {"X-Session-Id": self.session_id},
        }
        for name in ("max_tokens", "temperature", "seed", "stop"):
            if params.get(name) is not None:
                req[name] = params[name]
        if params.get("tools"):
            req["tools"] = params["tools"]
            if params.get("tool_choice") is not None:
                req["tool_choice"] = params["tool_choice"]
        if self._send_effort and params.get("reasoning_effort"):
            req["reasoning_effort"] = params["reasoning_effort"]
        return req

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


class _Accumulator:
    """Turns a chat.completion.chunk stream into events and, at the end, one TurnResult."""

    def __init__(self, t0: float, tool_names: set[str]) -> None:
        self.t0, self.tool_names = t0, tool_names
        self.text, self.reasoning = "", ""
        self.calls: dict[int, dict] = {}
        self.finish: str | None = None
        self.ttft_ms: float | None = None
        self.ttfat_ms: float | None = None
        self.usage: Any = None
        self.server_metrics: dict = {}
        self.server_tool_errors: list[str] = []

    def _ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def feed(self, chunk: Any) -> list[TurnEvent]:
        extra = chunk.model_extra or {}
        if isinstance(extra.get("metrics"), dict):
            self.server_metrics = extra["metrics"]
        if isinstance(extra.get("tool_errors"), list):
            self.server_tool_errors = [str(e) for e in extra["tool_errors"]]
        if chunk.usage is not None:
            self.usage = chunk.usage
        events = []
        for choice in chunk.choices or []:
            d = choice.delta
            if choice.finish_reason:
                self.finish = choice.finish_reason
            if d is None:
                continue
            reasoning = getattr(d, "reasoning_content", None) or (d.model_extra or {}).get("reasoning_content") \
                or (d.model_extra or {}).get("reasoning")
            if reasoning:
                self.reasoning += reasoning
                events.append(self._event("reasoning", reasoning))
            if d.content:
                self.text += d.content
                if self.ttfat_ms is None:
                    self.ttfat_ms = self._ms()
                events.append(self._event("answer", d.content))
            for tc in d.tool_calls or []:
                c = self.calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                c["id"] = tc.id or c["id"]
                if tc.function is not None:
                    c["name"] += tc.function.name or ""
                    c["arguments"] += tc.function.arguments or ""
                if self.ttft_ms is None:
                    self.ttft_ms = self._ms()
        return events

    def _event(self, kind: str, text: str) -> TurnEvent:
        t = self._ms()
        if self.ttft_ms is None:
            self.ttft_ms = t
        return TurnEvent(kind, text, t)

    def metrics(self) -> dict:
        if self.finish is None:
            raise BrainError(BrainError.BAD_RESPONSE, "the server's stream ended before the answer was finished "
                             f"({len(self.text)} characters in); is it an OpenAI-compatible chat server?")
        m: dict[str, Any] = {}
        for k, v in self.server_metrics.items():
            m[f"server_{k}" if k in _OWN else k] = v
        m.update(ttft_ms=_round(self.ttft_ms), ttfat_ms=_round(self.ttfat_ms), total_ms=round(self._ms(), 2))
        u = self.usage
        if u is not None:
            m["prompt_tokens"], m["completion_tokens"] = u.prompt_tokens, u.completion_tokens
            cached = getattr(u.prompt_tokens_details, "cached_tokens", None)
            reasoning = getattr(u.completion_tokens_details, "reasoning_tokens", None)
            if cached is not None:
                m["cached_tokens"] = cached
            if reasoning is not None:
                m["reasoning_tokens"] = reasoning
        return m

    def result(self, metrics: dict) -> TurnResult:
        calls, errors = [], list(self.server_tool_errors)
        for i in sorted(self.calls):
            c = self.calls[i]
            problem = _check_call(c, self.tool_names)
            if problem:
                errors.append(problem)
                continue
            calls.append({"id": c["id"] or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                          "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}})
        finish = "tool_calls" if calls else ("stop" if self.finish == "tool_calls" else self.finish or "stop")
        return TurnResult(text=self.text.strip(), reasoning=self.reasoning.strip(), tool_calls=calls,
                          tool_errors=errors, finish_reason=finish, metrics=metrics)


def _check_call(c: dict, tool_names: set[str]) -> str | None:
    if c["name"] not in tool_names:
        return f"the model called {c['name']!r}, which is not one of the tools ({', '.join(sorted(tool_names))})"
    try:
        args = json.loads(c["arguments"] or "{}")
    except ValueError as e:
        return f"{c['name']}: arguments are not JSON ({e}): {c['arguments'][:200]!r}"
    if not isinstance(args, dict):
        return f"{c['name']}: arguments must be a JSON object; got {c['arguments'][:200]!r}"
    return None


def _tool_names(tools: list[dict] | None) -> list[str]:
    return [(t.get("function") or t).get("name", "") for t in tools or []]


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def api_error(e: Exception, url: str) -> BrainError:
    """An `openai` SDK (or stream parsing) exception as a BrainError that says what to check."""
    import openai

    if isinstance(e, BrainError):
        return e
    if isinstance(e, openai.APITimeoutError):
        return BrainError(BrainError.TIMEOUT, f"the LLM server at {url} did not answer in time")
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e.__context__
        why = f": {type(cause).__name__}: {cause}" if cause else ""
        return BrainError(BrainError.UNREACHABLE, f"cannot reach the LLM server at {url}{why}; is it running, "
                          "and is --llm-url right?")
    if isinstance(e, openai.APIStatusError):
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
        code, message = err.get("code"), err.get("message") or e.message
        if code == "context_length_exceeded" or "context length" in str(message) or "context too long" in str(message):
            return BrainError(BrainError.CONTEXT_TOO_LONG, f"the LLM server at {url}: {message}", status=e.status_code)
        if e.status_code in (401, 403):
            return BrainError(BrainError.SERVER_ERROR, f"the LLM server at {url} refused the key ({e.status_code}: "
                              f"{message}); pass --llm-api-key or set {API_KEY_ENV}", status=e.status_code)
        kind = BrainError.INVALID_REQUEST if e.status_code in (400, 404, 422) else BrainError.SERVER_ERROR
        return BrainError(kind, f"the LLM server at {url} answered {e.status_code}: {message}", status=e.status_code)
    if isinstance(e, openai.APIError):  # an error event inside the stream
        return BrainError(BrainError.SERVER_ERROR, f"the LLM server at {url} failed mid-answer: {e.message}")
    return BrainError(BrainError.BAD_RESPONSE, f"the LLM server at {url} sent something that is not a chat "
                      f"completion stream: {type(e).__name__}: {e}")
