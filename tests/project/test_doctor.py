"""`voice-agent doctor`: exits 0 on this install and prints every item; a missing adapter, a bad
precision setting or (with --for) a busy port makes it exit 1 and name what is affected; secrets
are never printed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from engine.model.precision import resolve_precision
from voice_agent import doctor
from voice_agent.cli import main as cli_main

ITEMS = ["base weights", "adapter", "STT tiny.en", "TTS hibari", "VAD (live, pipecat Silero)",
         "CPU", "precision", "audio input devices", "audio output devices", "port 8765 (phone)",
         "port 8000 (serve)", "LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET", "version torch",
         "version pipecat-ai", "version livekit-agents", "version faster-whisper", "narrow pass threads",
         "llama.cpp peer"]


def _doctor(capsys, *args: str) -> tuple[int, str]:
    code = cli_main(["doctor", *args])
    return code, capsys.readouterr().out


def _line(out: str, item: str) -> str:
    return next(ln for ln in out.splitlines() if ln[8:].startswith(item + " "))


def test_doctor_exits_zero_here_and_prints_every_item(capsys):
    code, out = _doctor(capsys)
    assert code == 0, out
    for item in ITEMS:
        assert any(ln[8:].startswith(item + " ") for ln in out.splitlines()), (item, out)
    # Models come with their path and size.
    import engine.api

    adapter = _line(out, "adapter")
    assert str(engine.api.DEFAULT_ADAPTER) in adapter and " MB)" in adapter
    assert "FAIL" not in out and out.rstrip().splitlines()[-1].startswith("doctor: nothing a command needs is missing")
    # The precision line says what the engine will use and why.
    # (with native bf16 the default model runs int8, unless $VOICE_AGENT_PRECISION says otherwise)
    expected = resolve_precision(int8_checked=True).name
    assert _line(out, "precision").split("default model: ", 1)[1].startswith(f"{expected} (")


def test_missing_adapter_fails_and_names_it(capsys, monkeypatch, tmp_path):
    import engine

    # doctor reads the engine's public name (voice_agent imports nothing else of the engine)
    monkeypatch.setattr(engine, "DEFAULT_ADAPTER", tmp_path / "moved_away.safetensors")
    code, out = _doctor(capsys)
    assert code == 1
    line = _line(out, "adapter")
    assert line.startswith("  FAIL") and "moved_away.safetensors" in line and "affects: replay, mic, phone, serve" in line
    assert out.rstrip().splitlines()[-1].startswith("doctor: 1 problem(s): adapter; affects: ")


def test_a_bad_precision_setting_fails(capsys, monkeypatch):
    pytest.importorskip("engine.model.precision", reason="VOICE_AGENT_PRECISION comes with engine/model/precision.py")
    monkeypatch.setenv("VOICE_AGENT_PRECISION", "fp8")
    code, out = _doctor(capsys)
    assert code == 1 and _line(out, "precision").startswith("  FAIL")


def test_precision_follows_the_environment(capsys, monkeypatch):
    pytest.importorskip("engine.model.precision", reason="VOICE_AGENT_PRECISION comes with engine/model/precision.py")
    monkeypatch.setenv("VOICE_AGENT_PRECISION", "fp32")
    code, out = _doctor(capsys)
    assert code == 0 and "fp32 (VOICE_AGENT_PRECISION=fp32)" in _line(out, "precision")


def test_busy_port_warns_and_fails_only_for_its_command(capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setitem(doctor.PORTS, "phone", port)
        code, out = _doctor(capsys)
        assert code == 0 and _line(out, f"port {port} (phone)").startswith("  warn")
        code, out = _doctor(capsys, "--for", "phone")
        assert code == 1 and _line(out, f"port {port} (phone)").startswith("  FAIL")
        assert "affects: phone" in out.splitlines()[-1]


def test_livekit_settings_are_shown_without_secrets():
    env = {"LIVEKIT_URL": "wss://agent:hunter2@lk.example.com:7880/rtc?access_token=abc123",
           "LIVEKIT_API_KEY": "APIkeyvalue42", "LIVEKIT_API_SECRET": "s3cr3t-value-xyz"}
    checks = {c.item: c for c in doctor.check_livekit(env)}
    assert checks["LIVEKIT_URL"].detail == "wss://lk.example.com:7880/rtc"
    shown = " ".join(c.detail for c in checks.values())
    for secret in ("hunter2", "abc123", "APIkeyvalue42", "s3cr3t-value-xyz"):
        assert secret not in shown
    assert checks["LIVEKIT_API_SECRET"].status == "ok" and "16 characters" in checks["LIVEKIT_API_SECRET"].detail
    assert checks["LIVEKIT_TOKEN"].status == "warn" and checks["LIVEKIT_TOKEN"].affects == ("room",)


def test_a_check_that_crashes_is_a_failure_not_a_crash(capsys, monkeypatch):
    def broken() -> list[doctor.Check]:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(doctor.SECTIONS, "cpu", broken)
    code, out = _doctor(capsys)
    assert code == 1 and "check failed: RuntimeError: disk on fire" in out


def test_sizes_read_plainly(tmp_path: Path):
    (tmp_path / "a").write_bytes(b"x" * 3000)
    assert doctor.human(doctor.size_of(tmp_path)) == "2.9 KB" and doctor.human(512) == "512 B"


def test_native_layers_are_reported_for_w8a8_only(monkeypatch, tmp_path):
    from engine.model import native

    assert doctor.check_native_layers("fp32") == []
    monkeypatch.setenv(native.NATIVE_DIR_ENV, str(tmp_path))  # nothing built there
    [check] = doctor.check_native_layers("w8a8")
    assert check.status == "warn" and "not built" in check.detail and str(tmp_path) in check.detail
    (tmp_path / f"{native.EXTENSION}.so").write_bytes(b"")
    assert doctor.check_native_layers("w8a8")[0].status == "ok"
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    [check] = doctor.check_native_layers("w8a8")
    assert check.status == "warn" and "off" in check.detail


def test_native_layers_that_cannot_build_are_reported_with_their_cause(monkeypatch, tmp_path):
    from engine.model import native

    monkeypatch.setenv(native.NATIVE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(native, "build_error", lambda: None)  # this process's own build went fine
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    [check] = doctor.check_native_layers("w8a8")
    assert check.status == "warn" and "no C++ compiler" in check.detail and "Python layers" in check.detail
    monkeypatch.delenv("CXX")
    native.error_file().write_text("RuntimeError: narrow_pass.cpp:12: fatal error: omp.h: No such file\n")
    [check] = doctor.check_native_layers("w8a8")
    assert check.status == "warn" and "omp.h: No such file" in check.detail


def test_a_bad_narrow_threads_setting_fails_and_a_good_one_is_shown(capsys, monkeypatch):
    monkeypatch.setenv("VOICE_AGENT_NARROW_THREADS", "three")
    code, out = _doctor(capsys)
    line = _line(out, "narrow pass threads")
    assert code == 1 and line.startswith("  FAIL") and "VOICE_AGENT_NARROW_THREADS" in line
    monkeypatch.setenv("VOICE_AGENT_NARROW_THREADS", "one")
    assert doctor.check_narrow_threads().detail == "one (VOICE_AGENT_NARROW_THREADS=one)"


def test_a_llamacpp_peer_built_with_amx_warns_on_an_amx_cpu_only():
    amx_build = "CPU : AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | OPENMP = 1 | "
    plain_build = "CPU : AVX512 = 1 | AVX512_BF16 = 1 | OPENMP = 1 | "
    check = doctor.check_llamacpp_peer(lambda: amx_build, {"avx512f", "amx_int8"})
    assert check.status == "warn" and "SIGILL" in check.detail and check.affects == ()
    assert doctor.check_llamacpp_peer(lambda: plain_build, {"avx512f", "amx_int8"}).status == "ok"
    assert doctor.check_llamacpp_peer(lambda: amx_build, {"avx512f"}).status == "ok"
