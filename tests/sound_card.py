"""A virtual sound card and a caller in a room, for testing `voice-agent mic` end to end.

`VirtualSoundCard` starts a private PulseAudio daemon with two null sinks: `speaker` (the default
output: what the bot says ends up on its monitor) and `callerline`, whose monitor is remapped as
`microphone` (the default input). Any PortAudio program run with `card.env` talks to it through
ALSA's pulse plugin, as on a desktop.

`Conversation` is the caller. Every 10 ms it reads a block of the speaker (parec) and writes a
block to the microphone (pacat): the caller's next samples, plus, with a `Room` that has an echo
path, the speaker's sound from `echo_delay_s` earlier at `echo_gain` (open laptop speakers: a fixed
delay and attenuation, made from the speaker recorded in 10 ms blocks). The
caller acts on what it hears: it speaks its first line once the greeting is over, each next line
once the bot's answer is over, and its `barge_in` line while the bot is still answering. Both
directions run on one clock (the speaker's blocks), so the e2e it measures, from the caller's
true end of speech to the bot's first audio at the speaker, includes everything a user waits for.
"""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RATE = 16000
BLOCK = RATE // 100            # 10 ms
AUDIBLE = 500                  # int16 peak above which a 10 ms block of the speaker is the bot talking
ONSET_SILENCE_BLOCKS = 10      # an onset is audio after >= 100 ms of silence
# The speaker's recorder asks PulseAudio for this latency. An idle sink wakes at the longest period
# its clients allow (2 s by default, as on a desktop with nothing playing); a recorder asking for
# 10 ms would keep it awake and hide, under test, the stall a cold output stream meets there.
# An echo path needs the speaker in 10 ms blocks, so a room with echo records at 10 ms (the stall is
# then hidden; the test without echo covers it).
RECORD_LATENCY_MS = 2000
TOOLS = ("pulseaudio", "pactl", "pacat", "parec")


class SoundCardUnavailable(RuntimeError):
    """No PulseAudio here (not installed, or the daemon would not start): the reason says which."""


class VirtualSoundCard:
    def __init__(self, root: Path) -> None:
        self.root = root
        # the daemon's socket and cookie live under root; HOME stays (the engine's caches are there)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=str(root / "run"), XDG_CONFIG_HOME=str(root / "config"),
                        PULSE_RUNTIME_PATH=str(root / "run" / "pulse"))
        self.env.pop("PULSE_SERVER", None)

    def start(self) -> VirtualSoundCard:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            raise SoundCardUnavailable(f"{', '.join(missing)} not installed (setup.sh installs pulseaudio and "
                                       "pulseaudio-utils from Debian)")
        for d in ("run", "config"):
            (self.root / d).mkdir(parents=True, exist_ok=True, mode=0o700)
        modules = ["module-native-protocol-unix", "module-null-sink sink_name=speaker",
                   "module-null-sink sink_name=callerline",
                   "module-remap-source master=callerline.monitor source_name=microphone"]
        cmd = ["pulseaudio", "--daemonize=yes", "-n", "--exit-idle-time=-1", "--disallow-exit",
               f"--log-target=file:{self.root / 'pulseaudio.log'}", *(f"--load={m}" for m in modules)]
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise SoundCardUnavailable(f"pulseaudio did not start (exit {p.returncode}): "
                                       f"{(p.stderr or p.stdout).strip()[-300:]}")
        deadline = time.monotonic() + 10
        while self._pactl("info", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise SoundCardUnavailable("pulseaudio started but never answered `pactl info`")
            time.sleep(0.1)
        self._pactl("set-default-sink", "speaker")
        self._pactl("set-default-source", "microphone")
        return self

    def _pactl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True, timeout=10,
                              check=check)

    def stop(self) -> None:
        subprocess.run(["pulseaudio", "--kill"], env=self.env, capture_output=True, timeout=10)


@dataclass(frozen=True)
class Room:
    echo_gain: float = 0.0     # speaker -> microphone; 0: the user wears headphones
    echo_delay_s: float = 0.03


@dataclass
class Line:
    """One caller utterance: its audio and where its speech truly ends in it."""

    audio: np.ndarray
    speech_end: int            # samples from the clip's start


