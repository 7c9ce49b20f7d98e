"""Where wrapped per-turn data keys live: never in the event log.

Every key store is also the view of the purge (`domain.ports.KeyPurgeView`):
it records how far the purge has followed the log in the same transaction in
which it destroys keys.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import Tracking

from turnledger.domain.errors import TurnDeletedError
from turnledger.domain.ports import KeyPurgeView


class DestroyedKeyLog(Protocol):
    """Where destroyed key ids are remembered outside the store (its backups
    do not roll it back): infra/deletion_record.py."""

    def remember(
        self, conversation_id: UUID, key_ids: Collection[str], *, position: int
    ) -> None: ...


class KeyStore(KeyPurgeView):
    # Whether the event store writes new keys in the events' own transaction
    # (PostgreSQL: the same database); otherwise each is stored just before.
    keys_with_events = False
    # Set by the composition root; every destroy_keys tells it first, so the
    # record is never behind the store (a crash between leaves the record
    # ahead, which the next purge run makes true).
    deletion_record: DestroyedKeyLog | None = None

    def _remember_destroyed(
        self, conversation_id: UUID, key_ids: Collection[str], tracking: Tracking
    ) -> None:
        if self.deletion_record is not None:
            self.deletion_record.remember(
                conversation_id, key_ids, position=tracking.notification_id
            )

    @abstractmethod
    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        """Store `wrapped` unless the turn has a key; return the stored one.

        Raises TurnDeletedError if the turn's key was destroyed: a writer that
        loaded the conversation before the deletion must not create a new key
        for a deleted turn (the purge, which has moved on, would never see it).
        """

    @abstractmethod
    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        """The wrapped keys of those turns that still have one."""

    def get_across(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> dict[UUID, dict[str, bytes]]:
        """`get_many` for several conversations at once: the wrapped keys of
        those turns that still have one, by conversation (stores that can
        answer in one statement override this)."""
        found = {c: self.get_many(c, ids) for c, ids in turn_ids.items() if ids}
        return {c: keys for c, keys in found.items() if keys}

    @abstractmethod
    def close(self) -> None: ...

    # What the store remembers about itself (ids, never secrets): the id of
    # its master key and of the deletion record it follows (infra/restore.py).
    @abstractmethod
    def read_meta(self, name: str) -> str | None:
        """A value of the store's own metadata, None if never written."""

    @abstractmethod
    def write_meta(self, name: str, value: str) -> None: ...

    @abstractmethod
    def claim_meta(self, name: str, value: str) -> str:
        """Write `value` unless the store holds a value already; return the
        value held afterwards (processes racing to set it all get the first)."""

    @abstractmethod
    def destroyed_key_ids(self) -> set[tuple[str, str]]:
        """Every (conversation id as 32 hex digits, key id) whose key this
        store destroyed (strings: comparing 100,000 of them must be cheap)."""

    @abstractmethod
    def any_wrapped_key(self) -> tuple[UUID, str, bytes] | None:
        """One stored key, to check a master key against (None: no keys)."""

    @abstractmethod
    def rewrap_all(
        self, rewrap: Callable[[UUID, str, bytes], bytes], *, key_id: str
    ) -> int:
        """Replace every wrapped key by `rewrap(...)` of it and record `key_id`
        as the master key's id, in one transaction; return the keys rewrapped."""

    @abstractmethod
    def _tracking_row(self, application_name: str) -> tuple[int, int, int] | None:
        """The purge's (followed, last destroying, compacted) positions."""

    def max_tracking_id(self, application_name: str) -> int | None:
        row = self._tracking_row(application_name)
        return None if row is None else row[0]

    def needs_compaction(self, application_name: str) -> bool:
        row = self._tracking_row(application_name)
        return row is not None and row[1] > row[2]


class MemoryKeyStore(KeyStore):
    def __init__(self) -> None:
        self._keys: dict[tuple[UUID, str], bytes] = {}
        self._destroyed: set[tuple[UUID, str]] = set()
        # application name -> [followed, last destroying, compacted] positions
        self._tracking: dict[str, list[int]] = {}
        self._meta: dict[str, str] = {}
        self._lock = threading.Lock()

    def read_meta(self, name: str) -> str | None:
        with self._lock:
            return self._meta.get(name)

    def write_meta(self, name: str, value: str) -> None:
        with self._lock:
            self._meta[name] = value

    def claim_meta(self, name: str, value: str) -> str:
        with self._lock:
            return self._meta.setdefault(name, value)

    def destroyed_key_ids(self) -> set[tuple[str, str]]:
        with self._lock:
            return {(c.hex, turn_id) for c, turn_id in self._destroyed}

    def any_wrapped_key(self) -> tuple[UUID, str, bytes] | None:
        with self._lock:
            for (conversation_id, turn_id), wrapped in self._keys.items():
                return conversation_id, turn_id, wrapped
            return None

    def rewrap_all(
        self, rewrap: Callable[[UUID, str, bytes], bytes], *, key_id: str
    ) -> int:
        with self._lock:
            rewrapped = {
                (conversation_id, turn_id): rewrap(conversation_id, turn_id, wrapped)
                for (conversation_id, turn_id), wrapped in self._keys.items()
            }
            self._keys.update(rewrapped)
            self._meta["master_key_id"] = key_id
            return len(rewrapped)

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._lock:
            if (conversation_id, turn_id) in self._destroyed:
                raise TurnDeletedError(conversation_id, turn_id)
            return self._keys.setdefault((conversation_id, turn_id), wrapped)

    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        with self._lock:
            return {
                turn_id: self._keys[(conversation_id, turn_id)]
                for turn_id in turn_ids
                if (conversation_id, turn_id) in self._keys
            }

    def get_across(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> dict[UUID, dict[str, bytes]]:
        found: dict[UUID, dict[str, bytes]] = {}
        with self._lock:
            for conversation_id, ids in turn_ids.items():
                for turn_id in ids:
                    wrapped = self._keys.get((conversation_id, turn_id))
                    if wrapped is not None:
                        found.setdefault(conversation_id, {})[turn_id] = wrapped
        return found

    def destroy_keys(
        self, conversation_id: UUID, turn_ids: Collection[str], tracking: Tracking
    ) -> int:
        with self._lock:
            deleted = sum(
                self._keys.pop((conversation_id, turn_id), None) is not None
                for turn_id in turn_ids
            )
            self._destroyed.update((conversation_id, turn_id) for turn_id in turn_ids)
            positions = self._positions(tracking.application_name)
            positions[0] = max(positions[0], tracking.notification_id)
            positions[1] = max(positions[1], tracking.notification_id)
            return deleted

    def insert_tracking(self, tracking: Tracking) -> None:
        with self._lock:
            positions = self._positions(tracking.application_name)
            positions[0] = max(positions[0], tracking.notification_id)

    def _tracking_row(self, application_name: str) -> tuple[int, int, int] | None:
        with self._lock:
            positions = self._tracking.get(application_name)
            return (
                None
                if positions is None
                else (positions[0], positions[1], positions[2])
            )

    def compact(self, application_name: str) -> bool:
        # A popped dict entry leaves nothing to rewrite.
        with self._lock:
            positions = self._positions(application_name)
            positions[2] = positions[1]
            return True

    def close(self) -> None:
        pass

    def _positions(self, application_name: str) -> list[int]:
        return self._tracking.setdefault(application_name, [0, 0, 0])
