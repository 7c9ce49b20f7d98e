"""What a deletion and a fold do inside a batch (batch.py): read the facts the
aggregate's command needs from the read side, call it, and leave in the
batch what the recorder writes with the events (turn rows read, the fold's
new key and size). `Conversations.delete_history` and `record_fold`
(application.py) check their input, then submit these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from uuid import UUID

from turnledger.domain.conversation import Conversation, TurnFacts, fold_key_id
from turnledger.domain.ports import TextVault
from turnledger.domain.text import TextMetrics
from turnledger.infra.service_layer.batch import Batch
from turnledger.infra.service_layer.results import FoldReceipt
from turnledger.projections.ledger_rows import SummarySize
from turnledger.projections.read_side import ReadSide, current_fold


def deletion_run(
    read: ReadSide,
    *,
    wanted: list[str] | None,
    deleted_by: str,
    expected_version: int | None,
) -> Callable[[Conversation, Batch], tuple[list[str], int]]:
    """Delete `wanted` (every turn when None): the turns deleted and the
    conversation's version after."""

    def run(conversation: Conversation, batch: Batch) -> tuple[list[str], int]:
        facts: Mapping[str, TurnFacts]
        if wanted is None:
            rows = read.undeleted_turns(conversation.id)
            facts = {row.turn_id: row.facts() for row in rows}
            batch.turns.setdefault(conversation.id, {}).update(
                (row.turn_id, row) for row in rows
            )
        else:
            facts = {
                turn_id: row.facts()
                for turn_id in wanted
                if (row := batch.turn(conversation.id, turn_id)) is not None
            }
        head = batch.heads[conversation.id]
        live = [
            fold.facts()
            for fold in read.folds(conversation.id)
            if fold.live_at(head.version)
        ]
        deleted = conversation.delete_history(
            requested=wanted,
            facts=facts,
            live_folds=live,
            deleted_by=deleted_by,
            expected_version=expected_version,
        )
        return deleted, conversation.version

    return run


def fold_run(
    read: ReadSide,
    vault: TextVault,
    *,
    fold_id: str,
    covers_through_turn_id: str,
    summary: str,
    summarized_version: int,
    expected_version: int | None,
) -> Callable[[Conversation, Batch], FoldReceipt]:
    """Record the fold, its summary sealed under a key of its own."""
    metrics = TextMetrics.of(summary)
    key_id = fold_key_id(fold_id)

    def run(conversation: Conversation, batch: Batch) -> FoldReceipt:
        head_version = conversation.version
        folds = read.folds(conversation.id)
        through = batch.turn(conversation.id, covers_through_turn_id)
        covered_eligible, deleted_since = (
            (0, [])
            if through is None
            else _eligible_covered(
                read,
                conversation.id,
                through_position=through.position,
                head_version=head_version,
                summarized_version=summarized_version,
            )
        )
        current = current_fold(folds, head_version)
        data_key, new_key = vault.new_data_key(conversation.id, key_id)
        conversation.record_fold(
            fold_id=fold_id,
            through=None if through is None else through.facts(),
            covers_through_turn_id=covers_through_turn_id,
            covered_eligible=covered_eligible,
            current_fold=None if current is None else current.facts(),
            fold_exists=any(f.fold_id == fold_id for f in folds),
            deleted_since_summary=deleted_since,
            sealed_summary=vault.seal_with(
                data_key,
                conversation.id,
                key_id,
                "summary",
                summary,
                owner_id=conversation.owner_id,
            ),
            summarized_version=summarized_version,
            expected_version=expected_version,
        )
        if new_key is not None:
            batch.keys.append(new_key)
        batch.sizes.setdefault(conversation.id, {})[key_id] = SummarySize(
            metrics.json_bytes, metrics.chars
        )
        return FoldReceipt(
            conversation.id, fold_id, covers_through_turn_id, conversation.version
        )

    return run


def _eligible_covered(
    read: ReadSide,
    conversation_id: UUID,
    *,
    through_position: int,
    head_version: int,
    summarized_version: int | None,
) -> tuple[int, list[str]]:
    """How many turns up to `through_position` are eligible now, and which of
    those eligible when the summary was written have been deleted since."""
    now = set(
        read.eligible_ids(
            conversation_id, first=0, last=through_position, as_of=head_version
        )
    )
    deleted_since: list[str] = []
    if summarized_version is not None:
        before = read.eligible_ids(
            conversation_id,
            first=0,
            last=through_position,
            as_of=min(summarized_version, head_version),
        )
        deleted_since = [t for t in before if t not in now]
    return len(now), deleted_since
