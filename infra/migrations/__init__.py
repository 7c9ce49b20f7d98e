"""Versioned schema steps, in one place: see runner.py for how they are applied
and docs/operations.md for what an operator sees."""

from __future__ import annotations

from turnledger.infra.migrations.runner import (
    MIGRATIONS_TABLE,
    SchemaTooNewError,
    Step,
    StoreNames,
    migrate_postgres,
    migrate_sqlite,
)

__all__ = [
    "MIGRATIONS_TABLE",
    "SchemaTooNewError",
    "Step",
    "StoreNames",
    "migrate_postgres",
    "migrate_sqlite",
]
