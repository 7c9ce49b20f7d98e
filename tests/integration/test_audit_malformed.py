"""No cell can crash the chain pass: each malformed one is a located finding."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.test_audit import run_turns
from turnledger.domain.findings import MALFORMED
from turnledger.domain.transparency import InvalidText, RawRow
from turnledger.infra.raw_log import RecorderLog
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor


class EditedLog:
    """The ledger's real rows, with some cells replaced as a DBA could."""

    def __init__(self, rows: list[RawRow]) -> None:
        self._rows = sorted(rows, key=lambda r: r.notification_id)

    def rows(self, after: int | None, limit: int) -> Sequence[RawRow]:
        chosen = [r for r in self._rows if after is None or r.notification_id > after]
        return chosen[:limit]

    def rows_of(self, conversation_id: UUID) -> Sequence[RawRow]:
        return [r for r in self._rows if r.originator_id == conversation_id]

    def close(self) -> None:
        pass


def _rows(ledger: Conversations) -> list[RawRow]:
    return list(RecorderLog(ledger.recorder).rows(None, 1000))


CELLS = st.sampled_from(
    [
        ("state", None),
        ("state", 42),
        ("state", "text, not bytes"),
        ("state", InvalidText(b"\xff")),
        ("topic", None),
        ("topic", InvalidText(b"\xfe\xff")),
        ("topic", 7),
        ("originator_id", "not-a-uuid"),
        ("originator_id", None),
        ("version", None),
        ("version", "3"),
        ("notification_id", -1),
        ("notification_id", 0),
    ]
)


@settings(max_examples=40, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 5), CELLS), min_size=1, max_size=4))
def test_every_malformed_cell_is_a_finding_and_the_rest_is_still_checked(
    edits: list[tuple[int, tuple[str, object]]],
) -> None:
    from turnledger.infra.persistence import open_conversations
    from turnledger.infra.settings import Settings

    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        first, _ = run_turns(ledger, "alice", turns=2)
        second, _ = run_turns(ledger, "bob", turns=2)
        rows = _rows(ledger)
        edited = set()
        for index, (column, value) in edits:
            if column == "notification_id":
                value = -index - 1 if value == -1 else -100 - index
            rows[index] = rows[index]._replace(**{column: value})
            edited.add(index)
        report = Auditor(ledger, raw_log=EditedLog(rows)).audit(receipts=False)
    finally:
        ledger.close()
    located = {f.notification_id for f in report.failures}
    for index in edited:  # every edited row is named by its position in the log
        assert rows[index].notification_id in located, report.failures
    for finding in report.failures:
        if finding.kind == MALFORMED:
            assert finding.notification_id is not None
    untouched = {r.originator_id for i, r in enumerate(rows) if i not in edited}
    audited = {a.conversation_id for a in report.conversations}
    assert untouched & {first, second} <= audited
