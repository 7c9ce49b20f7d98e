"""Sync cursors: opaque, unforgeable, bound to one user."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.domain.errors import CursorExpiredError, InvalidInputError
from turnledger.infra.http.cursor import CursorCodec, CursorEpoch

codec = CursorCodec(os.urandom(32))


@settings(max_examples=50)
@given(position=st.integers(min_value=0, max_value=2**63 - 1))
def test_a_cursor_gives_back_its_position_to_its_user(position: int) -> None:
    cursor = codec.encode("alice", position)
    assert codec.decode("alice", cursor) == position


def test_a_cursor_is_useless_to_another_user_and_to_another_key() -> None:
    cursor = codec.encode("alice", 42)
    with pytest.raises(InvalidInputError, match="since"):
        codec.decode("bob", cursor)
    with pytest.raises(InvalidInputError):
        CursorCodec(os.urandom(32)).decode("alice", cursor)


def test_equal_positions_give_different_cursors() -> None:
    assert codec.encode("alice", 7) != codec.encode("alice", 7)


def test_a_tampered_cursor_is_rejected() -> None:
    cursor = codec.encode("alice", 42)
    # A middle character: the last one may carry only base64 padding bits.
    middle = len(cursor) // 2
    flipped = "A" if cursor[middle] != "A" else "B"
    with pytest.raises(InvalidInputError):
        codec.decode("alice", cursor[:middle] + flipped + cursor[middle + 1 :])


@settings(max_examples=100)
@given(garbage=st.text(max_size=300))
def test_anything_else_is_an_invalid_input_error_never_a_crash(garbage: str) -> None:
    with pytest.raises(InvalidInputError):
        codec.decode("alice", garbage)
    with pytest.raises(InvalidInputError):
        codec.decode("alice", "c1." + garbage)


@settings(max_examples=50)
@given(
    position=st.integers(min_value=0, max_value=2**63 - 1),
    wal=st.integers(min_value=1, max_value=2**64 - 1),
)
def test_a_cursor_read_at_a_wal_position_gives_back_both(
    position: int, wal: int
) -> None:
    cursor = codec.encode("alice", position, wal)
    assert codec.decode_at("alice", cursor) == (position, wal)
    assert codec.decode("alice", cursor) == position
    with pytest.raises(InvalidInputError):
        codec.decode_at("bob", cursor)


def test_a_cursor_without_a_wal_position_gives_back_none() -> None:
    cursor = codec.encode("alice", 42)
    assert codec.decode_at("alice", cursor) == (42, 0)
    # Position, WAL position and epoch at their largest fit the 200 allowed.
    largest = CursorEpoch(current=2**64 - 1)
    assert len(codec.encode("alice", 2**63 - 1, 2**64 - 1, largest)) < 100


@settings(max_examples=50)
@given(wal=st.integers(min_value=0, max_value=2**64 - 1))
def test_a_position_token_is_bound_to_its_user(wal: int) -> None:
    token = codec.encode_wal("alice", wal)
    assert codec.decode_wal("alice", token) == wal
    with pytest.raises(InvalidInputError, match="TurnLedger-Position"):
        codec.decode_wal("bob", token)
    # A cursor is not a position token, nor the other way round.
    with pytest.raises(InvalidInputError):
        codec.decode_wal("alice", codec.encode("alice", wal % 2**63))
    with pytest.raises(InvalidInputError):
        codec.decode("alice", token)


@settings(max_examples=100)
@given(garbage=st.text(max_size=300))
def test_a_garbage_position_token_is_an_invalid_input_error(garbage: str) -> None:
    with pytest.raises(InvalidInputError):
        codec.decode_wal("alice", garbage)
    with pytest.raises(InvalidInputError):
        codec.decode_wal("alice", "w1." + garbage)
    with pytest.raises(InvalidInputError):
        codec.decode("alice", "c2." + garbage)


def _legacy(user_id: str, position: int, wal: int = 0) -> str:
    """A cursor as the releases before the cursor epoch sealed it."""
    if wal:
        payload = position.to_bytes(8, "big") + wal.to_bytes(8, "big")
        return codec._seal("c2", b"turnledger/cursor/v1|alice", payload)
    return codec._seal("c1", b"turnledger/cursor/v1|alice", position.to_bytes(8, "big"))


def test_cursors_from_before_the_epoch_keep_working_while_no_restore_happened() -> None:
    assert codec.decode_at("alice", _legacy("alice", 42)) == (42, 0)
    assert codec.decode_at("alice", _legacy("alice", 42, 7)) == (42, 7)


def test_a_cursor_of_an_older_epoch_past_the_restored_head_is_expired() -> None:
    restored = CursorEpoch(current=99, previous=0, head=40)
    # Within what the restored log holds: exactly what the device saw.
    assert codec.decode("alice", _legacy("alice", 40), restored) == 40
    assert codec.decode("alice", codec.encode("alice", 12), restored) == 12
    for stale in (_legacy("alice", 41), codec.encode("alice", 41)):
        with pytest.raises(CursorExpiredError) as raised:
            codec.decode("alice", stale, restored)
        assert raised.value.field == "since"
        assert "41" not in str(raised.value) and "40" not in str(raised.value)
    current = codec.encode("alice", 1_000, epoch=restored)
    assert codec.decode("alice", current, restored) == 1_000
    # Two restores on: the first epoch's cursors are refused at any position.
    again = CursorEpoch(current=5, previous=99, head=30)
    with pytest.raises(CursorExpiredError):
        codec.decode("alice", _legacy("alice", 1), again)
    assert codec.decode("alice", codec.encode("alice", 30, epoch=restored), again) == 30
    with pytest.raises(CursorExpiredError):
        codec.decode("alice", current, again)
    # Expired is an invalid input too: callers that catch those still do.
    assert issubclass(CursorExpiredError, InvalidInputError)
