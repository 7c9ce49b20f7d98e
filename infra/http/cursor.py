"""Sync cursors and WAL position tokens: sealed, so opaque and bound to a user.

A plain log position would tell a device how many events *all* users have
written (it advances past other users' events). Sealing it with AES-GCM under
a key derived from the master key hides that, and binding it to the user makes
a cursor useless to anybody else. Every process derives the same key, so a
cursor from one service process is good at any other.

With reads on a streaming replica (docs/scaling.md), a cursor also carries
the WAL position of the database its changes were read from, and a response
to a write carries the write's in a `TurnLedger-Position` header: a later read
with either, in any process, is served only from a database that has replayed
that far. A WAL position reveals how much the whole cluster has written, so it
is sealed the same way.

A cursor also carries the store's cursor epoch: a number drawn afresh each
time the opening finds the store restored from an older backup
(infra/restore.py). A position is only meaningful in the log it was read
from; after a restore the positions past the restored head are reused by new
events, so a cursor from an older epoch beyond that head would silently skip
them. Such a cursor is answered `CursorExpiredError` (HTTP 422
`cursor_expired`), never accepted again however far the log grows. Cursors
issued before epochs existed belong to epoch 0, the epoch of a store that was
never restored.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from turnledger.domain.errors import CursorExpiredError, InvalidInputError

# Read only: cursors of the releases before the cursor epoch (epoch 0).
_VERSION = "c1"
# ... one that also names a WAL position.
_VERSION_AT = "c2"
# Position, WAL position (0: none) and cursor epoch: what is issued now.
_VERSION_EPOCH = "c3"
_POSITION_VERSION = "w1"
_NONCE_BYTES = 12
_MAX_CURSOR_CHARS = 200


@dataclass(frozen=True, slots=True)
class CursorEpoch:
    """The store's cursor epoch, the one before it, and the log head the
    restore that ended the previous one found (docs/deletion.md, "Restores")."""

    current: int = 0
    previous: int = 0
    head: int = 0

    def admit(self, epoch: int, position: int) -> None:
        """Refuse a cursor of epoch `epoch` at `position` that this log no
        longer extends: one from before the last restore and past the head it
        found, or one from any earlier epoch (CursorExpiredError)."""
        if epoch == self.current:
            return
        if epoch == self.previous and position <= self.head:
            return  # the restored log holds exactly what the device saw
        raise CursorExpiredError


INITIAL_EPOCH = CursorEpoch()


class CursorCodec:
    def __init__(self, master_key: bytes) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=b"turnledger/cursor/v1",
        ).derive(master_key)
        self._aead = AESGCM(key)

    def encode(
        self,
        user_id: str,
        position: int,
        wal: int = 0,
        epoch: CursorEpoch = INITIAL_EPOCH,
    ) -> str:
        """A cursor for log `position`, read at WAL position `wal` (0: unknown),
        in the store's current cursor epoch."""
        payload = (
            position.to_bytes(8, "big")
            + wal.to_bytes(8, "big")
            + epoch.current.to_bytes(8, "big")
        )
        return self._seal(_VERSION_EPOCH, _context(user_id), payload)

    def decode(
        self, user_id: str, cursor: str, epoch: CursorEpoch = INITIAL_EPOCH
    ) -> int:
        """The position inside `cursor`; InvalidInputError if it is not one of
        ours, CursorExpiredError if a restore since it was issued voids it."""
        return self.decode_at(user_id, cursor, epoch)[0]

    def decode_at(
        self, user_id: str, cursor: str, epoch: CursorEpoch = INITIAL_EPOCH
    ) -> tuple[int, int]:
        """The log position and WAL position (0 if none) inside `cursor`,
        checked against the store's cursor `epoch`."""
        invalid = InvalidInputError(
            "since",
            "not a cursor this service issued to your user; "
            "omit 'since' to sync from the beginning",
        )
        for version, size in ((_VERSION, 8), (_VERSION_AT, 16), (_VERSION_EPOCH, 24)):
            if cursor.startswith(version + "."):
                payload = self._open(version, _context(user_id), cursor, invalid)
                if len(payload) != size:
                    raise invalid
                position = int.from_bytes(payload[:8], "big")
                wal = int.from_bytes(payload[8:16], "big")
                epoch.admit(int.from_bytes(payload[16:24], "big"), position)
                return position, wal
        raise invalid

    def encode_wal(self, user_id: str, wal: int) -> str:
        """A `TurnLedger-Position` token for WAL position `wal`."""
        return self._seal(
            _POSITION_VERSION, _position_context(user_id), wal.to_bytes(8, "big")
        )

    def decode_wal(self, user_id: str, token: str) -> int:
        """The WAL position inside a `TurnLedger-Position` token."""
        invalid = InvalidInputError(
            "TurnLedger-Position",
            "not a position this service issued to your user; "
            "send the header of a previous response, or none",
        )
        if not token.startswith(_POSITION_VERSION + "."):
            raise invalid
        payload = self._open(
            _POSITION_VERSION, _position_context(user_id), token, invalid
        )
        if len(payload) != 8:
            raise invalid
        return int.from_bytes(payload, "big")

    def _seal(self, version: str, context: bytes, payload: bytes) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, payload, context)
        token = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
        return f"{version}.{token}"

    def _open(
        self, version: str, context: bytes, token: str, invalid: InvalidInputError
    ) -> bytes:
        if len(token) > _MAX_CURSOR_CHARS:
            raise invalid
        body = token[len(version) + 1 :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context)
        except (binascii.Error, ValueError, InvalidTag):
            raise invalid from None


def _context(user_id: str) -> bytes:
    return b"turnledger/cursor/v1|" + user_id.encode("utf-8")


def _position_context(user_id: str) -> bytes:
    return b"turnledger/wal-position/v1|" + user_id.encode("utf-8")
