"""docs/audit.md, "The hash chain": the envelope as documented is what is stored.

A verifier written from the documentation alone (offsets, tag, what the
digest covers, the link to the event before) checks every event a ledger
stores: if the format drifted from the text, this fails.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from uuid import UUID

from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

AUDIT_MD = Path(__file__).resolve().parents[2] / "docs" / "audit.md"


def test_every_stored_event_is_the_documented_envelope() -> None:
    text = " ".join(AUDIT_MD.read_text().split())
    assert (
        'b"\\x00TL\\x01" | previous digest (32) | digest (32) | timestamp (8) |' in text
    )
    assert "bytes 4-36 and 36-68 of an envelope" in text
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        cid = ledger.start_conversation("alice")
        ledger.confirm_turn("alice", cid, turn_id="t1", question="q?", answer="a.")
        ledger.confirm_turn("alice", cid, turn_id="t2", question="r?", answer="b.")
        rows = ledger.recorder.select_notifications(0, 10)
    finally:
        ledger.close()
    assert len(rows) == 3
    previous = bytes(32)  # version 1 links to 32 zero bytes
    for row in rows:
        state = bytes(row.state)
        assert state[:4] == b"\x00TL\x01"
        assert state[4:36] == previous
        covered = (
            b"turnledger/chain/v2\n"
            + UUID(str(row.originator_id)).bytes
            + row.originator_version.to_bytes(8, "big", signed=True)
            + row.topic.encode()
            + b"\n"
            + state[:36]
            + state[68:]
        )
        assert state[36:68] == hashlib.sha256(covered).digest()
        class_version, count = struct.unpack(">BB", state[76:78])
        assert class_version >= 1
        at, lengths = 78, []
        for _ in range(count):
            _, length = struct.unpack(">BI", state[at : at + 5])
            lengths.append(length)
            at += 5
        rest = state[at + sum(lengths) :]
        assert isinstance(json.loads(rest), dict)  # the rest is compact JSON
        previous = state[36:68]
