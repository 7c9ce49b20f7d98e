"""`Conversations.record_turns`: many turns in shared transactions, each with
the outcome `confirm_turn` or `record_abandoned_turn` would have given it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.domain.conversation import TurnStatus
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.results import TurnReceipt, TurnRequest
from turnledger.infra.settings import Settings

OWNERS = ["alice", "bob"]

# (owner index, conversation index, turn id, status, question, answer,
# expected version): small pools, so retries, conflicts, other owners'
# conversations and stale versions all come up.
requests = st.lists(
    st.tuples(
        st.sampled_from([0, 1]),
        st.sampled_from([0, 1, 2]),
        st.sampled_from(["t1", "t2", "t3", "-bad"]),
        st.sampled_from(["confirmed", "failed", "stopped", "lost"]),
        st.sampled_from(["q", "q2", " ", "nul\x00"]),
        st.sampled_from(["a", "a2", ""]),
        st.sampled_from([None, None, 1, 2, 3]),
    ),
    max_size=12,
)


def outcome_of(call: Callable[[], TurnReceipt]) -> tuple[Any, ...]:
    """What can be compared between two ledgers: no timestamps."""
    try:
        receipt = call()
    except Exception as error:
        return ("error", type(error).__name__, str(error))
    return ("receipt", receipt.turn_id, receipt.status, receipt.version)


def one_by_one(ledger: Conversations, request: TurnRequest) -> tuple[Any, ...]:
    if request.status == TurnStatus.CONFIRMED:
        return outcome_of(
            lambda: ledger.confirm_turn(
                request.owner_id,
                request.conversation_id,
                turn_id=request.turn_id,
                question=request.question,
                answer=request.answer,
                expected_version=request.expected_version,
            )
        )
    return outcome_of(
        lambda: ledger.record_abandoned_turn(
            request.owner_id,
            request.conversation_id,
            turn_id=request.turn_id,
            outcome=request.status,
            question=request.question,
            partial_answer=request.answer,
            expected_version=request.expected_version,
        )
    )


def as_outcome(outcome: TurnReceipt | Exception) -> tuple[Any, ...]:
    def give() -> TurnReceipt:
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return outcome_of(give)


def memory() -> Conversations:
    return open_conversations(Settings(_env_file=None, persistence="memory"))


@settings(max_examples=150, deadline=None)
@given(drawn=requests)
def test_each_request_has_the_outcome_it_would_have_alone(
    drawn: list[tuple[Any, ...]],
) -> None:
    memory_ledger, twin = memory(), memory()
    try:
        conversations: list[UUID] = []
        for n in range(3):
            chosen = memory_ledger.start_conversation(OWNERS[n % 2])
            assert twin.start_conversation(OWNERS[n % 2], conversation_id=chosen)
            conversations.append(chosen)
        batch = [
            TurnRequest(
                owner_id=OWNERS[owner],
                conversation_id=conversations[conversation],
                turn_id=turn_id,
                status=status,
                question=question,
                answer=answer,
                expected_version=expected,
            )
            for (owner, conversation, turn_id, status, question, answer, expected) in (
                drawn
            )
        ]
        together = [as_outcome(o) for o in memory_ledger.record_turns(batch)]
        alone = [one_by_one(twin, request) for request in batch]
        assert together == alone
        for conversation in conversations:
            owner = memory_ledger.read_side.conversations([conversation])[
                conversation
            ].owner_id
            mine = memory_ledger.get_history(owner, conversation)
            theirs = twin.get_history(owner, conversation)
            assert [(i.turn_id, i.status) for i in mine.items] == [
                (i.turn_id, i.status) for i in theirs.items
            ]
    finally:
        memory_ledger.close()
        twin.close()
