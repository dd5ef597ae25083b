"""The llama.cpp peer runs in a child process: a crash there costs the bench its peer rows, not its own."""

from __future__ import annotations

import sys

import pytest

from engine.errors import EngineError
from engine.tools.peer_llamacpp import PEER_CRASHED, run_peer_child


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_answer_is_the_childs_last_json_line_and_it_reads_the_request():
    out = run_peer_child(child("import json, sys; r = json.load(sys.stdin); print('noise'); "
                               "print(json.dumps({'n': len(r['prompts'])}))"), {"prompts": [[1], [2, 3]]}, 60)
    assert out == {"n": 2}


def test_a_child_killed_by_sigill_is_a_coded_error_that_names_the_signal_and_the_fix():
    with pytest.raises(EngineError) as e:
        run_peer_child(child("import os, signal; os.kill(os.getpid(), signal.SIGILL)"), {}, 60)
    assert e.value.code == PEER_CRASHED
    assert "SIGILL" in str(e.value) and "AMX" in str(e.value)


def test_a_failing_child_reports_its_status_and_last_error_line():
    with pytest.raises(EngineError) as e:
        run_peer_child(child("import sys; sys.stderr.write('first\\nmodel file is corrupt\\n'); sys.exit(3)"), {}, 60)
    assert e.value.code == PEER_CRASHED
    assert "status 3" in str(e.value) and "model file is corrupt" in str(e.value)


def test_a_child_without_a_json_answer_or_past_its_time_is_an_error():
    with pytest.raises(EngineError, match="no JSON answer"):
        run_peer_child(child("print('not json')"), {}, 60)
    with pytest.raises(EngineError, match="longer than 1 s") as e:
        run_peer_child(child("import time; time.sleep(30)"), {}, 1)
    assert e.value.code == PEER_CRASHED
