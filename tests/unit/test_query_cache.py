"""The query cache: bounded, fast-forwarded, never used by writes."""

from __future__ import annotations

from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


def test_the_cache_holds_at_most_its_size_and_still_answers_everything() -> None:
    ledger = open_conversations(
        Settings(_env_file=None, persistence="memory", query_cache_size=1)
    )
    try:
        first = ledger.start_conversation("o")
        second = ledger.start_conversation("o")
        for conversation_id in (first, second, first):
            ledger.confirm_turn(
                "o",
                conversation_id,
                turn_id=f"t{conversation_id.hex[:6]}-"
                f"{ledger.get_conversation('o', conversation_id).version}",
                question="q",
                answer="a",
            )
            window = ledger.project_window(
                "o",
                conversation_id,
                question="now",
                system="",
                model="m",
                max_bytes=10_000,
            ).window
            expected = len(ledger.get_conversation("o", conversation_id).turns)
            assert len(window.kept_turn_ids) == expected
        assert list(ledger._query_cache._cached) == [first]
    finally:
        ledger.close()


def test_writes_do_not_change_the_cached_object() -> None:
    ledger = open_conversations(
        Settings(_env_file=None, persistence="memory", query_cache_size=4)
    )
    try:
        conversation_id = ledger.start_conversation("o")
        ledger.project_window(
            "o", conversation_id, question="q", system="", model="m", max_bytes=999
        )
        cached = ledger._query_cache._cached[conversation_id]
        ledger.confirm_turn(
            "o", conversation_id, turn_id="t1", question="q", answer="a"
        )
        assert cached.turns == {}  # the write loaded its own copy
        ledger.project_window(
            "o", conversation_id, question="q", system="", model="m", max_bytes=999
        )
        assert list(cached.turns) == ["t1"]  # fast-forwarded by the next query
    finally:
        ledger.close()
