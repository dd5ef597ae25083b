"""A tiny scenario pack written as a builder would, outside this repository: a library's loan desk.

`write_library_pack(folder)` writes scenario.yaml, backend.py (which imports its own store.py) and
callers/calls.yaml; nothing in voice_agent knows about libraries.
"""

from __future__ import annotations

from pathlib import Path

SCENARIO_YAML = """\
name: city_library
description: The loan desk of the City Library.
reasoning_effort: instant
backend: LoanDesk
opening_hours: "10:00-19:00"
greeting: "City Library, loan desk. How can I help?"
filler: "One moment."
greeting_reply: "Hello! How can I help?"
goodbye_reply: "Thanks for calling the City Library. Goodbye!"
system_prompt: |
  You are the loan desk of the City Library, on a phone call.
  Speak in one or two short sentences. Use the tools to look up a member's loans and renew books.
facts:
  hours: "Every day, 10 am to 7 pm."
fact_questions:
  hours: [opening hours, when are you open, what time do you close]
ask:
  card_number: "Could I have your library card number, please?"
tools:
  - name: list_loans
    description: The books a member has on loan.
    parameters:
      type: object
      properties:
        card_number: {type: string, x-kind: phone_number, description: "the card's digits"}
      required: [card_number]
  - name: renew_book
    description: Renew one book a member has on loan for two more weeks.
    parameters:
      type: object
      properties:
        card_number: {type: string, x-kind: phone_number}
        title: {type: string, x-kind: text}
      required: [card_number, title]
"""

STORE_PY = '''\
"""The loans, in a JSON file."""
import json
from pathlib import Path


class Loans:
    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            self.save({})

    def load(self) -> dict:
        return json.loads(self.path.read_text())

    def save(self, data: dict) -> None:
        self.path.write_text(json.dumps(data, indent=1))
'''

BACKEND_PY = '''\
import datetime as dt

from voice_agent.packs import Backend, ToolError
from voice_agent.policy.kinds import KindContext, KindError, parse

from .store import Loans


class LoanDesk(Backend):
    def __init__(self, store, today=None, hours=None):
        super().__init__(store, today, hours)
        self.loans = Loans(self.store / "loans.json")

    def _card(self, card_number):
        try:
            return parse("phone_number", card_number, KindContext(today=self.today()))
        except KindError as e:
            raise ToolError(f"card number: {e}") from None

    def list_loans(self, card_number):
        books = self.loans.load().get(self._card(card_number))
        if books is None:
            raise ToolError("No member has that card number.")
        return {"loans": books}

    def renew_book(self, card_number, title):
        data = self.loans.load()
        books = data.get(self._card(card_number))
        if books is None:
            raise ToolError("No member has that card number.")
        book = next((b for b in books if title.lower() in b["title"].lower()), None)
        if book is None:
            raise ToolError(f"{title} is not on loan to this card.")
        book["due"] = (dt.date.fromisoformat(book["due"]) + dt.timedelta(days=14)).isoformat()
        self.loans.save(data)
        return {"renewed": book["title"], "due": book["due"]}

    def setup(self, block):
        self.loans.save({str(k): v for k, v in (block.get("members") or {}).items()})

    def snapshot(self):
        return {"members": self.loans.load()}
'''

CALLS_YAML = """\
today: 2026-12-01
calls:
  - id: renew_dune
    setup:
      members:
        "4471": [{title: Dune, due: "2026-12-03"}, {title: Emma, due: "2026-12-10"}]
    caller:
      - "Hi, I'd like to renew Dune please. My card number is four four seven one."
      - "Thanks, bye."
    expect:
      state:
        members:
          "4471": [{title: Dune, due: "2026-12-17"}, {title: Emma, due: "2026-12-10"}]
  - id: hours
    caller:
      - "When are you open?"
    expect:
      must_say: ["10 am"]
"""


def write_library_pack(folder: Path) -> Path:
    (folder / "callers").mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(SCENARIO_YAML)
    (folder / "store.py").write_text(STORE_PY)
    (folder / "backend.py").write_text(BACKEND_PY)
    (folder / "callers" / "calls.yaml").write_text(CALLS_YAML)
    return folder
