"""Sync cursors: a log position, sealed so that it is opaque and bound to a user.

A plain position would tell a device how many events *all* users have written
(it advances past other users' events). Sealing it with AES-GCM under a key
derived from the master key hides that, and binding it to the user makes a
cursor useless to anybody else. Every process derives the same key, so a
cursor from one service process is good at any other.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from turnledger.domain.errors import InvalidInputError

_VERSION = "c1"
_NONCE_BYTES = 12
_MAX_CURSOR_CHARS = 200


class CursorCodec:
    def __init__(self, master_key: bytes) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=b"turnledger/cursor/v1",
        ).derive(master_key)
        self._aead = AESGCM(key)

    def encode(self, user_id: str, position: int) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(
            nonce, position.to_bytes(8, "big"), _context(user_id)
        )
        token = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
        return f"{_VERSION}.{token}"

    def decode(self, user_id: str, cursor: str) -> int:
        """The position inside `cursor`; InvalidInputError if it is not one of ours."""
        invalid = InvalidInputError(
            "since",
            "not a cursor this service issued to your user; "
            "omit 'since' to sync from the beginning",
        )
        if len(cursor) > _MAX_CURSOR_CHARS or not cursor.startswith(_VERSION + "."):
            raise invalid
        body = cursor[len(_VERSION) + 1 :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            position = self._aead.decrypt(
                raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _context(user_id)
            )
        except (binascii.Error, ValueError, InvalidTag):
            raise invalid from None
        return int.from_bytes(position, "big")


def _context(user_id: str) -> bytes:
    return b"turnledger/cursor/v1|" + user_id.encode("utf-8")
