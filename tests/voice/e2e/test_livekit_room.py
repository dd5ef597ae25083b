"""`voice-agent room`: Pipecat's LiveKitTransport on the shared pipeline. No LiveKit server here, so
these check what can be checked offline: the room comes from the token, and a missing or wrong
server is a clear error (exit code 2, no traceback), before any model is loaded."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from livekit import api

from voice_agent.transports.room import make_room_transport, room_from_token

ROOT = Path(__file__).resolve().parents[3]


def token(room: str | None) -> str:
    grants = api.VideoGrants(room_join=True, room=room) if room else api.VideoGrants(room_list=True)
    return api.AccessToken("devkey", "secret" * 6).with_identity("agent").with_grants(grants).to_jwt()


def room_cmd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voice_agent.cli", "room", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_room_comes_from_the_token_grant() -> None:
    assert room_from_token(token("call-42")) == "call-42"
    assert room_from_token(token(None)) is None
    assert room_from_token("not-a-jwt") is None
    transport = make_room_transport("ws://127.0.0.1:7880", token("call-42"))
    assert transport._params.audio_in_user_tracks is False  # one mixed stream for one VAD + STT
    assert make_room_transport("ws://x:1", token(None), room_name="lobby") is not None


def test_unreachable_server_is_a_clear_error_before_loading_models() -> None:
    t = time.monotonic()
    r = room_cmd("--url", f"ws://127.0.0.1:{free_port()}", "--token", token("call-42"))
    assert r.returncode == 2 and "cannot reach the LiveKit server" in r.stderr
    assert "Traceback" not in r.stderr and time.monotonic() - t < 10


def test_missing_token_and_roomless_token_are_named() -> None:
    r = room_cmd("--url", "ws://127.0.0.1:7880", "--token", "")
    assert r.returncode == 2 and "missing --token" in r.stderr
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        r = room_cmd("--url", f"ws://127.0.0.1:{httpd.server_address[1]}", "--token", token(None))
    finally:
        httpd.shutdown()
    assert r.returncode == 2 and "the token names no room" in r.stderr and "Traceback" not in r.stderr
