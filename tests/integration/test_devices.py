"""Devices and tokens on every store: shown once, stored hashed, revocable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from turnledger.domain.errors import (
    DeviceNotFoundError,
    InvalidInputError,
    UnauthenticatedError,
)
from turnledger.infra.devices import DeviceRegistry, open_device_registry, token_digest
from turnledger.infra.settings import Settings


@pytest.fixture
def registry(settings: Settings) -> Iterator[DeviceRegistry]:
    opened = open_device_registry(settings)
    yield opened
    opened.close()


def stored_bytes(settings: Settings) -> bytes:
    """Everything the store keeps about devices, as raw bytes."""
    if settings.persistence == "sqlite":
        return (settings.data_dir / "devices.sqlite3").read_bytes()
    if settings.persistence == "postgres":
        with psycopg.connect(settings.postgres_conninfo()) as connection:
            rows = connection.execute(
                sql.SQL("SELECT * FROM {}").format(
                    sql.Identifier(settings.postgres_schema, "devices")
                )
            ).fetchall()
        return repr(rows).encode()
    pytest.skip("the memory store keeps nothing outside the process")


def test_a_token_authenticates_its_device_and_is_stored_only_hashed(
    registry: DeviceRegistry, settings: Settings
) -> None:
    issued = registry.add("alice", "phone")
    assert registry.authenticate(issued.token) == issued.device
    assert issued.device.user_id == "alice" and not issued.device.revoked
    if settings.persistence != "memory":
        raw = stored_bytes(settings)
        assert issued.token.encode() not in raw
        assert issued.token.split("_", 1)[1].encode() not in raw
        digest = token_digest(issued.token)
        assert (
            digest in raw
            or digest.hex().encode() in raw
            or repr(digest).encode() in raw
        )


def test_tokens_survive_reopening_the_store(settings: Settings) -> None:
    first = open_device_registry(settings)
    issued = first.add("alice", "phone")
    first.close()
    if settings.persistence == "memory":
        return
    second = open_device_registry(settings)
    try:
        assert second.authenticate(issued.token) == issued.device
    finally:
        second.close()


@pytest.mark.parametrize("token", [None, "", "tl1_not-a-token", "x" * 5000, "\ud800"])
def test_missing_and_unknown_tokens_are_refused(
    registry: DeviceRegistry, token: str | None
) -> None:
    registry.add("alice", "phone")
    with pytest.raises(UnauthenticatedError):
        registry.authenticate(token)


def test_a_revoked_token_is_refused_and_revoking_twice_keeps_the_first_time(
    registry: DeviceRegistry,
) -> None:
    kept = registry.add("alice", "laptop")
    lost = registry.add("alice", "phone")
    revoked = registry.revoke(lost.device.device_id)
    assert revoked.revoked
    with pytest.raises(UnauthenticatedError, match="revoked"):
        registry.authenticate(lost.token)
    assert registry.revoke(lost.device.device_id).revoked_at == revoked.revoked_at
    assert registry.authenticate(kept.token) == kept.device
    listed = {d.device_id: d for d in registry.list("alice")}
    assert listed[lost.device.device_id].revoked_at == revoked.revoked_at
    assert not listed[kept.device.device_id].revoked


def test_a_user_can_neither_see_nor_revoke_another_users_devices(
    registry: DeviceRegistry,
) -> None:
    alices = registry.add("alice", "phone")
    bobs = registry.add("bob", "phone")
    assert [d.device_id for d in registry.list("bob")] == [bobs.device.device_id]
    with pytest.raises(DeviceNotFoundError):
        registry.revoke(alices.device.device_id, user_id="bob")
    with pytest.raises(DeviceNotFoundError):
        registry.revoke("dev_does-not-exist", user_id="bob")
    assert registry.authenticate(alices.token) == alices.device


@pytest.mark.parametrize(
    ("user_id", "name"),
    [
        ("", "phone"),
        ("al ice", "phone"),
        ("alice", ""),
        ("alice", "x" * 101),
        ("alice", "bad \ud800"),
        ("alice", "nul \x00 inside"),
        ("ali\x00ce", "phone"),
    ],
)
def test_bad_users_and_names_are_rejected_and_add_nothing(
    registry: DeviceRegistry, user_id: str, name: str
) -> None:
    with pytest.raises(InvalidInputError):
        registry.add(user_id, name)
    assert registry.list() == []


def test_the_device_commands_add_list_and_revoke(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env["TURNLEDGER_DELETION_RECORD_DIR"] = os.environ["TURNLEDGER_DELETION_RECORD_DIR"]
    env.update(TURNLEDGER_DATA_DIR=str(tmp_path / "data"), COLUMNS="200")

    def turnledger(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "turnledger.infra.cli", "device", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    added = turnledger("add", "--user", "alice", "--name", "phone")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip().splitlines()[-1]
    device_id = added.stdout.split()[1]
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    registry = open_device_registry(settings)
    try:
        assert registry.authenticate(token).device_id == device_id
        listed = turnledger("list", "--user", "alice")
        assert device_id in listed.stdout and token not in listed.stdout
        assert turnledger("revoke", device_id).returncode == 0
        with pytest.raises(UnauthenticatedError):
            registry.authenticate(token)
        missing = turnledger("revoke", "dev_nope")
        assert missing.returncode == 2 and "not found" in missing.stderr
    finally:
        registry.close()


def test_revoking_a_device_revokes_the_devices_it_added(
    registry: DeviceRegistry,
) -> None:
    root = registry.add("alice", "phone")
    child = registry.add("alice", "tablet", added_by=root.device.device_id)
    grandchild = registry.add("alice", "tv", added_by=child.device.device_id)
    sibling = registry.add("alice", "laptop")
    assert grandchild.device.added_by == child.device.device_id
    registry.revoke(root.device.device_id, user_id="alice")
    for issued in (root, child, grandchild):
        with pytest.raises(UnauthenticatedError, match="revoked"):
            registry.authenticate(issued.token)
    assert registry.authenticate(sibling.token) == sibling.device
    # Revoking a leaf leaves its parent alone.
    other = registry.add("alice", "watch", added_by=sibling.device.device_id)
    registry.revoke(other.device.device_id)
    assert registry.authenticate(sibling.token) == sibling.device


def test_many_tokens_are_authenticated_each_in_its_place(
    registry: DeviceRegistry,
) -> None:
    """One lookup for a group of requests gives each token the answer
    `authenticate` gives it alone: repeated, unknown, revoked and missing
    tokens included."""
    phone = registry.add("alice", "phone")
    laptop = registry.add("bob", "laptop")
    gone = registry.add("alice", "old tablet")
    registry.revoke(gone.device.device_id)
    tokens = [
        phone.token,
        "not-a-token",
        laptop.token,
        None,
        gone.token,
        phone.token,
        "",
    ]
    found = registry.authenticate_many(tokens)
    assert len(found) == len(tokens)
    for token, outcome in zip(tokens, found, strict=True):
        try:
            alone: object = registry.authenticate(token)
        except UnauthenticatedError as error:
            assert isinstance(outcome, UnauthenticatedError)
            assert str(outcome) == str(error)
        else:
            assert outcome == alone
    assert [getattr(o, "device_id", None) for o in found] == [
        phone.device.device_id,
        None,
        laptop.device.device_id,
        None,
        None,
        phone.device.device_id,
        None,
    ]
    assert registry.authenticate_many([]) == []
