"""Whisper on a window sized to the utterance instead of the fixed 30 s one.

faster-whisper pads every input to 30 s (3,000 mel frames), so a 3 s utterance pays for encoding
27 s of padding and the decoder cross-attends over all of it. CTranslate2's encoder also takes a
shorter input: here the utterance's own frames plus `pad_frames` frames of zero features (what
Whisper's own `pad_or_trim` puts after the audio). Without that tail the decoder never sees the
end of speech and keeps going ("Do you have anything in the morning? Do you have anything..."):
with about 2-4 s of it, it ends with end-of-text as on the 30 s window.

Stop rules, because one missing end-of-text must not become a runaway transcript:
- a token cap from the input's duration (`tokens_per_s` per second plus `token_margin`);
- a repetition check: a word pair seen twice is how a short-window loop looks.
A transcript that hit either is not trusted: `transcribe_short` says why in `stop`, and the
caller (`voice_agent.services.stt.transcribe`) transcribes that input on the 30 s window instead.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from voice_agent.latency.wer import normalize

WHISPER_RATE = 16000
FULL_WINDOW_FRAMES = 3000  # 30 s of 10 ms mel frames: Whisper's own window, never exceeded


@dataclass(frozen=True)
class ShortWindow:
    """How the short window is sized and when its transcript is cut off."""

    pad_frames: int = 300       # zero feature frames after the audio (3 s): lets the decoder end
    tokens_per_s: float = 6.0   # token cap per second of input: fast speech is ~4-5 tokens/s
    token_margin: int = 8       # plus this many, for short inputs and punctuation
    repeat_ngram: int = 2       # a repeated word n-gram of this size marks a decoder loop


DEFAULT_SHORT_WINDOW = ShortWindow()


@dataclass(frozen=True)
class ShortResult:
    text: str
    stop: str               # "eot": ended by itself; "cap": hit the token cap; "repeat": looped
    tokens: int             # text tokens kept (at most the cap)
    no_speech_prob: float
    frames: int             # encoder input frames (the 30 s window is 3,000)


@functools.lru_cache(maxsize=4)
def _tokenizer(model: WhisperModel) -> Tokenizer:
    return Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
                     language="en" if model.model.is_multilingual else None)


def features(model: WhisperModel, audio: np.ndarray, pad_frames: int) -> np.ndarray:
    """Log-mel features of `audio` (float32, 16 kHz) followed by `pad_frames` zero frames, an even
    number of frames (the encoder's convolution halves them), at most the 30 s window."""
    mel = model.feature_extractor(audio)[:, :-1]  # the extractor's last frame is its own padding
    n = min(FULL_WINDOW_FRAMES, mel.shape[1] + max(0, pad_frames))
    n += n % 2
    out = np.zeros((mel.shape[0], n), dtype=np.float32)
    out[:, : min(n, mel.shape[1])] = mel[:, :n]
    return out


def repeats(text: str, n: int = 2) -> bool:
    """True when a word n-gram occurs twice: "thank you thank you", "in the morning do you have
    anything in the morning"."""
    words = normalize(text)
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return len(grams) != len(set(grams))


def token_cap(duration_s: float, window: ShortWindow) -> int:
    return math.ceil(duration_s * window.tokens_per_s) + window.token_margin


def transcribe_short(model: WhisperModel, audio: np.ndarray, beam_size: int = 1,
                     window: ShortWindow = DEFAULT_SHORT_WINDOW) -> ShortResult:
    """Blocking: greedy (or beam) decoding of float32 16 kHz audio on a window sized to it."""
    tok = _tokenizer(model)
    feats = features(model, audio, window.pad_frames)
    encoded = model.model.encode(ctranslate2.StorageView.from_array(feats[None]))
    prompt = [*tok.sot_sequence, tok.no_timestamps]
    cap = token_cap(len(audio) / WHISPER_RATE, window)
    # CTranslate2's Whisper decodes at most max_length // 2 tokens (as Whisper's sample_len is half
    # its text context; measured on 4.8.5): room for `cap` tokens and one more, which marks the cap.
    result = model.model.generate(
        encoded, [prompt], beam_size=beam_size, max_length=2 * (cap + 1), return_no_speech_prob=True,
        suppress_blank=True, suppress_tokens=[-1])[0]
    ids = [t for t in result.sequences_ids[0] if t < tok.eot]
    text = tok.decode(ids[:cap]).strip()
    stop = "cap" if len(ids) > cap else "repeat" if repeats(text, window.repeat_ngram) else "eot"
    return ShortResult(text=text, stop=stop, tokens=min(len(ids), cap), no_speech_prob=float(result.no_speech_prob),
                       frames=feats.shape[1])
