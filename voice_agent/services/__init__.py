"""Pipecat services for the cascade: `llm` (the in-process engine), `stt` (local faster-whisper)
and `tts` (hibari; piper and Coqui as options). Import the submodule you need; this package
imports nothing heavy itself."""
