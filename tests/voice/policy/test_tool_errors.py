"""An engine tool (`python -m engine.*`) stops on a bad setting with its code and message, not a traceback;
a load test whose server will not start says why, from the server's own last line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.errors import EngineError, SettingError, run_tool
from engine.tools.loadtest import main as loadtest_main


def test_run_tool_maps_a_bad_setting_to_2_and_another_engine_error_to_1(capsys):
    def bad_setting() -> int:
        raise SettingError("VOICE_AGENT_X='y': expected one of a, b", code="invalid_x")

    def no_server() -> int:
        raise EngineError("the server exited with code 2", code="server_start_failed")

    assert run_tool(bad_setting, "python -m engine.tool") == 2
    assert capsys.readouterr().err.strip() == "python -m engine.tool: error [invalid_x]: VOICE_AGENT_X='y': expected one of a, b"
    assert run_tool(no_server, "python -m engine.tool") == 1
    assert "[server_start_failed]" in capsys.readouterr().err
    assert run_tool(lambda: 0, "python -m engine.tool") == 0


def test_an_engine_tool_prints_a_bad_setting_and_exits_2():
    done = subprocess.run([sys.executable, "-m", "engine.tools.bench", "--roofline-only"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VOICE_AGENT_PRECISION": "fp8"})
    assert done.returncode == 2, done.stderr
    assert "python -m engine.tools.bench: error [invalid_precision]" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_loadtest_whose_server_cannot_start_names_the_servers_error(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICE_AGENT_NARROW_THREADS", "three")
    log = tmp_path / "server.log"
    for extra in ([], ["--server-log", str(log)]):  # the log in a temporary file, or where asked
        try:
            loadtest_main(["--concurrency", "1", "--max-tokens", "4", *extra])
        except EngineError as e:
            assert e.code == "server_start_failed"
            assert "exited with code 2" in str(e) and "[invalid_narrow_threads]" in str(e)
        else:
            raise AssertionError("the load test ran without a server")
    assert "[invalid_narrow_threads]" in log.read_text()
