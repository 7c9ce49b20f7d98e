"""The highest log position a store was seen at, kept beside its deletion
record, where restores of the store do not reach (docs/deletion.md,
"Restores").

A restored backup that predates a deletion is found by the deletion record.
One taken when no deletion has happened since holds nothing the record
remembers, yet its log is shorter than the one devices synced from: a cursor
past the restored head names positions the next events will reuse, and would
silently skip them. So the position every cursor names is first made durable
here (`advance`, before the sync answer leaves), and an opening whose log
ends below it has been restored or rolled back: it starts a new cursor epoch
(infra/restore.py) and says so.

The file is `deletions-<record id>.seen`: one JSON line, replaced atomically
(written beside, fsynced, renamed) under the record file's exclusive lock, so
processes sharing a record never lower each other's mark. It holds a number
only: no ids, nothing about any conversation.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

import orjson

from turnledger.infra.deletion_record import DeletionRecord

_log = logging.getLogger(__name__)

SEEN_FORMAT = "turnledger-log-seen/1"


class LogSeen:
    """The mark of one deletion record's store."""

    def __init__(self, record: DeletionRecord) -> None:
        self.record = record
        self.path = record.path.with_suffix(".seen")
        self._known = -1  # the mark as this process last made or read it
        self._lock = threading.Lock()

    def read(self) -> int:
        """The mark (0: none yet). An unreadable mark is 0, loudly: restores
        without a deletion since can then not be found until it is rewritten."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            document = orjson.loads(data)
            if document["format"] != SEEN_FORMAT:
                raise ValueError(document["format"])
            if document["record_id"] != self.record.record_id:
                raise ValueError("another record's mark")
            position = document["position"]
            if isinstance(position, bool) or not isinstance(position, int):
                raise TypeError(position)
        except (ValueError, KeyError, TypeError) as error:
            _log.warning(
                "turnledger: WARNING: %s is unreadable (%s): a restore from a "
                "backup taken with no deletion since cannot be detected until "
                "it is written again",
                self.path,
                error,
            )
            return 0
        self._known = max(self._known, position)
        return int(position)

    def needs(self, position: int) -> bool:
        """Whether `position` is past the mark as this process knows it."""
        return position > self._known

    def advance(self, position: int) -> None:
        """Make the mark at least `position`, durably (never lowered here).

        A mark that cannot be written (the record's directory gone or full)
        is logged as an error on every try and the answer still served: the
        record's loss is refused by the next opening anyway, and devices are
        better served than stopped by it."""
        if not self.needs(position):
            return
        with self._lock:
            try:
                self._replace(position, lower=False)
            except OSError as error:
                _log.error(
                    "turnledger: cannot keep the served log position in %s (%s): "
                    "a restore to before it may go unnoticed by devices",
                    self.path,
                    error,
                )

    def lower(self, position: int) -> None:
        """Set the mark to `position`: only once a restore was found and a new
        cursor epoch is durable, so that the next opening does not find the
        same restore again."""
        with self._lock:
            self._replace(position, lower=True)

    def _replace(self, position: int, *, lower: bool) -> None:
        # The record file's lock orders the processes sharing this record.
        with open(self.record.path, "rb") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            current = self.read()
            if not lower and current >= position:
                self._known = current
                return
            document = {
                "format": SEEN_FORMAT,
                "record_id": self.record.record_id,
                "position": position,
            }
            _write_durably(self.path, orjson.dumps(document) + b"\n")
            self._known = position


def _write_durably(path: Path, data: bytes) -> None:
    staged = path.with_name(path.name + ".new")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staged, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
