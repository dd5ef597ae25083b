"""Where the native layers cannot build (no compiler, a compile that fails, an ARM machine), the engine runs
the Python layers: the same model answers, `doctor` warns and names the cause, and nothing hangs. Each case
is a real process with its own empty build folder, so the failure is a real one."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cpu_isa import is_x86
from engine.model import native

PROBE = """
import json, logging
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
from engine import Engine
from voice_agent import doctor
eng = Engine.load("default", precision="w8a8")
r = eng.chat([{"role": "user", "content": "Hello, is the clinic open on Saturday?"}], reasoning_effort="instant",
             max_tokens=12)
[check] = doctor.check_native_layers("w8a8")
print("RESULT " + json.dumps({"native": eng.runner.info["native_layers"], "tokens": r.metrics["completion_tokens"],
                              "doctor": [check.status, check.detail]}))
"""


def run_probe(tmp_path: Path, cxx: str) -> tuple[dict, str]:
    env = dict(os.environ, CXX=cxx, VOICE_AGENT_NATIVE_DIR=str(tmp_path / "native"))
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc.stderr


@pytest.mark.slow
def test_without_a_compiler_the_engine_runs_the_python_layers_and_doctor_names_the_cause(tmp_path):
    out, log = run_probe(tmp_path, str(tmp_path / "no-such-c++"))
    assert out["native"].startswith("not built: no C++ compiler"), out
    assert out["tokens"] > 0  # the same model answered, through the Python layers
    status, detail = out["doctor"]
    assert status == "warn" and "no C++ compiler" in detail, detail
    assert log.count("native layers unavailable") == 1, log  # said once, not per linear


@pytest.mark.slow
def test_a_compile_that_fails_leaves_the_python_layers_running_and_its_error_for_doctor(tmp_path):
    fake = tmp_path / "broken-c++"
    # a compiler that answers torch's version probes but fails every compile, as a broken toolchain does
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--version*|*-v|*-dumpversion*) exec c++ \"$@\";; esac\n"
                    "echo \"$0: error: forced failure for the test\" >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out, _ = run_probe(tmp_path, str(fake))
    assert out["native"].startswith("not built: "), out
    assert out["tokens"] > 0
    status, detail = out["doctor"]
    assert status == "warn" and "cannot build" in detail, detail
    assert not (tmp_path / "native" / "lock").exists()  # a failed build leaves no lock to hang the next load


@pytest.mark.skipif(not is_x86(), reason="checks the x86 kernels' guards from an x86 machine")
@pytest.mark.slow
def test_the_native_sources_compile_for_aarch64():
    """ARM machines (Apple Silicon under Linux, Graviton) cannot run the x86 kernels; the sources must still
    compile there, their x86 paths guarded, so the hand loops serve and the int8 products fall back to
    PyTorch's. Debian's g++-aarch64-linux-gnu (setup.sh) compiles each source against torch's headers."""
    import shutil
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    cross = shutil.which("aarch64-linux-gnu-g++")
    if cross is None:
        pytest.skip("no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu, as setup.sh does)")
    includes = [f"-I{p}" for p in [*include_paths(), sysconfig.get_paths()["include"]]]
    for src in native.SOURCES:
        cmd = [cross, "-std=c++17", "-O0", "-fopenmp", "-fPIC", "-DTORCH_EXTENSION_NAME=va_check", *includes,
               "-c", str(src), "-o", os.devnull]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{src.name} does not compile for aarch64:\n{proc.stderr[-3000:]}"
