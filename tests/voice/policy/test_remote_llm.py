"""`--llm-url`: a call's turns on an OpenAI-compatible server (our own, started on 127.0.0.1), sent
with the `openai` SDK by RemoteBrain, through the same Pipecat service and tool loop as the
in-process engine.

- answer text only is pushed (reasoning arrives as `reasoning_content` and is never spoken), and
  the turn's TTFAT is measured from the stream; the call's second turn reuses its server session;
- a tool call the server returns runs the registered tool and the model again;
- a server that is down, or that answers garbage, fails that turn with a clear error, the caller
  hears the apology, and the service stays usable;
- end to end: the sample call replayed with `voice-agent replay --llm-url` answers every turn.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from pathlib import Path

import pytest
import torch
from pipecat.frames.frames import (
    ErrorFrame,
    FunctionCallResultFrame,
    LLMContextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.tests.utils import run_test

from engine.serve.server import ServerConfig, ServerThread, create_app, free_port
from tests.voice.policy.test_llm_service import StopAfterResponses, responses, tool_call_to_copy
from voice_agent.brain.remote import RemoteBrain, api_base
from voice_agent.policy.calendar_words import parse_time
from voice_agent.scenarios import load_scenario
from voice_agent.services.llm import EngineLLMService, EngineMetricsFrame

TODAY = dt.date(2026, 11, 30)
SCENARIO = load_scenario("dental_clinic")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: the server's engine and the test share them
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def server(base_engine):
    with ServerThread(create_app(base_engine, ServerConfig(model_id="smollm2-base", max_batch=2))) as srv:
        yield srv


def remote_llm(url: str, **kw) -> EngineLLMService:
    kw.setdefault("system_instruction", SCENARIO.system_prompt_for(TODAY))
    return EngineLLMService(RemoteBrain(url, timeout_s=120), **kw)


def test_llm_url_gets_v1_when_it_names_no_path():
    assert api_base("http://10.0.0.5:8000") == "http://10.0.0.5:8000/v1"
    assert api_base("http://10.0.0.5:8000/v1/") == "http://10.0.0.5:8000/v1"
    assert api_base("https://llm.example/openai/v1") == "https://llm.example/openai/v1"
    with pytest.raises(ValueError, match="--llm-url must be an http"):
        api_base("10.0.0.5:8000")


@pytest.mark.slow
async def test_remote_turns_push_answer_text_only_with_ttfat_and_reuse_the_server_session(server):
    llm = remote_llm(server.base_url, reasoning_effort="low", max_tokens=76)
    first = LLMContext([{"role": "user", "content": "Hi! Are you open on Fridays?"}])
    down, up = await run_test(llm, frames_to_send=[LLMContextFrame(first)])
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    spoken = responses(down)[0]
    assert spoken.strip() and llm.last_reasoning, "the model reasons at low effort; the server streams it"
    assert llm.last_reasoning not in spoken and llm.last_reasoning[:40] not in spoken
    m = [f for f in down if isinstance(f, EngineMetricsFrame)][0].metrics
    assert 0 < m["ttft_ms"] < m["ttfat_ms"] <= m["total_ms"]  # measured here, from the stream
    assert m["server_ttfat_ms"] is not None and m["prefill_ms"] is not None  # the server's own numbers
    assert m["reasoning_tokens"] > 0 and m["prompt_tokens"] > 0 and m["llm_url"] == server.base_url + "/v1"

    second = LLMContext([*first.get_messages(), {"role": "assistant", "content": spoken},
                         {"role": "user", "content": "And on Saturdays?"}])
    await run_test(llm, frames_to_send=[LLMContextFrame(second)])
    assert llm.last_metrics["cached_tokens"] > 0.8 * m["prompt_tokens"]  # the call's X-Session-Id kept its cache


@pytest.mark.slow
async def test_a_tool_call_from_the_server_runs_the_tool_and_the_model_again(server, tmp_path):
    backend = SCENARIO.open_backend(tmp_path / "store", TODAY)
    db = backend.db
    day = "2026-12-02"
    t = db.find_free_slots({"date": day})["free_times"][0]
    llm = remote_llm(server.base_url, reasoning_effort="instant", max_tokens=64, tools=SCENARIO.bind_handlers(backend),
                     filler=SCENARIO.filler)
    call = {"name": "book_appointment", "arguments": {"patient_name": "John Smith", "date": day, "time": t}}
    ctx = tool_call_to_copy(call)
    tap = StopAfterResponses(2)
    _, up = await run_test(Pipeline([llm, tap, LLMAssistantAggregator(ctx)]),
                           frames_to_send=[LLMContextFrame(ctx)], send_end_frame=False)
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    assert llm.turn_metrics[0]["tool_calls"] == ["book_appointment"], llm.turn_metrics
    booked = [a for a in db.appointments("John Smith") if (a["date"], a["time"]) == (day, parse_time(t))]
    assert len(booked) == 1
    assert [f.result["booked"] for f in tap.frames if isinstance(f, FunctionCallResultFrame)] == [True]
    assert len(llm.turn_metrics) == 2  # the result went back to the server for the answer


async def test_an_unreachable_server_fails_each_turn_clearly_and_the_call_goes_on():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    llm = remote_llm(url)
    ctx = LLMContext([{"role": "user", "content": "Hello?"}])
    down, up = await run_test(llm, frames_to_send=[LLMContextFrame(ctx), LLMContextFrame(ctx)])
    errors = [f for f in up if isinstance(f, ErrorFrame)]
    assert len(errors) == 2 and not any(e.fatal for e in errors) and llm.is_usable
    for e in errors:
        assert f"cannot reach the LLM server at {url}/v1" in e.error and "[llm_unreachable]" in e.error
    assert responses(down) == [llm.apology, llm.apology]


class _FakeServer(http.server.BaseHTTPRequestHandler):
    """A hand-written OpenAI-compatible server: answers what each test's subclass says, quietly."""

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _Garbage(_FakeServer):
    """Answers every request with 200 and something that is not a chat completion stream."""

    bodies = [("text/html", b"<html><body>502 Bad Gateway</body></html>"),
              ("text/event-stream", b"data: this is not json\n\n")]

    def do_GET(self) -> None:  # /v1/models
        self._send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind, body = self.bodies[self.server.n % len(self.bodies)]
        self.server.n += 1
        self._send(200, kind, body)


