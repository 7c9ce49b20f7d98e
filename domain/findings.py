"""What an audit reports: findings, per-conversation results, the chain checks.

Pure: the functions here look at digests and versions already read from the
store and never touch it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from turnledger.domain.chain import GENESIS

# Kinds of finding. Every kind is an integrity failure except the last one.
CHANGED = "changed"  # an event's bytes no longer match its digest
UNSEALED = "unsealed"  # an event carries no well-formed chain seal
BROKEN_LINK = "broken-link"  # an event does not follow the stored one before it
MISSING = "missing"  # versions are absent: events were removed
UNDECODABLE = "undecodable"  # an event's state cannot be read back
UNREPLAYABLE = "unreplayable"  # the conversation cannot be rebuilt from its events
RECEIPT_INVALID = "receipt-invalid"  # a stored receipt is malformed
RECEIPT_MISMATCH = "receipt-mismatch"  # re-derived body differs from the receipt
TEXT_MISSING = "text-missing"  # text of a turn that was never deleted cannot be read
UNREADABLE = "unreadable"  # sealed text fails to open: its ciphertext was altered
DAMAGED_KEY = "damaged-key"  # a turn's (or fold's) stored key was altered
SNAPSHOT_MISMATCH = "snapshot-mismatch"  # a snapshot is not what its events give
TRUNCATED = "truncated"  # the log ends before a head an anchor recorded
ANCHOR_MISMATCH = "anchor-mismatch"  # the event an anchor recorded has another digest
READ_SIDE_MISMATCH = "read-side-mismatch"  # a read-side row says what the log does not
MALFORMED = "malformed"  # a stored cell holds what the ledger never writes
LOG_CHANGED = "log-changed"  # a checkpointed position holds another event now
LOG_REMOVED = "log-removed"  # an event a checkpoint covered is gone
LOG_INSERTED = "log-inserted"  # an event sits inside a checkpoint's range, uncovered
LOG_TRUNCATED = "log-truncated"  # the log is shorter than a checkpoint's tree
CHECKPOINT_MISMATCH = "checkpoint-mismatch"  # the log's root is not the signed one
RECORD_LOST = "record-lost"  # the deletion record a checkpoint signed is missing
RECORD_ROLLED_BACK = "record-rolled-back"  # ... holds fewer entries than signed
RECORD_ALTERED = "record-altered"  # ... holds other entries than signed
NOT_REDERIVABLE = "not-rederivable"  # receipt's turns deleted since: expected


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing an audit found, located by conversation and version.

    Findings about the log as a whole, or a row whose originator id is not a
    conversation id, have no conversation; `notification_id` places a row in
    the log when it is known.
    """

    kind: str
    conversation_id: UUID | None
    version: int | None
    detail: str
    notification_id: int | None = None

    @property
    def failure(self) -> bool:
        return self.kind != NOT_REDERIVABLE

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "failure": self.failure,
            "conversation_id": (
                None if self.conversation_id is None else str(self.conversation_id)
            ),
            "version": self.version,
            "notification_id": self.notification_id,
            "detail": self.detail,
        }


@dataclass(slots=True)
class ConversationAudit:
    """What the audit established about one conversation."""

    conversation_id: UUID
    owner_id: str | None = None
    events: int = 0
    head_version: int = 0
    head_digest: str = GENESIS
    receipts_verified: int = 0
    receipts_not_rederivable: int = 0
    receipts_failed: int = 0
    deleted_turn_ids: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def chain_intact(self) -> bool:
        return not any(
            f.kind
            in (
                CHANGED,
                UNSEALED,
                BROKEN_LINK,
                MISSING,
                TRUNCATED,
                ANCHOR_MISMATCH,
                MALFORMED,
            )
            for f in self.findings
        )

    @property
    def ok(self) -> bool:
        return not any(finding.failure for finding in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "conversation_id": str(self.conversation_id),
            "owner_id": self.owner_id,
            "events": self.events,
            "head_version": self.head_version,
            "head_digest": self.head_digest,
            "chain_intact": self.chain_intact,
            "receipts": {
                "verified": self.receipts_verified,
                "not_rederivable": self.receipts_not_rederivable,
                "failed": self.receipts_failed,
            },
            "deleted_turn_ids": list(self.deleted_turn_ids),
            "findings": [finding.to_json() for finding in self.findings],
            "ok": self.ok,
        }


