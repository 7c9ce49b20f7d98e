"""The fast window returns the textbook loop's bytes, byte for byte."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.reference_window import both_windows, naive_window
from tests.strategies import hostile_text, sendable_text
from turnledger.domain.errors import WindowError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.formats import WIRE_FORMATS, label_fold
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter, trim_text
from turnledger.projections.window import (
    Window,
    WindowFold,
    WindowTurn,
)


@st.composite
def policies(draw: st.DrawFn, fixed_tokens: int | None = None) -> WindowPolicy:
    """Any valid policy. Given the tokens of system + question, the context
    is drawn around what they and the reserve need, so that it binds often
    (and is sometimes a few tokens short: the mandatory-input error)."""
    max_tokens = draw(st.none() | st.integers(2, 80))
    max_messages = draw(st.none() | st.integers(1, 16))
    floor = draw(st.integers(0, max_messages if max_messages is not None else 8))
    reserve = draw(st.integers(1, 50))
    if fixed_tokens is None:
        context = draw(st.none() | st.integers(reserve + 1, 400))
    else:
        needed = fixed_tokens + reserve
        around = st.integers(max(reserve + 1, needed - 3), needed + 80)
        context = draw(st.one_of(st.none(), around, around))
    return WindowPolicy(
        wire_format=draw(st.sampled_from(WIRE_FORMATS)),
        max_bytes=draw(
            st.one_of(
                st.integers(60, 400), st.integers(400, 6_000), st.integers(400, 6_000)
            )
        ),
        max_tokens=max_tokens,
        reserved_output_tokens=reserve,
        context_tokens=context,
        max_messages=max_messages,
        max_pairs=draw(st.none() | st.integers(1, 8)),
        floor_messages=floor,
        max_message_tokens=draw(st.none() | st.integers(1, 12)),
        fold_max_tokens=draw(st.none() | st.integers(2, 40)),
        fold_threshold_tokens=1,
    )


def fixed_tokens(counter: TokenCounter, system: str, question: str) -> int:
    return counter.count(system) + counter.count(question)


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
    both = both_windows(**arguments)
    if both is None:
        event("refused by both")
        return
    fast, expected = both
    assert fast.body == expected.body
    assert fast.kept_turn_ids == expected.kept_turn_ids
    assert fast.fold_dropped_reason == expected.fold_dropped_reason
    covered = set() if fold is None else set(fold.covered_turn_ids)
    left_out = {t.turn_id for t in turns} - set(expected.kept_turn_ids)
    assert set(fast.dropped_turn_ids) == left_out | covered
    assert_hard_limits_hold(fast, turns, question, system, policy, counter, fold)


def assert_hard_limits_hold(
    window: Window,
    turns: list[WindowTurn],
    question: str,
    system: str,
    policy: WindowPolicy,
    counter: TokenCounter,
    fold: WindowFold | None,
) -> None:
    """The rules stated in docs/window.md, checked on the result alone."""
    for reason in window.dropped.counts():
        event(f"dropped for {reason}")
    if window.floor_over_budget:
        event("the floor kept pairs over the soft budget")
    if window.fold_dropped_reason is not None:
        event(f"fold not sent: {window.fold_dropped_reason}")
    # Bytes: never exceeded, floor or not.
    assert window.byte_length == len(window.body) <= policy.max_bytes
    # Context: what is sent + the reserve never exceeds it, floor or not.
    by_id = {turn.turn_id: turn for turn in turns}
    history = sum(
        trim_text(text, counter, policy.max_message_tokens).tokens
        for turn_id in window.kept_turn_ids
        for text in (by_id[turn_id].question, by_id[turn_id].answer)
    )
    assert history == window.history_tokens
    sent_fold = 0
    if window.fold_sent:
        assert fold is not None
        summary = trim_text(fold.summary, counter, policy.fold_max_tokens).text
        sent_fold = counter.count(label_fold(summary))
    if policy.context_tokens is not None:
        fixed = counter.count(system) + counter.count(question) + sent_fold
        assert fixed + history + policy.reserved_output_tokens <= (
            policy.context_tokens
        )
    # The floor yields only to hard limits: a window shorter than the floor
    # with turns left out was stopped by bytes, count or context.
    left_out = [
        span
        for span in window.dropped.spans
        if span.reason not in ("fold", "fold_dropped")
    ]
    if left_out and len(window.kept_turn_ids) < policy.floor_pairs:
        assert left_out[0].reason in ("bytes", "count", "context")
        event(f"the floor yielded to {left_out[0].reason}")
    # The soft budget is broken only by the floor, and never by more pairs.
    if policy.max_tokens is not None and history > policy.max_tokens:
        assert window.floor_over_budget > 0
        assert len(window.kept_turn_ids) <= policy.floor_pairs
    # A fold that exists is either sent or reported dropped, with its turns.
    report = window.report()
    if fold is None:
        assert window.fold_id is None and window.fold_dropped_reason is None
    else:
        assert window.fold_id == fold.fold_id
        assert window.fold_sent == (window.fold_dropped_reason is None)
        assert report["fold_dropped_reason"] == window.fold_dropped_reason
        reason = "fold" if window.fold_sent else "fold_dropped"
        assert [d.turn_id for d in window.dropped if d.reason == reason] == list(
            fold.covered_turn_ids
        )
        assert window.omitted == bool(fold.covered_turn_ids or left_out)
    assert report["dropped"] == [
        {"turn_id": d.turn_id, "reason": d.reason} for d in window.dropped
    ]
    assert report["dropped_counts"] == window.dropped.counts()


@settings(max_examples=300, deadline=None)
@given(
    texts=turn_texts,
    question=hostile_text,
    system=hostile_text,
    summary=st.none() | hostile_text,
    data=st.data(),
)
def test_fast_window_equals_the_naive_loop(
    texts: list[tuple[str, str]],
    question: str,
    system: str,
    summary: str | None,
    data: st.DataObject,
) -> None:
    policy = data.draw(
        policies(fixed_tokens(CHAR_ESTIMATE, system, question)), label="policy"
    )
    turns = [WindowTurn(f"t{i}", q, a) for i, (q, a) in enumerate(texts)]
    fold = None if summary is None else WindowFold("f", summary, ("t-old",))
    _both(turns, question, system, policy, CHAR_ESTIMATE, fold)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.tuples(hostile_text, hostile_text), min_size=1, max_size=10),
    question=hostile_text,
    system=hostile_text,
    summary=st.none() | hostile_text,
    reserve=st.integers(1, 50),
    slack=st.integers(-3, 120),
    floor_messages=st.integers(0, 24),
    max_tokens=st.none() | st.integers(2, 60),
    max_message_tokens=st.none() | st.integers(1, 30),
)
def test_the_context_is_a_hard_limit_the_floor_cannot_beat(
    texts: list[tuple[str, str]],
    question: str,
    system: str,
    summary: str | None,
    reserve: int,
    slack: int,
    floor_messages: int,
    max_tokens: int | None,
    max_message_tokens: int | None,
) -> None:
    """Bytes and counts out of the way: the context, the floor and the soft
    budget decide. The context is drawn around what system + question + the
    reserve need, a few tokens short of it (the mandatory-input error) up to
    room for several pairs, and the floor is often larger than what fits."""
    context = max(
        reserve + 1, fixed_tokens(CHAR_ESTIMATE, system, question) + reserve + slack
    )
    policy = WindowPolicy(
        max_bytes=10**6,
        max_tokens=max_tokens,
        reserved_output_tokens=reserve,
        context_tokens=context,
        max_messages=None,
        floor_messages=floor_messages,
        max_message_tokens=max_message_tokens,
        fold_max_tokens=None,
        fold_threshold_tokens=1,
    )
    turns = [WindowTurn(f"t{i}", q, a) for i, (q, a) in enumerate(texts)]
    fold = None if summary is None else WindowFold("f", summary, ("t-old",))
    _both(turns, question, system, policy, CHAR_ESTIMATE, fold)


@settings(max_examples=50, deadline=None)
@given(
    texts=turn_texts,
    question=hostile_text,
    summary=st.none() | hostile_text,
    data=st.data(),
)
def test_fast_window_equals_the_naive_loop_with_a_real_tokenizer(
    texts: list[tuple[str, str]],
    question: str,
    summary: str | None,
    data: st.DataObject,
) -> None:
    counter = token_counter("o200k_base")
    policy = data.draw(policies(fixed_tokens(counter, "sys", question)), label="policy")
    turns = [WindowTurn(f"t{i}", q * 3, a) for i, (q, a) in enumerate(texts)]
    fold = None if summary is None else WindowFold("f", summary * 2, ("t-old",))
    _both(turns, question, "sys", policy, counter, fold)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.tuples(sendable_text, sendable_text), min_size=1, max_size=8),
    outcomes=st.lists(st.sampled_from(["confirmed", "failed", "stopped"]), max_size=8),
    question=sendable_text,
    fold_at=st.none() | st.integers(0, 7),
    use_real_tokenizer=st.booleans(),
    data=st.data(),
)
def test_the_stored_conversation_gives_the_same_bytes_as_the_naive_loop(
    texts: list[tuple[str, str]],
    outcomes: list[str],
    question: str,
    fold_at: int | None,
    use_real_tokenizer: bool,
    data: st.DataObject,
) -> None:
    """Through the ledger: recorded sizes, sealed text, failed turns and a fold."""
    counter = token_counter("o200k_base") if use_real_tokenizer else CHAR_ESTIMATE
    policy = data.draw(policies(fixed_tokens(counter, "sys", question)), label="policy")
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
                fold_id="f",
                summarized_version=ledger.get_conversation(
                    "owner", conversation_id
                ).version,
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
        except WindowError as refused:
            try:
                ledger.project_window(
                    "owner",
                    conversation_id,
                    question=question,
                    system="sys",
                    model="m",
                    policy=policy,
                    token_counter=counter,
                )
            except WindowError as error:
                assert type(error) is type(refused)
                return
            raise AssertionError(
                "the ledger accepted what the naive loop refused"
            ) from None
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
        assert window.body == expected.body
        assert window.kept_turn_ids == expected.kept_turn_ids
        assert window.fold_dropped_reason == expected.fold_dropped_reason
        assert set(window.dropped_turn_ids) == {t.turn_id for t in eligible} - set(
            expected.kept_turn_ids
        )
        assert len(window.dropped) == len(window.dropped_turn_ids)
        assert_hard_limits_hold(window, after, question, "sys", policy, counter, fold)
    finally:
        ledger.close()
