"""Server-side faults for a soak: one call's engine requests fail, by injection, while the other
calls share the same engine and scheduler.

`FaultyEngine` stands in for the process's engine in the phone app. It is the engine in every
respect (attributes are the engine's, and its calls go to the engine's one scheduler), except that
the turns of a session marked faulty fail when they are prepared, as an engine bug in one request
would. The phone app builds a call's brain right after asking for the call's observers, so the
load run marks the next session faulty from there (`fail_next_call`).
"""

from __future__ import annotations

from typing import Any


class InjectedEngineFault(RuntimeError):
    """The failure a soak injects into one call's turns."""


class FaultyEngine:
    def __init__(self, engine: Any) -> None:
        from voice_agent import engine_host

        self._engine = engine
        self._faulty: set[int] = set()
        self._fail_next = False
        self.injected = 0
        engine_host.share_scheduler(self, engine)  # one scheduler: the faulty call's rows sit among the others'

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def fail_next_call(self) -> None:
        self._fail_next = True

    def session(self) -> Any:
        s = self._engine.session()
        if self._fail_next:
            self._fail_next = False
            self._faulty.add(id(s))
        return s

    def prepare(self, messages: Any, **kw: Any) -> Any:
        session = kw.get("session")
        if session is not None and id(session) in self._faulty and kw.get("max_tokens", 2) > 1:
            self.injected += 1  # turns fail; the call's warm-up and guesses (max_tokens=1) do not
            raise InjectedEngineFault("injected engine fault (soak)")
        return self._engine.prepare(messages, **kw)
