"""Where wrapped per-turn data keys live: never in the event log.

Every key store is also the view of the purge (`domain.ports.KeyPurgeView`):
it records how far the purge has followed the log in the same transaction in
which it destroys keys.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import Tracking

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
