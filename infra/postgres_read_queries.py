"""The PostgreSQL recorder's read-side queries: conversation heads, turn and
fold rows as of a version, and the per-user feed."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    Notification,
)
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.utils import get_topic
from psycopg import sql

from turnledger.domain.conversation import Conversation
from turnledger.infra.postgres_keys import KEY_TABLE
from turnledger.infra.postgres_sql import TURN_PAIRS, SchemaTables, turn_pairs
from turnledger.infra.read_side_sql import (
    CONVERSATION_COLUMNS,
    FOLD_COLUMNS,
    TURN_COLUMNS,
    conversation_row,
    fold_row,
    turn_row,
)
from turnledger.projections.ledger_rows import (
    ConversationRow,
    FoldRow,
    TurnRow,
)


class PostgresReadQueries(SchemaTables):
    """The queries of `PostgresReadSideRecorder` (infra/postgres_recorder.py)."""

    datastore: PostgresDatastore
    events_table_name: str
    _select_owner_events: dict[bool, bytes]

    def select_owner_notifications(
        self, owner_id: str, after: int, limit: int, topics: Sequence[str] = ()
    ) -> list[Notification]:
        """The owner's events after log position `after`, oldest first, through
        the per-user feed index (infra/owner_feed.py)."""
        params: list[Any] = [owner_id, after]
        if topics:
            params.append(list(topics))
        params.append(limit)
        rows = self._select(self._select_owner_events[bool(topics)], params)
        return [_notification(row) for row in rows]

    def select_owner_reads(
        self, owner_id: str, after: int, limit: int
    ) -> tuple[list[Notification], dict[int, tuple[str, bool, bytes | None]], int]:
        """`select_owner_notifications` with, for each turn event, its turn's
        id, whether the turn is deleted and its wrapped key (None: gone), and
        the log's head: one statement, so one round trip and one snapshot (a
        deletion committed before it shows as deleted; one committed after it
        has not destroyed the key yet)."""
        rows = self._select(self._select_owner_reads, (owner_id, after, limit))
        notifications: list[Notification] = []
        turns: dict[int, tuple[str, bool, bytes | None]] = {}
        for row in rows:
            if row["notification_id"] is None:
                continue  # the head's row alone: nothing after `after`
            notifications.append(_notification(row))
            if row["turn_id"] is not None:
                wrapped = row["wrapped_key"]
                turns[row["notification_id"]] = (
                    row["turn_id"],
                    row["deleted"],
                    None if wrapped is None else bytes(wrapped),
                )
        head = rows[0]["head"] if rows else None
        return notifications, turns, head or 0

    @functools.cached_property
    def _select_owner_reads(self) -> bytes:
        # The owner index's own query, unchanged, as a subquery; each turn
        # event's row found by its version (a turn at position p has version
        # p + 2 or later: the start is version 1, each turn one event), the
        # newest position first, so the scan stops at once unless folds or
        # deletions came between; its key only while it is not deleted. Both
        # LIMIT 1 (each names at most one row) keep them per-event index
        # lookups: a plain join may hash every key partition instead.
        owner = self._select_owner_events[False].decode()
        turn_topics = sql.SQL(", ").join(
            sql.Literal(get_topic(cls))
            for cls in (Conversation.TurnConfirmed, Conversation.TurnAbandoned)
        )
        return (
            sql.SQL(
                "SELECT o.notification_id, o.originator_id, o.originator_version, "
                "o.topic, o.state, t.turn_id, t.deleted, k.wrapped_key, h.head "
                "FROM (SELECT max(notification_id) AS head FROM {events}) h "
                "LEFT JOIN ({owner}) o ON true "
                "LEFT JOIN LATERAL (SELECT r.turn_id, "
                "r.deleted_version IS NOT NULL AS deleted FROM {turns} r "
                "WHERE o.topic IN ({topics}) "
                "AND r.conversation_id = o.originator_id "
                "AND r.position <= o.originator_version - 2 "
                "AND r.version = o.originator_version "
                "ORDER BY r.position DESC LIMIT 1) t ON true "
                "LEFT JOIN LATERAL (SELECT k.wrapped_key FROM {keys} k "
                "WHERE NOT t.deleted AND k.conversation_id = o.originator_id "
                "AND k.turn_id = t.turn_id LIMIT 1) k ON true "
                "ORDER BY o.notification_id"
            )
            .format(
                events=self._table(self.events_table_name),
                owner=sql.SQL(owner),  # type: ignore[arg-type]
                turns=self._table("conversation_turns"),
                topics=turn_topics,
                keys=self._table(KEY_TABLE),
            )
            .as_bytes(None)
        )

    def _select(
        self, statement: sql.Composable | bytes, params: Sequence[Any]
    ) -> list[Any]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params, prepare=True)
            return list(curs.fetchall())

    def conversations(self, ids: Collection[UUID]) -> dict[UUID, ConversationRow]:
        if not ids:
            return {}
        rows = self._select(
            sql.SQL("SELECT {} FROM {} WHERE conversation_id = ANY(%s)").format(
                sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
            ),
            (list(ids),),
        )
        decoded = [conversation_row(row) for row in rows]
        return {row.conversation_id: row for row in decoded}

    def heads_and_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> tuple[dict[UUID, ConversationRow], dict[UUID, dict[str, TurnRow]]]:
        pairs = [(c, t) for c, ids in turn_ids.items() for t in ids]
        with (
            self.datastore.get_connection() as conn,
            conn.cursor() as heads_cursor,
            conn.cursor() as turns_cursor,
        ):
            # Both statements go in one round trip.
            with conn.pipeline():
                heads_cursor.execute(
                    sql.SQL("SELECT {} FROM {} WHERE conversation_id = ANY(%s)").format(
                        sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
                    ),
                    (list(turn_ids),),
                    prepare=True,
                )
                turns_cursor.execute(
                    sql.SQL(
                        "SELECT {} FROM {} WHERE (conversation_id, turn_id) IN "
                        "(SELECT * FROM unnest(%s::uuid[], %s::text[]))"
                    ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                    ([c for c, _ in pairs], [t for _, t in pairs]),
                    prepare=True,
                )
            heads = [conversation_row(row) for row in heads_cursor.fetchall()]
            turns = [turn_row(row) for row in turns_cursor.fetchall()]
        found: dict[UUID, dict[str, TurnRow]] = {}
        for turn in turns:
            found.setdefault(turn.conversation_id, {})[turn.turn_id] = turn
        return {row.conversation_id: row for row in heads}, found

    @functools.cached_property
    def _select_deleted_turns(self) -> bytes:
        # Rendered once: a Composed is rendered again at every execution.
        return (
            sql.SQL(
                "SELECT conversation_id, turn_id FROM {} "
                "WHERE (conversation_id, turn_id) IN ({}) "
                "AND deleted_version IS NOT NULL"
            )
            .format(self._table("conversation_turns"), sql.SQL(TURN_PAIRS))
            .as_bytes(None)
        )

    def deleted_turns(
        self, turn_ids: Mapping[UUID, Collection[str]]
    ) -> set[tuple[UUID, str]]:
        if not any(turn_ids.values()):
            return set()
        rows = self._select(self._select_deleted_turns, (turn_pairs(turn_ids),))
        return {(row["conversation_id"], row["turn_id"]) for row in rows}

    def conversations_of(self, owner_id: str) -> list[ConversationRow]:
        return [
            conversation_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE owner_id = %s "
                    "ORDER BY created_at, conversation_id"
                ).format(
                    sql.SQL(CONVERSATION_COLUMNS), self._table("conversation_heads")
                ),
                (owner_id,),
            )
        ]

    def turns_by_id(
        self, conversation_id: UUID, turn_ids: Collection[str]
    ) -> dict[str, TurnRow]:
        if not turn_ids:
            return {}
        rows = self._select(
            sql.SQL(
                "SELECT {} FROM {} WHERE conversation_id = %s AND turn_id = ANY(%s)"
            ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
            (conversation_id, list(turn_ids)),
        )
        decoded = [turn_row(row) for row in rows]
        return {row.turn_id: row for row in decoded}

    def turns_page(
        self, conversation_id: UUID, *, offset: int, limit: int, as_of: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s AND position >= %s "
                    "AND position < %s AND version <= %s ORDER BY position"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id, offset, offset + limit, as_of),
            )
        ]

    def eligible_newest_first(
        self, conversation_id: UUID, *, below: int, above: int, as_of: int, limit: int
    ) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s AND position < %s "
                    "AND position > %s AND status = 'c' AND version <= %s "
                    "AND (deleted_version IS NULL OR deleted_version > %s) "
                    "ORDER BY position DESC LIMIT %s"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id, min(below, 2**31 - 1), above, as_of, as_of, limit),
            )
        ]

    def eligible_ids(
        self, conversation_id: UUID, *, first: int, last: int, as_of: int
    ) -> tuple[str, ...]:
        return tuple(
            row["turn_id"]
            for row in self._select(
                sql.SQL(
                    "SELECT turn_id FROM {} WHERE conversation_id = %s "
                    "AND position >= %s AND position <= %s AND status = 'c' "
                    "AND version <= %s "
                    "AND (deleted_version IS NULL OR deleted_version > %s) "
                    "ORDER BY position"
                ).format(self._table("conversation_turns")),
                (conversation_id, first, last, as_of, as_of),
            )
        )

    def folds(self, conversation_id: UUID) -> list[FoldRow]:
        return [
            fold_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s ORDER BY version"
                ).format(sql.SQL(FOLD_COLUMNS), self._table("conversation_folds")),
                (conversation_id,),
            )
        ]

    def undeleted_turns(self, conversation_id: UUID) -> list[TurnRow]:
        return [
            turn_row(row)
            for row in self._select(
                sql.SQL(
                    "SELECT {} FROM {} WHERE conversation_id = %s "
                    "AND deleted_version IS NULL ORDER BY position"
                ).format(sql.SQL(TURN_COLUMNS), self._table("conversation_turns")),
                (conversation_id,),
            )
        ]

    def read_side_is_empty(self) -> bool:
        return not self._select(
            sql.SQL("SELECT 1 FROM {} LIMIT 1").format(
                self._table("conversation_heads")
            ),
            (),
        )

    def read_side_rows(
        self,
    ) -> tuple[list[ConversationRow], list[TurnRow], list[FoldRow]]:
        def every(columns: str, table: str) -> list[Any]:
            return self._select(
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(columns), self._table(table)
                ),
                (),
            )

        return (
            [
                conversation_row(r)
                for r in every(CONVERSATION_COLUMNS, "conversation_heads")
            ],
            [turn_row(r) for r in every(TURN_COLUMNS, "conversation_turns")],
            [fold_row(r) for r in every(FOLD_COLUMNS, "conversation_folds")],
        )


def _notification(row: Any) -> Notification:
    """A log row of the owner-index reads as the library's notification."""
    return Notification(
        id=row["notification_id"],
        originator_id=row["originator_id"],
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )
