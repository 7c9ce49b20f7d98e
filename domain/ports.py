"""What the application needs from the outside world, as protocols."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import Tracking, TrackingRecorder


class KeyPurgeView(TrackingRecorder, ABC):
    """The key store as seen by the purge, a follower of the event log.

    Destroying keys and recording the position of the `HistoryDeleted` event
    that asked for it happen in one transaction of the key store, so a crash
    leaves either both or neither. `compact` then rewrites the store's files so
    the bytes of destroyed keys are gone from disk, not only from queries.
    """

    @abstractmethod
    def destroy_keys(
        self, conversation_id: UUID, turn_ids: Collection[str], tracking: Tracking
    ) -> int:
        """Delete these turns' keys and record `tracking`; return rows deleted."""

    @abstractmethod
    def needs_compaction(self, application_name: str) -> bool:
        """Whether keys were destroyed since the store's files were last rewritten."""

    @abstractmethod
    def compact(self, application_name: str) -> bool:
        """Rewrite storage so no destroyed key's bytes remain; False if deferred."""

    def compaction_holds(self, application_name: str) -> tuple[str, ...]:
        """Why the last compaction stayed pending, if the store can say."""
        return ()


class TextVault(Protocol):
    """Seals turn text with keys held outside the event log.

    Each turn has its own data key, so destroying the keys of chosen turns
    (crypto-shredding) makes every stored copy of their text unreadable while
    the other turns stay readable. `field` names the part of the turn
    ("question", "answer") and is bound into the ciphertext, so sealed text
    cannot be moved to another turn or field undetected. Keys are destroyed
    only by the purge (`purge_view`), which follows `HistoryDeleted` events.
    """

    def seal(self, conversation_id: UUID, turn_id: str, field: str, text: str) -> bytes:
        """Encrypt `text` under the turn's key, creating the key if needed."""
        ...

    def open_many(
        self, conversation_id: UUID, items: Sequence[tuple[str, str, bytes]]
    ) -> list[str | None]:
        """Decrypt (turn_id, field, sealed) items; None where the key is gone."""
        ...

    @property
    def purge_view(self) -> KeyPurgeView:
        """The key store, for the purge that destroys deleted turns' keys."""
        ...

    def close(self) -> None:
        """Release the key store's connections."""
        ...
