"""The ledger's PostgreSQL recorder: the library's, writing the read side and
the new turns' keys in the events' own transaction, in one round trip."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import (
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from turnledger.domain.errors import (
    CredentialRevokedError,
    InvalidInputError,
)
from turnledger.domain.ports import NewKey
from turnledger.infra.library_compat import PostgresRecorderWithRows
from turnledger.infra.migrations import ledger as ledger_steps
from turnledger.infra.migrations.runner import (
    StoreNames,
    check_postgres_version,
    migrate_postgres,
    postgres_startup_lock,
)
from turnledger.infra.owner_feed import (
    postgres_select_owner_events,
)
from turnledger.infra.postgres_keys import KEY_COLUMNS, KEY_TABLE
from turnledger.infra.postgres_quiet import QuietKeyStatements
from turnledger.infra.postgres_read_queries import PostgresReadQueries
from turnledger.infra.postgres_row_writes import PostgresRowWrites
from turnledger.infra.postgres_sql import (
    BATCH_ARGUMENTS,
    BATCH_PARAMETERS,
    CREDENTIAL_REVOKED,
    DEVICE_TABLE,
    HEADS_UPSERT,
    WRITE_FUNCTION,
    bigint_array,
    in_one_statement,
    json_insert,
    json_rows,
    schema_channel,
    text_array,
    uuid_array,
    wake_payload,
)
from turnledger.infra.read_side_sql import (
    CONVERSATION_COLUMNS,
    TURN_COLUMNS,
)
from turnledger.projections.ledger_rows import (
    RowChanges,
)


class PostgresReadSideRecorder(
    PostgresReadQueries, PostgresRowWrites, QuietKeyStatements, PostgresRecorderWithRows
):
    """The library's PostgreSQL recorder, writing the read side and the new
    turns' keys in the events' own transaction."""

    # Writes with credentials (device ids) are refused, in their own
    # transaction, unless each is a device of the schema not revoked.
    checks_credentials = True

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        # The library names the channel after the table alone, so every store
        # in one database shared it: each schema's listeners heard the
        # others' writes. Set before anything uses it (the write function,
        # the library's NOTIFY and subscriptions all read this attribute).
        self.channel_name = schema_channel(datastore.schema, self.events_table_name)
        self._schema = sql.Identifier(datastore.schema)
        # A batch's keys, turns, heads and events in one statement (see
        # insert_events); a rebuild's many rows go table by table.
        inserts = self._batch_inserts(BATCH_PARAMETERS)
        self._row_inserts = tuple(inserts[:-1])
        # Rendered once: a Composed is rendered again at every execution.
        self._insert_rows_and_events = in_one_statement(
            [statement for statement, _ in inserts]
        ).as_bytes(None)
        self._count_credentials = (
            sql.SQL("SELECT {} AS valid")
            .format(self._credentials_valid("%s"))
            .as_bytes(None)
        )
        self._write_function = sql.Identifier(datastore.schema, WRITE_FUNCTION)
        # The batch's rows as the three-message path sends them
        # (BATCH_PARAMETERS), then lock_wait, wake and credentials.
        self._call_write_function = (
            sql.SQL("SELECT notification_id FROM {}({}, %s, %s, %s) AS notification_id")
            .format(self._write_function, sql.SQL(", ".join(BATCH_PARAMETERS)))
            .as_bytes(None)
        )
        self._quiet_connections: weakref.WeakSet[psycopg.Connection[Any]] = (
            weakref.WeakSet()
        )
        # The read side's tables and the per-user feed index are versioned
        # steps (infra/migrations/), applied by create_table.
        self.sql_create_statements.append(self._write_function_ddl())
        self._select_owner_events = {
            with_topics: postgres_select_owner_events(
                datastore.schema, self.events_table_name, with_topics=with_topics
            ).as_bytes(None)
            for with_topics in (False, True)
        }

    def create_table(self) -> None:
        """The library's tables and functions, then the steps of the read side
        this schema has not had yet (infra/migrations/), all under the
        schema's migration lock: processes starting at once take turns."""
        schema = self.datastore.schema
        with (
            self.datastore.get_connection() as conn,
            postgres_startup_lock(conn, schema),
        ):
            super().create_table()
            migrate_postgres(
                conn,
                ledger_steps.COMPONENT,
                ledger_steps.POSTGRES_STEPS,
                StoreNames(schema=schema, events_table=self.events_table_name),
            )

    def check_schema_version(self) -> None:
        """For a read-only opening: refuse a read side newer than the code."""
        with self.datastore.transaction(commit=False) as curs:
            check_postgres_version(
                curs,
                ledger_steps.COMPONENT,
                ledger_steps.POSTGRES_STEPS,
                StoreNames(schema=self.datastore.schema),
            )

    def _batch_inserts(
        self, sources: tuple[str, str, str, str]
    ) -> list[tuple[sql.Composed, str]]:
        """The inserts of a batch's keys, turn rows, heads and events, with
        their columns; `sources` says where each takes its rows from (the
        statement's parameters, or the write function's arguments)."""
        keys, turns, heads, events = sources
        return [
            (
                json_insert(
                    self._table(KEY_TABLE),
                    KEY_COLUMNS,
                    source=keys,
                    suffix=" ON CONFLICT DO NOTHING",
                ),
                KEY_COLUMNS,
            ),
            (
                json_insert(
                    self._table("conversation_turns"), TURN_COLUMNS, source=turns
                ),
                TURN_COLUMNS,
            ),
            (
                json_insert(
                    self._table("conversation_heads"),
                    CONVERSATION_COLUMNS,
                    source=heads,
                    suffix=HEADS_UPSERT,
                ),
                CONVERSATION_COLUMNS,
            ),
            (
                sql.SQL(
                    "INSERT INTO {} (originator_id, originator_version, topic, state) "
                    "SELECT * FROM unnest({}) RETURNING notification_id"
                ).format(
                    sql.Identifier(self.datastore.schema, self.events_table_name),
                    sql.SQL(events),
                ),
                "originator_id, originator_version, topic, state",
            ),
        ]

    def _write_function_ddl(self) -> sql.Composed:
        """The function that writes a batch in one statement (insert_events).

        Its body is the transaction of the three-message path: the library's
        lock timeout and table lock, the NOTIFY (naming the batch's owners,
        `wake_payload`), then the keys, turn rows, heads and events in one
        statement. Replaced at every start, as the library does with its own
        function.
        """
        inserts = [statement for statement, _ in self._batch_inserts(BATCH_ARGUMENTS)]
        return self.write_function_ddl(
            function=self._write_function,
            arguments="key_rows json, turn_rows json, head_rows json, ids uuid[],"
            " versions bigint[], topics text[], states bytea[], lock_wait text,"
            " wake text, credentials text[]",
            # Nested: PL/pgSQL plans the inner query only when it first runs,
            # so ledgers without a device table never reference one.
            checks=sql.SQL(
                "IF credentials IS NOT NULL THEN"
                " IF {credentials_valid} < cardinality(credentials) THEN"
                " RAISE EXCEPTION USING MESSAGE = {revoked};"
                " END IF; END IF;"
            ).format(
                credentials_valid=self._credentials_valid("credentials"),
                revoked=sql.Literal(CREDENTIAL_REVOKED),
            ),
            statement=in_one_statement(inserts),
        )

    def _credentials_valid(self, credentials: str) -> sql.Composed:
        """How many of the device ids in `credentials` are devices not revoked."""
        return sql.SQL(
            "(SELECT count(*) FROM {} WHERE device_id = ANY({}) AND revoked_at IS NULL)"
        ).format(self._table(DEVICE_TABLE), sql.SQL(credentials))

    def _check_credentials(
        self, curs: psycopg.Cursor[DictRow], credentials: Sequence[str]
    ) -> None:
        """In the transaction of `curs`: refuse unless every one is valid."""
        row = curs.execute(self._count_credentials, (list(credentials),)).fetchone()
        if row is None or row["valid"] < len(credentials):
            raise CredentialRevokedError(tuple(credentials))

    # Long because: every write's path, its one-round-trip protocol in the docstring
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """The events, their read-side rows and new keys: one transaction in
        one round trip.

        The library's own insert (kept below for what does not fit one
        statement) runs each statement through psycopg's pipeline, whose
        per-statement bookkeeping cost more than the rest of a turn's write.
        A batch of new turns is one call of the schema's write function
        (`_write_function_ddl`), in autocommit: it sets the library's lock
        timeout, takes its table lock (notification ids in commit order),
        queues its NOTIFY and writes the keys, turn rows, heads and events in
        one statement, returning the events' notification ids; the deferred
        unique keys are checked as the statement's transaction commits. A
        batch that also changes rows (deletions, folds) is sent as three
        messages instead: BEGIN with the lock and the NOTIFY, the same insert,
        the updates and COMMIT. A conflict anywhere fails the whole
        transaction as an IntegrityError, as the library's insert does.
        """
        changes: RowChanges = kwargs.get("read_side") or RowChanges()
        new_keys: Sequence[NewKey] = kwargs.get("new_keys", ())
        credentials: Sequence[str] = kwargs.get("credentials", ())
        key_rows = [(k.conversation_id, k.key_id, k.wrapped) for k in new_keys]
        row_sets = self._row_sets(changes, key_rows)
        if not stored_events or any(
            len(rows) > self.rows_per_statement for rows in (*row_sets, stored_events)
        ):
            if credentials:
                # Turn writes with credentials come in groups of at most 64
                # requests, far below these sizes; a caller that still gets
                # here is refused rather than written unchecked.
                raise InvalidInputError(
                    "credentials", "a batch this large is not checked in one statement"
                )
            return super().insert_events(stored_events, **kwargs)
        parameters: list[Any] = [
            json_rows(columns, rows)
            for rows, (_, columns) in zip(row_sets, self._row_inserts, strict=True)
        ]
        # The events' columns as array literals but their states (bytea, sent
        # in binary): psycopg dumps a list element by element in Python, which
        # cost an 8-event call 30-90 us more client CPU (docs/benchmarks.md,
        # "Writes to many conversations in one batch").
        parameters.extend(
            [
                uuid_array(e.originator_id for e in stored_events),
                bigint_array(e.originator_version for e in stored_events),
                text_array(e.topic for e in stored_events),
                [e.state for e in stored_events],
            ]
        )
        wake = wake_payload([row.owner_id for row in changes.conversations])
        changes_rows = changes.deletions or changes.new_folds or changes.withdrawals
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if not changes_rows:
                if new_keys:
                    self._quiet_session(conn)
                parameters.extend([self.lock_wait, wake, list(credentials) or None])
                return self._call_write(curs, parameters, credentials)
            return self._insert_with_changes(
                conn,
                curs,
                parameters,
                changes=changes,
                wake=wake,
                credentials=credentials,
            )

    def _call_write(
        self,
        curs: psycopg.Cursor[DictRow],
        parameters: list[Any],
        credentials: Sequence[str],
    ) -> list[int]:
        """A batch of new turns: one call of the schema's write function."""
        try:
            curs.execute(self._call_write_function, parameters)
        except psycopg.errors.RaiseException as error:
            if error.diag.message_primary == CREDENTIAL_REVOKED:
                raise CredentialRevokedError(tuple(credentials)) from None
            raise
        return [row["notification_id"] for row in curs.fetchall()]

    def _insert_with_changes(
        self,
        conn: psycopg.Connection[DictRow],
        curs: psycopg.Cursor[DictRow],
        parameters: list[Any],
        *,
        changes: RowChanges,
        wake: str,
        credentials: Sequence[str],
    ) -> list[int]:
        """A batch that also changes rows: BEGIN with the lock and the NOTIFY,
        the batch's insert, the updates and COMMIT."""
        try:
            curs.execute(self._begin_and_lock(wake))
            if credentials:
                self._check_credentials(curs, credentials)
            curs.execute(self._insert_rows_and_events, parameters)
            notification_ids = [row["notification_id"] for row in curs.fetchall()]
            self._write_changed_rows(curs, changes)
            curs.execute(b"COMMIT")
        except BaseException:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()
            raise
        return notification_ids

    def _begin_and_lock(self, wake: str) -> bytes:
        return self.begin_lock_and_notify(self._quiet_key_statements(), wake)

    def write_rows(
        self,
        curs: psycopg.Cursor[DictRow],
        stored_events: Sequence[StoredEvent],
        **kwargs: Any,
    ) -> None:
        # psycopg prepares a statement it has run several times, even inside
        # this pipeline; when the transaction then fails (another process took
        # the version), it still believes the statement exists. These
        # statements are therefore never auto-prepared.
        curs.connection.prepare_threshold = None
        new_keys: Sequence[NewKey] = kwargs.get("new_keys", ())
        if new_keys:
            # As in the key store's own sessions (infra/key_session.py): with
            # statement logging on, the server would log the wrapped keys.
            for statement in self._quiet_key_statements():
                curs.execute(statement)
        changes = kwargs.get("read_side") or RowChanges()
        # A key already there means a duplicate turn: the turn row's unique
        # key refuses the transaction at commit.
        self._write_rows(
            curs,
            changes,
            key_rows=[(k.conversation_id, k.key_id, k.wrapped) for k in new_keys],
        )


class PostgresSnapshotRecorder(PostgresAggregateRecorder):
    """The library's recorder of the first release's snapshots, its table
    created under the schema's migration lock, as the events' are."""

    def create_table(self) -> None:
        with (
            self.datastore.get_connection() as conn,
            postgres_startup_lock(conn, self.datastore.schema),
        ):
            super().create_table()
