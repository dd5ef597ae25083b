"""The phone output's barge-in rule: audio queued before an interruption is never written after it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pipecat.frames.frames import OutputAudioRawFrame
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams

from voice_agent.transports.phone_output import BargeInSafeOutput, PhoneWebsocketTransport


def chunk() -> OutputAudioRawFrame:
    return OutputAudioRawFrame(audio=b"\x00\x00" * 160, sample_rate=8000, num_channels=1)


def output() -> BargeInSafeOutput:
    websocket = SimpleNamespace(headers={}, client_state=None, application_state=None)
    transport = PhoneWebsocketTransport(websocket=websocket, params=FastAPIWebsocketParams(audio_out_enabled=True))
    return transport.output()


def test_chunks_queued_before_a_barge_in_are_dropped_and_later_ones_are_not():
    out = output()
    assert isinstance(out, BargeInSafeOutput)
    before, kept = chunk(), chunk()
    kept.interruptible = False
    assert not out.is_stale(before)  # no barge-in yet
    out.mark_interruption()
    after = chunk()
    assert out.is_stale(before)
    assert not out.is_stale(kept)  # uninterruptible audio still plays, as Pipecat promises
    assert not out.is_stale(after)  # the next reply is spoken


def test_writing_a_stale_chunk_sends_nothing_and_is_counted():
    out = output()
    sent: list = []

    async def send(payload) -> None:
        sent.append(payload)

    out._client = SimpleNamespace(is_closing=False, is_connected=True, send=send)
    stale = chunk()
    out.mark_interruption()
    assert asyncio.run(out.write_audio_frame(stale)) is False
    assert sent == [] and out.dropped_after_barge_in == 1
