"""OpenAI-compatible HTTP API over the engine, with continuous batching across calls.

Routes: POST /v1/chat/completions (JSON or SSE stream), GET /v1/models, GET /health.
A request names its call with the `X-Session-Id` header, `prompt_cache_key` or `user`; that call's
KV cache is then kept between turns (a bounded LRU of calls). Errors use OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.api import ChatResult, Engine, EngineInputError, Session
from engine.config import DEFAULT_MAX_TOKENS, ENV, engine_config
from engine.runtime.effort import EFFORTS
from engine.serve.scheduler import Rejected, RequestCancelled, Scheduler, Ticket

API_KEY_ENV = ENV["api_key"]
MAX_BODY_BYTES = 2 * 1024 * 1024
EFFORT_ALIASES = {"none": "instant", "minimal": "instant"}  # OpenAI's names for "no thinking"
DISCONNECT_POLL_S = 0.5


class APIError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


@dataclass
class ServerConfig:
    model_id: str = "default"
    api_key: str | None = None
    max_batch: int = 8
    max_queue: int = 64
    queue_timeout_s: float = 30.0
    max_sessions: int = 32
    default_effort: str = "low"
    default_max_tokens: int = DEFAULT_MAX_TOKENS


class SessionStore:
    """A bounded LRU of calls' sessions. An evicted call simply starts its next turn uncached."""

    def __init__(self, engine: Engine, max_sessions: int) -> None:
        self.engine, self.max_sessions = engine, max_sessions
        self._items: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def get(self, key: str) -> Session:
        with self._lock:
            s = self._items.get(key)
            if s is None:
                s = self._items[key] = self.engine.session()
            self._items.move_to_end(key)
            while len(self._items) > self.max_sessions:
                self._items.popitem(last=False)
                self.evictions += 1
            return s

    def __len__(self) -> int:
        return len(self._items)


# -- request bodies ----------------------------------------------------------------------------
@dataclass
class ChatParams:
    messages: list
    stream: bool
    include_usage: bool
    kwargs: dict
    session_key: str | None


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def _opt(body: dict, name: str, types: tuple, what: str):
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) and bool not in types:
        raise _bad(f"'{name}' must be {what}; got a boolean", name)
    if not isinstance(v, types):
        raise _bad(f"'{name}' must be {what}; got {type(v).__name__}", name)
    return v


def parse_chat_body(raw: bytes, cfg: ServerConfig, session_header: str | None) -> ChatParams:
    """Check the JSON body's shape and types; the engine checks the contents (roles, schemas, sizes)."""
    try:
        body = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _bad(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    if "messages" not in body:
        raise _bad("'messages' is required", "messages")
    if not isinstance(body["messages"], list):
        raise _bad("'messages' must be a list of message objects", "messages")
    _opt(body, "model", (str,), "a string")
    stream = bool(_opt(body, "stream", (bool,), "a boolean"))
    so = _opt(body, "stream_options", (dict,), "an object") or {}
    include_usage = bool(so.get("include_usage", False))
    n = _opt(body, "n", (int,), "an integer")
    if n not in (None, 1):
        raise _bad("only n=1 is supported", "n")
    if _opt(body, "logprobs", (bool,), "a boolean"):
        raise _bad("logprobs are not supported", "logprobs")
    rf = _opt(body, "response_format", (dict,), "an object")
    if rf is not None and rf.get("type", "text") != "text":
        raise _bad("only response_format {'type': 'text'} is supported", "response_format")
    for name in ("top_p", "presence_penalty", "frequency_penalty"):
        _opt(body, name, (int, float), "a number")  # accepted and ignored, as many clients send them
    max_tokens = _opt(body, "max_completion_tokens", (int,), "an integer")
    if max_tokens is None:
        max_tokens = _opt(body, "max_tokens", (int,), "an integer")
    temperature = _opt(body, "temperature", (int, float), "a number")
    seed = _opt(body, "seed", (int,), "an integer")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str | list):
        raise _bad("'stop' must be a string or a list of strings", "stop")
    tools = _opt(body, "tools", (list,), "a list of tool objects")
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, str | dict):
        raise _bad("'tool_choice' must be a string or an object", "tool_choice")
    effort = _opt(body, "reasoning_effort", (str,), "a string") or cfg.default_effort
    effort = EFFORT_ALIASES.get(effort, effort)
    if effort not in EFFORTS:
        raise _bad(f"reasoning_effort must be one of {', '.join(EFFORTS)}; got {body['reasoning_effort']!r}",
                   "reasoning_effort")
    key = session_header
    for name in ("prompt_cache_key", "user"):
        key = key or _opt(body, name, (str,), "a string")
    if key is not None and not 1 <= len(key) <= 256:
        raise _bad("a session id (X-Session-Id, prompt_cache_key or user) must be 1-256 characters", "user")
    kwargs = {
        "tools": tools,
        "tool_choice": tool_choice,
        "reasoning_effort": effort,
        "max_tokens": cfg.default_max_tokens if max_tokens is None else max_tokens,
        "stop": stop,
        "temperature": 0.0 if temperature is None else temperature,
        "seed": seed,
    }
    order = _opt(body, "order", (str,), "a string")  # ours: how a pass commits (engine/runtime/sampler.py ORDERS)
    if order is not None:
        kwargs["order"] = order
    return ChatParams(body["messages"], stream, include_usage, kwargs, key)


