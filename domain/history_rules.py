"""The rules of a conversation's history edits, as pure functions of the
facts the read side gives a command (turn_facts.py): which turns a deletion
deletes, which folds it withdraws, and what a fold must cover and name. The
aggregate's commands (conversation.py) apply them before recording anything,
so a refused edit records no event."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from turnledger.domain.errors import (
    FoldConflictError,
    TurnDeletedError,
    TurnNotFoundError,
)
from turnledger.domain.turn_facts import FoldFacts, TurnFacts


def deletion_targets(
    conversation_id: UUID,
    requested: Sequence[str] | None,
    facts: Mapping[str, TurnFacts],
) -> list[TurnFacts]:
    """The turns a deletion of `requested` (None: every turn) deletes, in
    order: those not deleted already. An unknown turn id refuses it."""
    if requested is None:
        return sorted(
            (f for f in facts.values() if not f.deleted),
            key=lambda f: f.position,
        )
    unknown = [turn_id for turn_id in requested if turn_id not in facts]
    if unknown:
        raise TurnNotFoundError(conversation_id, unknown)
    return [
        facts[turn_id]
        for turn_id in dict.fromkeys(requested)
        if not facts[turn_id].deleted
    ]


def covering_folds(
    live_folds: Sequence[FoldFacts], deleted: Sequence[TurnFacts]
) -> list[str]:
    """The live folds covering a deleted turn: their text was derived from it."""
    first_deleted = min(f.position for f in deleted)
    return [
        fold.fold_id
        for fold in live_folds
        if fold.covers_through_position >= first_deleted
    ]


def covered_turns(
    conversation_id: UUID,
    version: int,
    *,
    fold_id: str,
    through: TurnFacts | None,
    covers_through_turn_id: str,
    current_fold: FoldFacts | None,
    fold_exists: bool,
    deleted_since_summary: Sequence[str],
    summarized_version: int | None,
) -> int:
    """How many turns a new fold covers, once it is allowed: a new fold id,
    through a turn that stands, with a summary of a version that still
    holds, covering no fewer turns than the current fold."""
    if fold_exists:
        raise FoldConflictError(conversation_id, fold_id, "is already recorded")
    if through is None:
        raise TurnNotFoundError(conversation_id, [covers_through_turn_id])
    if through.deleted:
        raise TurnDeletedError(conversation_id, covers_through_turn_id)
    _check_summarized(
        conversation_id,
        version,
        fold_id=fold_id,
        through=through,
        summarized_version=summarized_version,
        deleted_since_summary=deleted_since_summary,
    )
    covered = through.position + 1
    if current_fold is not None and covered < current_fold.covered_turns:
        raise FoldConflictError(
            conversation_id,
            fold_id,
            f"would cover fewer turns than fold {current_fold.fold_id}",
        )
    return covered


def _check_summarized(
    conversation_id: UUID,
    version: int,
    *,
    fold_id: str,
    through: TurnFacts,
    summarized_version: int | None,
    deleted_since_summary: Sequence[str],
) -> None:
    """A fold's summary must name a version the turns it covers had, and
    none of them may have been deleted since (its text may hold theirs)."""
    if summarized_version is not None and summarized_version > version:
        raise FoldConflictError(
            conversation_id,
            fold_id,
            f"names version {summarized_version}, after the conversation's "
            f"current version {version}",
        )
    if summarized_version is not None and summarized_version < through.version:
        raise FoldConflictError(
            conversation_id,
            fold_id,
            f"summarizes version {summarized_version}, before turn "
            f"{through.turn_id} was recorded",
        )
    if deleted_since_summary:
        raise FoldConflictError(
            conversation_id,
            fold_id,
            "covers turns deleted after the version it summarized ("
            + ", ".join(deleted_since_summary)
            + "): summarize the history again",
        )
