"""The ledger's turn commands, as methods of `Conversations` (application.py):
each checks its input, makes the write (turn_requests.py, turn_writes.py) and
queues it in the group committer (group_commit.py), the one batching layer,
which saves it with other callers' writes in shared transactions.

A caller waits in one of the committer's two ways: on its own thread
(`confirm_turn`, `record_turns` and the rest), or, for a caller that must
not block (the HTTP service's event loop), by posting turns through
`posted_turns` and being handed each batch's outcomes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar, cast
from uuid import UUID

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import TurnParts
from turnledger.infra.service_layer.batch import Write
from turnledger.infra.service_layer.group_commit import GroupCommitter, Pending
from turnledger.infra.service_layer.results import TurnReceipt, TurnRequest
from turnledger.infra.service_layer.turn_requests import TurnRequests
from turnledger.infra.service_layer.turn_writes import TurnWrites, turn_parts
from turnledger.projections.results import ProjectedWindow

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class TurnDelivery(Protocol[T_contra]):
    """A caller that posts turns (`Conversations.posted_turns`) instead of
    waiting on a thread: its items become requests, and their outcomes come
    back, a batch at a time, on the thread that leads the batch."""

    def lend(self, lead: Callable[[], None]) -> None:
        """Run `lead` on a thread of the caller's (RuntimeError: none left)."""

    def requests(self, items: Sequence[T_contra]) -> list[TurnRequest | Exception]:
        """The request each item asks for, or the error that refuses it."""

    def deliver(
        self, items: Sequence[T_contra], outcomes: Sequence[TurnReceipt | Exception]
    ) -> None:
        """Each item's receipt or error, in its place. Must not raise."""


class PostedTurns(Generic[T]):
    """Turns posted to the group committer for a `TurnDelivery`: the
    committer's poster, making the delivery's requests into the ledger's
    writes (each checked and sealed as `record_turns` does)."""

    def __init__(
        self,
        committer: GroupCommitter[Write],
        requests: TurnRequests,
        delivery: TurnDelivery[T],
    ) -> None:
        self._committer = committer
        self._requests = requests
        self._delivery = delivery

    def post(self, conversation_id: UUID, item: T) -> None:
        """Queue `item`'s turn, of `conversation_id`, and return at once."""
        self._committer.post(self, [(conversation_id, item)])

    # The committer's Poster.

    def lend(self, lead: Callable[[], None]) -> None:
        self._delivery.lend(lead)

    def prepare(self, pending: Sequence[Pending[Write]]) -> None:
        made = self._delivery.requests([request.posted for request in pending])
        for request, turn in zip(pending, made, strict=True):
            try:
                if isinstance(turn, Exception):
                    raise turn
                if turn.conversation_id != request.key:
                    raise InvalidInputError(
                        "conversation_id", "not the conversation the turn was posted to"
                    )
                request.work = self._requests.request(turn)
            except Exception as error:  # this request's refusal alone
                request.fail(error)

    def deliver(self, pending: Sequence[Pending[Write]]) -> None:
        outcomes: list[TurnReceipt | Exception] = []
        for request in pending:
            try:
                outcomes.append(request.outcome())
            except Exception as error:
                outcomes.append(error)
        self._delivery.deliver([request.posted for request in pending], outcomes)


