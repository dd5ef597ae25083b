"""`voice-agent mic` end to end on a virtual sound card (tests/sound_card.py): the sample call's
caller is played into the microphone in real time, acting on what it hears at the speaker, and the
speaker is recorded. Skips, saying why, where PulseAudio is missing or cannot start.

Each session prints what it measured (per caller line the e2e from its true end of speech to the
bot's audio at the speaker; per turn the gap from the pipeline's first bot audio to that audio at
the speaker; the transcripts). The numbers are for the log: the assertions are on behaviour that a
broken build fails (a reply stalled by a cold output stream arrives ~2 s late; a bot without echo
cancellation answers itself).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sound_card import (
    Conversation,
    Heard,
    Room,
    SoundCardUnavailable,
    VirtualSoundCard,
    barge_in_stop_ms,
    caller_lines,
    session_numbers,
)
from voice_agent.audio_io import read_caller_audio

pytestmark = pytest.mark.slow
SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "dental_booking_call.wav"
# From the pipeline's "bot started speaking" to that audio at the speaker: PortAudio's and
# PulseAudio's buffers (60-100 ms measured). The stall this guards against was ~2,000 ms.
MAX_FIRST_AUDIO_GAP_MS = 400
# A caller talking over the bot: its audio must stop about when the VAD confirms the speech
# (start_secs 0.2 s) plus the output's queue (LEAD_S); a bot that ignores it talks on for seconds.
MAX_BARGE_IN_STOP_MS = 1500


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory):
    try:
        card = VirtualSoundCard(tmp_path_factory.mktemp("sound_card")).start()
    except SoundCardUnavailable as e:
        pytest.skip(f"no virtual sound card: {e}")
    yield card
    card.stop()


def _session(card: VirtualSoundCard, out: Path, room: Room, *, barge_in: int | None = None,
             mic_args: tuple[str, ...] = ()) -> tuple[Heard, dict, dict]:
    lines = caller_lines(read_caller_audio(SAMPLE).samples)
    assert len(lines) == 4
    agent = subprocess.Popen(
        [sys.executable, "-m", "voice_agent.cli", "mic", "--report", str(out / "report"), "--store",
         str(out / "store"), "--log-file", str(out / "agent.log"), *mic_args],
        env=card.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        heard = Conversation(card, lines, room, barge_in=barge_in).start().wait(timeout=420)
    finally:
        agent.send_signal(signal.SIGINT)  # the user's Ctrl-C: the report is written on the way out
        try:
            printed, _ = agent.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            agent.kill()
            printed, _ = agent.communicate()
    print(printed)
    assert agent.returncode == 0, printed[-3000:]
    report = json.loads((out / "report" / "report.json").read_text())
    numbers = session_numbers(heard, report)
    print(json.dumps(numbers, indent=1))
    for t in report["calls"][0]["turns"]:
        print(f"turn {t['index']}: caller {t['user_text']!r} -> bot {t['bot_text']!r}")
    return heard, report, numbers


def _assert_call_completed(heard: Heard, report: dict, numbers: dict) -> None:
    assert heard.greeting_heard, "the greeting never played at the speaker"
    assert heard.unanswered == [], f"caller lines with no answer at the speaker: {heard.unanswered}"
    assert [line["answered"] for line in numbers["lines"]] == [True] * 4
    bookings = report["calls"][0]["state"]["appointments"].get("Jordan Lee") or []
    assert [(b["time"], b["service"]) for b in bookings] == [("10:00", "cleaning")], bookings
    assert numbers["first_audio_gap_ms"], "no reply was matched at the speaker"
    assert max(numbers["first_audio_gap_ms"]) <= MAX_FIRST_AUDIO_GAP_MS, numbers["first_audio_gap_ms"]


def test_mic_holds_the_sample_call_and_replies_reach_the_speaker_without_a_stall(card, tmp_path):
    heard, report, numbers = _session(card, tmp_path, Room())  # headphones: no echo path
    _assert_call_completed(heard, report, numbers)
    assert report["summary"]["mode"] == "live" and report["summary"]["answered_turns"] >= 4


def test_on_open_speakers_the_bot_does_not_answer_itself_and_a_barge_in_still_stops_it(card, tmp_path):
    """The speaker leaks into the microphone (-10 dB, 30 ms late) as on a laptop without headphones;
    the caller says goodbye over the booking confirmation."""
    heard, report, numbers = _session(card, tmp_path, Room(echo_gain=0.3, echo_delay_s=0.03), barge_in=3)
    _assert_call_completed(heard, report, numbers)
    assert numbers["self_interruptions"] == 0, report["calls"][0]["speaking"]
    stop = barge_in_stop_ms(heard, 3)
    print(f"barge-in: the bot stopped {stop} ms after the caller began")
    assert stop is not None and stop <= MAX_BARGE_IN_STOP_MS
    assert report["calls"][0]["echo_cancellation"] is True
