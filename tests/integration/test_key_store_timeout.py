"""The key store waits for a connection as long as
TURNLEDGER_POSTGRES_CONNECT_TIMEOUT says, not a fixed 5 s."""

from __future__ import annotations

import socket
import time

import pytest

from turnledger.infra.cli import main
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.vault import new_master_key


def _closed_port() -> int:
    """A local port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("timeout", [1, 2])
def test_audit_of_an_unreachable_server_gives_up_after_the_connect_timeout(
    timeout: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "postgres")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_HOST", "127.0.0.1")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_PORT", str(_closed_port()))
    monkeypatch.setenv("TURNLEDGER_POSTGRES_CONNECT_TIMEOUT", str(timeout))
    monkeypatch.setenv("TURNLEDGER_MASTER_KEY", new_master_key())
    started = time.monotonic()
    code = main(["audit"])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == EXIT_CANNOT_RUN
    assert "unavailable" in err and f"after {timeout}.00 sec" in err, err
    # Before, the key store's pool waited 5 s whatever the setting.
    assert timeout <= elapsed < timeout + 2.0, elapsed
