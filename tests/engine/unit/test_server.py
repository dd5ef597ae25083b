"""The OpenAI-compatible server, driven by the real `openai` SDK over 127.0.0.1.

Mechanics run on a tiny random-weight fp32 model (fast, varied text); the tool-call round trip
runs on a tiny model trained in the fixture to make one tool call and answer from its result;
a few checks run on the real "default" model.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch
from openai import OpenAI

from engine import Engine
from engine.model.transformer import causal_mask
from engine.serve.server import ServerConfig, ServerThread, create_app
from engine.tools.loadtest import write_random_model

KEY = "test-key-123"
USER = [{"role": "user", "content": "Hi, I'd like to book a cleaning next week."}]
LOOKUP = {"type": "function", "function": {
    "name": "lookup_patient", "description": "Find a patient's next appointment.",
    "parameters": {"type": "object", "properties": {"patient_name": {"type": "string"}},
                   "required": ["patient_name"]}}}
FORCE_LOOKUP = {"type": "function", "function": {"name": "lookup_patient"}}
CALLER = [{"role": "user", "content": "This is John Smith. When is my next appointment?"}]
TOOL_RESULT = json.dumps({"next_appointment": "2026-12-03 10:00"})
FINAL_ANSWER = "Your next appointment is on December 3 at 10 am."


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: one thread is several times faster than two fighting
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    return Engine.load(write_random_model(tmp_path_factory.mktemp("m") / "tiny"), dtype=torch.float32)


@pytest.fixture(scope="module")
def tiny(tiny_engine):
    app = create_app(tiny_engine, ServerConfig(model_id="tiny", api_key=KEY, max_batch=8))
    with ServerThread(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(tiny):
    return OpenAI(base_url=tiny.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _health(srv) -> dict:
    return httpx.get(srv.base_url + "/health", timeout=10).json()


def _post(srv, body, key=KEY, **kw) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(srv.base_url + "/v1/chat/completions", content=data, timeout=60,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, **kw)


def _extra(obj, name):
    return (obj.model_extra or {}).get(name)


# -- basics ----------------------------------------------------------------------------------------
def test_models_and_health(tiny, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"] and models.data[0].object == "model"
    h = _health(tiny)
    assert h["status"] == "ok" and h["max_batch"] == 8 and h["running"]


def test_plain_completion(client):
    r = client.chat.completions.create(model="tiny", messages=USER, max_tokens=12, reasoning_effort="instant")
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "tiny"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.completion_tokens <= 12 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.completion_tokens_details.reasoning_tokens == 0
    assert _extra(r, "metrics")["completion_tokens"] == u.completion_tokens


def test_streaming_matches_the_plain_answer(tiny, client):
    kw = dict(model="tiny", messages=USER, max_tokens=16, reasoning_effort="instant")
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == plain.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2  # streamed by block
    with httpx.stream("POST", tiny.base_url + "/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}, json={**kw, "stream": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_reasoning_effort_changes_the_output_and_metrics(client):
    def ask(effort, **kw):
        return client.chat.completions.create(model="tiny", messages=USER, max_tokens=24,
                                              reasoning_effort=effort, **kw)

    instant, low, high = ask("instant"), ask("low"), ask("high")
    assert _extra(low.choices[0].message, "reasoning_content")  # the thought, apart from the answer
    assert low.usage.completion_tokens_details.reasoning_tokens > 0
    assert instant.usage.completion_tokens_details.reasoning_tokens == 0
    assert not _extra(instant.choices[0].message, "reasoning_content")
    assert _extra(low, "metrics")["reasoning_effort"] == "low"
    assert high.usage.completion_tokens_details.reasoning_tokens > 0
    # Every effort commits what AR decoding would (order "verify"); a threshold order is asked for.
    assert _extra(high, "metrics")["order"] == _extra(instant, "metrics")["order"] == "verify"
    by_threshold = ask("high", extra_body={"order": "prefix"})
    assert _extra(by_threshold, "metrics")["order"] == "prefix"
    assert _extra(by_threshold, "metrics")["threshold"] > _extra(instant, "metrics")["threshold"]
    deltas = list(ask("low", stream=True))
    assert "".join(_extra(c.choices[0].delta, "reasoning_content") or "" for c in deltas if c.choices).strip() \
        == _extra(low.choices[0].message, "reasoning_content")


def test_auth(tiny):
    bad = OpenAI(base_url=tiny.base_url + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model="tiny", messages=USER, max_tokens=4)
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    r = httpx.get(tiny.base_url + "/v1/models", timeout=10)  # no Authorization header at all
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}


BAD_BODIES = [
    ("missing messages", {"model": "tiny"}, "messages"),
    ("messages not a list", {"messages": "hello"}, "messages"),
    ("empty messages", {"messages": []}, "messages"),
    ("unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
    ("content of a wrong type", {"messages": [{"role": "user", "content": 42}]}, "messages"),
    ("message not an object", {"messages": ["hi"]}, "messages"),
    ("unknown effort", {"messages": USER, "reasoning_effort": "extreme"}, "reasoning_effort"),
    ("effort of a wrong type", {"messages": USER, "reasoning_effort": 3}, "reasoning_effort"),
    ("invalid tool schema", {"messages": USER, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}}]}, "tools"),
    ("tool without a name", {"messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools"),
    ("tools not a list", {"messages": USER, "tools": {"name": "f"}}, "tools"),
    ("tool_choice names an unknown tool", {"messages": USER, "tools": [LOOKUP], "tool_choice": {
        "type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ("oversized context", {"messages": [{"role": "user", "content": "hello " * 5000}]}, "messages"),
    ("max_tokens zero", {"messages": USER, "max_tokens": 0}, "max_tokens"),
    ("max_tokens too large", {"messages": USER, "max_tokens": 100000}, "max_tokens"),
    ("max_tokens a string", {"messages": USER, "max_tokens": "ten"}, "max_tokens"),
    ("max_completion_tokens negative", {"messages": USER, "max_completion_tokens": -1}, "max_tokens"),
    ("temperature a string", {"messages": USER, "temperature": "hot"}, "temperature"),
    ("temperature out of range", {"messages": USER, "temperature": 7}, "temperature"),
    ("stream a string", {"messages": USER, "stream": "yes"}, "stream"),
    ("stop of a wrong type", {"messages": USER, "stop": 5}, "stop"),
    ("n above 1", {"messages": USER, "n": 3}, "n"),
    ("not JSON", b"{this is not json", None),
    ("not an object", [1, 2, 3], None),
]


@pytest.mark.parametrize("name,body,param", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_get_400_in_openai_shape(tiny, name, body, param):
    r = _post(tiny, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and len(err["message"]) > 10
    if param is not None:
        assert err["param"] in (param, "max_completion_tokens" if param == "max_tokens" else param)


def test_bad_input_through_the_sdk_and_the_server_is_still_fine(tiny, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=USER, reasoning_effort="bogus")
    assert e.value.param == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x " * 5000}])
    assert (e.value.code, e.value.param) == ("context_length_exceeded", "messages")
    h = _health(tiny)
    assert h["status"] == "ok" and h["failed"] == 0


# -- batching, sessions, disconnects, backpressure ---------------------------------------------------
PROMPTS = [("Hi", "instant"), ("What are your opening hours?", "low"), ("Cancel my appointment please", "instant"),
           ("Can I move my filling to Friday afternoon?", "medium"), ("hello??", "instant"),
           ("Do you take insurance?", "low")]


def _ask(client, i, stream=False):
    text, effort = PROMPTS[i]
    kw = dict(model="tiny", messages=[{"role": "user", "content": text}], max_tokens=20 + 3 * i,
              reasoning_effort=effort)
    if not stream:
        m = client.chat.completions.create(**kw).choices[0].message
        return m.content, _extra(m, "reasoning_content")
    content, reasoning = [], []
    for c in client.chat.completions.create(**kw, stream=True):
        if c.choices:
            content.append(c.choices[0].delta.content or "")
            reasoning.append(_extra(c.choices[0].delta, "reasoning_content") or "")
    return "".join(content).strip(), "".join(reasoning).strip() or None


def test_batched_output_equals_sequential_output(tiny, client):
    sequential = [_ask(client, i) for i in range(len(PROMPTS))]
    before = _health(tiny)
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        batched = list(pool.map(lambda i: _ask(client, i, stream=i % 2 == 1), range(len(PROMPTS))))
    after = _health(tiny)
    assert batched == sequential
    assert after["rows_stepped"] - before["rows_stepped"] > after["steps"] - before["steps"]  # batches > 1 row


def test_a_call_keeps_its_cache_between_turns(client):
    call = str(uuid.uuid4())
    turn1 = [{"role": "system", "content": "You are Maya at Bright Smile Dental. " * 4}, *USER]
    r1 = client.chat.completions.create(model="tiny", messages=turn1, max_tokens=8, reasoning_effort="instant",
                                        extra_headers={"X-Session-Id": call})
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "Tuesday at ten."}]
    r2 = client.chat.completions.create(model="tiny", messages=turn2, max_tokens=8, reasoning_effort="instant",
                                        extra_headers={"X-Session-Id": call})
    assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens
    # `user` names the call too
    u1 = client.chat.completions.create(model="tiny", messages=turn1, max_tokens=8, reasoning_effort="instant",
                                        user=call + "-u")
    u2 = client.chat.completions.create(model="tiny", max_tokens=8, reasoning_effort="instant", user=call + "-u",
                                        messages=turn1 + [u1.choices[0].message.model_dump(exclude_none=True),
                                                          turn2[-1]])
    assert u2.usage.prompt_tokens_details.cached_tokens >= u1.usage.prompt_tokens


def test_disconnect_mid_stream_frees_the_slot(tiny, client):
    before = _health(tiny)
    body = {"model": "tiny", "messages": USER, "max_tokens": 4000, "reasoning_effort": "instant", "stream": True}
    with httpx.stream("POST", tiny.base_url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as resp:
        got = 0
        for line in resp.iter_lines():
            got += '"content"' in line
            if got >= 3:
                assert _health(tiny)["active"] == 1  # decoding...
                break  # ...and leaving the loop drops the iterator, which closes the connection
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        h = _health(tiny)
        if h["active"] == 0 and h["cancelled"] > before["cancelled"]:
            break
        time.sleep(0.1)
    assert h["active"] == 0 and h["cancelled"] == before["cancelled"] + 1
    assert h["completed"] == before["completed"]  # it did not run on to 4000 tokens
    r = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, reasoning_effort="instant")
    assert r.choices[0].finish_reason in ("stop", "length")


def test_backpressure_429_then_503_with_retry_after(tiny_engine):
    app = create_app(tiny_engine, ServerConfig(model_id="tiny", max_batch=1, max_queue=1, queue_timeout_s=2.0))
    with ServerThread(app) as srv:
        c = OpenAI(base_url=srv.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
        hog = c.chat.completions.create(model="tiny", messages=USER, max_tokens=4000, reasoning_effort="instant",
                                        stream=True)
        next(iter(hog))  # admitted and decoding: the only batch slot is taken
        queued: dict = {}
        t = threading.Thread(target=lambda: queued.update(r=_post(srv, {"messages": USER, "max_tokens": 4})))
        t.start()
        deadline = time.monotonic() + 10
        while _health(srv)["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(openai.RateLimitError) as full:
            c.chat.completions.create(model="tiny", messages=USER, max_tokens=4)
        assert full.value.status_code == 429 and int(full.value.response.headers["retry-after"]) >= 1
        t.join(30)
        r = queued["r"]
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "server_overloaded"
        hog.close()
        deadline = time.monotonic() + 20
        while _health(srv)["active"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _health(srv)["active"] == 0


# -- a tool call round trip -----------------------------------------------------------------------------
def _teach(eng: Engine, examples: list[tuple[list[int], str]], max_steps: int = 300) -> None:
    """Train the tiny model until greedy decoding reproduces each target after its prompt."""
    model, tok = eng.model, eng.tokenizer
    data = [(p, tok.encode(t, add_special_tokens=False).ids) for p, t in examples]
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(max_steps):
        loss, right = 0.0, True
        for prompt, target in data:
            seq = torch.tensor([prompt + target])
            n = seq.shape[1]
            h = model.hidden(seq, torch.arange(n)[None], causal_mask(n)[None, None])
            logits = model.lm_head(h[0, len(prompt) - 1: n - 1])
            loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(target))
            right = right and logits.argmax(-1).tolist() == target
        if right and loss.item() < 0.3:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    assert right, "the tiny tool model did not learn its two turns"


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    # dim 16: small enough that training takes seconds, big enough to learn two turns by heart
    folder = write_random_model(tmp_path_factory.mktemp("m") / "tool", family="ar", seed=1, dim=16, heads=2,
                                kv_heads=1, intermediate=32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VOICE_AGENT_FP32_LINEARS", "dense")  # trained below, in place: plain nn.Linear weights
        eng = Engine.load(folder, dtype=torch.float32)
    call = {"id": "call_0", "type": "function",
            "function": {"name": "lookup_patient", "arguments": json.dumps({"patient_name": "John Smith"})}}
    after_tool = CALLER + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_0", "content": TOOL_RESULT}]
    forced = eng.prepare(CALLER, tools=[LOOKUP], tool_choice=FORCE_LOOKUP, reasoning_effort="instant")
    whole = '<tool_call>\n{"name": "lookup_patient", "arguments": {"patient_name": "John Smith"}}\n</tool_call><|im_end|>'
    assert whole.startswith(forced.prefix)  # the prompt holds the call's opening (engine/text/tool_guide.py)
    _teach(eng, [
        (forced.tokens, whole[len(forced.prefix):]),
        (eng.prepare(after_tool, tools=[LOOKUP], reasoning_effort="instant").tokens, FINAL_ANSWER + "<|im_end|>"),
    ])
    with ServerThread(create_app(eng, ServerConfig(model_id="tool-model"))) as srv:
        yield OpenAI(base_url=srv.base_url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_tool_call_round_trip(tool_server):
    c = tool_server
    kw = dict(model="tool-model", tools=[LOOKUP], reasoning_effort="instant", max_tokens=32)
    first = c.chat.completions.create(messages=CALLER, tool_choice=FORCE_LOOKUP, **kw)
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and not msg.content
    call = msg.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "lookup_patient"
    assert json.loads(call.function.arguments) == {"patient_name": "John Smith"}

    history = CALLER + [msg.model_dump(exclude_none=True),
                        {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT}]
    final = c.chat.completions.create(messages=history, **kw)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == FINAL_ANSWER and not final.choices[0].message.tool_calls

    # the same call, streamed: one tool_calls delta in OpenAI's shape, then finish_reason tool_calls
    chunks = [ch for ch in c.chat.completions.create(messages=CALLER, tool_choice=FORCE_LOOKUP, stream=True, **kw)
              if ch.choices]
    calls = [tc for ch in chunks for tc in ch.choices[0].delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "lookup_patient"
    assert json.loads(calls[0].function.arguments) == {"patient_name": "John Smith"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


# -- the real default model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_server():
    eng = Engine.load("default", dtype=torch.float32)
    with ServerThread(create_app(eng, ServerConfig(model_id="default", max_batch=4))) as srv:
        yield srv, OpenAI(base_url=srv.base_url + "/v1", api_key="none", max_retries=0, timeout=300)


def test_default_model_batched_equals_sequential(default_server):
    srv, c = default_server
    asks = [[{"role": "user", "content": t}] for t in ("Hello!", "Can I book a checkup?", "Are you open today?")]

    def ask(i, stream=False):
        kw = dict(model="default", messages=asks[i], max_tokens=10, reasoning_effort="instant")
        if stream:
            return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(**kw, stream=True)
                           if ch.choices).strip()
        r = c.chat.completions.create(**kw)
        assert r.model == "default" and r.usage.completion_tokens > 0
        return r.choices[0].message.content

    sequential = [ask(i) for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        batched = list(pool.map(lambda i: ask(i, stream=i == 1), range(3)))
    assert batched == sequential
    assert max(int(k) for k in _health(srv)["batch_hist"]) >= 2


def test_default_model_second_turn_computes_only_its_new_tokens(default_server):
    """The call's second turn reuses the first turn's cache: the model runs only the tokens the turn
    added. (Which turn answers sooner in wall-clock time is a benchmark's question, not a test's: on
    a loaded machine the cheaper turn lost, 400 against 352 ms.)"""
    _, c = default_server
    call = str(uuid.uuid4())
    system = (f"Call {call}. You are Maya, the receptionist at Bright Smile Dental, on a phone call. Speak in one "
              "or two short, friendly sentences. Never use lists or markdown. Use the tools to look up patients "
              "and to find, book, move or cancel appointments. Never invent free times. The clinic is open "
              "Monday to Friday, 9 am to 5 pm. Confirm the day and time before booking.")
    kw = dict(model="default", max_tokens=6, reasoning_effort="instant", extra_headers={"X-Session-Id": call})
    turn1 = [{"role": "system", "content": system}, {"role": "user", "content": "Hi, I need a cleaning."}]
    r1 = c.chat.completions.create(messages=turn1, **kw)
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "Tuesday works."}]
    r2 = c.chat.completions.create(messages=turn2, **kw)
    m1, m2 = _extra(r1, "metrics"), _extra(r2, "metrics")
    assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens
    computed1 = m1["prompt_tokens"] - m1["cached_tokens"]
    computed2 = m2["prompt_tokens"] - m2["cached_tokens"]
    assert m1["cached_tokens"] == 0 and computed1 == r1.usage.prompt_tokens
    # turn 2 adds the first reply and "Tuesday works." inside their chat markup: a few dozen tokens
    assert 0 < computed2 and computed2 * 3 < computed1, (computed1, computed2)
