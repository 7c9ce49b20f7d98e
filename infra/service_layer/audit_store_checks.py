"""The audit's checks of what the ledger keeps beside the chain: each
conversation's read-side row, and every snapshot against the replay of its
events."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.domain import Snapshot

from turnledger.domain.conversation import fold_key_id
from turnledger.domain.findings import (
    DAMAGED_KEY,
    READ_SIDE_MISMATCH,
    SNAPSHOT_MISMATCH,
    ConversationAudit,
    Finding,
)
from turnledger.domain.transparency import RawLog
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit_collected import CollectedConversation
from turnledger.projections.ledger_rows import ConversationRow


def _state(aggregate: Any) -> tuple[Any, int, dict[str, Any]]:
    """What an aggregate is: its id, version and the state the library's own
    snapshot would record."""
    return aggregate.id, aggregate.version, Snapshot.take(aggregate).state


class StoreChecks:
    """The read-side and snapshot checks of `Auditor` (audit.py)."""

    ledger: Conversations
    raw_log: RawLog
    _snapshot_owners: frozenset[UUID] | None

    def _check_read_side(
        self,
        audit: ConversationAudit,
        item: CollectedConversation,
        row: ConversationRow | None,
    ) -> None:
        """The conversation's read-side row and deletion marks agree with the log.

        Queries trust the read side (owner checks, which turns are deleted),
        so a row edited in the database must not pass. Every other column is
        compared by `turnledger rebuild --check`, which replays the whole log.
        """
        conversation_id = audit.conversation_id
        if row is None:
            audit.findings.append(
                Finding(
                    READ_SIDE_MISMATCH,
                    conversation_id,
                    None,
                    "the conversation has events but no read-side row",
                )
            )
            return
        differ = [
            f"{name}: read side {mine!r}, log {theirs!r}"
            for name, mine, theirs in (
                ("owner", row.owner_id, audit.owner_id),
                ("version", row.version, audit.head_version),
                ("head digest", row.head_digest, audit.head_digest),
                ("turns", row.turn_count, item.turns),
            )
            if mine != theirs
        ]
        if audit.deleted_turn_ids:
            marked = self.ledger.read_side.turns_by_id(
                conversation_id, audit.deleted_turn_ids
            )
            undeleted = [
                turn_id
                for turn_id in audit.deleted_turn_ids
                if turn_id not in marked or not marked[turn_id].deleted
            ]
            if undeleted:
                differ.append(f"deleted in the log, not on the read side: {undeleted}")
        if differ:
            audit.findings.append(
                Finding(
                    READ_SIDE_MISMATCH,
                    conversation_id,
                    row.version,
                    "; ".join(differ),
                )
            )

    def _check_keys(self, audit: ConversationAudit) -> None:
        """Every stored key of the conversation's turns and folds unwraps.

        The store's master key is checked when it opens, so a key that does
        not unwrap was altered: a `damaged-key` finding at the version that
        recorded its turn (or fold). Destroyed keys are not looked at.
        """
        conversation_id = audit.conversation_id
        try:
            read_side = self.ledger.read_side
            versions: dict[str, tuple[int, str]] = {
                row.turn_id: (row.version, f"turn {row.turn_id}")
                for row in read_side.turns_page(
                    conversation_id, offset=0, limit=2**62, as_of=2**62
                )
                if not row.deleted
            }
            versions.update(
                (fold_key_id(fold.fold_id), (fold.version, f"fold {fold.fold_id}"))
                for fold in read_side.folds(conversation_id)
                if fold.withdrawn_version is None
            )
            damaged = self.ledger.vault.damaged_key_ids(conversation_id, list(versions))
        except Exception as error:  # noqa: BLE001 - reported, never raised
            audit.findings.append(
                Finding(
                    DAMAGED_KEY,
                    conversation_id,
                    None,
                    f"{type(error).__name__}: the conversation's keys cannot be "
                    "checked",
                )
            )
            return
        for key_id in damaged:
            version, what = versions[key_id]
            audit.findings.append(
                Finding(
                    DAMAGED_KEY,
                    conversation_id,
                    version,
                    f"the stored key of {what} does not unwrap under the store's "
                    "master key: its key row was altered, so its text cannot be "
                    "read (the conversation's other turns are unaffected)",
                )
            )

    def _conversations_with_snapshots(self) -> frozenset[UUID] | None:
        """Which conversations have snapshots, in one read (None: ask each)."""
        if self.ledger.legacy_snapshots is None:
            return frozenset()
        listing = getattr(self.raw_log, "snapshot_originators", None)
        if listing is None:
            return None
        try:
            return frozenset(listing())
        except Exception:  # noqa: BLE001 - each conversation is then asked
            return None

    def _check_snapshots(self, audit: ConversationAudit) -> None:
        """Each snapshot must equal the replay of the events up to its version.

        Snapshots are not chained, yet the ledger loads from them: an altered
        snapshot (another owner, an undeleted turn) would be served as truth.
        """
        store = self.ledger.legacy_snapshots
        if store is None:  # a store that never had snapshots
            return
        conversation_id = audit.conversation_id
        owners = self._snapshot_owners
        if owners is not None and conversation_id not in owners:
            return
        try:
            snapshots: list[Any] = list(store.get(conversation_id))
            if not snapshots:
                return
            last = max(s.originator_version for s in snapshots)
            events: list[Any] = list(self.ledger.events.get(conversation_id, lte=last))
        except Exception as error:  # noqa: BLE001 - reported, never raised
            audit.findings.append(
                Finding(
                    SNAPSHOT_MISMATCH,
                    conversation_id,
                    None,
                    f"{type(error).__name__}: snapshots or events cannot be read",
                )
            )
            return
        _compare_snapshots(audit, snapshots, events)


def _compare_snapshots(
    audit: ConversationAudit, snapshots: list[Any], events: list[Any]
) -> None:
    """A finding for each snapshot that differs from the replay of its events,
    or that no event replays to."""
    conversation_id = audit.conversation_id
    by_version = {s.originator_version: s for s in snapshots}
    replayed: Any = None
    for event in events:
        try:
            replayed = event.mutate(replayed)
        except Exception:  # noqa: BLE001 - the chain pass reports the cause
            return
        snapshot = by_version.pop(replayed.version, None)
        if snapshot is None:
            continue
        try:
            differs = _state(snapshot.mutate(None)) != _state(replayed)
        except Exception:  # noqa: BLE001 - an unreadable snapshot differs
            differs = True
        if differs:
            audit.findings.append(
                Finding(
                    SNAPSHOT_MISMATCH,
                    conversation_id,
                    replayed.version,
                    "the snapshot differs from the replay of its events: the "
                    "ledger would serve altered state until it is removed",
                )
            )
    head = 0 if replayed is None else replayed.version
    for version in sorted(by_version):  # no event replays to these
        audit.findings.append(
            Finding(
                SNAPSHOT_MISMATCH,
                conversation_id,
                version,
                f"a snapshot at version {version}, which no event of the "
                f"conversation (head {head}) replays to: written or moved "
                "by hand",
            )
        )
