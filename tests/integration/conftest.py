"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement psycopg's cursors send while the test runs
    (the pools' checks included), but for the once-per-connection settings
    that keep parameter values out of the server log."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: psycopg.Cursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(query, bytes):
            text = query.decode()
        elif isinstance(query, str):
            text = query
        else:
            text = query.as_string(self)
        if not text.startswith("SELECT set_config('log_parameter"):
            sent.append(text)
        return execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    yield sent