@dataclass(slots=True)
class AuditReport:
    conversations: list[ConversationAudit]
    # Findings about the log as a whole: rows no conversation owns, and the
    # comparison with a signed checkpoint.
    log_findings: list[Finding] = field(default_factory=list)
    # The signed checkpoint the log was compared with, when there was one.
    checkpoint: dict[str, Any] | None = None

    @property
    def events_verified(self) -> int:
        return sum(audit.events for audit in self.conversations)

    @property
    def findings(self) -> list[Finding]:
        return [
            *self.log_findings,
            *(f for audit in self.conversations for f in audit.findings),
        ]

    def anchors(self) -> dict[UUID, Anchor]:
        """Every conversation's head, to check a later audit against."""
        return {
            audit.conversation_id: (audit.head_version, audit.head_digest)
            for audit in self.conversations
            if audit.events
        }

    @property
    def failures(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.failure]

    @property
    def ok(self) -> bool:
        return not self.failures

    def conversation(self, conversation_id: UUID) -> ConversationAudit:
        for audit in self.conversations:
            if audit.conversation_id == conversation_id:
                return audit
        raise KeyError(conversation_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "conversations": len(self.conversations),
            "events_verified": self.events_verified,
            "chains_broken": sum(not a.chain_intact for a in self.conversations),
            "receipts": {
                "verified": sum(a.receipts_verified for a in self.conversations),
                "not_rederivable": sum(
                    a.receipts_not_rederivable for a in self.conversations
                ),
                "failed": sum(a.receipts_failed for a in self.conversations),
            },
            "deleted_turns": sum(len(a.deleted_turn_ids) for a in self.conversations),
            "checkpoint": self.checkpoint,
            "failures": [finding.to_json() for finding in self.failures],
            "conversation_details": [a.to_json() for a in self.conversations],
        }


class ChainRow(NamedTuple):
    """One stored event's chain facts (digests as hex; error when unsealed)."""

    version: int
    previous: str
    recorded: str
    computed: str
    seal_error: str | None = None
    error_kind: str = UNSEALED
    notification_id: int | None = None


def check_chain(conversation_id: UUID, rows: Iterable[ChainRow]) -> list[Finding]:
    """Findings for one conversation's rows, whatever order they came in."""
    findings: list[Finding] = []
    expected_version = 1
    head: str | None = GENESIS
    for row in sorted(rows, key=lambda r: r.version):
        if row.version > expected_version:
            missing = (
                str(expected_version)
                if row.version == expected_version + 1
                else f"{expected_version}-{row.version - 1}"
            )
            findings.append(
                Finding(
                    MISSING,
                    conversation_id,
                    expected_version,
                    f"version(s) {missing} absent: events were removed",
                    row.notification_id,
                )
            )
        expected_version = row.version + 1
        if row.seal_error is not None:
            findings.append(
                Finding(
                    row.error_kind,
                    conversation_id,
                    row.version,
                    row.seal_error or "no seal",
                    row.notification_id,
                )
            )
            head = None
            continue
        if row.recorded != row.computed:
            findings.append(
                Finding(
                    CHANGED,
                    conversation_id,
                    row.version,
                    "stored bytes do not match the event's digest: the event was "
                    "altered (or moved from another conversation or version)",
                    row.notification_id,
                )
            )
        if head is not None and row.previous != head:
            findings.append(
                Finding(
                    BROKEN_LINK,
                    conversation_id,
                    row.version,
                    "does not follow the stored event before it: events were removed, "
                    "inserted or reordered",
                    row.notification_id,
                )
            )
        head = row.recorded
    return findings


Anchor = tuple[int, str]
"""A (version, digest) pair recorded outside the log for one conversation."""


def check_anchor(
    conversation_id: UUID, rows: Iterable[ChainRow], anchor: Anchor
) -> list[Finding]:
    version, digest = anchor
    recorded = {row.version: row.recorded for row in rows}
    if version not in recorded:
        if version > max(recorded, default=0):
            return [
                Finding(
                    TRUNCATED,
                    conversation_id,
                    version,
                    f"an anchor records version {version}, but the log ends at "
                    f"version {max(recorded, default=0)}: newest events were removed",
                )
            ]
        return []  # a missing middle version is already reported by the chain
    if recorded[version] != digest:
        return [
            Finding(
                ANCHOR_MISMATCH,
                conversation_id,
                version,
                "the event differs from the one an anchor recorded",
            )
        ]
    return []


def vanished_finding(conversation_id: UUID, anchors: Mapping[UUID, Anchor]) -> Finding:
    version, _ = anchors[conversation_id]
    return Finding(
        TRUNCATED,
        conversation_id,
        version,
        f"an anchor records this conversation at version {version}, but the log "
        "holds none of its events",
    )