# -- responses ---------------------------------------------------------------------------------
def usage_of(result: ChatResult) -> dict:
    m = result.metrics
    prompt, completion = int(m["prompt_tokens"]), int(m["completion_tokens"])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(m.get("cached_tokens") or 0)},
        "completion_tokens_details": {"reasoning_tokens": int(m.get("reasoning_tokens") or 0)},
    }


def completion_body(cid: str, created: int, model: str, result: ChatResult) -> dict:
    msg = result.message()
    msg.setdefault("content", None)
    body = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": result.finish_reason}],
        "usage": usage_of(result),
        "system_fingerprint": None,
        "metrics": result.metrics,  # extension: the engine's timings (ttfat_ms, tokens_per_forward...)
    }
    if result.tool_errors:
        body["tool_errors"] = result.tool_errors  # extension: tool calls the engine rejected, and why
    return body


def _chunk(cid: str, created: int, model: str, delta: dict, finish: str | None = None, **extra) -> str:
    c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
         "system_fingerprint": None,
         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    c.update(extra)
    return f"data: {json.dumps(c)}\n\n"


def _error_for(item_error: BaseException) -> APIError:
    if isinstance(item_error, Rejected):
        return APIError(item_error.status, str(item_error), "rate_limit_error" if item_error.status == 429
                        else "server_error", code=item_error.code,
                        headers={"Retry-After": str(int(item_error.retry_after))})
    if isinstance(item_error, RequestCancelled):
        return APIError(499, "the request was cancelled", "invalid_request_error", code=item_error.code)
    return APIError(500, f"the engine failed on this request: {type(item_error).__name__}: {item_error}",
                    "server_error", code="engine_error")


