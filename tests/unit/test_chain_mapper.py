"""The chained envelope as the mapper writes it: bytes fixed, events untouched.

The digests below are of the stored states the ledger wrote for these events
before the chain link became an argument of the mapping (when it was set on
the event): a stored event's bytes, and so every digest after it, must never
change for the same event and link.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application

from turnledger.domain.chain import GENESIS, read_link
from turnledger.domain.conversation import Conversation
from turnledger.domain.transcodings import register_legacy_transcodings
from turnledger.infra.service_layer.chain_mapper import ChainSealingMapper

ID = UUID("0f0e0d0c-0b0a-4908-8706-050403020100")
AT = datetime(2026, 12, 5, 9, 30, 0, 123456, tzinfo=UTC)
STORED_SHA256 = [
    "f3c032e9a73ba8d8dddca6071e14f591d49a199676b6e7e97af49ef0f400e937",
    "5a8f96e828eca276a4cd5ede1416800123e43cb2edf81a450c439b0045711bcd",
    "cc774616d64dbf26b894ac3056f8eee2d775ef77fec6c3ffb36c7d372cdb8c7c",
    "c28b81af9ab5c036d56ab0b1283a81f4d162167865b63a12379620e84bde6a2c",
    "90112616a092e77efd8434cae65ef3aaf270310c42a838d41a99de606db073aa",
    "ad2b58798b63942773e50b69cb40fe6d0c0d04b2b0da4799cb79c85af54e77f8",
    "224024f9319a8872dc60c0767961eb13762a8f7af487ceca6d077035ada1cced",
]


def _events() -> list[Any]:
    c = Conversation
    common: dict[str, Any] = {"originator_id": ID, "timestamp": AT}
    return [
        c.Started(
            **common,
            originator_version=1,
            originator_topic="domain.conversation:Conversation",
            owner_id="alice",
        ),
        c.TurnConfirmed(
            **common,
            originator_version=2,
            turn_id="t1",
            sealed_question=b"\x00q\xff",
            sealed_answer=b"answer",
        ),
        c.TurnConfirmed(
            **common,
            originator_version=3,
            turn_id="t2",
            sealed_question=b"q2",
            sealed_answer=b"a2",
            window_receipt={"format": 1, "ids": ["t1"]},
            sealed_system=b"sys",
            sealed_parts=b"[parts]",
        ),
        c.TurnAbandoned(
            **common,
            originator_version=4,
            turn_id="t3",
            outcome="stopped",
            sealed_question=b"q3",
            sealed_answer=b"",
        ),
        c.FoldRecorded(
            **common,
            originator_version=5,
            fold_id="f1",
            covers_through_turn_id="t2",
            covered_turns=2,
            covered_eligible=2,
            sealed_summary=b"sum",
        ),
        c.HistoryDeleted(
            **common,
            originator_version=6,
            turn_ids=["t1"],
            whole_history=False,
            deleted_by="alice",
        ),
        c.FoldWithdrawn(
            **common, originator_version=7, fold_ids=["f1"], reason="deleted"
        ),
    ]


def _mapper() -> ChainSealingMapper:
    transcoder = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    register_legacy_transcodings(transcoder.transcoder)  # type: ignore[arg-type]
    return ChainSealingMapper(transcoder=transcoder.transcoder)


def test_sealed_bytes_are_those_the_ledger_always_wrote() -> None:
    mapper = _mapper()
    previous = GENESIS
    for event, expected in zip(_events(), STORED_SHA256, strict=True):
        stored, digest = mapper.seal(event, previous)
        assert hashlib.sha256(stored.state).hexdigest() == expected
        link = read_link(stored)
        assert (link.previous_digest, link.recorded_digest) == (previous, digest)
        assert link.intact
        previous = digest


def test_sealing_leaves_the_event_as_it_was_created() -> None:
    mapper = _mapper()
    for event in _events():
        before = dict(vars(event))
        mapper.seal(event, "ab" * 32)
        assert vars(event) == before


def test_a_decoded_event_has_its_fields_and_its_stored_link() -> None:
    mapper = _mapper()
    previous = GENESIS
    for event in _events():
        stored, digest = mapper.seal(event, previous)
        decoded = mapper.to_domain_event(stored)
        assert type(decoded) is type(event)
        # Optional fields at their default (None) are not stored: read back
        # as the class's default.
        given = {k: v for k, v in vars(event).items() if v is not None}
        assert vars(decoded) == {**given, "previous_digest": previous, "digest": digest}
        assert all(getattr(decoded, k) is None for k in vars(event).keys() - given)
        # Stored again (an export, a copy), a decoded event gives the same bytes.
        assert mapper.seal(decoded, previous)[0].state == stored.state
        previous = digest
