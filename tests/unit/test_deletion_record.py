"""The deletion record: what is appended is what is read back, any change to a
complete line is caught, and a line torn by a crash is dropped, not trusted."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.infra.deletion_record import (
    DeletionRecord,
    DeletionRecordError,
    DeletionRecordLostError,
)

CONVERSATIONS = [uuid.UUID(int=n) for n in range(1, 4)]
deletions = st.lists(
    st.tuples(
        st.sampled_from(CONVERSATIONS),
        st.lists(st.from_regex(r"[a-z0-9/]{1,8}", fullmatch=True), max_size=4),
    ),
    min_size=1,
    max_size=8,
)


def _fresh() -> DeletionRecord:
    record = DeletionRecord(Path(tempfile.mkdtemp()) / "record.log")
    record.create()
    return record


@settings(max_examples=40, deadline=None)
@given(deletions)
def test_every_key_appended_is_read_back_once(
    appended: list[tuple[uuid.UUID, list[str]]],
) -> None:
    record = _fresh()
    for position, (conversation_id, keys) in enumerate(appended):
        record.remember(conversation_id, keys, position=position)
    expected = {(c.hex, key) for c, keys in appended for key in keys}
    state = DeletionRecord(record.path).load()  # a second reader, from the file
    assert set(state.ids) == expected
    assert state.entries_naming(expected) == state.entries


@settings(max_examples=40, deadline=None)
@given(deletions, st.data())
def test_any_changed_byte_of_a_complete_entry_is_caught(
    appended: list[tuple[uuid.UUID, list[str]]], data: st.DataObject
) -> None:
    record = _fresh()
    for conversation_id, keys in appended:
        record.remember(conversation_id, [*keys, "k"], position=1)
    content = bytearray(record.path.read_bytes())
    header_end = content.index(b"\n") + 1
    index = data.draw(st.integers(header_end, len(content) - 2))  # not a newline
    if content[index] == ord("\n"):
        return
    content[index] ^= 0x01
    record.path.write_bytes(bytes(content))
    with pytest.raises(DeletionRecordLostError):
        DeletionRecord(record.path).load()


def test_a_torn_last_line_is_dropped_and_replaced() -> None:
    record = _fresh()
    conversation_id = uuid.uuid4()
    record.remember(conversation_id, ["t1"], position=1)
    with open(record.path, "ab") as handle:
        handle.write(b'0123abcd {"n":2,"c"')  # the crash
    state = DeletionRecord(record.path).load()
    assert set(state.ids) == {(conversation_id.hex, "t1")}
    record.remember(conversation_id, ["t2"], position=2)
    state = DeletionRecord(record.path).load()
    assert set(state.ids) == {(conversation_id.hex, "t1"), (conversation_id.hex, "t2")}


def test_two_writers_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "record.log"
    first, second = DeletionRecord(path), DeletionRecord(path)
    first.create()
    first.remember(uuid.uuid4(), ["a"], position=1)
    second.remember(uuid.uuid4(), ["b"], position=2)  # has not read "a" yet
    first.remember(uuid.uuid4(), ["c"], position=3)
    assert DeletionRecord(path).load().entries == 3


def test_a_record_is_never_replaced(tmp_path: Path) -> None:
    record = DeletionRecord(tmp_path / "record.log")
    record.create()
    with pytest.raises(FileExistsError):
        record.create()


def test_a_record_that_cannot_be_created_says_which_setting_to_change(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    record = DeletionRecord(blocker / "record.log")
    with pytest.raises(DeletionRecordError, match="TURNLEDGER_DELETION_RECORD_DIR"):
        record.create()


def _rewritten(path: Path, keep: int, extra: list[bytes]) -> bytes:
    """The record with only its first `keep` entries and then `extra` bodies,
    every hash recomputed: what someone who read this module writes."""
    import hashlib

    lines = path.read_bytes().splitlines()
    header, entries = lines[0], lines[1 : 1 + keep]
    head = hashlib.sha256(header).digest()
    out = [header]
    for line in entries:
        body = line.partition(b" ")[2]
        head = hashlib.sha256(head + body).digest()
        out.append(head.hex().encode() + b" " + body)
    for body in extra:
        head = hashlib.sha256(head + body).digest()
        out.append(head.hex().encode() + b" " + body)
    return b"\n".join(out) + b"\n"


def _filler(n: int) -> bytes:
    return (
        b'{"n":%d,"c":"%s","k":["pad-%d"],"p":1,"at":"2026-12-06T00:00:00+00:00"}'
        % (n, uuid.UUID(int=9).hex.encode(), n)
    )


@pytest.mark.parametrize("how", ["rewritten in place", "renamed over", "truncated"])
def test_a_record_rewritten_underneath_a_running_writer_is_refused(
    tmp_path: Path, how: str
) -> None:
    """A long-running writer checks, before each append, that the record is
    the one it read: a record with an entry removed and every hash recomputed
    (padded to be at least as long), renamed over it, or cut short is read
    again whole and refused; nothing is appended to it."""
    path = tmp_path / "record.log"
    writer = DeletionRecord(path)
    writer.create()
    conversation_id = uuid.uuid4()
    for n in range(1, 4):
        writer.remember(conversation_id, [f"t{n}"], position=n)
    if how == "truncated":
        forged = _rewritten(path, 2, [])
    else:
        # Entry 3 removed; pads keep the file as long as it was, or longer.
        forged = _rewritten(path, 2, [_filler(3), _filler(4)])
    if how == "renamed over":
        staged = tmp_path / "forged.log"
        staged.write_bytes(forged)
        staged.replace(path)
    else:
        path.write_bytes(forged)
    with pytest.raises(DeletionRecordLostError, match="replaced or rewritten"):
        writer.remember(conversation_id, ["t4"], position=4)
    assert path.read_bytes() == forged  # nothing chained onto it
    with pytest.raises(DeletionRecordLostError):
        writer.current_head()  # what a checkpoint would sign


def test_appends_by_another_process_are_still_read_incrementally(
    tmp_path: Path,
) -> None:
    path = tmp_path / "record.log"
    first, second = DeletionRecord(path), DeletionRecord(path)
    first.create()
    first.remember(uuid.uuid4(), ["a"], position=1)
    assert second.current_head().entries == 1
    first.remember(uuid.uuid4(), ["b"], position=2)
    assert second.current_head() == first.current_head()
    second.remember(uuid.uuid4(), ["c"], position=3)
    assert first.current_head().entries == 3
    assert DeletionRecord(path).load().entries == 3
