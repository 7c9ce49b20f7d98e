"""Queries: history pages, request windows and folds, from the read side.

Nothing here loads an aggregate. A query reads the conversation's row first;
its version is the version every later read is pinned to ("as of"), so the
turns a window keeps and the version its receipt names always agree, however
many writes land meanwhile. Only the texts of the turns a query returns are
read (from their events) and decrypted. A turn deleted after the pinned
version has lost its key: the query then starts again at the new head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.projections.dropped import KEY_DAMAGED
from turnledger.projections.ledger_rows import TurnRow
from turnledger.projections.read_side import current_fold
from turnledger.projections.results import (
    MAX_HISTORY_PAGE,
    HistoryItem,
    HistoryPage,
)
from turnledger.projections.turn_reads import EventReader
from turnledger.projections.window_query import WindowQueries


@dataclass(frozen=True, slots=True)
class FoldStatus:
    """Whether the turns after the current fold call for a new one.

    `unfolded_tokens` is the char/4 estimate of the eligible turns after the
    fold, counted from the newest back until the threshold is passed (so it is
    exact when `due` is false, and a lower bound when it is true).
    """

    fold_id: str | None
    covers_through_turn_id: str | None
    unfolded_tokens: int
    threshold_tokens: int
    due: bool


class ConversationQueries(WindowQueries):
    """History pages, request windows and folds, answered from the read side.

    Built in layers, each in its own module: the conversation's row and its
    turns' texts (turn_reads.py), windows (window_query.py), and here the
    history and the fold's status.
    """

    # History -------------------------------------------------------------------

    def get_history(
        self, owner_id: str, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPage:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError("offset", "must be a non-negative integer")
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not (1 <= limit <= MAX_HISTORY_PAGE)
        ):
            raise InvalidInputError(
                "limit", f"must be an integer from 1 to {MAX_HISTORY_PAGE}"
            )
        head = self.get_conversation(owner_id, conversation_id)
        rows = self.read_side.turns_page(
            head.conversation_id, offset=offset, limit=limit, as_of=head.version
        )
        end = offset + len(rows)
        return HistoryPage(
            conversation_id=head.conversation_id,
            version=head.version,
            total_turns=head.turn_count,
            items=self.history_items(head.conversation_id, rows, owner_id=owner_id),
            next_offset=end if end < head.turn_count else None,
        )

    def history_items(
        self, conversation_id: UUID, rows: Sequence[TurnRow], *, owner_id: str
    ) -> tuple[HistoryItem, ...]:
        """These turns as the owner sees them: text for live turns, else None.

        A turn whose key is gone is shown as deleted, with the deletion's time
        read again from the read side (it was deleted while we read). A turn
        whose stored key is damaged is shown without text, `unreadable`
        "key-damaged"; the other turns are read as usual.
        """
        damaged: set[str] = set()
        texts = self.open_texts(
            conversation_id,
            [r for r in rows if not r.deleted],
            owner_id=owner_id,
            damaged=damaged,
        )
        missing = [
            r.turn_id
            for r in rows
            if not r.deleted and texts[r.turn_id] is None and r.turn_id not in damaged
        ]
        fresh = self.read_side.turns_by_id(conversation_id, missing) if missing else {}
        items = []
        for row in rows:
            row = fresh.get(row.turn_id, row)
            text = None if row.deleted else texts.get(row.turn_id)
            items.append(
                HistoryItem(
                    position=row.position,
                    turn_id=row.turn_id,
                    status=row.status,
                    recorded_at=row.recorded_at,
                    deleted_at=row.deleted_at,
                    question=None if text is None else text.question,
                    answer=None if text is None else text.answer,
                    parts=text,
                    unreadable=KEY_DAMAGED
                    if row.turn_id in damaged and not row.deleted
                    else None,
                )
            )
        return tuple(items)

    # Folds --------------------------------------------------------------------

    def get_fold_status(
        self, owner_id: str, conversation_id: UUID, *, threshold_tokens: int
    ) -> FoldStatus:
        if (
            isinstance(threshold_tokens, bool)
            or not isinstance(threshold_tokens, int)
            or threshold_tokens < 1
        ):
            raise InvalidInputError("threshold_tokens", "must be a positive integer")
        head = self.get_conversation(owner_id, conversation_id)
        fold = current_fold(self.read_side.folds(head.conversation_id), head.version)
        boundary = -1 if fold is None else fold.covers_through_position
        tokens = self._unfolded_tokens(head, boundary, threshold_tokens)
        return FoldStatus(
            fold_id=None if fold is None else fold.fold_id,
            covers_through_turn_id=None
            if fold is None
            else fold.covers_through_turn_id,
            unfolded_tokens=tokens,
            threshold_tokens=threshold_tokens,
            due=tokens > threshold_tokens,
        )

    def get_fold_summary(self, owner_id: str, conversation_id: UUID) -> str | None:
        head = self.get_conversation(owner_id, conversation_id)
        fold = current_fold(self.read_side.folds(head.conversation_id), head.version)
        return (
            None
            if fold is None
            else self.read_fold(head.conversation_id, fold, owner_id=owner_id)
        )


__all__ = ["ConversationQueries", "EventReader", "FoldStatus", "TurnStatus"]
