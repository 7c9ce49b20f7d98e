"""The layers hold at run time, not only in the import-linter contracts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# What the client may load of turnledger: itself, the wire contract, and the
# pure model and read-side value types the contract is written in.
CLIENT_MAY_LOAD = (
    "turnledger.infra.client",
    "turnledger.infra.wire",
    "turnledger.domain",
    "turnledger.projections",
)
NEVER_WITH_THE_CLIENT = (
    "psycopg",
    "psycopg_pool",
    "sqlite3",
    "_sqlite3",
    "fastapi",
    "starlette",
    "uvicorn",
)


def _loaded_after(statement: str) -> set[str]:
    script = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    return set(done.stdout.split())


def test_importing_the_client_loads_no_server_and_no_database_driver() -> None:
    loaded = _loaded_after("import turnledger.infra.client")
    assert "turnledger.infra.client" in loaded
    drivers = sorted(
        name for name in loaded if name.split(".")[0] in NEVER_WITH_THE_CLIENT
    )
    assert drivers == []
    server = sorted(
        name
        for name in loaded
        if name.startswith("turnledger.")
        and not name.startswith(CLIENT_MAY_LOAD)
        and name not in {"turnledger.infra"}
    )
    assert server == []


@pytest.mark.parametrize("package", ["turnledger.domain", "turnledger.projections"])
def test_the_inner_layers_load_nothing_of_the_outer_ones(package: str) -> None:
    modules = {
        "turnledger.domain": [
            "conversation",
            "parts",
            "chain",
            "merkle",
            "transparency",
            "findings",
            "transcodings",
            "ports",
        ],
        "turnledger.projections": [
            "queries",
            "window",
            "formats",
            "receipt",
            "read_side",
            "results",
        ],
    }[package]
    imports = "\n".join(f"import {package}.{name}" for name in modules)
    loaded = _loaded_after(imports)
    outer = sorted(name for name in loaded if name.startswith("turnledger.infra"))
    assert outer == []
    if package == "turnledger.domain":
        assert not any(name.startswith("turnledger.projections") for name in loaded)


def test_every_error_code_the_service_sends_has_a_class_in_the_client() -> None:
    from turnledger.infra.client.errors import ERROR_CODES
    from turnledger.infra.wire.errors import ERROR_STATUS

    assert {code for _, _, code in ERROR_STATUS} <= ERROR_CODES
