"""`TwilioCaller`: one caller on a Twilio Media Streams websocket, as a phone network would be.

It sends `connected` and `start`, then a `media` message every 20 ms at real-time pace (the
recording's 8 kHz mu-law, then silence), and records every `media`, `clear` and `mark` message the
bot sends back with its arrival time. The send time of every 20 ms chunk is kept, so the moment
the caller's speech really ended is known on the shared clock even when the sender ran late.

Faults a soak needs are behaviours of the caller: junk and out-of-order frames, a hang-up at a
given moment, and a stall (the caller's side stops sending and reading for a while).
"""

from __future__ import annotations

import asyncio
import audioop
import base64
import json
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from voice_agent.config import BUSY_MARK

CHUNK = 160                # 20 ms of 8 kHz mu-law
CHUNK_S = 0.02
SILENCE = b"\xff" * CHUNK  # mu-law zero


def mulaw_8k(samples_16k: np.ndarray) -> bytes:
    """16 kHz int16 mono -> 8 kHz mu-law, as a phone line carries it."""
    pcm8, _ = audioop.ratecv(np.ascontiguousarray(samples_16k, dtype=np.int16).tobytes(), 2, 1, 16000, 8000, None)
    return audioop.lin2ulaw(pcm8, 2)


@dataclass
class CallerFaults:
    """What this caller does wrong (all off by default)."""

    junk_every_s: float | None = None   # send a junk message (not JSON, bad base64, wrong shape) this often
    out_of_order: bool = False          # send media with shuffled sequence numbers now and then
    hang_up_at_s: float | None = None   # close the socket this long after the stream started
    stall_at_s: float | None = None     # stop sending and reading at this moment ...
    stall_s: float = 0.0                # ... for this long
    engine_fails: bool = False          # the server's engine fails this call's turns (injected: faults.FaultyEngine)

    def names(self) -> list[str]:
        """The faults this caller brings, by kind (the report names each)."""
        out = []
        if self.junk_every_s is not None:
            out.append("junk_frames")
        if self.out_of_order:
            out.append("out_of_order_frames")
        if self.hang_up_at_s is not None:
            out.append("hang_up")
        if self.stall_at_s is not None and self.stall_s > 0:
            out.append("stalled_socket")
        if self.engine_fails:
            out.append("engine_failure")
        return out


