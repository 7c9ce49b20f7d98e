"""The hash chain's seal, read back from raw bytes, and the chain checks."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.domain.chain import (
    GENESIS,
    ChainFormatError,
    raw_link,
    read_link_parts,
    seal_state,
)
from turnledger.domain.findings import (
    BROKEN_LINK,
    CHANGED,
    MISSING,
    UNSEALED,
    ChainRow,
    check_chain,
)
from turnledger.infra.service_layer.chain_mapper import RecentDigests

TOPIC = "domain.conversation:Conversation.TurnConfirmed"
CONVERSATION = uuid.UUID("12345678-1234-5678-1234-567812345678")


def sealed(state: bytes, *, version: int = 2, previous: str = GENESIS) -> bytes:
    return seal_state(
        originator_id=CONVERSATION,
        version=version,
        topic=TOPIC,
        state=state,
        previous_digest=previous,
    )[0]


def test_sealed_state_is_json_with_the_two_chain_keys_last() -> None:
    state, digest = seal_state(
        originator_id=CONVERSATION,
        version=2,
        topic=TOPIC,
        state=b'{"turn_id":"t1","n":1}',
        previous_digest="a" * 64,
    )
    document = json.loads(state)
    assert list(document) == ["turn_id", "n", "previous_digest", "digest"]
    assert document["previous_digest"] == "a" * 64
    assert document["digest"] == digest
    link = read_link_parts(
        originator_id=CONVERSATION, version=2, topic=TOPIC, state=state
    )
    assert link.intact and link.previous_digest == "a" * 64


def test_an_empty_object_can_be_sealed_and_read() -> None:
    state = sealed(b"{}")
    assert json.loads(state)["previous_digest"] == GENESIS
    assert read_link_parts(
        originator_id=CONVERSATION, version=2, topic=TOPIC, state=state
    ).intact


@pytest.mark.parametrize(
    ("originator_id", "version", "topic"),
    [
        (uuid.uuid4(), 2, TOPIC),
        (CONVERSATION, 3, TOPIC),
        (CONVERSATION, 2, "domain.conversation:Conversation.TurnAbandoned"),
    ],
)
def test_the_digest_binds_the_row_id_version_and_topic(
    originator_id: uuid.UUID, version: int, topic: str
) -> None:
    state = sealed(b'{"turn_id":"t1"}')
    link = read_link_parts(
        originator_id=originator_id, version=version, topic=topic, state=state
    )
    assert not link.intact


@settings(max_examples=200, deadline=None)
@given(
    body=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=4),
    data=st.data(),
)
def test_any_single_byte_change_is_detected(
    body: dict[str, str], data: st.DataObject
) -> None:
    original = sealed(json.dumps(body, separators=(",", ":")).encode())
    offset = data.draw(st.integers(0, len(original) - 1))
    replacement = data.draw(st.integers(0, 255).filter(lambda b: b != original[offset]))
    changed = bytearray(original)
    changed[offset] = replacement
    try:
        link = read_link_parts(
            originator_id=CONVERSATION, version=2, topic=TOPIC, state=bytes(changed)
        )
    except ChainFormatError:
        return  # the seal itself is no longer well-formed: detected
    assert not link.intact or link.previous_digest != GENESIS


def test_unsealed_state_is_refused() -> None:
    with pytest.raises(ChainFormatError):
        read_link_parts(
            originator_id=CONVERSATION, version=1, topic=TOPIC, state=b'{"a":1}'
        )


def test_a_bad_previous_digest_cannot_be_sealed() -> None:
    with pytest.raises(ChainFormatError):
        sealed(b"{}", previous="not hex")


def _states(length: int) -> dict[int, bytes]:
    states, previous = {}, GENESIS
    for version in range(1, length + 1):
        states[version], previous = seal_state(
            originator_id=CONVERSATION,
            version=version,
            topic=TOPIC,
            state=b'{"v":%d}' % version,
            previous_digest=previous,
        )
    return states


def _row(version: int, state: bytes) -> ChainRow:
    return ChainRow(version, *raw_link(CONVERSATION.bytes, version, TOPIC, state))


def _chain(length: int) -> list[ChainRow]:
    return [_row(version, state) for version, state in _states(length).items()]


def test_an_intact_chain_has_no_findings_in_any_row_order() -> None:
    rows = _chain(6)
    assert check_chain(CONVERSATION, rows) == []
    assert check_chain(CONVERSATION, list(reversed(rows))) == []


@settings(max_examples=50, deadline=None)
@given(length=st.integers(3, 12), data=st.data())
def test_removing_a_non_final_event_is_located(
    length: int, data: st.DataObject
) -> None:
    rows = _chain(length)
    removed = data.draw(st.integers(1, length - 1))
    findings = check_chain(CONVERSATION, [r for r in rows if r.version != removed])
    assert {(f.kind, f.version) for f in findings} >= {
        (MISSING, removed),
        (BROKEN_LINK, removed + 1),
    }


@settings(max_examples=50, deadline=None)
@given(length=st.integers(3, 12), data=st.data())
def test_renumbered_events_are_located(length: int, data: st.DataObject) -> None:
    states = _states(length)
    first = data.draw(st.integers(1, length - 1))
    second = data.draw(st.integers(first + 1, length))
    # Swap the version numbers, keeping each row's bytes: what an UPDATE does.
    states[first], states[second] = states[second], states[first]
    swapped = [_row(version, state) for version, state in states.items()]
    findings = check_chain(CONVERSATION, swapped)
    assert (CHANGED, first) in {(f.kind, f.version) for f in findings}
    assert (CHANGED, second) in {(f.kind, f.version) for f in findings}


def test_an_unsealed_row_is_reported_where_it_is() -> None:
    rows = _chain(3)
    rows[1] = ChainRow(2, "", "", "", "no seal")
    findings = check_chain(CONVERSATION, rows)
    assert [(f.kind, f.version) for f in findings] == [(UNSEALED, 2)]


def test_recent_digests_keep_only_the_newest_entries() -> None:
    recent = RecentDigests(capacity=2)
    for version in (1, 2, 3):
        recent.put(CONVERSATION, version, f"{version}" * 64)
    assert recent.get(CONVERSATION, 1) is None
    assert recent.get(CONVERSATION, 3) == "3" * 64
    recent.get(CONVERSATION, 2)
    recent.put(CONVERSATION, 4, "4" * 64)
    assert recent.get(CONVERSATION, 2) == "2" * 64
    assert recent.get(CONVERSATION, 3) is None
