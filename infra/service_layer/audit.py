"""Audits: verify every conversation's versions, hash chain, receipts and snapshots.

The chain pass reads raw stored rows (the notification log, or one
conversation's events) and needs no keys: it checks that versions run 1..n
without gaps, that each event's digest matches its stored bytes, that each
event links to the digest of the stored event before it, and that heads
recorded elsewhere (anchors) are still there. A cell the ledger never writes
(NULL, a wrong type, a position at or below zero) is a `malformed` finding at
its row, never an exception; with `leaves` set, the same read computes every
row's transparency-log leaf (docs/transparency.md). The receipt pass replays each
conversation from its events alone (never from a snapshot, which the chain
does not cover) to the version a receipt names, applies the receipt's policy
again with the turn's own question, and compares the body's length and
SHA-256; receipts whose turns were deleted since are reported as not
re-derivable, which is expected, not a failure. Finally every snapshot is
compared with the replay of its events. See docs/audit.md.

The passes live in their own modules: the chain pass in `audit_chain.py`
(with what it keeps per conversation in `audit_collected.py`), the receipt
pass in `audit_receipts.py`, the read-side and snapshot checks in
`audit_store_checks.py`; `Auditor` joins them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from uuid import UUID

from turnledger.domain.errors import ConversationNotFoundError
from turnledger.domain.findings import (
    ANCHOR_MISMATCH,
    BROKEN_LINK,
    CHANGED,
    DAMAGED_KEY,
    MISSING,
    NOT_REDERIVABLE,
    READ_SIDE_MISMATCH,
    RECEIPT_INVALID,
    RECEIPT_MISMATCH,
    SNAPSHOT_MISMATCH,
    TEXT_MISSING,
    TRUNCATED,
    UNDECODABLE,
    UNREADABLE,
    UNREPLAYABLE,
    UNSEALED,
    Anchor,
    AuditReport,
    ConversationAudit,
    Finding,
    check_anchor,
    check_chain,
    vanished_finding,
)
from turnledger.domain.transparency import RawLog
from turnledger.infra.raw_log import RecorderLog
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit_chain import ChainPass
from turnledger.infra.service_layer.audit_collected import CollectedConversation
from turnledger.infra.service_layer.audit_receipts import ReceiptPass
from turnledger.infra.service_layer.audit_receipts import head_at as _head_at
from turnledger.infra.service_layer.audit_store_checks import StoreChecks
from turnledger.projections.tokens import TokenCounter

__all__ = [
    "ANCHOR_MISMATCH",
    "BROKEN_LINK",
    "CHANGED",
    "DAMAGED_KEY",
    "MISSING",
    "NOT_REDERIVABLE",
    "READ_SIDE_MISMATCH",
    "RECEIPT_INVALID",
    "RECEIPT_MISMATCH",
    "SNAPSHOT_MISMATCH",
    "TEXT_MISSING",
    "TRUNCATED",
    "UNDECODABLE",
    "UNREADABLE",
    "UNREPLAYABLE",
    "UNSEALED",
    "Anchor",
    "AuditReport",
    "Auditor",
    "ConversationAudit",
    "Finding",
    "_head_at",
    "check_anchor",
    "check_chain",
]


class Auditor(ChainPass, ReceiptPass, StoreChecks):
    """Runs audits over one ledger; `progress` is told how many events were read."""

    def __init__(
        self,
        ledger: Conversations,
        *,
        page_size: int = 1000,
        progress: Callable[[int], None] | None = None,
        token_counters: Mapping[str, TokenCounter] | None = None,
        raw_log: RawLog | None = None,
    ) -> None:
        """`token_counters`: the counters, by name, that windows were built with
        besides the built-in estimate (receipts name theirs). `raw_log` reads
        the rows as stored (infra/raw_log.py); the default reads through the
        library's recorder, which decodes ids and skips positions <= 0.
        """
        self.ledger = ledger
        self.raw_log = raw_log or RecorderLog(ledger.recorder)
        self._ids = {}
        self._topics = {}
        self._by_int = {}
        # Set `leaves` to a list to collect every row's transparency-log leaf
        # hash (and `leaf_positions` its notification id) in the same pass.
        self.leaves = None
        self.leaf_positions = []
        self.log_findings = []
        self._snapshot_owners = None
        self.page_size = page_size
        self.token_counters = token_counters or {}
        self.progress = progress or (lambda count: None)

    def total_events(self, conversation_id: UUID | None = None) -> int:
        """An upper bound on the rows an audit reads, for a progress bar."""
        if conversation_id is not None:
            return len(self.ledger.recorder.select_events(conversation_id))
        return self.ledger.recorder.max_notification_id() or 0

    def audit(
        self,
        conversation_id: UUID | None = None,
        *,
        receipts: bool = True,
        anchors: Mapping[UUID, Anchor] | None = None,
        read_side: bool = True,
    ) -> AuditReport:
        """Audit the whole store, or one conversation.

        `anchors` are heads recorded elsewhere (a checkpoint, an earlier
        report): the chain cannot show that a conversation's newest
        events were removed, an anchor beyond the end of the log can. With
        `read_side`, each conversation's read-side row (written with its
        events) is checked against the log, and serves as such an anchor.
        """
        collected: dict[UUID, CollectedConversation] = {}
        self._by_int = {}
        self.log_findings = []
        self._snapshot_owners = self._conversations_with_snapshots()
        for page in self._pages(conversation_id):
            self._collect_page(collected, page)
        if conversation_id is not None and not collected and not self.log_findings:
            raise ConversationNotFoundError(conversation_id)
        anchors = dict(anchors or {})
        if conversation_id is not None:
            anchors = {k: v for k, v in anchors.items() if k == conversation_id}
        for vanished in anchors.keys() - collected.keys():
            collected[vanished] = CollectedConversation(
                ConversationAudit(vanished), vanished.bytes
            )
        heads = (
            self.ledger.read_side.conversations(
                [k for k, v in collected.items() if v.has_rows]
            )
            if read_side
            else {}
        )
        audits: list[ConversationAudit] = []
        for item in collected.values():
            audit = item.audit
            if not item.has_rows:
                audit.findings.append(vanished_finding(audit.conversation_id, anchors))
            else:
                self._conclude(item, anchors.get(audit.conversation_id))
                if read_side:
                    self._check_read_side(audit, item, heads.get(audit.conversation_id))
                if receipts:
                    self._check_keys(audit)
                    self._check_receipts(audit, item.receipts)
                self._check_snapshots(audit)
            audits.append(audit)
        return AuditReport(audits, log_findings=list(self.log_findings))

    @staticmethod
    def _conclude(item: CollectedConversation, anchor: Anchor | None) -> None:
        """The conversation's chain findings, event count and head."""
        audit = item.audit
        if anchor is not None:
            item.to_rows()
        if item.fast:  # versions 1..count, each intact and linked: no finding
            audit.events = audit.head_version = item.count
            last_digest = item.digests[-1]
            audit.head_digest = (
                last_digest.hex()
                if len(last_digest) == 32
                else last_digest.decode("ascii")
            )
            return
        audit.findings.extend(check_chain(audit.conversation_id, item.rows))
        if anchor is not None:
            audit.findings.extend(
                check_anchor(audit.conversation_id, item.rows, anchor)
            )
        audit.events = len(item.rows)
        last = max(item.rows, key=lambda r: r.version)
        audit.head_version = last.version
        audit.head_digest = last.recorded
