"""Turn commands made into the batch's writes (batch.py): which rules apply
to a confirmed turn, which to a failed or stopped one, what a `TurnRequest`
of `Conversations.record_turns` asks for, and the window a confirmed turn
keeps the receipt of (window_requests.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import TurnParts
from turnledger.infra.service_layer.batch import Write
from turnledger.infra.service_layer.results import TurnRequest
from turnledger.infra.service_layer.turn_writes import (
    TurnWrites,
    check_window,
    turn_parts,
)
from turnledger.infra.service_layer.window_requests import project_requested
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.results import ProjectedWindow


class _Ledger(Protocol):
    @property
    def queries(self) -> ConversationQueries: ...

    @property
    def checks_credentials(self) -> bool: ...


class TurnRequests:
    """The writes of `confirm_turn`, `record_abandoned_turn` and `record_turns`."""

    def __init__(self, turns: TurnWrites, ledger: _Ledger) -> None:
        self._turns = turns
        self._ledger = ledger

    def request(self, request: TurnRequest) -> Write:
        """The write a request asks for, checked; its credential kept for the
        store to check in the write's transaction."""
        write = self._uncredentialed(request)
        if request.credential is None:
            return write
        if not self._ledger.checks_credentials:
            raise InvalidInputError(
                "credential", "this ledger's store does not check credentials"
            )
        return replace(write, credential=request.credential)

    def _uncredentialed(self, request: TurnRequest) -> Write:
        if not isinstance(request, TurnRequest):
            raise InvalidInputError("requests", "expected TurnRequest items")
        if request.status == TurnStatus.CONFIRMED:
            return self.confirmed(
                request.owner_id,
                request.conversation_id,
                turn_id=request.turn_id,
                question=request.question,
                answer=request.answer,
                parts=request.parts,
                expected_version=request.expected_version,
                window=self._requested_window(request),
            )
        if request.window is not None:
            raise InvalidInputError(
                "window", "only a confirmed turn keeps its window's receipt"
            )
        return self.abandoned(
            request.owner_id,
            request.conversation_id,
            turn_id=request.turn_id,
            outcome=request.status,
            question=request.question,
            partial_answer=request.answer,
            parts=request.parts,
            expected_version=request.expected_version,
        )

    def _requested_window(self, request: TurnRequest) -> ProjectedWindow | None:
        """The window a request names, projected again (window_requests.py)."""
        if request.window is None:
            return None
        question = (
            request.parts.question if request.parts is not None else request.question
        )
        if not isinstance(question, str):
            return None  # `confirmed` refuses the turn itself
        return project_requested(
            self._ledger.queries,
            request.owner_id,
            request.conversation_id,
            question,
            request.window,
        )

    def confirmed(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str | None,
        answer: str | None,
        parts: TurnParts | None,
        expected_version: int | None,
        window: ProjectedWindow | None = None,
    ) -> Write:
        turn = turn_parts(question, answer, parts, answer_field="answer")
        turn.check_complete()
        if window is not None:
            check_window(conversation_id, turn.question, window)
        return self._turns.write(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=TurnStatus.CONFIRMED,
            turn=turn,
            expected_version=expected_version,
            window=window,
        )

    def abandoned(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        outcome: TurnStatus | str,
        question: str | None,
        partial_answer: str | None,
        parts: TurnParts | None,
        expected_version: int | None,
    ) -> Write:
        try:
            status = TurnStatus(outcome)
        except ValueError:
            status = None
        if status not in (TurnStatus.FAILED, TurnStatus.STOPPED):
            raise InvalidInputError("outcome", "must be 'failed' or 'stopped'")
        assert status is not None
        turn = turn_parts(
            question,
            "" if partial_answer is None and parts is None else partial_answer,
            parts,
            answer_field="partial_answer",
        )
        return self._turns.write(
            owner_id,
            conversation_id,
            turn_id=turn_id,
            status=status,
            turn=turn,
            expected_version=expected_version,
        )
