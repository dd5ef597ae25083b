"""One SQLite transaction for a pack backend's tool: every change a tool makes is all or nothing, and
two calls writing the same store at once queue rather than interleave (BEGIN IMMEDIATE). Every shipped
pack's store goes through it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def transaction(path: Path, *, write: bool = True, foreign_keys: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to `path` inside one transaction, rows by column name; rolled back if the block
    raises, committed otherwise. `write=False` reads in a plain BEGIN (no writer lock);
    `foreign_keys` turns SQLite's foreign-key checks on for the connection."""
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        if foreign_keys:
            con.execute("PRAGMA foreign_keys = ON")
        con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        con.close()


__all__ = ["transaction"]
