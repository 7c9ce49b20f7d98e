"""Windows read while writes land: every window is exactly its version's.

Writers and readers share one ledger (its connection pool, its aggregates).
A window reports the ledger version it was read at; the turns it keeps must
be exactly the turns eligible at that version, and the receipt of every
answer must re-derive byte for byte in an audit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.conftest import durable_stores
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import compare_read_sides, live_rows, replay_log
from turnledger.infra.service_layer.application import Conversations, ProjectedWindow
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"
EVERYTHING = WindowPolicy.bytes_only(10_000_000)


def test_windows_and_writes_interleave_and_every_receipt_matches_its_version(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="seed", question="q", answer="a"
    )
    windows: list[ProjectedWindow] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        return run

    def writer(name: str) -> None:
        for index in range(15):
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=f"{name}-{index}",
                question=f"question {name} {index}",
                answer=f"answer {name} {index}",
            )
            if index % 5 == 4:
                ledger.delete_history(
                    OWNER, conversation_id, turn_ids=[f"{name}-{index - 1}"]
                )

    def reader(name: str) -> None:
        for index in range(8):
            question = f"what now, {name} {index}?"
            projected = ledger.project_window(
                OWNER,
                conversation_id,
                question=question,
                system="Be brief.",
                model="m",
                policy=EVERYTHING,
            )
            with lock:
                windows.append(projected)
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=f"{name}-answer-{index}",
                question=question,
                answer="ok",
                window=projected,
            )

    threads = [
        threading.Thread(target=guarded(lambda n=n: writer(n)))
        for n in ("w1", "w2", "w3")
    ] + [threading.Thread(target=guarded(lambda n=n: reader(n))) for n in ("r1", "r2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    rows = ledger.read_side.turns_page(
        conversation_id, offset=0, limit=10_000, as_of=10**9
    )
    assert len(windows) == 16
    for projected in windows:
        version = projected.ledger_version
        eligible = tuple(row.turn_id for row in rows if row.eligible_at(version))
        assert projected.window.kept_turn_ids == eligible
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    audit = report.conversation(conversation_id)
    # Receipts whose window sent a turn deleted later cannot be redone; every
    # other one is re-derived byte for byte.
    assert audit.receipts_verified + audit.receipts_not_rederivable == 16
    assert audit.receipts_verified >= 1


@durable_stores
def test_a_write_is_in_the_next_window_in_this_process_and_another(
    open_ledger: Callable[[], Conversations],
) -> None:
    writer = open_ledger()
    conversation_id = writer.start_conversation(OWNER)
    other = open_ledger()  # another application on the same store
    for index in range(20):
        turn_id = f"t{index}"
        writer.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question="q", answer="a"
        )
        for ledger in (writer, other):
            window = ledger.project_window(
                OWNER,
                conversation_id,
                question="next?",
                system="",
                model="m",
                policy=EVERYTHING,
            )
            assert window.window.kept_turn_ids[-1] == turn_id
            assert window.ledger_version == index + 2


@pytest.mark.postgres
def test_overlapping_batches_lose_duplicate_and_reorder_nothing(
    postgres_settings: Settings,
) -> None:
    """Two batches in flight: writers of disjoint and shared conversations."""
    settings = postgres_settings.model_copy(update={"postgres_batches_in_flight": 2})
    ledger = open_conversations(settings)
    try:
        shared = ledger.start_conversation(OWNER)
        own = [ledger.start_conversation(OWNER) for _ in range(4)]
        errors: list[BaseException] = []

        def writer(worker: int) -> None:
            try:
                for index in range(25):
                    target = shared if index % 3 == 0 else own[worker % len(own)]
                    ledger.confirm_turn(
                        OWNER,
                        target,
                        turn_id=f"w{worker}-{index}",
                        question=f"q {worker} {index}",
                        answer=f"a {worker} {index}",
                    )
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        written: dict[str, list[str]] = {}
        for conversation_id in (shared, *own):
            rows = ledger.read_side.turns_page(
                conversation_id, offset=0, limit=10_000, as_of=10**9
            )
            assert [row.position for row in rows] == list(range(len(rows)))
            by_worker: dict[str, list[int]] = {}
            for row in rows:
                worker_name, index = row.turn_id.split("-")
                written.setdefault(worker_name, []).append(row.turn_id)
                by_worker.setdefault(worker_name, []).append(int(index))
            # Each writer's turns of this conversation in the order it wrote.
            for indexes in by_worker.values():
                assert indexes == sorted(indexes)
        # Every turn exactly once.
        for worker in range(8):
            ids = written[f"w{worker}"]
            assert sorted(ids) == sorted(f"w{worker}-{i}" for i in range(25))
        assert compare_read_sides(live_rows(ledger), replay_log(ledger).rows()) == []
        report = Auditor(ledger).audit()
        assert report.ok, report.failures
    finally:
        ledger.close()
