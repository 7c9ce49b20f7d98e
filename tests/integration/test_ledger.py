"""The ledger's use cases, run unchanged on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from tests.conftest import durable_stores
from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    MandatoryInputTooLargeError,
    TurnConflictError,
    TurnDeletedError,
    TurnNotFoundError,
    TurnTooLargeError,
    VersionConflictError,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.batch import aggregate_from_row
from turnledger.infra.settings import Settings

OWNER = "alice"
MIXED = 'Chinese 中文, quotes "q", a newline\n, a backslash \\ and an emoji 🧪'


def confirm(
    ledger: Conversations, conversation_id: uuid.UUID, turn_id: str, **kw: object
):
    return ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id=turn_id,
        question=kw.pop("question", f"question {turn_id} {MIXED}"),  # type: ignore[arg-type]
        answer=kw.pop("answer", f"answer {turn_id}"),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def history(ledger: Conversations, conversation_id: uuid.UUID) -> list[tuple]:
    page = ledger.get_history(OWNER, conversation_id, limit=500)
    return [(i.turn_id, i.status, i.deleted, i.question, i.answer) for i in page.items]


def test_confirmed_turns_read_back_in_order(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(3):
        confirm(ledger, conversation_id, f"t{index}")
    assert history(ledger, conversation_id) == [
        (f"t{i}", TurnStatus.CONFIRMED, False, f"question t{i} {MIXED}", f"answer t{i}")
        for i in range(3)
    ]


def test_retrying_a_confirmation_returns_the_original_receipt_and_writes_nothing(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    first = confirm(ledger, conversation_id, "t1")
    confirm(ledger, conversation_id, "t2")
    retried = confirm(ledger, conversation_id, "t1")
    assert retried == first
    assert ledger.get_history(OWNER, conversation_id).version == 3


def test_reusing_a_turn_id_for_different_content_is_a_conflict(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    with pytest.raises(TurnConflictError, match="different content"):
        confirm(ledger, conversation_id, "t1", answer="another answer")
    assert ledger.get_history(OWNER, conversation_id).version == 2


def test_a_stale_expected_version_is_rejected_with_the_current_version(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1", expected_version=1)
    with pytest.raises(VersionConflictError) as raised:
        confirm(ledger, conversation_id, "t2", expected_version=1)
    assert raised.value.current_version == 2
    assert [row[0] for row in history(ledger, conversation_id)] == ["t1"]
    # A retry of an already recorded turn is answered even with a stale version.
    assert confirm(ledger, conversation_id, "t1", expected_version=1).version == 2


def test_failed_and_stopped_turns_are_shown_but_never_sent(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="t2", question="q2", outcome="failed"
    )
    ledger.record_abandoned_turn(
        OWNER,
        conversation_id,
        turn_id="t3",
        question="q3",
        outcome="stopped",
        partial_answer="half an ans",
    )
    rows = history(ledger, conversation_id)
    assert [(r[0], r[1]) for r in rows] == [
        ("t1", TurnStatus.CONFIRMED),
        ("t2", TurnStatus.FAILED),
        ("t3", TurnStatus.STOPPED),
    ]
    assert rows[2][4] == "half an ans"
    projected = ledger.project_window(
        OWNER, conversation_id, question="next", system="s", model="m", max_bytes=10_000
    )
    assert projected.window.kept_turn_ids == ("t1",)
    assert projected.window.dropped_turn_ids == ()
    assert (
        b"half an ans" not in projected.window.body
        and b"q2" not in projected.window.body
    )


def test_a_failed_turn_id_cannot_be_confirmed_later(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="t1", question="q", outcome="failed"
    )
    with pytest.raises(TurnConflictError, match="failed"):
        confirm(ledger, conversation_id, "t1", question="q")


def test_deleted_turns_become_placeholders_and_are_never_sent(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2", "t3"):
        confirm(ledger, conversation_id, turn_id)
    receipt = ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    assert receipt.deleted_turn_ids == ("t2",)
    rows = history(ledger, conversation_id)
    assert rows[1] == ("t2", TurnStatus.CONFIRMED, True, None, None)
    assert rows[0][3] is not None and rows[2][3] is not None
    window = ledger.project_window(
        OWNER, conversation_id, question="q", system="s", model="m", max_bytes=10_000
    ).window
    assert window.kept_turn_ids == ("t1", "t3")
    assert b"question t2" not in window.body


def test_deleting_the_whole_history_then_writing_again(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    confirm(ledger, conversation_id, "t2")
    assert ledger.delete_history(OWNER, conversation_id).deleted_turn_ids == (
        "t1",
        "t2",
    )
    # A device that was offline retries a deleted turn: refused, not resurrected.
    with pytest.raises(TurnDeletedError):
        confirm(ledger, conversation_id, "t1")
    confirm(ledger, conversation_id, "t3")
    assert [(r[0], r[2]) for r in history(ledger, conversation_id)] == [
        ("t1", True),
        ("t2", True),
        ("t3", False),
    ]
    # Deleting again is a no-op that records nothing.
    version = ledger.get_history(OWNER, conversation_id).version
    assert (
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"]).deleted_turn_ids
        == ()
    )
    assert ledger.get_history(OWNER, conversation_id).version == version


def test_deleting_an_unknown_turn_changes_nothing(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    with pytest.raises(TurnNotFoundError):
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1", "nope"])
    assert history(ledger, conversation_id)[0][2] is False


def test_history_pages(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(7):
        confirm(ledger, conversation_id, f"t{index}")
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
    seen, offset = [], 0
    while offset is not None:
        page = ledger.get_history(OWNER, conversation_id, offset=offset, limit=3)
        seen += [(item.position, item.turn_id, item.deleted) for item in page.items]
        offset = page.next_offset
    assert seen == [(i, f"t{i}", i == 3) for i in range(7)]


def test_a_projection_changes_nothing_even_when_it_fails(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    before = ledger.get_history(OWNER, conversation_id)
    ledger.project_window(
        OWNER, conversation_id, question="q", system="s", model="m", max_bytes=100
    )
    with pytest.raises(MandatoryInputTooLargeError):
        ledger.project_window(
            OWNER,
            conversation_id,
            question="q" * 200,
            system="s",
            model="m",
            max_bytes=100,
        )
    assert ledger.get_history(OWNER, conversation_id) == before


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("question", "", "empty"),
        ("question", "   \n", "empty"),
        ("question", 42, "expected a string"),
        ("answer", None, "expected a string"),
        ("question", "lone \ud800 surrogate", "unpaired surrogate"),
        ("answer", "tail \udfff", "unpaired surrogate"),
        ("turn_id", "", "1-128 characters"),
        ("turn_id", "has space", "1-128 characters"),
        ("turn_id", "x" * 129, "1-128 characters"),
        ("expected_version", 0, "positive integer"),
        ("expected_version", "2", "positive integer"),
    ],
)
def test_bad_input_is_rejected_with_a_reason_and_writes_nothing(
    ledger: Conversations, field: str, value: object, message: str
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    arguments: dict[str, object] = {"turn_id": "t1", "question": "q", "answer": "a"}
    arguments[field] = value
    with pytest.raises(InvalidInputError, match=message) as raised:
        ledger.confirm_turn(OWNER, conversation_id, **arguments)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert ledger.get_history(OWNER, conversation_id).version == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app, c: app.get_history("bad owner", c), "owner_id"),
        (lambda app, c: app.get_history(OWNER, str(c)), "conversation_id"),
        (lambda app, c: app.get_history(OWNER, c, limit=0), "limit"),
        (lambda app, c: app.get_history(OWNER, c, offset=-1), "offset"),
        (lambda app, c: app.delete_history(OWNER, c, turn_ids="t1"), "turn_ids"),
        (
            lambda app, c: app.record_abandoned_turn(
                OWNER, c, turn_id="t", question="q", outcome="confirmed"
            ),
            "outcome",
        ),
        (
            lambda app, c: app.project_window(
                OWNER, c, question="q", system="s", model="m", max_bytes=0
            ),
            "max_bytes",
        ),
        (
            lambda app, c: app.project_window(
                OWNER, c, question="\ud83d", system="s", model="m", max_bytes=9
            ),
            "question",
        ),
        (lambda app, c: app.start_conversation(""), "owner_id"),
    ],
)
def test_bad_arguments_to_other_calls_are_rejected_with_a_typed_error(
    ledger: Conversations, call: Callable[..., object], message: str
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    with pytest.raises(InvalidInputError, match=message):
        call(ledger, conversation_id)
    assert ledger.get_history(OWNER, conversation_id).version == 2


def test_a_turn_over_the_size_limit_is_rejected(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    pasted = "契約" * 400_000  # 2.4 MB of UTF-8
    with pytest.raises(TurnTooLargeError) as raised:
        confirm(ledger, conversation_id, "t1", question=pasted)
    assert raised.value.limit == ledger.max_turn_bytes
    assert raised.value.size > ledger.max_turn_bytes
    assert ledger.get_history(OWNER, conversation_id).total_turns == 0


def test_unknown_and_foreign_conversations_look_the_same(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t1")
    for owner, target in (("mallory", conversation_id), (OWNER, uuid.uuid4())):
        with pytest.raises(ConversationNotFoundError) as raised:
            ledger.confirm_turn(owner, target, turn_id="t9", question="q", answer="a")
        assert str(raised.value) == f"conversation {target} not found"
        with pytest.raises(ConversationNotFoundError):
            ledger.get_history(owner, target)
        with pytest.raises(ConversationNotFoundError):
            ledger.delete_history(owner, target)
    assert [row[0] for row in history(ledger, conversation_id)] == ["t1"]


@durable_stores
def test_close_and_reopen_keeps_everything_byte_identical(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    texts = [MIXED, "\u2028line\u2029sep", "tab\tctl\x01\x1f", "<>&='", "😀" * 50]
    for index, text in enumerate(texts):
        confirm(ledger, conversation_id, f"t{index}", question=text, answer=text[::-1])
    ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="f", question="q", outcome="stopped"
    )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    before = ledger.get_history(OWNER, conversation_id)
    window_before = ledger.project_window(
        OWNER, conversation_id, question="q", system="s", model="m", max_bytes=5_000
    )
    ledger.close()

    reopened = open_ledger()
    after = reopened.get_history(OWNER, conversation_id)
    assert after == before
    for item, text in zip(after.items, texts, strict=False):
        if not item.deleted:
            assert item.question is not None
            assert item.question.encode() == text.encode()
    assert (
        reopened.project_window(
            OWNER, conversation_id, question="q", system="s", model="m", max_bytes=5_000
        )
        == window_before
    )


def test_the_aggregate_is_constant_size_and_loads_from_its_row(
    open_ledger: Callable[[], Conversations],
) -> None:
    """No per-turn state: the aggregate built from its read-side row equals the
    replay of every event, and no snapshot is ever written."""
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(205):
        confirm(ledger, conversation_id, f"t{index}", question=f"q{index}", answer="a")
    row = ledger.get_conversation(OWNER, conversation_id)
    loaded = aggregate_from_row(row)
    replayed = ledger.repository.get(conversation_id)
    state = {k: v for k, v in vars(loaded).items() if k != "_pending_events"}
    assert state == {k: v for k, v in vars(replayed).items() if k != "_pending_events"}
    assert set(state) == {
        "_id",
        "_version",
        "_created_on",
        "_modified_on",
        "owner_id",
        "turn_count",
    }
    assert (loaded.version, loaded.turn_count) == (206, 205)
    assert not ledger.legacy_snapshots.recorder.select_events(conversation_id)
    assert history(ledger, conversation_id)[150][3] == "q150"


def test_racing_writers_lose_nothing_and_duplicate_nothing(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    errors: list[BaseException] = []

    def device(name: str) -> None:
        try:
            for index in range(15):
                for _ in range(2):  # every request is sent twice
                    confirm(
                        ledger,
                        conversation_id,
                        f"{name}-{index}",
                        question=f"{name} {index}",
                    )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=device, args=(f"d{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    page = ledger.get_history(OWNER, conversation_id, limit=500)
    turn_ids = [item.turn_id for item in page.items]
    assert sorted(turn_ids) == sorted(f"d{n}-{i}" for n in range(3) for i in range(15))
    assert page.version == 1 + 45


@durable_stores
def test_no_turn_text_is_stored_in_plaintext(
    settings: Settings, open_ledger: Callable[[], Conversations]
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    marker = f"MARKER-{uuid.uuid4().hex}"
    for index in range(30):
        confirm(ledger, conversation_id, f"t{index}", question=marker, answer=marker)
    ledger.close()
    if settings.persistence == "sqlite":
        stored = b"".join(
            path.read_bytes() for path in settings.data_dir.iterdir() if path.is_file()
        )
    else:
        with psycopg.connect(settings.postgres_conninfo()) as connection:
            rows = connection.execute(
                sql.SQL("SELECT state FROM {}.conversations_events").format(
                    sql.Identifier(settings.postgres_schema)
                )
            ).fetchall()
        assert len(rows) == 31
        stored = b"".join(bytes(row[0]) for row in rows)
    assert marker.encode() not in stored
    assert open_ledger().get_history(OWNER, conversation_id).items[0].question == marker


def test_a_history_imported_in_bulk_keeps_its_order_and_refuses_turn_by_turn(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    turns = [(f"i{n}", f"question {n}", f"answer {n}") for n in range(150)]
    receipts = ledger.confirm_turns(OWNER, conversation_id, turns)
    assert [r.version for r in receipts] == list(range(2, 152))
    assert history(ledger, conversation_id)[149][:3] == (
        "i149",
        TurnStatus.CONFIRMED,
        False,
    )
    # Malformed input: nothing is written.
    with pytest.raises(InvalidInputError):
        ledger.confirm_turns(
            OWNER, conversation_id, [("j1", "q", "a"), ("j2", "", "a")]
        )
    assert ledger.get_conversation(OWNER, conversation_id).version == 151
    # A refused turn fails alone; the first refusal is raised after all were tried.
    with pytest.raises(TurnConflictError):
        ledger.confirm_turns(
            OWNER,
            conversation_id,
            [("j1", "q", "a"), ("i0", "another question", "a"), ("j2", "q", "a")],
        )
    assert [t for t, *_ in history(ledger, conversation_id)[-2:]] == ["j1", "j2"]
