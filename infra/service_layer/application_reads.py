"""The ledger's queries, as methods of `Conversations` (application.py): each
reads the read side through `ConversationQueries` (projections/queries.py),
never an aggregate."""

from __future__ import annotations

from uuid import UUID

from turnledger.projections.ledger_rows import ConversationRow
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.queries import ConversationQueries, FoldStatus
from turnledger.projections.results import HistoryPage, ProjectedWindow
from turnledger.projections.tokens import TokenCounter


class ConversationReads:
    """History, windows and folds, for the ledger's callers."""

    queries: ConversationQueries

    def get_conversation(self, owner_id: str, conversation_id: UUID) -> ConversationRow:
        """The conversation's row: owner, version, counts (no turns)."""
        return self.queries.get_conversation(owner_id, conversation_id)

    def get_history(
        self, owner_id: str, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPage:
        """One page of turns, oldest first, deleted ones as placeholders."""
        return self.queries.get_history(
            owner_id, conversation_id, offset=offset, limit=limit
        )

    def project_window(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        question: str,
        system: str,
        model: str,
        max_bytes: int | None = None,
        policy: WindowPolicy | None = None,
        token_counter: TokenCounter | None = None,
    ) -> ProjectedWindow:
        """The request for `question` under `policy` (see projections/window.py).

        Without a policy only `max_bytes` applies; with one, `max_bytes`, when
        given, overrides the policy's. Reads only: nothing is written.
        """
        return self.queries.project_window(
            owner_id,
            conversation_id,
            question=question,
            system=system,
            model=model,
            max_bytes=max_bytes,
            policy=policy,
            token_counter=token_counter,
        )

    def get_fold_status(
        self, owner_id: str, conversation_id: UUID, *, threshold_tokens: int
    ) -> FoldStatus:
        """Whether the turns after the current fold exceed `threshold_tokens`."""
        return self.queries.get_fold_status(
            owner_id, conversation_id, threshold_tokens=threshold_tokens
        )

    def get_fold_summary(self, owner_id: str, conversation_id: UUID) -> str | None:
        """The text of the current fold, or None when there is none."""
        return self.queries.get_fold_summary(owner_id, conversation_id)
