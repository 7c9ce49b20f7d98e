"""The ledger's history edits, as methods of `Conversations` (application.py):
deleting turns (then purging their keys) and recording a fold. Each checks
its input here; what the write does to the aggregate and the read side is
history_edits.py."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID, uuid4

from turnledger.domain.errors import InvalidInputError, PurgeIncompleteError
from turnledger.domain.ports import TextVault
from turnledger.domain.text import (
    check_expected_version,
    check_identifier,
    check_text,
    check_turn_size,
)
from turnledger.infra.service_layer.batch import Write
from turnledger.infra.service_layer.group_commit import GroupCommitter
from turnledger.infra.service_layer.history_edits import deletion_run, fold_run
from turnledger.infra.service_layer.purge import PurgeReport, PurgeRunner
from turnledger.infra.service_layer.results import DeletionReceipt, FoldReceipt
from turnledger.infra.service_layer.turn_writes import check_conversation_id
from turnledger.projections.read_side import ReadSide


class HistoryCommands:
    """Deletions, the purge that follows them, and folds."""

    # Set by `Conversations.__init__`.
    _committer: GroupCommitter[Write]
    read_side: ReadSide
    purge: PurgeRunner
    max_turn_bytes: int
    vault: TextVault

    def delete_history(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_ids: Sequence[str] | None = None,
        deleted_by: str | None = None,
        expected_version: int | None = None,
    ) -> DeletionReceipt:
        """Delete the chosen turns, or the whole history when turn_ids is None."""
        check_identifier("owner_id", owner_id)
        check_conversation_id(conversation_id)
        check_expected_version(expected_version)
        actor = check_identifier("deleted_by", deleted_by or owner_id)
        wanted: list[str] | None = None
        if turn_ids is not None:
            if isinstance(turn_ids, str) or not isinstance(turn_ids, Sequence):
                raise InvalidInputError(
                    "turn_ids", "expected a list of turn ids or None"
                )
            wanted = [check_identifier("turn_id", turn_id) for turn_id in turn_ids]

        run = deletion_run(
            self.read_side,
            wanted=wanted,
            deleted_by=actor,
            expected_version=expected_version,
        )
        deleted, version = self._committer.submit(
            Write(owner_id, conversation_id, run, turn_ids=tuple(wanted or ()))
        )
        # The event is saved: from here the deletion stands. The purge destroys
        # the keys as a tracked follower of the log, so if it fails or the
        # process dies now, the next purge run (or start-up) completes it.
        try:
            report = self.purge_deleted_history()
        except Exception as error:
            raise PurgeIncompleteError(conversation_id) from error
        return DeletionReceipt(conversation_id, tuple(deleted), version, purge=report)

    def purge_deleted_history(self) -> PurgeReport:
        """Destroy the keys of every deleted turn not yet purged; compact the store."""
        return self.purge.run()

    def record_fold(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        covers_through_turn_id: str,
        summary: str,
        summarized_version: int,
        fold_id: str | None = None,
        expected_version: int | None = None,
    ) -> FoldReceipt:
        """Record a summary that stands in for every turn up to the given one.

        Written by the application service that made the summary; windows send
        it instead of the turns it covers. `summarized_version` is the ledger
        version of the history the summary was made from: the fold is refused
        if a turn it covers was deleted after it. Deleting any covered turn
        later withdraws the fold and destroys its text.
        """
        check_identifier("owner_id", owner_id)
        check_conversation_id(conversation_id)
        check_identifier("covers_through_turn_id", covers_through_turn_id)
        check_text("summary", summary)
        check_turn_size(summary, limit=self.max_turn_bytes)
        check_expected_version(expected_version)
        if (
            isinstance(summarized_version, bool)
            or not isinstance(summarized_version, int)
            or summarized_version < 1
        ):
            raise InvalidInputError(
                "summarized_version",
                "the ledger version the summary was made from (a positive integer)",
            )
        fold_id = check_identifier("fold_id", fold_id or uuid4().hex)

        run = fold_run(
            self.read_side,
            self.vault,
            fold_id=fold_id,
            covers_through_turn_id=covers_through_turn_id,
            summary=summary,
            summarized_version=summarized_version,
            expected_version=expected_version,
        )
        result: FoldReceipt = self._committer.submit(
            Write(owner_id, conversation_id, run, turn_ids=(covers_through_turn_id,))
        )
        return result
