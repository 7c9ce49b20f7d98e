"""Sealing with per-turn keys: bound to its place, gone when shredded."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import Tracking
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.key_rows import set_wrapped_key, wrapped_key
from turnledger.domain.errors import (
    SealMismatchError,
    TextUnavailableError,
    TurnDeletedError,
    TurnKeyDamagedError,
)
from turnledger.domain.ports import SEAL_BOUND_TO_OWNER
from turnledger.infra.sqlite_keys import MEMORY, SQLiteKeyStore
from turnledger.infra.vault import (
    PAD_BYTES,
    KeyVault,
    MasterKeyError,
    decode_master_key,
    load_or_create_key_file,
    new_master_key,
)


def vault(store: SQLiteKeyStore | None = None, key: str | None = None) -> KeyVault:
    return KeyVault(
        store or SQLiteKeyStore(MEMORY), decode_master_key(key or new_master_key())
    )


def test_sealed_text_opens_only_in_its_own_place() -> None:
    box, conversation = vault(), uuid.uuid4()
    sealed = box.seal(conversation, "t1", "question", "secret 中文")
    assert b"secret" not in sealed
    assert box.open_many(conversation, [("t1", "question", sealed)]) == ["secret 中文"]
    box.seal(conversation, "t2", "question", "x")  # t2 gets a key of its own
    for turn_id, field in (("t2", "question"), ("t1", "answer")):
        with pytest.raises(SealMismatchError) as raised:
            box.open_many(conversation, [(turn_id, field, sealed)])
        assert (raised.value.turn_id, raised.value.field) == (turn_id, field)


def test_an_owner_bound_seal_opens_only_for_its_owner() -> None:
    box, conversation = vault(), uuid.uuid4()
    data_key = box._data_key(conversation, "t1")
    sealed = box.seal_with(
        data_key, conversation, "t1", "question", "alice's secret", owner_id="alice"
    )
    assert sealed[:1] == SEAL_BOUND_TO_OWNER
    items = [("t1", "question", sealed)]
    assert box.open_many(conversation, items, "alice") == ["alice's secret"]
    for owner in ("mallory", "alicE", None):
        with pytest.raises(SealMismatchError) as raised:
            box.open_many(conversation, items, owner)
        assert raised.value.conversation_id == conversation
        assert raised.value.turn_id == "t1"
    # Moved to another conversation under a copied key row: still refused.
    other = uuid.uuid4()
    box.purge_view.put_if_absent(  # type: ignore[attr-defined]
        other,
        "t1",
        box.purge_view.get_many(conversation, ["t1"])["t1"],  # type: ignore[attr-defined]
    )
    with pytest.raises(SealMismatchError):
        box.open_many(other, items, "alice")


def test_seals_of_earlier_versions_still_open_whoever_asks() -> None:
    # Versions 1 and 2 bind no owner: the reader checks it against the
    # conversation's Started event (tests/integration/test_owner_binding.py).
    box, conversation = vault(), uuid.uuid4()
    sealed = box.seal(conversation, "t1", "question", "old")
    assert sealed[:1] == b"\x02"
    assert box.open_many(conversation, [("t1", "question", sealed)], "anyone") == [
        "old"
    ]


def test_sealing_twice_uses_the_same_key_and_fresh_nonces() -> None:
    store = SQLiteKeyStore(MEMORY)
    box, conversation = vault(store), uuid.uuid4()
    first = box.seal(conversation, "t1", "answer", "same")
    second = box.seal(conversation, "t1", "answer", "same")
    assert first != second
    assert box.open_many(
        conversation, [("t1", "answer", first), ("t1", "answer", second)]
    ) == ["same", "same"]
    assert len(store.get_many(conversation, ["t1"])) == 1


def test_shredding_a_turn_leaves_the_others_readable() -> None:
    box, conversation = vault(), uuid.uuid4()
    one = box.seal(conversation, "t1", "question", "one")
    two = box.seal(conversation, "t2", "question", "two")
    # Keys are destroyed only by the purge, which records the log position.
    tracking = Tracking("Conversations", 7)
    assert box.purge_view.destroy_keys(conversation, ["t1", "missing"], tracking) == 1
    assert box.purge_view.max_tracking_id("Conversations") == 7
    assert box.open_many(
        conversation, [("t1", "question", one), ("t2", "question", two)]
    ) == [None, "two"]
    # A destroyed key is never created again, even by a late writer.
    with pytest.raises(TurnDeletedError):
        box.seal(conversation, "t1", "question", "one again")


def test_a_wrong_master_key_is_reported_not_mistaken_for_shredding() -> None:
    store, conversation = SQLiteKeyStore(MEMORY), uuid.uuid4()
    vault(store).seal(conversation, "t1", "question", "text")
    # Checked when a store opens, before any key is unwrapped.
    with pytest.raises(MasterKeyError, match="master key"):
        vault(store).check_master_key(remember=False)


def test_a_damaged_key_loses_its_own_turn_and_names_it() -> None:
    store, conversation = SQLiteKeyStore(MEMORY), uuid.uuid4()
    box = vault(store)
    box.check_master_key(remember=True)
    one = box.seal(conversation, "t1", "question", "one")
    two = box.seal(conversation, "t2", "question", "two")
    wrapped = bytearray(wrapped_key(store, conversation, "t1"))
    wrapped[5] ^= 0x01  # one byte flipped in the key row
    set_wrapped_key(store, conversation, "t1", bytes(wrapped))
    items = [("t1", "question", one), ("t2", "question", two)]
    with pytest.raises(TurnKeyDamagedError) as raised:
        box.open_many(conversation, items)
    assert raised.value.conversation_id == conversation
    assert raised.value.turn_ids == ("t1",)
    assert isinstance(raised.value, TextUnavailableError)
    assert box.open_many(conversation, items[1:]) == ["two"]
    assert box.damaged_key_ids(conversation, ["t1", "t2", "gone"]) == ["t1"]
    # The store's key still checks: the damage is one row's, not the key's.
    box.check_master_key(remember=False)


@pytest.mark.parametrize("encoded", ["not base64!", "c2hvcnQ=", ""])
def test_malformed_master_keys_are_rejected(encoded: str) -> None:
    with pytest.raises(MasterKeyError):
        decode_master_key(encoded)


def test_the_default_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "data" / "master.key"
    key = load_or_create_key_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_key_file(path) == key and len(key) == 32


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_a_ciphertext_tells_the_length_only_to_within_the_padding(text: str) -> None:
    box, conversation = vault(), uuid.uuid4()
    sealed = box.seal(conversation, "t1", "question", text)
    assert box.open_many(conversation, [("t1", "question", sealed)]) == [text]
    size = len(text.encode("utf-8"))
    # version byte, nonce and tag, then the text padded to the next multiple
    assert len(sealed) == 1 + 12 + 16 + (size // PAD_BYTES + 1) * PAD_BYTES


def test_texts_of_nearby_lengths_seal_to_the_same_length() -> None:
    box, conversation = vault(), uuid.uuid4()
    lengths = {
        len(box.seal(conversation, "t1", "answer", "PIN " + "7" * n))
        for n in range(4, 4 + PAD_BYTES - 8)
    }
    assert len(lengths) == 1


def test_unpadded_texts_of_the_first_release_still_open() -> None:
    box, conversation = vault(), uuid.uuid4()
    key = box._data_key(conversation, "t1")
    nonce = os.urandom(12)
    body = AESGCM(key).encrypt(
        nonce,
        b"old text",
        b"turnledger/text/v1|" + conversation.bytes + b"|t1|question",
    )
    assert box.open_many(
        conversation, [("t1", "question", b"\x01" + nonce + body)]
    ) == ["old text"]
