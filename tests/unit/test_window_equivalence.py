"""The fast window returns the textbook loop's bytes, byte for byte."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference_window import naive_window
from tests.strategies import hostile_text, sendable_text
from turnledger.domain.errors import MandatoryInputTooLargeError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter
from turnledger.projections.window import WindowFold, WindowTurn, select_window


@st.composite
def policies(draw: st.DrawFn) -> WindowPolicy:
    max_tokens = draw(st.none() | st.integers(2, 80))
    max_messages = draw(st.none() | st.integers(1, 16))
    floor = draw(st.integers(0, max_messages if max_messages is not None else 8))
    context = draw(st.none() | st.integers(60, 400))
    return WindowPolicy(
        wire_format=draw(st.sampled_from(WIRE_FORMATS)),
        max_bytes=draw(st.integers(60, 3_000)),
        max_tokens=max_tokens,
        reserved_output_tokens=draw(st.integers(1, 50)),
        context_tokens=context,
        max_messages=max_messages,
        max_pairs=draw(st.none() | st.integers(1, 8)),
        floor_messages=floor,
        max_message_tokens=draw(st.none() | st.integers(1, 12)),
        fold_max_tokens=draw(st.none() | st.integers(2, 40)),
        fold_threshold_tokens=1,
    )


turn_texts = st.lists(st.tuples(hostile_text, hostile_text), max_size=10)


def _both(
    turns: list[WindowTurn],
    question: str,
    system: str,
    policy: WindowPolicy,
    counter: TokenCounter,
    fold: WindowFold | None,
) -> None:
    arguments: dict[str, Any] = dict(
        model="m\u2028",
        system=system,
        turns=turns,
        question=question,
        policy=policy,
        counter=counter,
        fold=fold,
    )
    try:
        expected = naive_window(**arguments)
    except MandatoryInputTooLargeError:
        try:
            select_window(**arguments)
        except MandatoryInputTooLargeError:
            return
        raise AssertionError(
            "the fast path accepted what the naive loop refused"
        ) from None
    fast = select_window(**arguments)
    assert fast.body == expected[0]
    assert fast.kept_turn_ids == expected[1]
    assert fast.byte_length <= policy.max_bytes
    covered = set() if fold is None else set(fold.covered_turn_ids)
    left_out = {t.turn_id for t in turns} - set(expected[1])
    assert set(fast.dropped_turn_ids) == left_out | covered


@settings(max_examples=150, deadline=None)
@given(
    texts=turn_texts,
    question=hostile_text,
    system=hostile_text,
    policy=policies(),
    summary=st.none() | hostile_text,
)
def test_fast_window_equals_the_naive_loop(
    texts: list[tuple[str, str]],
    question: str,
    system: str,
    policy: WindowPolicy,
    summary: str | None,
) -> None:
    turns = [WindowTurn(f"t{i}", q, a) for i, (q, a) in enumerate(texts)]
    fold = None if summary is None else WindowFold("f", summary, ("t-old",))
    _both(turns, question, system, policy, CHAR_ESTIMATE, fold)


@settings(max_examples=30, deadline=None)
@given(texts=turn_texts, question=hostile_text, policy=policies())
def test_fast_window_equals_the_naive_loop_with_a_real_tokenizer(
    texts: list[tuple[str, str]], question: str, policy: WindowPolicy
) -> None:
    turns = [WindowTurn(f"t{i}", q * 3, a) for i, (q, a) in enumerate(texts)]
    _both(turns, question, "sys", policy, token_counter("o200k_base"), None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.tuples(sendable_text, sendable_text), min_size=1, max_size=8),
    outcomes=st.lists(st.sampled_from(["confirmed", "failed", "stopped"]), max_size=8),
    question=sendable_text,
    policy=policies(),
    fold_at=st.none() | st.integers(0, 7),
    use_real_tokenizer=st.booleans(),
)
def test_the_stored_conversation_gives_the_same_bytes_as_the_naive_loop(
    texts: list[tuple[str, str]],
    outcomes: list[str],
    question: str,
    policy: WindowPolicy,
    fold_at: int | None,
    use_real_tokenizer: bool,
) -> None:
    """Through the ledger: recorded sizes, sealed text, failed turns and a fold."""
    counter = token_counter("o200k_base") if use_real_tokenizer else CHAR_ESTIMATE
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        conversation_id = ledger.start_conversation("owner")
        eligible: list[WindowTurn] = []
        for index, (q, a) in enumerate(texts):
            outcome = outcomes[index] if index < len(outcomes) else "confirmed"
            turn_id = f"t{index}"
            if outcome == "confirmed":
                ledger.confirm_turn(
                    "owner", conversation_id, turn_id=turn_id, question=q, answer=a
                )
                eligible.append(WindowTurn(turn_id, q, a))
            else:
                ledger.record_abandoned_turn(
                    "owner",
                    conversation_id,
                    turn_id=turn_id,
                    question=q,
                    outcome=outcome,
                    partial_answer=a,
                )
        fold = None
        after = eligible
        if fold_at is not None and fold_at < len(texts):
            ledger.record_fold(
                "owner",
                conversation_id,
                covers_through_turn_id=f"t{fold_at}",
                summary="S: " + q,
            )
            covered = {f"t{i}" for i in range(fold_at + 1)}
            fold = WindowFold(
                "f",
                "S: " + q,
                tuple(t.turn_id for t in eligible if t.turn_id in covered),
            )
            after = [t for t in eligible if t.turn_id not in covered]
        try:
            expected = naive_window(
                model="m",
                system="sys",
                turns=after,
                question=question,
                policy=policy,
                counter=counter,
                fold=fold,
            )
        except MandatoryInputTooLargeError:
            return
        projected = ledger.project_window(
            "owner",
            conversation_id,
            question=question,
            system="sys",
            model="m",
            policy=policy,
            token_counter=counter,
        )
        window = projected.window
        assert window.body == expected[0]
        assert window.kept_turn_ids == expected[1]
        assert set(window.dropped_turn_ids) == {t.turn_id for t in eligible} - set(
            expected[1]
        )
        assert len(window.dropped) == len(window.dropped_turn_ids)
    finally:
        ledger.close()
