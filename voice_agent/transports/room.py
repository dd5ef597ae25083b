"""A LiveKit room as a call: Pipecat's LiveKitTransport under the shared pipeline (`build_pipeline`).

The bot joins the room with the given access token and talks to whoever is in it (a SIP call put
there by LiveKit SIP, or a browser). The participants' audio is mixed into one stream, because
the pipeline runs one VAD and one STT. The call ends when the room disconnects, or when the last
other participant leaves; the engine session (KV cache) lives as long as the call.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from loguru import logger
from pipecat.transports.livekit.transport import LiveKitParams, LiveKitTransport
from pipecat.workers.runner import WorkerRunner

from voice_agent.config import CallOptions
from voice_agent.pipeline import build_pipeline
from voice_agent.scenarios import Scenario


class RoomTokenError(ValueError):
    """The access token does not say which room to join, and no --room was given."""


class RoomJoinError(RuntimeError):
    """The transport could not join (or lost) the room; the message has LiveKit's reason."""


def room_from_token(token: str) -> str | None:
    """The room a LiveKit access token grants (`video.room`), read without verifying the token
    (the server does that); None when the token names no room or is not a JWT."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        room = claims.get("video", {}).get("room")
    except (IndexError, ValueError, AttributeError):
        return None
    return room if isinstance(room, str) and room else None


def _reason(frame: Any) -> str:
    """LiveKit's own words for a failed join: the last retry's exception, first line only."""
    exc = getattr(frame, "exception", None)
    last = getattr(exc, "last_attempt", None)  # tenacity's RetryError around the connect retries
    if last is not None and last.exception() is not None:
        exc = last.exception()
    return (str(exc) if exc is not None else str(frame.error)).splitlines()[0][:300]


def make_room_transport(url: str, token: str, room_name: str | None = None) -> LiveKitTransport:
    room = room_name or room_from_token(token)
    if not room:
        raise RoomTokenError("the token names no room; pass --room, or mint a token with a room grant")
    params = LiveKitParams(audio_in_enabled=True, audio_out_enabled=True, audio_in_user_tracks=False)
    return LiveKitTransport(url=url, token=token, room_name=room, params=params)


async def run_room_call(url: str, token: str, scenario: Scenario | str, options: CallOptions,
                        *, room_name: str | None = None, engine: Any = None) -> None:
    """Join the room and run the call until it ends. Raises RoomJoinError when the transport
    cannot join the room (bad token, not a LiveKit server...)."""
    transport = make_room_transport(url, token, room_name)
    call = build_pipeline(transport, scenario, options, engine=engine)
    others: set[str] = set()
    join_errors: list[str] = []

    @call.task.event_handler("on_pipeline_error")
    async def _error(_task: Any, frame: Any) -> None:
        # Pipecat keeps a pipeline running when its transport fails to connect; a room call
        # without a room has nothing left to do, so end it and say why.
        if frame.processor in (transport.input(), transport.output()) and not frame.processor.is_usable:
            join_errors.append(_reason(frame))
            await call.task.cancel(reason="the LiveKit transport cannot reach the room")

    @transport.event_handler("on_participant_connected")
    async def _joined(_t: Any, participant_id: str) -> None:
        others.add(participant_id)
        logger.info(f"room: {participant_id} joined")

    @transport.event_handler("on_participant_disconnected")
    async def _left(_t: Any, participant_id: str) -> None:
        others.discard(participant_id)
        logger.info(f"room: {participant_id} left")
        if not others:
            await call.task.cancel(reason="the caller left the room")

    @transport.event_handler("on_disconnected")
    async def _disconnected(_t: Any) -> None:
        await call.task.cancel(reason="disconnected from the room")

    @call.llm.event_handler("on_engine_metrics")
    async def _metrics(_llm: Any, m: dict) -> None:
        logger.info(f"room: ttft {m.get('ttft_ms')} ms, ttfat {m.get('ttfat_ms')} ms, "
                    f"prefill {m.get('prefill_ms')} ms, cached {m.get('cached_tokens')}/{m.get('prompt_tokens')}")

    runner = WorkerRunner(handle_sigint=True)
    await runner.add_workers(call.task)
    await runner.run()
    if join_errors:
        raise RoomJoinError(join_errors[0])
