"""`voice-agent livekit-worker`: fails fast and clearly without a LiveKit server, and builds each
room's AgentSession from the real, offline components (no server needed to check that)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from voice_agent.livekit.worker import TURN_DETECTOR_VERSION, CallFactory, WorkerConfig

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voice_agent.cli", "livekit-worker", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_unreachable_server_fails_fast_with_a_clear_message() -> None:
    t = time.monotonic()
    r = worker("--url", f"ws://127.0.0.1:{free_port()}", "--api-key", "key", "--api-secret", "secret")
    assert r.returncode == 2
    assert "cannot reach the LiveKit server" in r.stderr and "Connection refused" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t < 10  # before any model is loaded


def test_missing_credentials_are_named() -> None:
    r = worker("--url", "ws://127.0.0.1:7880", "--api-key", "", "--api-secret", "")
    assert r.returncode == 2 and "missing --api-key, --api-secret" in r.stderr


@pytest.mark.slow
def test_a_server_that_is_not_livekit_ends_with_a_clear_error(tmp_path) -> None:
    # Something listens (plain HTTP), so the worker loads its models and tries to register.
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        r = worker("--url", f"ws://127.0.0.1:{httpd.server_address[1]}", "--api-key", "key",
                   "--api-secret", "secret" * 6, "--model", "smollm2-base", "--max-retry", "1",
                   "--http-port", "0", "--store", str(tmp_path / "store"))
    finally:
        httpd.shutdown()
    assert r.returncode == 2, r.stderr[-2000:]
    assert "failed to connect to livekit" in r.stderr and "Check --url, --api-key and --api-secret" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def calls(tmp_path_factory, base_engine) -> CallFactory:
    cfg = WorkerConfig(url="", api_key="", api_secret="", model="smollm2-base", reasoning_effort="instant",
                       store=str(tmp_path_factory.mktemp("store")))
    factory = CallFactory(cfg, engine=base_engine)  # conftest's engine: loaded once per test session
    factory.load()
    return factory


def test_per_call_reasoning_effort_comes_from_job_metadata(calls: CallFactory) -> None:
    assert calls.effort_for('{"reasoning_effort": "medium"}') == "medium"
    assert calls.effort_for('{"reasoning_effort": "extreme"}') == "instant"  # invalid: the default
    assert calls.effort_for("not json") == "instant"
    assert calls.effort_for(None) == "instant"


async def test_a_room_session_is_offline_and_answers_a_turn(calls: CallFactory) -> None:
    session, agent = calls.session()
    turn = session.options.turn_handling
    assert turn["turn_detection"].model == f"turn-detector-{TURN_DETECTOR_VERSION}"  # pinned, local
    assert turn["interruption"]["mode"] == "vad"  # the adaptive detector is a cloud service
    assert {t.info.name for t in agent.tools} == set(calls.scenario.tool_names)
    async with session:
        await session.start(agent)  # no room: text mode, same session object a room would get
        result = await session.run(user_input="Hi, is the clinic open on Saturday?")
        msg = result.expect.next_event().is_message(role="assistant").event().item
        assert msg.text_content and msg.text_content.strip()
