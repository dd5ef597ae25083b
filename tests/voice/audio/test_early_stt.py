"""`EarlyPasses` bookkeeping: an early transcription is used only for the segment that begins with
the audio it heard, and dropped (and counted) when the caller resumes before the stop is confirmed.
The real VAD driving it is in tests/voice/audio/test_turn_pauses.py."""

from __future__ import annotations

import asyncio

from voice_agent.services.early_stt import EarlyPasses, STTStats


def _run(steps):
    async def go():
        stats = STTStats()
        heard: list[bytes] = []

        def transcribe(pcm: bytes) -> str:
            heard.append(pcm)
            return f"{len(pcm)} bytes"

        passes = EarlyPasses(transcribe, stats)
        return await steps(passes), stats, heard

    return asyncio.run(go())


def test_a_confirmed_pass_is_the_transcript_of_its_segment():
    async def steps(p: EarlyPasses):
        p.start(b"speech", b"speech" + b"\0" * 4)
        p.confirmed()
        early = p.take(b"speech" + b"silence" + b"\0" * 4)  # the segment goes on past the snapshot
        return await early.future

    result, stats, heard = _run(steps)
    assert result == "10 bytes" and heard == [b"speech\0\0\0\0"]
    assert (stats.early_started, stats.early_dropped) == (1, 0)


def test_the_caller_resuming_drops_the_pass_and_the_next_pause_starts_another():
    async def steps(p: EarlyPasses):
        p.start(b"ten in the", b"ten in the")
        p.resumed()                          # the caller went on within stop_secs
        assert p.pending is None
        p.start(b"ten in the morning", b"ten in the morning")
        p.confirmed()
        assert p.take(b"ten in the morning works") is not None
        return None

    _, stats, _ = _run(steps)
    assert (stats.early_started, stats.early_dropped) == (2, 1)


def test_a_pass_is_never_used_for_audio_it_did_not_hear():
    async def steps(p: EarlyPasses):
        p.start(b"first", b"first")
        p.confirmed()
        assert p.take(b"other audio") is None   # not this segment's: transcribed on its own
        assert p.take(b"first and more") is not None
        assert p.take(b"first and more") is None  # used once
        p.start(b"", b"")                       # nothing buffered: nothing to start
        assert p.pending is None
        return None

    _, stats, _ = _run(steps)
    assert stats.early_started == 1


def test_a_failed_dropped_pass_does_not_leak_an_error():
    async def steps(p: EarlyPasses):
        p.start(b"x", b"x")
        fut = p.pending.future
        p.resumed()
        try:
            await fut
        except RuntimeError:
            return "raised"

    def boom(_pcm: bytes) -> str:
        raise RuntimeError("model error")

    async def go():
        p = EarlyPasses(boom, STTStats())
        return await steps(p)

    assert asyncio.run(go()) == "raised"