@dataclass
class TwilioCaller:
    url: str
    audio: bytes                       # the caller's side: 8 kHz mu-law
    tail_s: float = 8.0                # silence sent after the recording, for the last answer
    custom: dict = field(default_factory=dict)  # Twilio <Parameter>s
    faults: CallerFaults = field(default_factory=CallerFaults)
    stream_sid: str = field(default_factory=lambda: "MZ" + uuid.uuid4().hex)
    # What happened, on time.monotonic():
    t0: float | None = None            # when the first media chunk was due
    sent_at: list[float] = field(default_factory=list)   # actual send time of each chunk
    received: list[tuple[float, int]] = field(default_factory=list)  # (arrival, bytes) of bot media
    clears: list[float] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    junk_sent: int = 0
    hung_up: bool = False
    closed_by_server: bool = False
    _closing: bool = False
    error: str | None = None

    @property
    def busy(self) -> bool:
        """The server said all its lines were busy (and ended the call)."""
        return BUSY_MARK in self.marks

    def bot_audio_s(self) -> float:
        return sum(n for _, n in self.received) / 8000

    def chunk_time(self, t_audio_s: float) -> float | None:
        """When the caller's audio at `t_audio_s` (from the stream's start) was actually sent."""
        i = int(t_audio_s / CHUNK_S)
        if not self.sent_at or i >= len(self.sent_at):
            return None
        return self.sent_at[i] + (t_audio_s - i * CHUNK_S)

    async def run(self, connect_timeout_s: float = 10.0) -> None:
        """Place the call and play it to the end (or the fault that ends it). Never raises."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        try:
            ws = await asyncio.wait_for(connect(self.url, max_size=None, open_timeout=connect_timeout_s),
                                        timeout=connect_timeout_s)
        except (OSError, TimeoutError) as e:
            self.error = f"could not connect to {self.url}: {type(e).__name__}: {e}"
            return
        stalled = asyncio.Event()
        stalled.set()  # set = not stalled
        recv = asyncio.create_task(self._recv(ws, stalled))
        try:
            await self._start(ws)
            await self._send(ws, stalled)
        except ConnectionClosed:
            self.closed_by_server = not self.hung_up
        except Exception as e:  # a caller that fails is a result, not a crash of the load run
            self.error = f"{type(e).__name__}: {e}"
        finally:
            if not self.hung_up and not self.closed_by_server:
                try:
                    await ws.send(json.dumps({"event": "stop", "streamSid": self.stream_sid}))
                except Exception:
                    pass
            self._closing = True
            await ws.close()
            recv.cancel()
            await asyncio.gather(recv, return_exceptions=True)

    async def _start(self, ws) -> None:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid, "start": {
            "streamSid": self.stream_sid, "accountSid": "AC" + "0" * 32, "callSid": "CA" + uuid.uuid4().hex,
            "tracks": ["inbound"], "customParameters": dict(self.custom),
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))

    async def _send(self, ws, stalled: asyncio.Event) -> None:
        f = self.faults
        chunks = [self.audio[i:i + CHUNK].ljust(CHUNK, b"\xff") for i in range(0, len(self.audio), CHUNK)]
        chunks += [SILENCE] * int(self.tail_s / CHUNK_S)
        loop = asyncio.get_running_loop()
        t_loop0 = loop.time()
        self.t0 = time.monotonic()
        next_junk = f.junk_every_s
        seq = 2
        for i, chunk in enumerate(chunks):
            due = t_loop0 + i * CHUNK_S
            await asyncio.sleep(max(0.0, due - loop.time()))
            t = i * CHUNK_S
            if f.hang_up_at_s is not None and t >= f.hang_up_at_s:
                self.hung_up = True
                return
            if f.stall_at_s is not None and f.stall_at_s <= t < f.stall_at_s + CHUNK_S:
                stalled.clear()
                await asyncio.sleep(f.stall_s)  # a stuck network: nothing sent, nothing read
                stalled.set()
            if next_junk is not None and t >= next_junk:
                await ws.send(_junk(self.junk_sent))
                self.junk_sent += 1
                next_junk += f.junk_every_s
            number = seq + (3 if f.out_of_order and i % 50 == 25 else 0)
            self.sent_at.append(time.monotonic())
            await ws.send(json.dumps({"event": "media", "sequenceNumber": str(number), "streamSid": self.stream_sid,
                                      "media": {"track": "inbound", "chunk": str(i), "timestamp": str(int(t * 1000)),
                                                "payload": base64.b64encode(chunk).decode()}}))
            seq += 1

    async def _recv(self, ws, stalled: asyncio.Event) -> None:
        try:
            async for raw in ws:
                await stalled.wait()
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                event = msg.get("event")
                if event == "media":
                    payload = base64.b64decode(msg.get("media", {}).get("payload", ""))
                    self.received.append((time.monotonic(), len(payload)))
                elif event == "clear":
                    self.clears.append(time.monotonic())
                elif event == "mark":
                    self.marks.append(str(msg.get("mark", {}).get("name")))
        except Exception:
            pass  # the socket closed: the sender sees it too
        finally:
            if not self.hung_up and not self._closing:
                self.closed_by_server = True


def _junk(n: int) -> str:
    """A message a real network or a buggy client might send: each kind in turn."""
    kinds = ["this is not json", json.dumps([1, 2, 3]), json.dumps({"event": "media", "media": {"payload": "%%%"}}),
             json.dumps({"event": "media"}), json.dumps({"event": "dtmf", "dtmf": {"digit": "5"}})]
    return kinds[n % len(kinds)]