class TurnCommands:
    """Confirmed and abandoned turns, one at a time or many together."""

    # Set by `Conversations.__init__`.
    _committer: GroupCommitter[Write]
    _turns: TurnWrites
    _requests: TurnRequests

    def confirm_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        question: str | None = None,
        answer: str | None = None,
        parts: TurnParts | None = None,
        expected_version: int | None = None,
        window: ProjectedWindow | None = None,
    ) -> TurnReceipt:
        """Record a completed exchange. Retrying with the same content is a no-op.

        Give `question` and `answer` (a text-only turn), or `parts`: the
        question with its attachments, the assistant's steps (text, tool
        calls and their results, refusals) and the final answer
        (domain/parts.py). Every tool call of a confirmed turn has its result.
        `window` is the projected window this answer replied to: its receipt
        is kept with the turn so an audit can prove what was sent.
        """
        receipt: TurnReceipt = self._committer.submit(
            self._requests.confirmed(
                owner_id,
                conversation_id,
                turn_id=turn_id,
                question=question,
                answer=answer,
                parts=parts,
                expected_version=expected_version,
                window=window,
            )
        )
        return receipt

    def record_turns(
        self, requests: Sequence[TurnRequest]
    ) -> list[TurnReceipt | Exception]:
        """Many turns, of any owners and conversations, each written exactly
        as `confirm_turn` or `record_abandoned_turn` writes it, in shared
        transactions; writes of one conversation in the order given.

        Each request's outcome is in its place: its receipt, or the error that
        refused it, which refused nothing else. For services that gather
        concurrent requests into one call (the HTTP service's turn writes).
        """
        outcomes: list[TurnReceipt | Exception | None] = []
        writes: list[Write] = []
        places: list[int] = []
        for request in requests:
            try:
                writes.append(self._requests.request(request))
            except Exception as error:  # this request's refusal, in its place
                outcomes.append(error)
            else:
                places.append(len(outcomes))
                outcomes.append(None)  # filled in once committed
        for place, pending in zip(
            places, self._committer.submit_many(writes), strict=True
        ):
            try:
                outcomes[place] = pending.outcome()
            except Exception as error:
                outcomes[place] = error
        assert all(outcome is not None for outcome in outcomes)
        return cast(list[TurnReceipt | Exception], outcomes)

    def posted_turns(self, delivery: TurnDelivery[T]) -> PostedTurns[T]:
        """Where a caller that must not block posts turns: each is written as
        `record_turns` writes it, in shared transactions with every other
        caller's writes, and `delivery` is handed the outcomes."""
        return PostedTurns(self._committer, self._requests, delivery)

    def confirm_turns(
        self,
        owner_id: str,
        conversation_id: UUID,
        turns: Sequence[tuple[str, str, str] | tuple[str, TurnParts]],
    ) -> list[TurnReceipt]:
        """Record many completed exchanges in order: (turn id, question, answer)
        or (turn id, TurnParts) each.

        For importing a history: the turns are saved in shared transactions
        (up to 64 a transaction), each checked like `confirm_turn` and recorded
        or refused on its own; once all were tried, the first refusal is raised.
        Input that is malformed is refused before anything is written.
        """
        writes = []
        for index, item in enumerate(turns):
            if (
                isinstance(item, str)
                or not isinstance(item, Sequence)
                or len(item) not in (2, 3)
            ):
                raise InvalidInputError(
                    f"turns[{index}]",
                    "expected (turn_id, question, answer) or (turn_id, TurnParts)",
                )
            if len(item) == 3:
                turn = turn_parts(item[1], item[2], None, answer_field="answer")
            else:
                turn = turn_parts(None, None, item[1], answer_field="answer")
            turn.check_complete()
            writes.append(
                self._turns.write(
                    owner_id,
                    conversation_id,
                    turn_id=item[0],
                    status=TurnStatus.CONFIRMED,
                    turn=turn,
                    expected_version=None,
                )
            )
        return [request.outcome() for request in self._committer.submit_many(writes)]

    def record_abandoned_turn(
        self,
        owner_id: str,
        conversation_id: UUID,
        *,
        turn_id: str,
        outcome: TurnStatus | str,
        question: str | None = None,
        partial_answer: str | None = None,
        parts: TurnParts | None = None,
        expected_version: int | None = None,
    ) -> TurnReceipt:
        """Record an exchange whose reply failed or was stopped: never sent.

        Give `question` (and any `partial_answer`), or `parts`, which may end
        mid-tool: calls without results, an empty answer.
        """
        receipt: TurnReceipt = self._committer.submit(
            self._requests.abandoned(
                owner_id,
                conversation_id,
                turn_id=turn_id,
                outcome=outcome,
                question=question,
                partial_answer=partial_answer,
                parts=parts,
                expected_version=expected_version,
            )
        )
        return receipt
