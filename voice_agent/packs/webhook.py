"""Tools served over HTTP: a pack that names `webhook: {url: ...}` in place of a Python backend.

Each tool call is POSTed as JSON, as hosted voice platforms call a customer's own server:

    POST url  {"tool": "renew_book", "arguments": {"member_id": "4471"}, "call_id": "..."}
      -> 200  {"renewed": "Dune", "due": "2026-12-22"}          (any JSON object; {"error": ...} is read out)

`setup` posts {"setup": {...}} and `snapshot` posts {"snapshot": true} (simulate's grading). A request
gets `timeout_s` and one retry; when both fail (a timeout, a refused connection, an HTTP error, a body
that is not a JSON object) the tool answers with an apology the agent can say and a `webhook_failure`
that names what went wrong, which simulate's report shows.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from loguru import logger

from voice_agent.packs.backend import ToolError

APOLOGY = "Sorry, I can't reach our system right now. Could we try that again in a moment?"


class WebhookBackend:
    def __init__(self, url: str, tool_names: list[str], timeout_s: float = 5.0, retries: int = 1,
                 headers: dict[str, str] | None = None) -> None:
        self.url, self.timeout_s, self.retries = url, float(timeout_s), int(retries)
        self.tool_names = set(tool_names)
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.call_id = uuid.uuid4().hex
        self.failures: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.__dict__.get("tool_names", ()):
            raise AttributeError(name)

        def call(**arguments: Any) -> dict:
            return self._tool(name, arguments)

        call.__name__ = name
        return call

    def _tool(self, name: str, arguments: dict) -> dict:
        try:
            return self._post({"tool": name, "arguments": arguments, "call_id": self.call_id})
        except _Failed as e:
            self.failures.append(f"{name}: {e}")
            return {"error": APOLOGY, "webhook_failure": str(e)}

    def setup(self, block: dict) -> None:
        if block:
            try:
                self._post({"setup": block, "call_id": self.call_id})
            except _Failed as e:
                raise ToolError(f"the webhook refused the setup: {e}") from None

    def snapshot(self) -> dict:
        try:
            return self._post({"snapshot": True, "call_id": self.call_id})
        except _Failed as e:
            return {"webhook_failure": str(e)}

    def close(self) -> None:
        pass

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=self.headers, method="POST")
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - the pack's own URL
                    payload = json.loads(resp.read().decode("utf-8") or "null")
                if isinstance(payload, dict):
                    return payload
                last = "the answer was not a JSON object"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code} from {self.url}"
            except (TimeoutError, urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                timed_out = isinstance(reason, TimeoutError) or "timed out" in str(reason)
                last = (f"no answer from {self.url} within {self.timeout_s:g} s" if timed_out
                        else f"cannot reach {self.url} ({reason})")
            except (ValueError, UnicodeDecodeError):
                last = "the answer was not JSON"
            logger.warning(f"webhook {body.get('tool') or next(iter(body))}: {last} "
                           f"(try {attempt + 1} of {self.retries + 1}, {time.monotonic() - t0:.1f} s)")
        raise _Failed(last)


class _Failed(Exception):
    pass


__all__ = ["APOLOGY", "WebhookBackend"]
