"""Devices and their bearer tokens: who may call the HTTP service, as which user.

A token is 32 random bytes from `secrets`, shown once when the device is added
and stored only as its SHA-256 digest. Such a token has too much entropy to be
guessed, so a fast digest is enough (no password hashing); lookups go by the
digest and the final comparison is constant-time. Devices are not conversation
events: they live in a small table beside the ledger (an SQLite file of their
own, an SQLite database in memory for the memory store, or a table in the
PostgreSQL schema).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import uuid4

from psycopg_pool import ConnectionPool

from turnledger.domain.errors import (
    DeviceNotFoundError,
    InvalidInputError,
    UnauthenticatedError,
)
from turnledger.domain.text import check_identifier, check_text
from turnledger.infra.settings import Settings

TOKEN_PREFIX = "tl1_"
MAX_DEVICE_NAME_CHARS = 100


@dataclass(frozen=True, slots=True)
class Device:
    device_id: str
    user_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None
    added_by: str | None = None
    """The device that added this one over HTTP; None when added by the CLI."""

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


@dataclass(frozen=True, slots=True)
class IssuedDevice:
    """A new device and its token: the only time the token is ever available."""

    device: Device
    token: str


class DeviceStore(Protocol):
    def insert(self, device: Device, token_digest: bytes) -> None: ...

    def find_by_digests(
        self, token_digests: Collection[bytes]
    ) -> dict[bytes, tuple[Device, bytes]]: ...

    def get(self, device_id: str) -> Device | None: ...

    def list(self, user_id: str | None) -> list[Device]: ...

    def mark_revoked(self, device_id: str, at: datetime) -> None: ...

    def revoked_since(self, at: datetime) -> Sequence[Device]: ...

    def close(self) -> None: ...


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class DeviceRegistry:
    """Adds, authenticates, lists and revokes devices."""

    def __init__(self, store: DeviceStore) -> None:
        self._store = store

    def add(
        self, user_id: str, name: str, *, added_by: str | None = None
    ) -> IssuedDevice:
        check_identifier("user_id", user_id)
        check_text("name", name)
        if len(name) > MAX_DEVICE_NAME_CHARS:
            raise InvalidInputError(
                "name", f"must be at most {MAX_DEVICE_NAME_CHARS} characters"
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        device = Device(
            device_id=f"dev_{uuid4().hex}",
            user_id=user_id,
            name=name,
            created_at=datetime.now(UTC),
            added_by=added_by,
        )
        self._store.insert(device, token_digest(token))
        return IssuedDevice(device, token)

    def authenticate(self, token: str | None) -> Device:
        """The device holding `token`; UnauthenticatedError if none may use it."""
        found = self.authenticate_many([token])[0]
        if isinstance(found, UnauthenticatedError):
            raise found
        return found

    def authenticate_many(
        self, tokens: Sequence[str | None]
    ) -> list[Device | UnauthenticatedError]:
        """`authenticate` of each token, in its place, with one lookup for all."""
        digests = [token_digest(token) if token else None for token in tokens]
        wanted = {digest for digest in digests if digest is not None}
        found = self._store.find_by_digests(wanted) if wanted else {}
        return [
            self._device_for(digest, found.get(digest) if digest else None)
            for digest in digests
        ]

    @staticmethod
    def _device_for(
        digest: bytes | None, found: tuple[Device, bytes] | None
    ) -> Device | UnauthenticatedError:
        if digest is None:
            return UnauthenticatedError("send 'Authorization: Bearer <device token>'")
        if found is None or not hmac.compare_digest(found[1], digest):
            return UnauthenticatedError("unknown device token")
        if found[0].revoked:
            return UnauthenticatedError("this device token has been revoked")
        return found[0]

    def list(self, user_id: str | None = None) -> list[Device]:
        if user_id is not None:
            check_identifier("user_id", user_id)
        return self._store.list(user_id)

    def is_revoked(self, device_id: str) -> bool:
        """True if the device was revoked (or is gone) since it authenticated."""
        device = self._store.get(device_id)
        return device is None or device.revoked

    def usable_digests(self, token_digests: Collection[bytes]) -> set[bytes]:
        """Those of `token_digests` whose device is known and not revoked,
        now: one lookup for all (a sync read checks the devices it answers
        after reading, `infra/http/sync_routes.py`)."""
        found = self._store.find_by_digests(token_digests) if token_digests else {}
        return {
            digest
            for digest, (device, stored) in found.items()
            if hmac.compare_digest(stored, digest) and not device.revoked
        }

    def revoked_since(self, at: datetime) -> Sequence[Device]:
        """Devices revoked at or after `at` (for services that poll)."""
        return self._store.revoked_since(at)

    @property
    def revocation_channel(self) -> str | None:
        """The PostgreSQL channel NOTIFYed with the user id on each revocation."""
        return getattr(self._store, "revocation_channel", None)

    def revoke(self, device_id: str, *, user_id: str | None = None) -> Device:
        """Revoke a device and every device it added, transitively.

        With `user_id`, only one of that user's devices. A stolen token could
        have been used to add devices; revoking it revokes those too. Revoking
        an already revoked device keeps its first revocation time.
        """
        check_text("device_id", device_id)
        device = self._store.get(device_id)
        if device is None or (user_id is not None and device.user_id != user_id):
            raise DeviceNotFoundError(str(device_id))
        at = datetime.now(UTC)
        siblings = self._store.list(device.user_id)
        doomed, frontier = {device.device_id}, [device.device_id]
        while frontier:
            parent = frontier.pop()
            for child in siblings:
                if child.added_by == parent and child.device_id not in doomed:
                    doomed.add(child.device_id)
                    frontier.append(child.device_id)
        for each in siblings:
            if each.device_id in doomed and not each.revoked:
                self._store.mark_revoked(each.device_id, at)
        return device if device.revoked else replace(device, revoked_at=at)

    def connection_pools(self) -> list[ConnectionPool[Any]]:
        """The psycopg pools behind this registry (none off PostgreSQL)."""
        pools = getattr(self._store, "connection_pools", None)
        return list(pools()) if pools is not None else []

    def close(self) -> None:
        self._store.close()


# Stores -----------------------------------------------------------------------


def open_device_registry(settings: Settings) -> DeviceRegistry:
    """The device registry for these settings, its table created if needed."""
    # The stores import this module's model: imported here, not at the top.
    from turnledger.infra.device_stores import open_device_store

    return DeviceRegistry(open_device_store(settings))
