"""What the application needs from the outside world, as protocols."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class NewKey:
    """A data key made for a new turn (or fold), wrapped, to be stored with it."""

    conversation_id: UUID
    key_id: str
    wrapped: bytes


# The leading byte of a seal whose associated data binds the conversation's
# owner (infra/vault.py). Texts sealed before it (other leading bytes) are
# checked against the owner in the conversation's chained `Started` event.
SEAL_BOUND_TO_OWNER = b"\x03"


class TextVault(Protocol):
    """Seals turn text with keys held outside the event log.

    Each turn has its own data key, so destroying the keys of chosen turns
    (crypto-shredding) makes every stored copy of their text unreadable while
    the other turns stay readable. `field` names the part of the turn
    ("question", "answer") and is bound into the ciphertext, so sealed text
    cannot be moved to another turn or field undetected. Keys are destroyed
    only by the purge (`purge_view`), which follows `HistoryDeleted` events.
    """

    @property
    def keys_with_events(self) -> bool:
        """Whether new keys are saved with their events (then `new_data_key`
        touches no storage)."""
        ...

    def new_data_key(
        self, conversation_id: UUID, key_id: str
    ) -> tuple[bytes, NewKey | None]:
        """The data key to seal a new turn with, and the wrapped key to store
        with its event (None when the key store has stored it already)."""
        ...

    def seal_with(
        self,
        data_key: bytes,
        conversation_id: UUID,
        key_id: str,
        field: str,
        text: str,
        *,
        owner_id: str,
    ) -> bytes:
        """Encrypt `text` under `data_key`, bound to the conversation, turn,
        field and the conversation's owner."""
        ...

    def open_many(
        self,
        conversation_id: UUID,
        items: Sequence[tuple[str, str, bytes]],
        owner_id: str | None = None,
    ) -> list[str | None]:
        """Decrypt (turn_id, field, sealed) items; None where the key is gone.
        A text bound to its owner opens only with that `owner_id`; one that
        does not open in its place raises SealMismatchError."""
        ...

    def damaged_key_ids(
        self, conversation_id: UUID, key_ids: Collection[str]
    ) -> list[str]:
        """Those of `key_ids` whose stored key is damaged (no longer unwraps);
        `open_many` raises TurnKeyDamagedError for them."""
        ...

    def receipt_key(
        self,
        conversation_id: UUID,
        key_ids: Sequence[str],
        *,
        known: Mapping[str, bytes] | None = None,
    ) -> bytes | None:
        """The MAC key of a receipt, derived from these keys' data keys (`known`:
        data keys not stored yet); None when any of them was destroyed."""
        ...

    @property
    def purge_view(self) -> KeyPurgeView:
        """The key store, for the purge that destroys deleted turns' keys."""
        ...

    def close(self) -> None:
        """Release the key store's connections."""
        ...