# -- the app -----------------------------------------------------------------------------------
def create_app(engine: Engine, cfg: ServerConfig | None = None, scheduler: Scheduler | None = None) -> FastAPI:
    cfg = cfg or ServerConfig()
    sched = scheduler or Scheduler(engine, max_batch=cfg.max_batch, max_queue=cfg.max_queue,
                                   queue_timeout_s=cfg.queue_timeout_s)
    sessions = SessionStore(engine, cfg.max_sessions)
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        sched.start()
        try:
            yield
        finally:
            await asyncio.to_thread(sched.stop)

    app = FastAPI(title="voice-agent engine", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.engine, app.state.scheduler, app.state.sessions, app.state.cfg = engine, sched, sessions, cfg

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return APIError(exc.status_code, str(exc.detail), "invalid_request_error",
                        code="not_found" if exc.status_code == 404 else None).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}", "server_error").response()

    def check_key(request: Request) -> None:
        if not cfg.api_key:
            return
        auth = request.headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), cfg.api_key.encode()):
            raise APIError(401, "Incorrect API key provided." if given else "Missing API key: send 'Authorization: Bearer <key>'.",
                           "invalid_request_error", code="invalid_api_key")

    def model_card() -> dict:
        return {"id": cfg.model_id, "object": "model", "created": started, "owned_by": "voice-agent",
                "root": engine.model_name, "max_context": engine.max_context}

    @app.get("/health")
    async def health():
        import psutil

        snap = sched.snapshot()
        ok = snap["running"]
        body = {"status": "ok" if ok else "error", "model": cfg.model_id, **snap,
                "sessions": len(sessions), "max_sessions": cfg.max_sessions,
                "session_evictions": sessions.evictions,
                "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models(request: Request):
        check_key(request)
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request):
        check_key(request)
        if model_id != cfg.model_id:
            raise APIError(404, f"The model {model_id!r} does not exist", code="model_not_found", param="model")
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        check_key(request)
        size = request.headers.get("content-length")
        if size and size.isdigit() and int(size) > MAX_BODY_BYTES:
            raise APIError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise APIError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        p = parse_chat_body(raw, cfg, request.headers.get("x-session-id"))
        session = sessions.get(p.session_key) if p.session_key else None
        try:
            # tokenising and schema checks take tens of ms: keep them off the event loop
            req = await asyncio.to_thread(engine.prepare, p.messages, session=session, **p.kwargs)
        except EngineInputError as e:
            raise _bad(str(e), e.param, e.code) from None
        try:
            ticket = sched.submit(req, asyncio.get_running_loop())
        except Rejected as e:
            raise _error_for(e) from None
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        first = await _wait_admitted(ticket, request)
        if first is None:
            return JSONResponse({}, status_code=499)
        if p.stream:
            return _TicketStream(
                ticket, _sse(ticket, cid, created, cfg.model_id, p.include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        result = await _collect(ticket, request)
        if result is None:
            return JSONResponse({}, status_code=499)
        return completion_body(cid, created, cfg.model_id, result)

    return app


class _TicketStream(StreamingResponse):
    """A stream that cancels its request however the response ends, even before the body started."""

    def __init__(self, ticket: Ticket, content, **kw) -> None:
        super().__init__(content, **kw)
        self.ticket = ticket

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.ticket.finished:
                self.ticket.cancel()


async def _next(ticket: Ticket, request: Request):
    """The ticket's next item; None if the client went away while we waited."""
    while True:
        try:
            return await ticket.get(timeout=DISCONNECT_POLL_S)
        except TimeoutError:
            if await request.is_disconnected():
                ticket.cancel()
                return None


async def _wait_admitted(ticket: Ticket, request: Request):
    """Wait until the scheduler has prefilled the request: queue errors still become HTTP errors."""
    try:
        item = await _next(ticket, request)
    except BaseException:
        ticket.cancel()
        raise
    if item is None:
        return None
    if item.kind == "error":
        raise _error_for(item.error)
    return item


async def _collect(ticket: Ticket, request: Request) -> ChatResult | None:
    try:
        while True:
            item = await _next(ticket, request)
            if item is None:
                return None
            if item.kind == "done":
                return item.result
            if item.kind == "error":
                raise _error_for(item.error)
    finally:
        if not ticket.finished:
            ticket.cancel()


async def _sse(ticket: Ticket, cid: str, created: int, model: str, include_usage: bool):
    # A client that disconnects cancels this generator (Starlette watches the socket); the
    # `finally` then frees the request's batch row.
    try:
        yield _chunk(cid, created, model, {"role": "assistant", "content": ""})
        while True:
            item = await ticket.get()
            if item.kind == "event":
                ev = item.event
                key = "reasoning_content" if ev.type == "reasoning" else "content"
                if ev.text:
                    yield _chunk(cid, created, model, {key: ev.text})
            elif item.kind == "error":
                yield f"data: {json.dumps(_error_for(item.error).body())}\n\n"
                break
            elif item.kind == "done":
                r = item.result
                if r.tool_calls:
                    calls = [dict(c, index=i) for i, c in enumerate(r.tool_calls)]
                    yield _chunk(cid, created, model, {"tool_calls": calls})
                extra = {"metrics": r.metrics}
                if r.tool_errors:
                    extra["tool_errors"] = r.tool_errors
                yield _chunk(cid, created, model, {}, r.finish_reason, **extra)
                if include_usage:
                    yield f"data: {json.dumps({'id': cid, 'object': 'chat.completion.chunk', 'created': created, 'model': model, 'system_fingerprint': None, 'choices': [], 'usage': usage_of(r)})}\n\n"
                break
        yield "data: [DONE]\n\n"
    finally:
        if not ticket.finished:
            ticket.cancel()


# -- running it --------------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn in a background thread (tests and in-process benchmarks)."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int | None = None, **uvicorn_kw) -> None:
        import uvicorn

        self.host, self.port = host, port or free_port(host)
        config = uvicorn.Config(app, host=self.host, port=self.port, log_level="warning", lifespan="on", **uvicorn_kw)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def load_engine(model: str, precision: str | None = None, threads: int | None = None,
                decoding: str = "engine") -> Engine:
    """`decoding="reference"`: a dLLM checkpoint decodes with its family's reference sampler."""
    return Engine.load(model, precision=precision, threads=threads, decoding=decoding)


def run_from_args(args) -> int:
    """`voice-agent serve`: load the model, then serve until interrupted."""
    import uvicorn

    key = args.api_key or engine_config().api_key or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not key:
        print(f"warning: serving on {args.host} without an API key; set --api-key or {API_KEY_ENV}")
    engine = load_engine(args.model, args.precision, args.threads, getattr(args, "decoding", None) or "engine")
    model_id = args.served_model_name or ("default" if args.model == "default" else os.path.basename(
        os.path.normpath(args.model)))
    cfg = ServerConfig(model_id=model_id, api_key=key, max_batch=args.max_batch, max_queue=args.max_queue,
                       queue_timeout_s=args.queue_timeout, max_sessions=args.max_sessions,
                       default_effort=args.default_effort, default_max_tokens=args.default_max_tokens)
    app = create_app(engine, cfg)
    print(f"serving {engine.model_name} as {model_id!r} on http://{args.host}:{args.port}/v1 "
          f"(max batch {cfg.max_batch}, queue {cfg.max_queue}, auth {'on' if key else 'off'})", flush=True)
    # Open streams get a few seconds on shutdown, then are cut: a stuck client must not keep us up.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    from engine.serve.tool_args import serve_arguments

    parser = argparse.ArgumentParser(prog="python -m engine.serve.server", description=__doc__)
    serve_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    from engine.errors import run_tool

    raise SystemExit(run_tool(main, "python -m engine.serve.server"))
