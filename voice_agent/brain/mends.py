"""What the argument guards report: a call argument nobody said (`Unsaid`: the brain asks for it
instead), and one mended to the caller's own phrase of its kind (`Mended`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unsaid:
    tool: str
    argument: str
    value: str
    question: str


@dataclass(frozen=True)
class Mended:
    """A typed argument nobody said, replaced by the caller's own phrase of that kind."""
    tool: str
    argument: str
    written: str
    said: str
