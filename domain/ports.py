"""What the application needs from the outside world, as protocols."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol
from uuid import UUID


class TextVault(Protocol):
    """Seals turn text with keys held outside the event log.

    Each turn has its own data key, so destroying the keys of chosen turns
    (crypto-shredding) makes every stored copy of their text unreadable while
    the other turns stay readable. `field` names the part of the turn
    ("question", "answer") and is bound into the ciphertext, so sealed text
    cannot be moved to another turn or field undetected.
    """

    def seal(self, conversation_id: UUID, turn_id: str, field: str, text: str) -> bytes:
        """Encrypt `text` under the turn's key, creating the key if needed."""
        ...

    def open_many(
        self, conversation_id: UUID, items: Sequence[tuple[str, str, bytes]]
    ) -> list[str | None]:
        """Decrypt (turn_id, field, sealed) items; None where the key is gone."""
        ...

    def shred(self, conversation_id: UUID, turn_ids: Iterable[str]) -> int:
        """Destroy the keys of these turns; return how many were destroyed."""
        ...

    def close(self) -> None:
        """Release the key store's connections."""
        ...
