"""Where a sync loop keeps its cursor between runs.

A `CursorStore` is anything with `load()` and `save(cursor)`. The loop saves a
cursor only after its handler has returned for every change before it, so
after a crash it resumes at the first batch not fully handled: nothing is
lost. That batch is handed over again, so an application whose own writes
are not in the same transaction as `save` applies changes by
(conversation_id, version), which the feed hands over contiguously per
conversation (`VersionFilter`). An application that keeps its data in a
database can implement `save` in the same transaction as its writes instead
and get each change exactly once without the filter.

Cursors are opaque: never parse or compare them. After the store was restored
from an older backup, a cursor from before the restore may be answered with
`CursorExpiredError` (docs/sync.md, "Cursors"): drop the local copy, save
nothing, and pull again from the beginning (a store whose `load` returns None).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol
from uuid import UUID


class CursorStore(Protocol):
    def load(self) -> str | None:
        """The cursor saved last, or None to sync from the beginning."""
        ...

    def save(self, cursor: str) -> None:
        """Keep `cursor` durably: once this returns, a crash does not undo it."""
        ...


class FileCursorStore:
    """A cursor in a file, replaced atomically and fsynced on every save, so a
    crash leaves either the old cursor or the new one, never a torn file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> str | None:
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        return text or None

    def save(self, cursor: str) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".cursor-", dir=directory)
        try:
            with os.fdopen(handle, "w", encoding="ascii") as file:
                file.write(cursor)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        # The rename itself is durable once the directory is synced.
        directory_handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_handle)
        finally:
            os.close(directory_handle)


class MemoryCursorStore:
    """A cursor kept for the life of the process (tests, one-shot pulls)."""

    def __init__(self, cursor: str | None = None) -> None:
        self.cursor = cursor

    def load(self) -> str | None:
        return self.cursor

    def save(self, cursor: str) -> None:
        self.cursor = cursor


class VersionFilter:
    """Tells a change not yet applied from one handed over again after a crash.

    Seed it with the versions the application has applied (from its own
    store); `is_new` is then true exactly once per (conversation, version).
    """

    def __init__(self, applied: dict[UUID, int] | None = None) -> None:
        self.applied: dict[UUID, int] = dict(applied or {})

    def is_new(self, conversation_id: UUID, version: int) -> bool:
        if version <= self.applied.get(conversation_id, 0):
            return False
        self.applied[conversation_id] = version
        return True