@dataclass
class Heard:
    """What the conversation recorded. The speaker track is 16 kHz, with the monotonic time of each
    10 ms block; the caller's lines are (start, true end of speech) on the same monotonic clock."""

    speaker: np.ndarray
    block_monotonic: np.ndarray
    line_spans: list[tuple[float, float]]
    unanswered: list[int] = field(default_factory=list)
    greeting_heard: bool = False

    def _loud(self) -> np.ndarray:
        n = min(len(self.speaker) // BLOCK, len(self.block_monotonic))
        return np.abs(self.speaker[: n * BLOCK].reshape(n, BLOCK).astype(np.int32)).max(axis=1) > AUDIBLE

    def onsets(self) -> list[float]:
        """When the bot's audio starts at the speaker after >= 100 ms of silence (monotonic s)."""
        out, quiet = [], ONSET_SILENCE_BLOCKS
        for i, on in enumerate(self._loud()):
            if on and quiet >= ONSET_SILENCE_BLOCKS:
                out.append(float(self.block_monotonic[i]))
            quiet = 0 if on else quiet + 1
        return out

    def bot_stops_after(self, at: float, silence_s: float = 0.2) -> float | None:
        """Where the bot's audio, if it is playing at `at`, first falls silent for `silence_s`."""
        loud = self._loud()
        need, run = int(silence_s * 100), 0
        for i in range(int(np.searchsorted(self.block_monotonic[: len(loud)], at)), len(loud)):
            run = 0 if loud[i] else run + 1
            if run >= need:
                return float(self.block_monotonic[i - need + 1])
        return None


def caller_lines(samples: np.ndarray, pad_s: float = 0.1) -> list[Line]:
    """The caller's utterances in a recording (replay's own segmentation), each with `pad_s` of the
    recording around it."""
    from voice_agent.latency.truth import speech_segments, utterances

    pad = int(pad_s * RATE)
    lines = []
    for u in utterances(speech_segments(samples)):
        a, b = max(0, int(u.start_s * RATE) - pad), int(u.end_s * RATE)
        lines.append(Line(samples[a: b + pad].copy(), speech_end=b - a))
    return lines


class Conversation:
    """The caller's side, in a thread: `start()`, then `wait()` for what it heard."""

    def __init__(self, card: VirtualSoundCard, lines: list[Line], room: Room = Room(), *,
                 barge_in: int | None = None, barge_in_after_s: float = 0.8, quiet_s: float = 1.0,
                 greeting_timeout_s: float = 240.0, answer_timeout_s: float = 20.0) -> None:
        self.card, self.lines, self.room = card, lines, room
        self.barge_in, self.barge_in_after = barge_in, barge_in_after_s
        self.quiet, self.greeting_timeout, self.answer_timeout = quiet_s, greeting_timeout_s, answer_timeout_s
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="caller", daemon=True)
        self._result: Heard | None = None
        self._error: BaseException | None = None

    def start(self) -> Conversation:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> Heard:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stop.set()
            self._thread.join(10)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _run(self) -> None:
        try:
            self._result = self._talk()
        except BaseException as e:  # re-raised in wait()
            self._error = e

    def _talk(self) -> Heard:  # noqa: C901 - one state machine, block by block
        # the echo is made from the recording, so it must come in 10 ms blocks, not in bursts
        speaker = _SpeakerRecorder(self.card, 10 if self.room.echo_gain > 0 else RECORD_LATENCY_MS)
        fmt = ["--raw", "--format=s16le", f"--rate={RATE}", "--channels=1", "--latency-msec=20"]
        play = subprocess.Popen(["pacat", "--playback", "--device=callerline", *fmt], env=self.card.env,
                                stdin=subprocess.PIPE)
        spans: list[tuple[float, float]] = []
        unanswered: list[int] = []
        line, pos = -1, None            # the line being spoken, and where in it
        heard_from = None               # monotonic: the first bot audio heard since the caller last spoke
        waiting_since = time.monotonic()
        greeting = False
        delay = max(1, int(self.room.echo_delay_s * RATE))
        echo_tail = np.zeros(delay, dtype=np.int16)
        echo_pos = 0                    # speaker samples already fed back into the microphone
        t0 = time.monotonic()
        block_i = 0
        try:
            while not self.stop.is_set():
                # one block every 10 ms on an absolute schedule, so a late wake-up does not drift
                block_i += 1
                wait = t0 + block_i * BLOCK / RATE - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                now = time.monotonic()
                onset, last_loud, loud, newest = speaker.bot_since(waiting_since)
                if heard_from is None and onset is not None:
                    heard_from = onset
                mic = np.zeros(BLOCK, dtype=np.float32)
                if pos is not None:  # speaking
                    clip = self.lines[line].audio
                    mic[: len(clip[pos: pos + BLOCK])] = clip[pos: pos + BLOCK]
                    pos += BLOCK
                    if pos >= len(clip):  # its last block goes out behind what the pipe still holds
                        begun = now + _backlog_s(play) + BLOCK / RATE - len(clip) / RATE
                        spans.append((begun, begun + self.lines[line].speech_end / RATE))
                        pos, heard_from, waiting_since = None, None, now
                else:
                    nxt = line + 1
                    bot_done = heard_from is not None and last_loud is not None and newest - last_loud >= self.quiet
                    timed_out = now - waiting_since >= self.answer_timeout
                    if line < 0:
                        greeting = greeting or bot_done
                        go = bot_done or now - t0 >= self.greeting_timeout
                    elif nxt == self.barge_in:  # over the bot's answer, once it has been going a while
                        go = timed_out or (heard_from is not None and loud and now - heard_from >= self.barge_in_after)
                    else:
                        go = bot_done or timed_out
                    if line >= 0 and timed_out and heard_from is None and line not in unanswered:
                        unanswered.append(line)
                    if nxt >= len(self.lines):
                        if go:
                            break
                    elif go:
                        line, pos, heard_from = nxt, 0, None
                if self.room.echo_gain > 0:  # the room: the speaker, `delay` samples late and quieter
                    fresh = speaker.samples_from(echo_pos)
                    echo_pos += len(fresh)
                    joined = np.concatenate([echo_tail, fresh])
                    take = min(BLOCK, max(0, len(joined) - delay))
                    mic[:take] += self.room.echo_gain * joined[:take].astype(np.float32)
                    echo_tail = joined[take:]
                if pos is None and not mic.any() and _backlog_s(play) > 2 * BLOCK / RATE:
                    continue  # silence while pacat catches up: the caller's words then go out on time
                play.stdin.write(np.clip(mic, -32768, 32767).astype(np.int16).tobytes())
                play.stdin.flush()
        finally:
            play.kill()
            play.wait(5)
            track, clock = speaker.stop()
        return Heard(track, clock, spans, unanswered, bool(greeting))


