"""Redoing the deletions a restored store lacks (infra/restore.py): the turns
still standing in the restored log are deleted again through the ledger, as
any deletion is, and the keys left over are destroyed in the key store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from uuid import UUID

from eventsourcing.persistence import Tracking

from turnledger.infra.deletion_record import KeyRef
from turnledger.infra.keystore import KeyStore
from turnledger.infra.restore_report import RestoreReport
from turnledger.infra.service_layer.application import Conversations

# Who a deletion redone after a restore is recorded as deleted by.
RESTORE_ACTOR = "turnledger:restore-check"


def redo_deletions(
    ledger: Conversations,
    store: KeyStore,
    missing: set[KeyRef],
    report: RestoreReport,
) -> RestoreReport:
    """Destroy the `missing` keys again; `report` with what was redone."""
    turns_deleted, present = _delete_standing_turns(ledger, missing)
    # Keys whose turns are not (or no longer) standing in the restored log:
    # a fold's, or one stored just before its event when the copy was taken.
    remaining = missing - store.destroyed_key_ids()
    position = store.max_tracking_id(ledger.name) or 0
    for conversation_id, key_ids in sorted(_group(remaining).items()):
        present += store.destroy_keys(
            conversation_id, key_ids, Tracking(ledger.name, position)
        )
    pending = False
    if remaining:
        pending = not store.compact(ledger.name)
    return replace(
        report,
        turns_deleted_again=turns_deleted,
        keys_destroyed_again=present,
        compaction_pending=pending or store.needs_compaction(ledger.name),
    )


def _delete_standing_turns(
    ledger: Conversations, missing: set[KeyRef]
) -> tuple[int, int]:
    """Delete the turns of `missing` keys that the restored log still holds:
    how many turns were deleted, and how many keys their purge destroyed."""
    by_conversation = _group(missing)
    turns_deleted = present = 0
    rows = ledger.read_side.conversations(list(by_conversation))
    for conversation_id, key_ids in sorted(by_conversation.items()):
        row = rows.get(conversation_id)
        if row is None:
            continue  # written after the backup: nothing of it was restored
        live = sorted(
            turn.turn_id
            for turn in ledger.read_side.undeleted_turns(conversation_id)
            if turn.turn_id in key_ids
        )
        if live:
            # Recorded in the log as any deletion is; its purge destroys the
            # keys and compacts the key store before this returns.
            receipt = ledger.delete_history(
                row.owner_id,
                conversation_id,
                turn_ids=live,
                deleted_by=RESTORE_ACTOR,
            )
            turns_deleted += len(receipt.deleted_turn_ids)
            if receipt.purge is not None:
                present += receipt.purge.keys_destroyed
    return turns_deleted, present


def _group(ids: Iterable[KeyRef]) -> dict[UUID, set[str]]:
    grouped: dict[UUID, set[str]] = {}
    for conversation_hex, key_id in ids:
        grouped.setdefault(UUID(hex=conversation_hex), set()).add(key_id)
    return grouped
