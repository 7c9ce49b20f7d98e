"""The JSON a PostgreSQL batch carries its read-side rows in.

PostgreSQL reads each cell back with its column's input function, so the text
must be exactly what those accept: a UUID's canonical form, a timestamp with
its offset and microseconds, bytea in hex input form.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.infra.postgres import json_rows

COLUMNS = "conversation_id, recorded_at, position, wrapped, turn_id, note"

aware_times = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
    ),
)
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
rows = st.lists(
    st.tuples(
        st.uuids(),
        aware_times,
        st.integers(-(2**63), 2**63 - 1),
        st.binary(max_size=64),
        text,
        st.none() | text,
    ),
    max_size=12,
)


def expected_cell(value: object) -> object:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return value


@given(rows)
def test_every_cell_is_written_as_its_column_reads_it(batch: list[tuple]) -> None:
    names = [name.strip() for name in COLUMNS.split(",")]
    decoded = json.loads(json_rows(COLUMNS, batch))
    assert decoded == [
        {name: expected_cell(value) for name, value in zip(names, row, strict=True)}
        for row in batch
    ]


@given(aware_times)
def test_a_timestamp_keeps_its_offset_and_microseconds(moment: datetime) -> None:
    (row,) = json.loads(json_rows("at", [(moment,)]))
    assert datetime.fromisoformat(row["at"]) == moment
    assert datetime.fromisoformat(row["at"]).utcoffset() == moment.utcoffset()


def test_a_timestamp_without_a_time_zone_is_refused() -> None:
    # PostgreSQL would read it in the session's time zone, silently.
    with pytest.raises(TypeError) as refused:
        json_rows("at", [(datetime(2026, 12, 2, 3, 0),)])
    assert isinstance(refused.value.__cause__, ValueError)
    assert "time zone" in str(refused.value.__cause__)


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError):
        json_rows("a, b", [(1,)])
