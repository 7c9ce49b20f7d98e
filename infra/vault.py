"""Crypto-shredding: per-turn AES-GCM data keys, wrapped by a master key.

Turn text is sealed with a random 256-bit key per (conversation, turn). The
key is stored wrapped (AES-GCM under the master key) in a key store that is
separate from the event log. Destroying a turn's key makes every copy of its
text unreadable: events, snapshots, dead database rows, WAL and backups of the
event log alike. Associated data binds each ciphertext to its conversation,
turn and field, and each wrapped key to its conversation and turn.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import (
    InvalidUnwrap,
    aes_key_unwrap,
    aes_key_wrap,
)

from turnledger.domain.errors import (
    SealMismatchError,
    TurnKeyDamagedError,
)
from turnledger.domain.ports import SEAL_BOUND_TO_OWNER, NewKey
from turnledger.infra.keystore import KeyStore
from turnledger.infra.master_key import (
    MasterKeyError,
    decode_master_key,
    load_or_create_key_file,
    master_key_id,
    new_master_key,
)

# The master key's names, imported from here by the callers that open a vault.
__all__ = [
    "PAD_BYTES",
    "KeyVault",
    "MasterKeyError",
    "decode_master_key",
    "load_or_create_key_file",
    "master_key_id",
    "new_master_key",
]

# Leading byte of every sealed text: the sealing scheme's version. Version 3
# (SEAL_BOUND_TO_OWNER) binds the conversation's owner too: its associated
# data is the conversation id, turn id, field and owner id, so a ciphertext
# read for another owner (a read-side row rewritten to name somebody else)
# does not open. Version 2 pads the text (PKCS#7, `cryptography`) to a
# multiple of PAD_BYTES before sealing, so a ciphertext's length tells a
# text's length only to within PAD_BYTES (version 3 pads the same way);
# version 1 (the first release) did not pad. Both still open; their owner is
# checked against the conversation's chained `Started` event by the reader
# (projections/queries.py).
_OWNED_FORMAT = SEAL_BOUND_TO_OWNER
_FORMAT = b"\x02"
_UNPADDED_FORMAT = b"\x01"
PAD_BYTES = 32
_NONCE_BYTES = 12
_KEY_WRAP_BYTES = 40  # a 32-byte key wrapped by RFC 3394
# The key store's metadata naming the id of the master key its keys are under.
MASTER_KEY_META = "master_key_id"


def _key_context(conversation_id: UUID, turn_id: str) -> bytes:
    return b"turnledger/key/v1|" + conversation_id.bytes + turn_id.encode()


def _text_context(conversation_id: UUID, turn_id: str, field: str) -> bytes:
    return (
        b"turnledger/text/v1|"
        + conversation_id.bytes
        + b"|"
        + turn_id.encode()
        + b"|"
        + field.encode()
    )


def _owned_context(
    conversation_id: UUID, turn_id: str, field: str, owner_id: str
) -> bytes:
    # Each variable part is length-prefixed, so no two tuples share a context.
    parts = [turn_id.encode(), field.encode(), owner_id.encode()]
    return (
        b"turnledger/text/v3|"
        + conversation_id.bytes
        + b"".join(len(part).to_bytes(4, "big") + part for part in parts)
    )


class KeyVault:
    """The TextVault of the domain, over any KeyStore."""

    def __init__(self, key_store: KeyStore, master_key: bytes) -> None:
        self._keys = key_store
        self._master_key = master_key
        self._master = AESGCM(master_key)

    @property
    def keys_with_events(self) -> bool:
        """Whether a new key is saved in its event's transaction (then making
        one touches no storage, and may happen before the write is queued)."""
        return self._keys.keys_with_events

    def new_data_key(
        self, conversation_id: UUID, key_id: str
    ) -> tuple[bytes, NewKey | None]:
        if not self._keys.keys_with_events:
            # Stored now, in the key store's own transaction, before the event:
            # a key without its event is harmless (a retry seals under it
            # again), an event without its key would be unreadable.
            return self._data_key(conversation_id, key_id), None
        data_key, wrapped = self._fresh_key(conversation_id, key_id)
        return data_key, NewKey(conversation_id, key_id, wrapped)

    def _fresh_key(self, conversation_id: UUID, key_id: str) -> tuple[bytes, bytes]:
        # AES key wrap (RFC 3394): 40 bytes a key where AES-GCM took 60. It binds
        # no turn: a key row moved to another turn unwraps, but every text it
        # would open is bound to its own turn and field, so it opens nothing.
        data_key = AESGCM.generate_key(bit_length=256)
        return data_key, aes_key_wrap(self._master_key, data_key)

    def seal(
        self,
        conversation_id: UUID,
        turn_id: str,
        field: str,
        text: str,
        *,
        owner_id: str | None = None,
    ) -> bytes:
        """Seal under the turn's stored key, creating and storing it if needed
        (without `owner_id`: the unbound version 2, as releases before wrote)."""
        data_key = self._data_key(conversation_id, turn_id)
        if owner_id is None:
            return _FORMAT + self._encrypt(
                data_key, text, _text_context(conversation_id, turn_id, field)
            )
        return self.seal_with(
            data_key, conversation_id, turn_id, field, text, owner_id=owner_id
        )

    def seal_with(
        self,
        data_key: bytes,
        conversation_id: UUID,
        turn_id: str,
        field: str,
        text: str,
        *,
        owner_id: str,
    ) -> bytes:
        return _OWNED_FORMAT + self._encrypt(
            data_key,
            text,
            _owned_context(conversation_id, turn_id, field, owner_id),
        )

    @staticmethod
    def _encrypt(data_key: bytes, text: str, context: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        padder = padding.PKCS7(PAD_BYTES * 8).padder()
        padded = padder.update(text.encode("utf-8")) + padder.finalize()
        return nonce + AESGCM(data_key).encrypt(nonce, padded, context)

    def open_many(
        self,
        conversation_id: UUID,
        items: Sequence[tuple[str, str, bytes]],
        owner_id: str | None = None,
    ) -> list[str | None]:
        """Raises TurnKeyDamagedError naming every turn of `items` whose
        stored key no longer unwraps (after looking at all of them), and
        SealMismatchError for a text that does not open in its place: altered,
        moved from another turn or conversation, or (version 3) sealed for
        another owner than `owner_id`."""
        wrapped = self._keys.get_many(
            conversation_id, {turn_id for turn_id, _, _ in items}
        )
        keys: dict[str, bytes] = {}
        damaged: list[str] = []
        for turn_id, blob in wrapped.items():
            try:
                keys[turn_id] = self._unwrap(conversation_id, turn_id, blob)
            except TurnKeyDamagedError:
                damaged.append(turn_id)
        if damaged:
            raise TurnKeyDamagedError(conversation_id, tuple(sorted(damaged)))
        opened: list[str | None] = []
        for turn_id, field, sealed in items:
            key = keys.get(turn_id)
            if key is None:
                opened.append(None)
                continue
            opened.append(
                self._open_one(key, conversation_id, turn_id, field, sealed, owner_id)
            )
        return opened

    def open_across(
        self,
        items: Mapping[UUID, Sequence[tuple[str, str, bytes]]],
        *,
        owner_id: str,
        damaged: set[tuple[UUID, str]],
        wrapped: Mapping[UUID, Mapping[str, bytes]] | None = None,
    ) -> dict[UUID, list[str | None]]:
        """`open_many` for several conversations of `owner_id` at once, their
        keys read in one statement, or given (`wrapped`, read with the events).

        A text whose key is gone opens to None. A text whose stored key is
        damaged opens to None too, and (conversation id, turn id) is added
        to `damaged`, so the other turns are still served; a text that does
        not open in its place (altered, moved, or sealed for another owner)
        raises SealMismatchError, as in `open_many`.
        """
        if wrapped is None:
            wrapped = self._keys.get_across(
                {c: {turn_id for turn_id, _, _ in found} for c, found in items.items()}
            )
        opened: dict[UUID, list[str | None]] = {}
        for conversation_id, found in items.items():
            keys: dict[str, bytes] = {}
            for turn_id, blob in wrapped.get(conversation_id, {}).items():
                try:
                    keys[turn_id] = self._unwrap(conversation_id, turn_id, blob)
                except TurnKeyDamagedError:
                    damaged.add((conversation_id, turn_id))
            opened[conversation_id] = [
                None
                if (key := keys.get(turn_id)) is None
                else self._open_one(
                    key, conversation_id, turn_id, field, sealed, owner_id
                )
                for turn_id, field, sealed in found
            ]
        return opened

    @staticmethod
    def _open_one(
        key: bytes,
        conversation_id: UUID,
        turn_id: str,
        field: str,
        sealed: bytes,
        owner_id: str | None,
    ) -> str:
        scheme = sealed[:1]
        if scheme == _OWNED_FORMAT:
            if owner_id is None:
                raise SealMismatchError(
                    conversation_id,
                    turn_id,
                    field,
                    "it is bound to an owner, none given",
                )
            context = _owned_context(conversation_id, turn_id, field, owner_id)
        elif scheme in (_FORMAT, _UNPADDED_FORMAT):
            context = _text_context(conversation_id, turn_id, field)
        else:
            raise SealMismatchError(
                conversation_id, turn_id, field, "its sealing format is unknown"
            )
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            plaintext = AESGCM(key).decrypt(nonce, body, context)
            if scheme != _UNPADDED_FORMAT:
                unpadder = padding.PKCS7(PAD_BYTES * 8).unpadder()
                plaintext = unpadder.update(plaintext) + unpadder.finalize()
            return plaintext.decode("utf-8")
        except (InvalidTag, ValueError):
            raise SealMismatchError(
                conversation_id,
                turn_id,
                field,
                "it was altered, or moved from another turn, conversation or owner",
            ) from None

    def damaged_key_ids(
        self, conversation_id: UUID, key_ids: Collection[str]
    ) -> list[str]:
        """Those of `key_ids` whose stored key no longer unwraps (altered
        rows), in the order given; a destroyed key is not damaged."""
        wrapped = self._keys.get_many(conversation_id, set(key_ids))
        damaged = []
        for key_id in key_ids:
            if key_id not in wrapped:
                continue
            try:
                self._unwrap(conversation_id, key_id, wrapped[key_id])
            except TurnKeyDamagedError:
                damaged.append(key_id)
        return damaged

    def receipt_key(
        self,
        conversation_id: UUID,
        key_ids: Sequence[str],
        *,
        known: Mapping[str, bytes] | None = None,
    ) -> bytes | None:
        known = dict(known or {})
        wanted = [key_id for key_id in key_ids if key_id not in known]
        wrapped = self._keys.get_many(conversation_id, set(wanted)) if wanted else {}
        material = []
        for key_id in key_ids:
            if key_id in known:
                material.append(known[key_id])
            elif key_id in wrapped:
                material.append(self._unwrap(conversation_id, key_id, wrapped[key_id]))
            else:
                return None  # destroyed: the receipt can never be checked again
        return HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=b"turnledger/receipt/v1|" + conversation_id.bytes,
        ).derive(b"".join(material))

    def check_master_key(self, *, remember: bool) -> None:
        """Refuse a master key that is not the store's, before anything is
        sealed under it; with `remember`, record its id in a store that has
        none yet (a new store, or one written before ids were kept)."""
        mine = master_key_id(self._master_key)
        stored = self._keys.read_meta(MASTER_KEY_META)
        if stored is not None and stored != mine:
            raise MasterKeyError(
                f"the configured master key (id {mine}) is not the key of this "
                f"store (id {stored}): configure the store's key; to change it, "
                "run `turnledger rotate-master-key` (docs/deletion.md)"
            )
        if stored is None:
            sample = self._keys.any_wrapped_key()
            if sample is not None:
                conversation_id, key_id, wrapped = sample
                try:
                    self._unwrap(conversation_id, key_id, wrapped)
                except TurnKeyDamagedError:
                    raise MasterKeyError(
                        f"a stored key (turn {key_id}) does not open with the "
                        "configured master key: wrong TURNLEDGER_MASTER_KEY?"
                    ) from None
            if remember:
                self._keys.write_meta(MASTER_KEY_META, mine)

    def rotate_master_key(self, new_master_key: bytes) -> int:
        """Rewrap every stored key under `new_master_key`, in one transaction
        that also records the new key's id; return the number of keys."""
        if new_master_key == self._master_key:
            raise MasterKeyError("the new master key is the current one")

        def rewrap(conversation_id: UUID, key_id: str, wrapped: bytes) -> bytes:
            data_key = self._unwrap(conversation_id, key_id, wrapped)
            return aes_key_wrap(new_master_key, data_key)

        count = self._keys.rewrap_all(rewrap, key_id=master_key_id(new_master_key))
        self._master_key = new_master_key
        self._master = AESGCM(new_master_key)
        return count

    @property
    def purge_view(self) -> KeyStore:
        # Keys are destroyed only through the purge, which follows the log.
        return self._keys

    def close(self) -> None:
        self._keys.close()

    def _data_key(self, conversation_id: UUID, turn_id: str) -> bytes:
        # Wrap a fresh key; the store keeps the first one written, so a retry
        # (or a racing writer) of the same turn seals under the same key.
        _, wrapped = self._fresh_key(conversation_id, turn_id)
        stored = self._keys.put_if_absent(conversation_id, turn_id, wrapped)
        return self._unwrap(conversation_id, turn_id, stored)

    def _unwrap(self, conversation_id: UUID, turn_id: str, wrapped: bytes) -> bytes:
        # The store refuses a master key other than its own when it opens
        # (check_master_key), so a key that fails to unwrap here was altered:
        # only its own turn is lost, never the conversation.
        if len(wrapped) == _KEY_WRAP_BYTES:
            try:
                return aes_key_unwrap(self._master_key, wrapped)
            except InvalidUnwrap:
                raise TurnKeyDamagedError(conversation_id, (turn_id,)) from None
        # Keys wrapped by the first release: AES-GCM, bound to their turn.
        nonce, body = wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:]
        try:
            return self._master.decrypt(
                nonce, body, _key_context(conversation_id, turn_id)
            )
        except (InvalidTag, ValueError):
            raise TurnKeyDamagedError(conversation_id, (turn_id,)) from None