async def test_a_server_answering_garbage_fails_the_turn_clearly_and_the_call_goes_on():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    httpd.n = 0
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        llm = remote_llm(f"http://127.0.0.1:{httpd.server_port}")
        ctx = LLMContext([{"role": "user", "content": "Hello?"}])
        down, up = await run_test(llm, frames_to_send=[LLMContextFrame(ctx), LLMContextFrame(ctx)])
    finally:
        httpd.shutdown()
    errors = [f.error for f in up if isinstance(f, ErrorFrame)]
    assert len(errors) == 2 and llm.is_usable, errors
    assert all("[llm_bad_response]" in e for e in errors), errors
    assert "stream ended before the answer was finished" in errors[0]  # the HTML page: no chunk at all
    assert "not a chat completion stream" in errors[1]                  # an event that is not JSON
    assert responses(down) == [llm.apology, llm.apology]


# -- end to end: `voice-agent replay --llm-url` ----------------------------------------------------
@pytest.fixture(scope="module")
def spaced_sample_call(tmp_path_factory) -> Path:
    """The sample call's caller, with the sample's own voice and seeds, and room to answer every
    line on a busy CPU: 25 s after each line, and its third line
    ("Ten in the morning works, and my name is Jordan Lee.") said as two, since the VAD cuts it
    at the comma and the second half would barge in on the answer to the first."""
    from voice_agent.audio_io import write_wav
    from voice_agent.make_sample import DB, RATE, SCRIPT, TODAY, synthesize

    third = "Ten in the morning works, and my name is Jordan Lee."
    lines = [t for t, _ in SCRIPT]
    assert third in lines  # the sample's script, as make_sample has it
    i = lines.index(third)
    lines[i:i + 1] = ["Ten in the morning works.", "My name is Jordan Lee."]
    audio, _ = synthesize([(t, 25.0) for t in lines])
    folder = tmp_path_factory.mktemp("call")
    write_wav(folder / "sample_spaced.wav", audio, RATE)
    (folder / "sample_spaced.json").write_text(json.dumps({"today": TODAY, "db": DB, "script": lines}))
    return folder / "sample_spaced.wav"


