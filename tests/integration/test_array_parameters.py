"""Array parameters sent as one string (infra/postgres_sql.py): PostgreSQL
reads each back exactly as the list it was made from, whatever the elements
hold (quotes, backslashes, braces, commas, spaces, the word NULL)."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnledger.infra.postgres_sql import bigint_array, text_array, uuid_array

pytestmark = pytest.mark.postgres

# PostgreSQL's text holds any character but NUL (and no lone surrogate).
texts = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=30
)
tricky = st.sampled_from(["", "NULL", "null", " ", '"', "\\", "{", "}", ",", "a b"])


@pytest.fixture(scope="module")
def connection(postgres_conninfo: str) -> Iterator[psycopg.Connection[tuple]]:
    with psycopg.connect(postgres_conninfo, autocommit=True) as conn:
        yield conn


def read_back(
    connection: psycopg.Connection[tuple], cast: str, literal: str
) -> list[object]:
    row = connection.execute(f"SELECT %s::{cast}", (literal,)).fetchone()
    assert row is not None
    return list(row[0])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(texts | tricky, max_size=10))
def test_text_arrays_read_back_as_sent(
    connection: psycopg.Connection[tuple], values: list[str]
) -> None:
    assert read_back(connection, "text[]", text_array(values)) == values


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=10))
def test_bigint_arrays_read_back_as_sent(
    connection: psycopg.Connection[tuple], values: list[int]
) -> None:
    assert read_back(connection, "bigint[]", bigint_array(values)) == values


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.uuids(), max_size=10))
def test_uuid_arrays_read_back_as_sent(
    connection: psycopg.Connection[tuple], values: list[UUID]
) -> None:
    assert read_back(connection, "uuid[]", uuid_array(values)) == values
