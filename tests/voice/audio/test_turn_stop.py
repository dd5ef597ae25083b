"""`HoldOnSpeechStopStrategy`: the turn does not end while the VAD hears speech it has not yet
confirmed (the caller going on after a pause just over stop_secs), and ends exactly as Pipecat's
speech-timeout strategy does otherwise. Real Pipecat frames and timers; the VAD's state is set by
hand (a real Silero analyzer runs in tests/voice/audio/test_turn_pauses.py)."""

from __future__ import annotations

import asyncio

from pipecat.audio.vad.vad_analyzer import VADState
from pipecat.frames.frames import TranscriptionFrame, VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.utils.asyncio.task_manager import TaskManager

from voice_agent.services.turn_stop import HoldOnSpeechStopStrategy

TIMEOUT_S = 0.2


class FakeVAD:
    state = VADState.QUIET


async def _strategy(vad: FakeVAD, **waits: float) -> tuple[HoldOnSpeechStopStrategy, list[float]]:
    """A set-up strategy (`waits`: complete_s / incomplete_s), and the loop times at which it ended the turn."""
    strategy = HoldOnSpeechStopStrategy(vad=vad, max_hold_s=0.25, user_speech_timeout=TIMEOUT_S, **waits)
    await strategy.setup(FrameProcessorSetup(clock=None, pipeline_worker=None,
                                              task_manager=TaskManager(loop=asyncio.get_running_loop())))
    loop = asyncio.get_running_loop()
    stopped: list[float] = []

    @strategy.event_handler("on_user_turn_stopped")
    async def _stopped(_strategy, _params):
        stopped.append(loop.time())

    return strategy, stopped


async def _run(vad_state_at_timeout: VADState, then: VADState | None) -> tuple[bool, float, int]:
    """A segment ends and is transcribed; at the speech timeout the VAD is in `vad_state_at_timeout`;
    0.1 s later it becomes `then` (SPEAKING comes with Pipecat's VAD start frame). Returns whether
    the turn ended, after how long, and how often the stop held."""
    vad = FakeVAD()
    strategy, stopped = await _strategy(vad)
    loop = asyncio.get_running_loop()
    await strategy.handle_user_turn_started()
    await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
    t0 = loop.time()
    await strategy.process_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))
    tr = TranscriptionFrame("ten in the morning works", "", "now")
    tr.finalized = True
    await strategy.process_frame(tr)
    await asyncio.sleep(TIMEOUT_S - 0.05)
    vad.state = vad_state_at_timeout
    await asyncio.sleep(0.15)
    if then is not None:
        vad.state = then
        if then == VADState.SPEAKING:
            await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
    await asyncio.sleep(0.4)
    await strategy.cleanup()
    return bool(stopped), (stopped[0] - t0 if stopped else -1.0), strategy.holds


def test_a_quiet_vad_ends_the_turn_at_the_timeout_as_pipecat_does():
    ended, after, holds = asyncio.run(_run(VADState.QUIET, None))
    assert ended and holds == 0
    assert TIMEOUT_S <= after < TIMEOUT_S + 0.05


def test_speech_starting_at_the_timeout_keeps_the_turn_open_when_it_is_confirmed():
    ended, _, holds = asyncio.run(_run(VADState.STARTING, VADState.SPEAKING))
    assert not ended and holds == 1


def test_a_blip_that_the_vad_drops_ends_the_turn_once_it_is_dropped():
    ended, after, holds = asyncio.run(_run(VADState.STARTING, VADState.QUIET))
    assert ended and holds == 1
    assert TIMEOUT_S + 0.05 <= after < TIMEOUT_S + 0.15  # when the VAD went back to quiet