@pytest.fixture(scope="module")
def server_process(tmp_path_factory):
    """`python -m engine.serve.server` in its own process, as a user starts it on another machine (here
    127.0.0.1): its decoding does not compete with this process's VAD, STT and TTS for the GIL."""
    import subprocess
    import sys
    import time

    import httpx

    port = free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "engine.serve.server", "--model", "smollm2-base", "--port", str(port),
                             "--threads", "1", "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_replay_through_llm_url_answers_every_caller_turn_with_ttfat(server_process, spaced_sample_call, tmp_path,
                                                                     monkeypatch):
    from engine import Engine
    from voice_agent.cli import main as cli_main
    from voice_agent.latency.report import validate

    url = server_process

    def no_engine(*_a, **_k):
        raise AssertionError("replay --llm-url must not load an engine")

    monkeypatch.setattr(Engine, "load", no_engine)
    out = tmp_path / "replay"
    # Realtime, not --fast: on a loaded CPU the pipeline runs seconds behind the recording, and fast
    # mode (which skips silence once the pipeline looks idle) can then hang up before the last
    # line is transcribed. Short answers: their TTS runs in this process, on the same shared cores.
    code = cli_main(["replay", str(spaced_sample_call), "--llm-url", url, "--realtime", "--no-progress",
                     "--out", str(out), "--reasoning-effort", "instant", "--max-tokens", "24", "--tail-s", "40"])
    report = json.loads((out / "report.json").read_text())
    validate(report)
    s = report["summary"]
    assert code == 0 and s["calls_failed"] == 0, report["calls"][0].get("error")
    assert s["llm_url"] == url and s["model"] == base_model_name(url)
    turns = report["calls"][0]["turns"]
    assert len(turns) == 5, [(t["user_text"], t["timeline_s"]) for t in turns]
    for t in turns:
        assert t["user_text"].strip() and t["answered"] and t["bot_text"].strip(), t
        assert t["ttfat_ms"] is not None and t["ttfat_ms"] > 0, t
    # A turn the dialogue state decided (voice_agent/policy/decisions.py) made no request; every
    # other turn went to the server.
    served = [t for t in turns if any("llm_url" in m for m in t["engine"] or [])]
    for t in turns:
        assert t["engine"], t
        for m in t["engine"]:
            if "llm_url" in m:
                assert m["llm_url"] == url + "/v1", t
            else:
                assert m.get("decided_by") and m["forward_passes"] == 0, t
    assert len(served) >= 2, [t["engine"] for t in turns]
    # the caller's closing words ("Great, thank you so much. Bye.") get the scenario's goodbye, with
    # no request to the server (voice_agent/policy/closing.py)
    assert "Goodbye" in turns[-1]["bot_text"] and "llm_url" not in (turns[-1]["engine"] or [{}])[0], turns[-1]
    assert s["ttfat_ms"]["n"] == 5 and s["answered_turns"] == 5
    # Every turn after the first that reached the server reused the call's session there.
    assert all(t["cached_tokens"] > 0 for t in served[1:]), [t["cached_tokens"] for t in served]


def base_model_name(url: str) -> str:
    import httpx

    return httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["root"]


async def test_the_livekit_plugin_runs_a_turn_on_the_server(server):
    from livekit.agents import Agent, AgentSession

    from voice_agent.livekit import EngineLLM

    lm = EngineLLM(RemoteBrain(server.base_url, timeout_s=120), reasoning_effort="instant", max_tokens=16)
    ours = []
    lm.on("engine_metrics", ours.append)
    async with AgentSession(llm=lm) as session:
        await session.start(Agent(instructions="You are a friendly dental receptionist. Answer in one sentence."))
        result = await session.run(user_input="Hello, are you open on Mondays?")
        msg = result.expect.next_event().is_message(role="assistant").event().item
        assert msg.text_content and msg.text_content.strip()
    assert ours and ours[0].ttfat is not None and ours[0].metrics["llm_url"] == server.base_url + "/v1"
    assert lm.session is None and lm.model == "smollm2-base"  # the server's first model, asked once


class _NoInstant(_FakeServer):
    """A server that knows OpenAI's effort names only (as vLLM): 400 for 'instant', else one
    streamed answer in the chat.completion.chunk shape."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)
        if body.get("reasoning_effort") not in (None, "low", "medium", "high"):
            err = {"error": {"message": "reasoning_effort: Input should be 'low', 'medium' or 'high'",
                             "type": "BadRequestError", "param": None, "code": 400}}
            return self._send(400, "application/json", json.dumps(err).encode())
        chunks = [{"delta": {"role": "assistant", "content": "We open at nine."}, "finish_reason": None},
                  {"delta": {}, "finish_reason": "stop"}]
        sse = "".join(f"data: {json.dumps({'id': 'x', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'm', 'choices': [dict(c, index=0)]})}\n\n"
                      for c in chunks) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", sse.encode())


async def test_a_server_that_rejects_our_effort_names_gets_none_and_still_answers():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoInstant)
    httpd.bodies = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        brain = RemoteBrain(f"http://127.0.0.1:{httpd.server_port}", "m")
        for _ in range(2):
            events = [ev async for ev in brain.turn([{"role": "user", "content": "When do you open?"}],
                                                     reasoning_effort="instant", max_tokens=16)]
            assert events[-1].result.text == "We open at nine." and events[-1].result.metrics["ttfat_ms"] > 0
    finally:
        httpd.shutdown()
    # Asked once with 'instant', refused, then never again in this call.
    assert [b.get("reasoning_effort") for b in httpd.bodies[:3]] == ["instant", None, None]
