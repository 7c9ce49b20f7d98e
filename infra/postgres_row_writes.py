"""The PostgreSQL recorder's rarer row writes: deletions, folds and
withdrawals in an event's transaction, and a rebuild's replacement of every
row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg import sql

from turnledger.infra.owner_feed import (
    postgres_rebuild_owner_feed,
)
from turnledger.infra.postgres_sql import (
    READ_SIDE_TABLES,
    SchemaTables,
    json_rows,
    unchanged,
)
from turnledger.infra.read_side_sql import (
    ERASE_TURN_SIZES,
    FOLD_COLUMNS,
    conversation_values,
    fold_values,
    turn_values,
)
from turnledger.projections.ledger_rows import (
    RowChanges,
)
from turnledger.projections.read_side import LedgerView


class PostgresRowWrites(SchemaTables):
    """Row writes of `PostgresReadSideRecorder` (infra/postgres_recorder.py)
    beside its batches' one-statement insert."""

    datastore: PostgresDatastore
    events_table_name: str
    # The batch inserts of keys, turns and heads, with their columns.
    _row_inserts: tuple[tuple[sql.Composed, str], ...]
    # Rows per statement of a rebuild (a live batch has far fewer).
    rows_per_statement = 10_000

    def _row_sets(
        self, changes: RowChanges, key_rows: Sequence[tuple[Any, ...]]
    ) -> list[Sequence[tuple[Any, ...]]]:
        """Rows of the keys, turns and heads inserts (in _row_inserts' order)."""
        key, time = unchanged, unchanged
        return [
            key_rows,
            [turn_values(t, key=key, time=time) for t in changes.new_turns],
            [conversation_values(r, key=key, time=time) for r in changes.conversations],
        ]

    def _write_rows(
        self,
        curs: psycopg.Cursor[Any],
        changes: RowChanges,
        *,
        key_rows: Sequence[tuple[Any, ...]] = (),
    ) -> None:
        for rows, (statement, columns) in zip(
            self._row_sets(changes, key_rows), self._row_inserts, strict=True
        ):
            for start in range(0, len(rows), self.rows_per_statement):
                chunk = rows[start : start + self.rows_per_statement]
                curs.execute(statement, [json_rows(columns, chunk)])
        self._write_changed_rows(curs, changes)

    def _write_changed_rows(
        self, curs: psycopg.Cursor[Any], changes: RowChanges
    ) -> None:
        """Deletions, folds and withdrawals (rare: a statement each kind)."""
        key, time = unchanged, unchanged
        if changes.deletions:
            # One statement per deletion event, however many turns it names.
            marked: dict[tuple[Any, ...], list[str]] = {}
            for d in changes.deletions:
                group = (d.deleted_version, d.deleted_at, d.conversation_id)
                marked.setdefault(group, []).append(d.turn_id)
            curs.executemany(
                sql.SQL(
                    "UPDATE {} SET deleted_version = %s, deleted_at = %s, "
                    f"{ERASE_TURN_SIZES} "
                    "WHERE conversation_id = %s AND turn_id = ANY(%s)"
                ).format(self._table("conversation_turns")),
                [(*group, turn_ids) for group, turn_ids in marked.items()],
            )
        if changes.new_folds:
            curs.executemany(
                sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    self._table("conversation_folds"),
                    sql.SQL(FOLD_COLUMNS),
                    sql.SQL(",".join(["%s"] * 11)),
                ),
                [fold_values(f, key=key, time=time) for f in changes.new_folds],
            )
        if changes.withdrawals:
            curs.executemany(
                sql.SQL(
                    "UPDATE {} SET withdrawn_version = %s, summary_json_bytes = NULL, "
                    "summary_chars = NULL WHERE conversation_id = %s AND fold_id = %s"
                ).format(self._table("conversation_folds")),
                [
                    (w.withdrawn_version, w.conversation_id, w.fold_id)
                    for w in changes.withdrawals
                ],
            )

    def replace_read_side(self, view: LedgerView) -> None:
        """Replace every row with those of `view` (a rebuild), in one transaction."""
        conversations, turns, folds = view.rows()
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            for table in READ_SIDE_TABLES:
                curs.execute(sql.SQL("DELETE FROM {}").format(self._table(table)))
            self._write_rows(
                curs,
                RowChanges(
                    conversations=tuple(conversations),
                    new_turns=tuple(turns),
                    new_folds=tuple(folds),
                ),
            )
            for statement in postgres_rebuild_owner_feed(
                self.datastore.schema, self.events_table_name
            ):
                curs.execute(statement)
