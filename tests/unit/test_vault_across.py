"""KeyVault.open_across: open_many for several conversations of one owner,
with the owner binding and the damaged-key handling of open_many."""

from __future__ import annotations

import uuid

import pytest

from tests.key_rows import drop_key, set_wrapped_key, wrapped_key
from turnledger.domain.errors import SealMismatchError
from turnledger.infra.sqlite_keys import MEMORY, SQLiteKeyStore
from turnledger.infra.vault import KeyVault, decode_master_key, new_master_key


def _vault() -> tuple[KeyVault, SQLiteKeyStore]:
    store = SQLiteKeyStore(MEMORY)
    return KeyVault(store, decode_master_key(new_master_key())), store


def test_opens_every_conversation_with_one_key_read() -> None:
    vault, store = _vault()
    first, second = uuid.uuid4(), uuid.uuid4()
    items = {
        c: [(t, "question", vault.seal(c, t, "question", f"{c} {t}", owner_id="al"))]
        for c in (first, second)
        for t in ("t1",)
    }
    reads: list[object] = []
    get_across = store.get_across
    store.get_across = lambda wanted: reads.append(wanted) or get_across(wanted)  # type: ignore[method-assign]
    damaged: set[tuple[uuid.UUID, str]] = set()

    opened = vault.open_across(items, owner_id="al", damaged=damaged)

    assert opened == {first: [f"{first} t1"], second: [f"{second} t1"]}
    assert len(reads) == 1 and not damaged


def test_a_damaged_key_opens_to_none_and_is_noted_the_rest_open() -> None:
    vault, store = _vault()
    first, second = uuid.uuid4(), uuid.uuid4()
    items = {
        first: [
            ("t1", "question", vault.seal(first, "t1", "question", "a", owner_id="al")),
            ("t2", "question", vault.seal(first, "t2", "question", "b", owner_id="al")),
        ],
        second: [
            ("t1", "answer", vault.seal(second, "t1", "answer", "c", owner_id="al"))
        ],
    }
    wrapped = bytearray(wrapped_key(store, first, "t1"))
    wrapped[7] ^= 0x40
    set_wrapped_key(store, first, "t1", bytes(wrapped))
    drop_key(store, second, "t1")  # destroyed: gone, not damaged
    damaged: set[tuple[uuid.UUID, str]] = set()

    opened = vault.open_across(items, owner_id="al", damaged=damaged)

    assert opened == {first: [None, "b"], second: [None]}
    assert damaged == {(first, "t1")}


def test_a_text_sealed_for_another_owner_is_refused() -> None:
    vault, _ = _vault()
    conversation = uuid.uuid4()
    sealed = vault.seal(conversation, "t1", "question", "secret", owner_id="alice")

    with pytest.raises(SealMismatchError) as raised:
        vault.open_across(
            {conversation: [("t1", "question", sealed)]},
            owner_id="mallory",
            damaged=set(),
        )
    assert (raised.value.conversation_id, raised.value.turn_id) == (conversation, "t1")


def test_a_text_moved_to_another_conversation_is_refused() -> None:
    vault, store = _vault()
    source, target = uuid.uuid4(), uuid.uuid4()
    sealed = vault.seal(source, "t1", "question", "secret", owner_id="alice")
    set_wrapped_key(store, target, "t1", wrapped_key(store, source, "t1"))

    with pytest.raises(SealMismatchError):
        vault.open_across(
            {target: [("t1", "question", sealed)]}, owner_id="alice", damaged=set()
        )
