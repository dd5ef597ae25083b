"""One SQLite transaction for a pack backend's tool: every change a tool makes is all or nothing, and
two calls writing the same store at once queue rather than interleave (BEGIN IMMEDIATE)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to `path` inside one write transaction, rows by column name; rolled back if the
    block raises, committed otherwise."""
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        con.close()


__all__ = ["transaction"]
