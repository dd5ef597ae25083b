"""Fail fast, and clearly, before loading any model: is there a LiveKit server at this URL?

Light on purpose (standard library only): `voice-agent livekit-worker` and `voice-agent room` call
it first, so a wrong URL costs a second, not a model load followed by a retry loop.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse


class LiveKitUnreachable(RuntimeError):
    """No usable LiveKit server at the given URL; the message says what to do."""


def check_reachable(url: str, timeout: float = 3.0) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("ws", "wss", "http", "https") or not parsed.hostname:
        raise LiveKitUnreachable(f"--url must look like ws://host:7880 or wss://host; got {url!r}")
    port = parsed.port or (443 if parsed.scheme in ("wss", "https") else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as e:
        raise LiveKitUnreachable(
            f"cannot reach the LiveKit server at {url} ({parsed.hostname}:{port}): {e.strerror or e}. "
            "Start one (e.g. `livekit-server --dev`) or pass --url.") from None


def require(**values: str) -> None:
    """Raise LiveKitUnreachable naming every missing flag (`api_key=""` -> --api-key)."""
    missing = ["--" + k.replace("_", "-") for k, v in values.items() if not v]
    if missing:
        raise LiveKitUnreachable(f"missing {', '.join(missing)} (flags, or the LIVEKIT_* environment variables)")
