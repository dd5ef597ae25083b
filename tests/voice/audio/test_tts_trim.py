"""The TTS's padding is cut, never its speech: real hibari output for a reply's first words."""

from __future__ import annotations

import numpy as np

from voice_agent.services.tts import trim_silence

RATE = 24000


def test_trimming_keeps_every_audible_sample_and_at_most_10_ms_of_lead_silence(say):
    audio = say("Thanks for calling Bright Smile Dental.")
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    assert loud[0] > 0.1 * RATE  # hibari pads its sentences: there is something to trim
    out = trim_silence(audio, RATE)
    out_loud = np.flatnonzero(np.abs(out) > 0.01)
    lead_s = out_loud[0] / RATE
    assert lead_s <= 0.0101  # what the caller waits through before the first word
    assert len(out_loud) == len(loud)  # no audible sample was cut
    start = loud[0] - out_loud[0]
    assert np.array_equal(out, audio[start:start + len(out)])  # a cut, not a change