def _backlog_s(play: subprocess.Popen) -> float:
    """Audio written to pacat's stdin that it has not read yet (it reads as PulseAudio takes)."""
    return _pipe_bytes(play.stdin.fileno()) / (2 * RATE)


def _pipe_bytes(fd: int) -> int:
    import fcntl
    import termios

    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, "little")


class _SpeakerRecorder:
    """The speaker's monitor, read in a thread. At `RECORD_LATENCY_MS` pulse hands it the audio in
    bursts: each 10 ms block's time is worked back from when its burst arrived."""

    def __init__(self, card: VirtualSoundCard, latency_ms: int) -> None:
        self._proc = subprocess.Popen(
            ["parec", "--device=speaker.monitor", "--raw", "--format=s16le", f"--rate={RATE}", "--channels=1",
             f"--latency-msec={latency_ms}"], env=card.env, stdout=subprocess.PIPE)
        self._blocks: list[np.ndarray] = []
        self._times: list[float] = []
        self._loud_times: list[float] = []  # the times of the blocks where the bot is heard, in order
        self._last_loud = False             # ... and whether the newest block is one
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="speaker", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        pending = b""
        while True:
            chunk = self._proc.stdout.read1(1 << 16)
            if not chunk:
                return
            arrived = time.monotonic()
            pending += chunk
            n = len(pending) // (BLOCK * 2)
            if n == 0:
                continue
            blocks = np.frombuffer(pending[: n * BLOCK * 2], dtype=np.int16).reshape(n, BLOCK)
            pending = pending[n * BLOCK * 2:]
            times = arrived - (n - 1 - np.arange(n)) * BLOCK / RATE  # the last block ended as it arrived
            loud = np.abs(blocks.astype(np.int32)).max(axis=1) > AUDIBLE  # once per block, as it comes in
            with self._lock:
                self._blocks.extend(blocks)
                self._times.extend(times.tolist())
                self._loud_times.extend(times[loud].tolist())
                self._last_loud = bool(loud[-1])

    def bot_since(self, since: float) -> tuple[float | None, float | None, bool, float]:
        """Since `since` (monotonic): the first loud block, the last loud block, whether the newest
        block is loud, and the newest block's time."""
        with self._lock:
            i = bisect.bisect_left(self._loud_times, since)
            first = self._loud_times[i] if i < len(self._loud_times) else None
            last = self._loud_times[-1] if first is not None else None
            return first, last, self._last_loud, (self._times[-1] if self._times else 0.0)

    def samples_from(self, pos: int) -> np.ndarray:
        with self._lock:
            blocks = self._blocks[pos // BLOCK:]
        return np.concatenate(blocks) if blocks else np.zeros(0, np.int16)

    def stop(self) -> tuple[np.ndarray, np.ndarray]:
        self._proc.kill()
        self._proc.wait(5)
        self._thread.join(5)
        with self._lock:
            track = np.concatenate(self._blocks) if self._blocks else np.zeros(0, np.int16)
            return track, np.asarray(self._times, dtype=np.float64)


def session_numbers(heard: Heard, report: dict) -> dict:
    """What the ear got, against what the agent reports: per caller line, the e2e from its true end
    of speech to the bot's next onset at the speaker; per agent turn, the gap from the pipeline's
    "bot started speaking" to that audio at the speaker; the caller "starting" outside the caller's own
    lines (self-interruptions); and how soon a barge-in stopped the bot."""
    entry = report["calls"][0]
    origin = float(entry["clock_origin_monotonic"])
    onsets = heard.onsets()
    lines = []
    for k, (_start, end) in enumerate(heard.line_spans):
        nxt = heard.line_spans[k + 1][0] if k + 1 < len(heard.line_spans) else float("inf")
        onset = next((o for o in onsets if o > end), None)
        answered = onset is not None and onset < nxt
        lines.append({"line": k, "answered": answered,
                      "e2e_at_speaker_ms": round((onset - end) * 1000) if answered else None})
    gaps = []
    for t in entry["turns"]:
        moments = t.get("timeline_s") or {}
        first = moments.get("bot_started", moments.get("first_bot_audio"))  # "bot started speaking"
        if first is None:
            continue
        at = origin + float(first)
        onset = next((o for o in onsets if o >= at - 0.05), None)
        if onset is not None:
            gaps.append(round((onset - at) * 1000))
    spans = [(a - 0.2, b + 2.0) for a, b in heard.line_spans]
    speaking = entry.get("speaking") or {}

    def outside(times: list[float]) -> list[float]:
        return [t for t in times if not any(a <= origin + t <= b for a, b in spans)]

    return {"lines": lines, "first_audio_gap_ms": gaps,
            "self_interruptions": len(outside(speaking.get("user_started_s") or [])),
            "vad_starts_outside_caller": len(outside(speaking.get("vad_started_s") or []))}


def barge_in_stop_ms(heard: Heard, line: int) -> int | None:
    """How long the bot kept talking after the caller began `line` over it (None: it was silent)."""
    start = heard.line_spans[line][0]
    stop = heard.bot_stops_after(start)
    return None if stop is None else round((stop - start) * 1000)


def main(argv: list[str] | None = None) -> int:
    """`python tests/sound_card.py OUT [--echo GAIN] [--barge-in LINE] [-- MIC ARGS]`: the sample call through
    `voice-agent mic` on a fresh virtual sound card, by hand; prints what the ear got."""
    import argparse
    import json
    import signal
    import sys

    from voice_agent.audio_io import read_caller_audio, write_wav

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("out", type=Path, help="folder for the card, the agent's report, log and store, and speaker.wav")
    p.add_argument("--echo", type=float, default=0.0, metavar="GAIN", help="speaker -> microphone gain (0: headphones)")
    p.add_argument("--barge-in", type=int, default=None, metavar="LINE", help="say this caller line over the bot")
    p.add_argument("mic_args", nargs="*", help="more `voice-agent mic` flags (after --)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    sample = Path(__file__).resolve().parents[1] / "samples" / "dental_booking_call.wav"
    card = VirtualSoundCard(a.out / "card").start()
    agent = subprocess.Popen([sys.executable, "-m", "voice_agent.cli", "mic", "--report", str(a.out / "report"),
                              "--store", str(a.out / "store"), "--log-file", str(a.out / "agent.log"), *a.mic_args],
                             env=card.env, stdout=open(a.out / "agent.out", "w"), stderr=subprocess.STDOUT)
    try:
        lines = caller_lines(read_caller_audio(sample).samples)
        heard = Conversation(card, lines, Room(echo_gain=a.echo), barge_in=a.barge_in).start().wait(timeout=420)
    finally:
        agent.send_signal(signal.SIGINT)
        try:
            agent.wait(120)
        except subprocess.TimeoutExpired:
            agent.kill()
        card.stop()
    write_wav(a.out / "speaker.wav", heard.speaker, RATE)
    report = json.loads((a.out / "report" / "report.json").read_text())
    numbers = session_numbers(heard, report)
    if a.barge_in is not None:
        numbers["barge_in_stop_ms"] = barge_in_stop_ms(heard, a.barge_in)
    numbers["unanswered"], numbers["greeting_heard"] = heard.unanswered, heard.greeting_heard
    print(json.dumps(numbers, indent=1))
    for t in report["calls"][0]["turns"]:
        print(f"turn {t['index']}: caller {t['user_text']!r} -> bot {t['bot_text']!r}")
    return 0 if agent.returncode == 0 else 1


if __name__ == "__main__":
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
