"""No size of a deleted text survives in any file once the purge is complete.

The read side keeps each turn's sizes (the window needs them) and erases them
in the transaction that records the deletion; a withdrawn fold's sizes go the
same way. The erased values must not survive elsewhere: in SQLite's WAL
(frames of the pages as they were before the deletion), in PostgreSQL's dead
row versions in the heap files, in pg_wal. The attacker copies every file of
the data directory right after the purge reports complete and searches it for
the sizes **as they are stored**: SQLite's record integers (big-endian, in
the fewest bytes that hold them, the four columns one after another) and
PostgreSQL's four int4 in a row (little-endian); the parts sizes as their
text column; the fold's sizes as stored after the fold's covered count.
Before the deletion the same search finds every pattern (so an absence after
it is not a search that never works).
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.integration.forensic import files_under, hits, read_all
from tests.integration.private_cluster import private_cluster
from turnledger.domain.parts import AssistantText, ToolCall, ToolResult, TurnParts
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

OWNER = "sizes-owner"
DOOMED = ("d1", "d2")
TURN_SIZES = (
    "question_json_bytes, answer_json_bytes, question_chars, answer_chars, parts_sizes"
)


def _text(label: str, length: int) -> str:
    return (label + " " + "x" * length)[:length]


def write_conversation(ledger: Conversations) -> UUID:
    """Kept and doomed turns of distinctive lengths, a tool turn, a fold."""
    conversation_id = ledger.start_conversation(OWNER)
    _text_turn(ledger, conversation_id, "k0", ("kept", 1101, 2203))
    _text_turn(ledger, conversation_id, "d1", ("doomed", 3517, 1789))
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id="d2",
        parts=TurnParts(
            question=_text("tools", 2917),
            steps=(
                AssistantText(_text("step", 1433)),
                ToolCall("call_1", "lookup", '{"q": "' + "y" * 1327 + '"}'),
                ToolResult("call_1", _text("result", 4271)),
            ),
            answer=_text("answer", 1571),
        ),
    )
    _text_turn(ledger, conversation_id, "k3", ("kept", 1213, 2341))
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="d1",
        summary=_text("summary", 2671),
        fold_id="f1",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    return conversation_id


def _text_turn(
    ledger: Conversations,
    conversation_id: UUID,
    turn_id: str,
    texts: tuple[str, int, int],
) -> None:
    """A text-only turn: `texts` is the label, the question's and the answer's
    lengths."""
    label, question_length, answer_length = texts
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id=turn_id,
        question=_text(label, question_length),
        answer=_text(label, answer_length),
    )


def _sqlite_integer(value: int) -> bytes:
    """An integer as an SQLite record stores it (0 and 1 take no bytes)."""
    if value in (0, 1):
        return b""
    for size in (1, 2, 3, 4, 6, 8):
        if -(1 << (8 * size - 1)) <= value < (1 << (8 * size - 1)):
            return value.to_bytes(size, "big", signed=True)
    raise ValueError(value)


def _patterns(
    turns: Mapping[str, Sequence[Any]],
    fold: Sequence[int],
    integers: Any,
) -> dict[str, bytes]:
    found = {}
    for turn_id, row in turns.items():
        found[f"sizes of {turn_id}"] = integers(row[:4])
        if row[4] is not None:
            found[f"parts sizes of {turn_id}"] = str(row[4]).encode()
    found["sizes of fold f1"] = integers(fold)
    return found


def _sqlite_patterns(path: Path, conversation_id: UUID) -> dict[str, bytes]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        turns = {
            turn_id: connection.execute(
                f"SELECT {TURN_SIZES} FROM conversation_turns "  # noqa: S608
                "WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id.hex, turn_id),
            ).fetchone()
            for turn_id in DOOMED
        }
        fold = connection.execute(
            "SELECT summary_json_bytes, summary_chars FROM conversation_folds "
            "WHERE conversation_id = ? AND fold_id = 'f1'",
            (conversation_id.hex,),
        ).fetchone()
    return _patterns(
        turns, fold, lambda values: b"".join(_sqlite_integer(v) for v in values)
    )


def _check_distinctive(patterns: Mapping[str, bytes]) -> None:
    assert all(len(pattern) >= 4 for pattern in patterns.values()), patterns
    assert len(set(patterns.values())) == len(patterns), patterns
    assert patterns["parts sizes of d2"].count(b",") >= 3


@dataclass
class Written:
    """An SQLite store holding `write_conversation`'s conversation, open, and
    the sizes of its doomed texts as the store keeps them."""

    settings: Settings
    ledger: Conversations
    conversation_id: UUID
    patterns: dict[str, bytes]
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.ledger.close()


@pytest.fixture
def sqlite_written(tmp_path: Path) -> Iterator[Written]:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    ledger = open_conversations(settings)
    written = Written(settings, ledger, UUID(int=0), {})
    try:
        written.conversation_id = write_conversation(ledger)
        written.patterns = _sqlite_patterns(
            settings.sqlite_events_path, written.conversation_id
        )
        yield written
    finally:
        written.close()


def _copied(directory: Path, copy: Path) -> dict[str, bytes]:
    """Every file under `directory`, as a copy taken now reads."""
    shutil.copytree(directory, copy)
    return read_all(files_under(copy))


def test_sqlite_keeps_no_size_of_a_deleted_text_in_any_file(
    sqlite_written: Written, tmp_path: Path
) -> None:
    written = sqlite_written
    ledger, patterns = written.ledger, written.patterns
    data_dir = written.settings.data_dir
    _check_distinctive(patterns)
    assert "parts sizes of d1" not in patterns  # a text-only turn
    before = _copied(data_dir, tmp_path / "before")
    assert sorted(hits(before, patterns)) != []
    assert {hit.split(" in ")[0] for hit in hits(before, patterns)} == set(patterns)

    receipt = ledger.delete_history(
        OWNER, written.conversation_id, turn_ids=list(DOOMED)
    )
    assert receipt.purge is not None and not receipt.purge.compaction_pending
    opened = _copied(data_dir, tmp_path / "open")
    assert any(name.endswith("events.sqlite3") for name in opened)
    assert hits(opened, patterns) == []
    # The kept turns still have their sizes (the window needs them).
    kept = ledger.read_side.undeleted_turns(written.conversation_id)[0]
    assert kept.sizes is not None
    written.close()
    assert hits(_copied(data_dir, tmp_path / "closed"), patterns) == []


# PostgreSQL ---------------------------------------------------------------------

SCHEMA = "turnledger"


def _postgres_patterns(connection: Any, conversation_id: UUID) -> dict[str, bytes]:
    turns = {
        turn_id: connection.execute(
            f"SELECT {TURN_SIZES} FROM {SCHEMA}.conversation_turns "  # noqa: S608
            "WHERE conversation_id = %s AND turn_id = %s",
            (conversation_id, turn_id),
        ).fetchone()
        for turn_id in DOOMED
    }
    fold = connection.execute(
        "SELECT covered_eligible, summary_json_bytes, summary_chars "
        f"FROM {SCHEMA}.conversation_folds "  # noqa: S608
        "WHERE conversation_id = %s AND fold_id = 'f1'",
        (conversation_id,),
    ).fetchone()
    return _patterns(
        turns, fold, lambda values: struct.pack(f"<{len(values)}i", *values)
    )


@pytest.mark.postgres
def test_postgres_keeps_no_size_of_a_deleted_text_in_any_file(tmp_path: Path) -> None:
    with private_cluster() as cluster:
        settings = Settings(
            _env_file=None,
            persistence="postgres",
            postgres_host="127.0.0.1",
            postgres_port=cluster.port,
            postgres_schema=SCHEMA,
            master_key=new_master_key(),
        )
        ledger = open_conversations(settings)
        view: Any = ledger.vault.purge_view
        view.checkpoint_wait_seconds = 30.0  # complete before returning
        try:
            conversation_id = write_conversation(ledger)
            with cluster.connect() as connection:
                patterns = _postgres_patterns(connection, conversation_id)
                connection.execute("CHECKPOINT")
            _check_distinctive(patterns)
            shutil.copytree(cluster.data_dir, tmp_path / "before")
            before = read_all(files_under(tmp_path / "before"))
            found = {hit.split(" in ")[0] for hit in hits(before, patterns)}
            assert found == set(patterns)
            shutil.rmtree(tmp_path / "before")

            receipt = ledger.delete_history(
                OWNER, conversation_id, turn_ids=list(DOOMED)
            )
            assert receipt.purge is not None
            assert not receipt.purge.compaction_pending, receipt.purge.pending_reasons
            with cluster.connect() as connection:
                connection.execute("CHECKPOINT")
            shutil.copytree(cluster.data_dir, tmp_path / "after")
            after = read_all(files_under(tmp_path / "after"))
            assert any("/pg_wal/" in name for name in after)
            assert hits(after, patterns) == []
            assert (
                ledger.read_side.undeleted_turns(conversation_id)[0].sizes is not None
            )
        finally:
            ledger.close()


@pytest.mark.postgres
def test_postgres_analyze_keeps_no_sample_of_a_size(
    postgres_settings: Settings, postgres_conninfo: str
) -> None:
    """pg_statistic is a catalog no purge rewrites: no size is ever sampled
    there, and statistics kept before the columns were excluded are dropped."""
    from psycopg import connect

    from turnledger.infra.migrations.ledger import SIZE_COLUMNS

    schema = postgres_settings.postgres_schema
    ledger = open_conversations(postgres_settings)
    try:
        write_conversation(ledger)
    finally:
        ledger.close()
    stats = (
        "SELECT regexp_replace(tablename, '_p[0-9]+$', ''), attname FROM pg_stats "
        "WHERE schemaname = %s AND (tablename LIKE 'conversation_turns%%' "
        "OR tablename LIKE 'conversation_folds%%')"
    )
    sized = {(table, column) for table, cols in SIZE_COLUMNS.items() for column in cols}
    with connect(postgres_conninfo, autocommit=True) as connection:
        for table in SIZE_COLUMNS:
            connection.execute(f"ANALYZE {schema}.{table}")
            connection.execute(f"ANALYZE {schema}.{table}_p0")
        sampled = set(connection.execute(stats, (schema,)).fetchall())
        assert sampled, "ANALYZE sampled nothing: the check would prove nothing"
        assert sampled & sized == set()
        # A store analysed before step 4: its statistics go with the step.
        for table, columns in SIZE_COLUMNS.items():
            for column in columns:
                connection.execute(
                    f"ALTER TABLE {schema}.{table} "
                    f"ALTER COLUMN {column} SET STATISTICS -1"
                )
            connection.execute(f"ANALYZE {schema}.{table}")
            connection.execute(f"ANALYZE {schema}.{table}_p0")
        assert set(connection.execute(stats, (schema,)).fetchall()) & sized == sized
        connection.execute(
            f"DELETE FROM {schema}.turnledger_migrations "  # noqa: S608
            "WHERE component = 'ledger' AND version >= 4"
        )
    open_conversations(postgres_settings).close()
    with connect(postgres_conninfo, autocommit=True) as connection:
        assert set(connection.execute(stats, (schema,)).fetchall()) & sized == set()


def test_sqlite_a_reader_on_an_older_snapshot_keeps_the_purge_pending(
    sqlite_written: Written, tmp_path: Path
) -> None:
    """Pending is the truth: while a connection reads the event log on a
    snapshot from before the deletion, its WAL keeps the sizes and the purge
    says so; once it ends, the next purge run removes them."""
    written = sqlite_written
    ledger, patterns = written.ledger, written.patterns
    data_dir = written.settings.data_dir
    reader = sqlite3.connect(written.settings.sqlite_events_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM conversation_turns").fetchone()
    receipt = ledger.delete_history(
        OWNER, written.conversation_id, turn_ids=list(DOOMED)
    )
    assert receipt.purge is not None and receipt.purge.compaction_pending
    assert "events.sqlite3" in receipt.purge.state, receipt.purge.state
    assert hits(_copied(data_dir, tmp_path / "held"), patterns) != []
    reader.execute("COMMIT")
    reader.close()
    assert not ledger.purge_deleted_history().compaction_pending
    assert hits(_copied(data_dir, tmp_path / "after"), patterns) == []


@pytest.mark.postgres
def test_postgres_a_conversations_rows_sit_in_the_partition_its_keys_name(
    postgres_settings: Settings, postgres_conninfo: str
) -> None:
    """What compaction relies on to rewrite the right partitions only."""
    from psycopg import connect

    from turnledger.infra.migrations.ledger import read_side_partition

    schema = postgres_settings.postgres_schema
    ledger = open_conversations(postgres_settings)
    try:
        for _ in range(40):
            conversation_id = ledger.start_conversation(OWNER)
            ledger.confirm_turn(
                OWNER, conversation_id, turn_id="t1", question="q", answer="a"
            )
    finally:
        ledger.close()
    with connect(postgres_conninfo, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT k.tableoid::regclass::text, t.tableoid::regclass::text "
            f"FROM {schema}.turn_keys k JOIN {schema}.conversation_turns t "  # noqa: S608
            "USING (conversation_id, turn_id)"
        ).fetchall()
    assert len(rows) == 40
    assert len({key for key, _ in rows}) > 8  # many key partitions, so it shows
    for key_partition, turn_partition in rows:
        expected = read_side_partition("conversation_turns", key_partition)
        assert turn_partition.split(".")[-1] == expected, (
            key_partition,
            turn_partition,
        )
