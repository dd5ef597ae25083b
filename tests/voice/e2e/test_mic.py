"""`voice-agent mic` on a machine without audio devices (CI, this box) fails fast and says why."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voice_agent.transports.mic import NoAudioDeviceError, list_audio_devices


def _no_input_device() -> bool:
    try:
        return not list_audio_devices().inputs
    except NoAudioDeviceError:
        return True


@pytest.mark.skipif(not _no_input_device(), reason="this machine has a microphone; the no-device path cannot be shown")
@pytest.mark.parametrize("cmd", [[sys.executable, "-m", "voice_agent.cli", "mic"], ["voice-agent", "mic"]])
def test_mic_without_audio_device_exits_fast_with_a_clear_message(cmd):
    if cmd[0] == "voice-agent":
        exe = shutil.which("voice-agent") or str(Path(sys.executable).parent / "voice-agent")
        cmd = [exe, *cmd[1:]]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    elapsed = time.monotonic() - t0
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert elapsed < 10, f"took {elapsed:.1f}s"
    assert "no audio input device found" in p.stderr
    assert "voice-agent replay" in p.stderr  # says what to do instead
    assert "Traceback" not in p.stderr


def test_list_devices_reports_what_portaudio_sees():
    p = subprocess.run([sys.executable, "-m", "voice_agent.cli", "mic", "--list-devices"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "input devices:" in p.stdout and "output devices:" in p.stdout


def test_latency_line_uses_the_mission_metric_names():
    from voice_agent.latency.timeline import TurnTimeline
    from voice_agent.transports.mic import latency_line

    tl = TurnTimeline(index=3, vad_stopped=10.0, transcript_final=10.4, tts_request=10.9, tts_first_audio=10.95,
                      first_bot_audio=11.0, first_answer_audio=11.6, user_text="book me in", bot_text="Sure.")
    tl.engine.append({"ttft_ms": 120.5, "ttfat_ms": 300.0, "tokens_per_forward": 2.5})
    line = latency_line(tl)
    assert line.startswith("turn 3: e2e_ms 1000 | answer_e2e_ms 1600 | stt_ms 400 | ttft_ms 120.5 | ttfat_ms 300.0 "
                           "| tts_ttfb_ms 50")
    assert "tokens_per_forward 2.5" in line and "'book me in'" in line


def test_the_speaker_buffer_plays_silence_when_empty_and_a_barge_in_clears_it():
    from voice_agent.transports.mic_stream import PlaybackBuffer

    buf = PlaybackBuffer()
    assert buf.take(8) == bytes(8)  # nothing queued: silence, so the stream never runs dry
    buf.put(b"\x01\x02\x03\x04")
    assert buf.take(8) == b"\x01\x02\x03\x04" + bytes(4)
    buf.put(bytes(range(1, 11)))
    assert len(buf) == 10 and buf.clear() == 10 and buf.take(4) == bytes(4)


def test_mic_help_offers_echo_cancellation_off_and_a_report():
    p = subprocess.run([sys.executable, "-m", "voice_agent.cli", "mic", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "--no-aec" in p.stdout and "--report" in p.stdout