async def _after_a_wordless_segment(heard_nothing: bool) -> float:
    """The caller's line is transcribed; then a short segment with no words (a breath) starts and
    ends. Returns how long after that segment's VAD stop the turn ended (the STT reports a p99 of
    1.0 s, as ours does)."""
    from pipecat.frames.frames import STTMetadataFrame

    from voice_agent.services.stt import SegmentHeardNothingFrame

    strategy, stopped = await _strategy(FakeVAD())
    loop = asyncio.get_running_loop()
    await strategy.process_frame(STTMetadataFrame(service_name="stt", ttfs_p99_latency=1.0))
    await strategy.handle_user_turn_started()
    await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
    await strategy.process_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))
    tr = TranscriptionFrame("hi i'd like a cleaning", "", "now")
    tr.finalized = True
    await strategy.process_frame(tr)
    await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))  # the breath
    await asyncio.sleep(0.05)
    t0 = loop.time()
    await strategy.process_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))
    await asyncio.sleep(0.02)
    if heard_nothing:
        await strategy.process_frame(SegmentHeardNothingFrame())
    await asyncio.sleep(1.0)
    await strategy.cleanup()
    return stopped[0] - t0 if stopped else -1.0


def test_a_segment_with_no_words_ends_the_stt_wait_at_once():
    # sample call turn 1: a breath after the line made Pipecat wait 0.8 s (p99 - stop_secs) for text
    assert TIMEOUT_S <= asyncio.run(_after_a_wordless_segment(True)) < TIMEOUT_S + 0.05
    assert asyncio.run(_after_a_wordless_segment(False)) >= 0.8 - 0.01  # without the frame: the wait


COMPLETE_S, INCOMPLETE_S = 0.05, 0.6


async def _words_end(text: str, *, stt_s: float = 0.03, resume_at: float | None = None,
                     starting_at: float | None = None) -> tuple[float, list[str]]:
    """A segment ends; its final transcript `text` comes `stt_s` later. The caller resumes (VAD
    start) at `resume_at`, or the VAD hears unconfirmed speech from `starting_at` on. Returns how
    long after the VAD's stop the turn ended (-1: it did not) and the endings the strategy saw."""
    vad = FakeVAD()
    strategy, stopped = await _strategy(vad, complete_s=COMPLETE_S, incomplete_s=INCOMPLETE_S)
    loop = asyncio.get_running_loop()
    await strategy.handle_user_turn_started()
    await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
    t0 = loop.time()
    await strategy.process_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))
    if starting_at is not None:
        vad.state = VADState.STARTING
    await asyncio.sleep(stt_s)
    tr = TranscriptionFrame(text, "", "now")
    tr.finalized = True
    await strategy.process_frame(tr)
    if resume_at is not None:
        await asyncio.sleep(resume_at - (loop.time() - t0))
        vad.state = VADState.SPEAKING
        await strategy.process_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
    await asyncio.sleep(0.9)
    await strategy.cleanup()
    return (stopped[0] - t0 if stopped else -1.0), strategy.endings


def test_a_finished_sentence_ends_the_turn_soon_after_the_vad_stop():
    after, endings = asyncio.run(_words_end("Do you have anything in the morning?"))
    assert endings == ["complete"]
    assert COMPLETE_S <= after < COMPLETE_S + 0.04  # not the 0.2 s speech timeout


def test_a_transcript_slower_than_the_short_wait_ends_the_turn_when_it_comes():
    after, _ = asyncio.run(_words_end("Great, thank you so much. Bye.", stt_s=0.12))
    assert 0.12 <= after < 0.12 + 0.04


def test_a_line_cut_off_mid_clause_waits_longer_and_the_caller_going_on_keeps_it_open():
    after, endings = asyncio.run(_words_end("I'd like to book a cleaning for the"))
    assert endings == ["incomplete"]
    assert INCOMPLETE_S <= after < INCOMPLETE_S + 0.04
    # resuming 0.4 s after the stop: the plain 0.2 s timeout would have ended this turn already
    assert asyncio.run(_words_end("and my name is, um,", resume_at=0.4))[0] == -1.0


def test_words_with_no_closing_mark_keep_the_speech_timeout():
    after, endings = asyncio.run(_words_end("ten in the morning works"))
    assert endings == ["unsure"]
    assert TIMEOUT_S <= after < TIMEOUT_S + 0.04


def test_a_finished_sentence_still_holds_for_speech_the_vad_has_not_confirmed():
    after, _ = asyncio.run(_words_end("That works.", starting_at=0.0))
    # the VAD stays in STARTING: the stop waits max_hold_s (0.25) for it, then ends the turn
    assert COMPLETE_S + 0.25 - 0.02 <= after < COMPLETE_S + 0.25 + 0.06
