"""The chain pass's fast path reports exactly what the general path does.

The audit checks the common row (well-typed cells, the next version of its
conversation, a seal that verifies and links) without building its
`ChainRow`, and hashes its leaf from the same cells. Any other row, and every
later row of its conversation, goes through the general path. Here the same
logs, edited as someone with write access to the database could, are audited
both ways: the reports and the leaves must be identical. The audit over a
store also pauses the cyclic garbage collector while it reads, and restores it.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.test_audit import run_turns
from tests.integration.test_audit_malformed import CELLS, EditedLog
from turnledger.domain.chain import (
    ENVELOPE_MAGIC,
    GENESIS,
    ChainFormatError,
    decode_envelope,
    encode_envelope,
    raw_link,
    seal_state,
)
from turnledger.domain.transparency import RawRow
from turnledger.infra.persistence import open_conversations
from turnledger.infra.raw_log import RecorderLog
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor, AuditReport
from turnledger.infra.settings import Settings
from turnledger.infra.transparency_audit import audit_store

TOPIC = "bench:Event"


class GeneralPathAuditor(Auditor):
    """Every row through the general path: the reference the fast path matches."""

    def _collect_page(self, collected: Any, page: Sequence[RawRow]) -> None:
        for row in page:
            self._collect_row(collected, row)


class CountingAuditor(Auditor):
    """Counts the rows the fast path handed to the general path."""

    general = 0

    def _collect_row(self, collected: Any, row: RawRow) -> None:
        self.general += 1
        super()._collect_row(collected, row)


def _first_release_rows(start: int) -> Iterator[RawRow]:
    """A conversation sealed as the first release did (JSON), then continued
    in the envelope format, linked across the change; one with an empty
    JSON object state."""
    conversation_id = uuid.UUID(int=start)
    previous = GENESIS
    for version in range(1, 6):
        if version <= 3:
            body = b"{}" if version == 2 else b'{"n":%d,"text":"caf\xc3\xa9"}' % version
            state, previous = seal_state(
                originator_id=conversation_id,
                version=version,
                topic=TOPIC,
                state=body,
                previous_digest=previous,
            )
        else:
            state, previous = encode_envelope(
                originator_id=conversation_id,
                version=version,
                topic=TOPIC,
                previous_digest=previous,
                timestamp=datetime(2026, 1, 1, tzinfo=UTC),
                blobs={"sealed_question": base64.b64decode("AAEC/w==")},
                json=b'{"n":%d}' % version,
            )
        yield RawRow(start + version, conversation_id, version, TOPIC, state)


def _rows(ledger: Conversations) -> list[RawRow]:
    run_turns(ledger, "alice", turns=3)
    run_turns(ledger, "bob", turns=2)
    rows = list(RecorderLog(ledger.recorder).rows(None, 1000))
    return rows + list(_first_release_rows(1000))


EDITS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 40), st.integers(0, 10_000)),
    st.tuples(st.just("swap"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("drop"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("duplicate"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("move"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("version"), st.integers(0, 40), st.integers(-2, 2)),
    st.tuples(st.just("hex id"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("huge id"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("cell"), st.integers(0, 40), CELLS),
    st.tuples(st.just("reseal"), st.integers(0, 40), st.booleans()),
)


def _resealed(row: RawRow, *, keep_previous: bool) -> RawRow:
    """The row re-sealed as a forger who read domain/chain.py would: its own
    digest verifies; linked to a made-up digest unless `keep_previous`."""
    state = row.state
    if state[:4] == ENVELOPE_MAGIC:
        envelope = decode_envelope(state)
        sealed, _ = encode_envelope(
            originator_id=row.originator_id,
            version=row.version,
            topic=row.topic,
            previous_digest=envelope.previous_digest if keep_previous else "ab" * 32,
            timestamp=envelope.timestamp,
            blobs=envelope.blobs,
            json=b"{ " + envelope.json[1:],  # other bytes, the same meaning
            class_version=envelope.class_version,
        )
        return row._replace(state=sealed)
    link = raw_link(row.originator_id.bytes, row.version, row.topic, state)
    body = state[: state.rindex(b"previous_digest") - 2]
    body = b"{}" if body == b"" else body + b',"forged":1}'
    sealed, _ = seal_state(
        originator_id=row.originator_id,
        version=row.version,
        topic=row.topic,
        state=body,
        previous_digest=link[0] if keep_previous else "cd" * 32,
    )
    return row._replace(state=sealed)


def _edit(rows: list[RawRow], edit: tuple[str, int, Any]) -> None:
    kind, index, value = edit
    index %= len(rows)
    row = rows[index]
    if kind == "flip" and isinstance(row.state, bytes):
        at = value % len(row.state)
        state = bytearray(row.state)
        state[at] ^= 0x01
        rows[index] = row._replace(state=bytes(state))
    elif kind == "swap":
        other = rows[value % len(rows)]
        rows[index] = row._replace(notification_id=other.notification_id)
        rows[value % len(rows)] = other._replace(notification_id=row.notification_id)
    elif kind == "drop":
        del rows[index]
    elif kind == "duplicate":
        rows.append(row._replace(notification_id=5000 + len(rows)))
    elif kind == "move":
        rows[index] = row._replace(originator_id=rows[value % len(rows)].originator_id)
    elif kind == "version" and isinstance(row.version, int):
        rows[index] = row._replace(version=row.version + value)
    elif kind == "hex id" and isinstance(row.originator_id, uuid.UUID):
        rows[index] = row._replace(originator_id=row.originator_id.hex)
    elif kind == "huge id":
        rows[index] = row._replace(notification_id=2**70 + index)
    elif kind == "reseal" and isinstance(row.originator_id, uuid.UUID):
        # An earlier edit may have left nothing to re-seal.
        with contextlib.suppress(ChainFormatError, TypeError, ValueError):
            rows[index] = _resealed(row, keep_previous=value)
    elif kind == "cell":
        column, cell = value
        rows[index] = row._replace(**{column: cell})


def _audit(
    auditor_class: type[Auditor],
    ledger: Conversations,
    rows: list[RawRow],
    anchors: Any = None,
    *,
    read_side: bool = True,
) -> tuple[AuditReport, list[bytes], list[int]]:
    auditor = auditor_class(ledger, raw_log=EditedLog(rows), page_size=7)
    auditor.leaves = []
    report = auditor.audit(receipts=False, anchors=anchors, read_side=read_side)
    return report, auditor.leaves, auditor.leaf_positions


@settings(max_examples=60, deadline=None)
@given(
    edits=st.lists(EDITS, max_size=4),
    anchored=st.booleans(),
)
def test_fast_path_reports_what_the_general_path_reports(
    edits: list[tuple[str, int, Any]], anchored: bool
) -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        rows = _rows(ledger)
        anchors = _audit(Auditor, ledger, rows)[0].anchors() if anchored else None
        for edit in edits:
            _edit(rows, edit)
        fast = _audit(Auditor, ledger, rows, anchors)
        general = _audit(GeneralPathAuditor, ledger, rows, anchors)
    finally:
        ledger.close()
    assert fast[0].to_json() == general[0].to_json()
    assert fast[1] == general[1]  # the same leaf for every row, in the same order
    assert fast[2] == general[2]


def test_an_intact_log_takes_the_fast_path_for_every_row() -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        rows = _rows(ledger)
        auditor = CountingAuditor(ledger, raw_log=EditedLog(rows))
        auditor.leaves = []
        report = auditor.audit(receipts=False, read_side=False)
        assert report.ok, report.failures
        assert auditor.general == 0
        assert len(auditor.leaves) == len(rows)

        # One altered byte (of its recorded digest, so the event still
        # decodes; a later event follows it): that row and the rest of its
        # conversation go the general way, and the change is found there.
        victim = 2
        state = bytearray(rows[victim].state)
        state[40] ^= 0x01
        rows[victim] = rows[victim]._replace(state=bytes(state))
        later = sum(
            1
            for row in rows[victim:]
            if row.originator_id == rows[victim].originator_id
        )
        auditor = CountingAuditor(ledger, raw_log=EditedLog(rows))
        report = auditor.audit(receipts=False, read_side=False)
    finally:
        ledger.close()
    assert auditor.general == later
    version = rows[victim].version
    # The digest no longer matches its bytes, and the next event links to
    # the digest that was there.
    assert [(f.kind, f.version) for f in report.failures] == [
        ("changed", version),
        ("broken-link", version + 1),
    ]


def test_anchors_hold_conversations_whose_rows_all_took_the_fast_path() -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        rows = _rows(ledger)
        anchors = _audit(Auditor, ledger, rows)[0].anchors()
        newest = max(rows, key=lambda r: r.notification_id)
        truncated = [r for r in rows if r is not newest]
        # Nothing after a conversation's newest event commits to it: only
        # the anchor shows it was removed, while every remaining row is intact.
        report = _audit(Auditor, ledger, truncated, anchors, read_side=False)[0]
        assert [(f.kind, f.version) for f in report.failures] == [
            ("truncated", newest.version)
        ]
        # An anchor naming another digest for an event still there.
        forged = {**anchors, newest.originator_id: (2, "ef" * 32)}
        report = _audit(Auditor, ledger, rows, forged, read_side=False)[0]
        assert [(f.kind, f.version) for f in report.failures] == [
            ("anchor-mismatch", 2)
        ]
    finally:
        ledger.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_audit_pauses_the_cyclic_collector_and_restores_it(
    tmp_path: Path, enabled: bool
) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path)
    ledger = open_conversations(settings)
    seen: list[bool] = []

    @contextmanager
    def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
        yield lambda count: seen.append(gc.isenabled())

    was = gc.isenabled()
    try:
        run_turns(ledger, "alice", turns=2)
        (gc.enable if enabled else gc.disable)()
        report = audit_store(ledger, settings, progress=progress)
        assert report.ok, report.failures
        assert seen and not any(seen)  # off while the rows were read
        assert gc.isenabled() is enabled  # and as it was afterwards
        with pytest.raises(ZeroDivisionError):

            @contextmanager
            def failing(label: str, total: int) -> Iterator[Callable[[int], None]]:
                yield lambda count: [1 / 0]

            audit_store(ledger, settings, progress=failing)
        assert gc.isenabled() is enabled  # even when the pass failed
    finally:
        (gc.enable if was else gc.disable)()
        ledger.close()
