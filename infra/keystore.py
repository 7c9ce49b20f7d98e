"""Where wrapped per-turn data keys live: never in the event log."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Protocol
from uuid import UUID


class KeyStore(Protocol):
    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        """Store `wrapped` unless the turn has a key; return the stored one."""
        ...

    def get_many(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, bytes]:
        """The wrapped keys of those turns that still have one."""
        ...

    def destroy(self, conversation_id: UUID, turn_ids: Collection[str]) -> int:
        """Delete these turns' keys; return how many rows were deleted."""
        ...

    def close(self) -> None: ...


class MemoryKeyStore:
    def __init__(self) -> None:
        self._keys: dict[tuple[UUID, str], bytes] = {}
        self._lock = threading.Lock()

    def put_if_absent(
        self, conversation_id: UUID, turn_id: str, wrapped: bytes
    ) -> bytes:
        with self._lock:
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

    def destroy(self, conversation_id: UUID, turn_ids: Collection[str]) -> int:
        with self._lock:
            return sum(
                self._keys.pop((conversation_id, turn_id), None) is not None
                for turn_id in turn_ids
            )

    def close(self) -> None:
        pass
