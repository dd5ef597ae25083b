"""The local microphone + speaker demo on PortAudio (pyaudio), through Pipecat's LocalAudioTransport.

`check_audio_devices()` runs before anything heavy is loaded, so a machine without a microphone
or speaker (CI, a server) fails in well under a second with a message saying what is missing.

`MicTransport` changes two things in Pipecat's transport:
- **The speaker never starts cold.** Pipecat's output writes with blocking calls and lets the stream
  run dry between replies. On desktop Linux (ALSA -> PulseAudio) the first write after a run-dry
  blocked for ~2 s, so every reply reached the speaker ~2 s late. Here PortAudio pulls audio from a
  buffer in a callback and plays silence when there is none: the stream never underruns. Writes
  are paced to keep about `LEAD_S` of audio queued, so a barge-in cuts the bot off within that.
- **The bot does not hear itself.** Every block the speaker plays is the echo canceller's far end
  (voice_agent/transports/echo_cancel.py); every block the microphone records is cleaned of it
  before the VAD and the STT see it. On by default; `aec=False` turns it off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voice_agent.transports.quiet import quiet_stderr


class NoAudioDeviceError(RuntimeError):
    """No usable input (or output) device; the message says what was found and what to do."""


@dataclass
class AudioDevices:
    inputs: list[tuple[int, str]]
    outputs: list[tuple[int, str]]
    default_input: int | None
    default_output: int | None


def list_audio_devices() -> AudioDevices:
    try:
        with quiet_stderr():
            import pyaudio
    except ImportError as e:
        raise NoAudioDeviceError(
            f"PyAudio is not installed ({e}); the mic demo needs pipecat's 'local' extra and portaudio "
            "(apt-get install portaudio19-dev libportaudio2; see setup.sh)") from None
    with quiet_stderr():
        pa = pyaudio.PyAudio()
        try:
            infos = [pa.get_device_info_by_index(i) for i in range(pa.get_device_count())]
            default_in = _default(pa.get_default_input_device_info)
            default_out = _default(pa.get_default_output_device_info)
        finally:
            pa.terminate()
    return AudioDevices(
        inputs=[(int(d["index"]), str(d["name"])) for d in infos if int(d.get("maxInputChannels", 0)) > 0],
        outputs=[(int(d["index"]), str(d["name"])) for d in infos if int(d.get("maxOutputChannels", 0)) > 0],
        default_input=default_in, default_output=default_out)


def _default(get: Callable[[], dict]) -> int | None:
    try:
        return int(get()["index"])
    except (OSError, IOError, KeyError):  # noqa: UP024 - pyaudio raises IOError here
        return None


def check_audio_devices(input_index: int | None = None, output_index: int | None = None) -> AudioDevices:
    devices = list_audio_devices()
    if not devices.inputs:
        raise NoAudioDeviceError(
            "no audio input device found: PortAudio sees no microphone on this machine. Plug one in (or "
            "enable it), or try the agent without one: `voice-agent replay` plays a recorded call, and "
            "`voice-agent phone` serves phone calls.")
    if not devices.outputs:
        raise NoAudioDeviceError("no audio output device found: the mic demo needs a speaker or headphones.")
    for index, pool, kind in ((input_index, devices.inputs, "input"), (output_index, devices.outputs, "output")):
        if index is not None and index not in [i for i, _ in pool]:
            names = ", ".join(f"{i}: {n}" for i, n in pool)
            raise NoAudioDeviceError(f"--{kind}-device {index} is not an {kind} device; available: {names}")
    return devices


def make_mic_transport(input_index: int | None = None, output_index: int | None = None, *,
                       aec: bool = True) -> Any:
    """The demo's transport: the default (or given) devices, the echo canceller on unless `aec=False`."""
    from pipecat.transports.local.audio import LocalAudioTransportParams

    from voice_agent.transports.mic_stream import MicTransport  # pyaudio: only when the demo runs

    return MicTransport(LocalAudioTransportParams(
        audio_in_enabled=True, audio_out_enabled=True, input_device_index=input_index,
        output_device_index=output_index), aec=aec)


def latency_line(tl: Any) -> str:
    """One line per turn, in the MISSION.md names: what the caller waited for, and where it went."""

    def ms(a: float | None, b: float | None) -> str:
        return f"{(b - a) * 1000:.0f}" if a is not None and b is not None else "-"

    eng = tl.engine[-1] if getattr(tl, "engine", None) else {}
    return (f"turn {tl.index}: e2e_ms {ms(tl.vad_stopped, tl.first_bot_audio)} | "
            f"answer_e2e_ms {ms(tl.vad_stopped, getattr(tl, 'first_answer_audio', None))} | "
            f"stt_ms {ms(tl.vad_stopped, tl.transcript_final)} | ttft_ms {eng.get('ttft_ms', '-')} | "
            f"ttfat_ms {eng.get('ttfat_ms', '-')} | tts_ttfb_ms {ms(tl.tts_request, tl.tts_first_audio)} | "
            f"tokens_per_forward {eng.get('tokens_per_forward', '-')} | "
            f"you: {tl.user_text.strip()[:60]!r} | bot: {tl.bot_text.strip()[:60]!r}")
