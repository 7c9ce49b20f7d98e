"""JSON transcodings: bytes, and the types the first release's snapshots held.

Sealed text is stored raw in the event envelope (domain/chain.py); bytes in
JSON are only read back from events the first release wrote. Its snapshots
held an index of every turn; they are no longer read by the ledger, but the
audit still decodes them, so their entries decode to plain lists.
"""

from __future__ import annotations

import base64
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding


class BytesAsBase64(Transcoding):
    type = bytes
    name = "bytes_b64"

    def encode(self, obj: bytes) -> str:
        return base64.b64encode(obj).decode("ascii")

    def decode(self, data: str) -> bytes:
        return base64.b64decode(data)


class _LegacyEntry:
    """Never encoded: stands for a type only old snapshots contain."""


class _LegacyTurnEntry(_LegacyEntry):
    pass


class _LegacyFoldEntry(_LegacyEntry):
    pass


class _LegacyListTranscoding(Transcoding):
    def encode(self, obj: Any) -> Any:
        raise TypeError(f"{self.name} is only read, never written")

    def decode(self, data: list[Any]) -> list[Any]:
        return list(data)


class LegacyTurnEntry(_LegacyListTranscoding):
    type = _LegacyTurnEntry
    name = "turn_entry"


class LegacyFoldEntry(_LegacyListTranscoding):
    type = _LegacyFoldEntry
    name = "fold_entry"


def register_legacy_transcodings(transcoder: JSONTranscoder) -> None:
    transcoder.register(BytesAsBase64())
    transcoder.register(LegacyTurnEntry())
    transcoder.register(LegacyFoldEntry())
