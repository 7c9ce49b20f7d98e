"""The Ed25519 key that signs checkpoints: read from the settings, never the DB."""

from __future__ import annotations

import base64
import binascii

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from turnledger.domain.errors import CheckpointError
from turnledger.infra.settings import Settings


def new_signing_key() -> str:
    """A fresh Ed25519 key as TURNLEDGER_AUDIT_SIGNING_KEY takes it."""
    raw = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return base64.b64encode(raw).decode("ascii")


def _parse_private_key(text: str, source: str) -> Ed25519PrivateKey:
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(text.encode(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError("the PEM key is not an Ed25519 key")
            return key
        raw = base64.b64decode(text, validate=True)
        return Ed25519PrivateKey.from_private_bytes(raw)
    except (ValueError, TypeError, binascii.Error) as error:
        raise CheckpointError(
            f"{source} is not an Ed25519 private key (base64 of 32 bytes, or PEM): "
            f"{error}"
        ) from None


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The checkpoint signing key from the settings, never from the database."""
    if settings.audit_signing_key is not None and settings.audit_signing_key_file:
        raise CheckpointError(
            "set TURNLEDGER_AUDIT_SIGNING_KEY or TURNLEDGER_AUDIT_SIGNING_KEY_FILE, "
            "not both"
        )
    if settings.audit_signing_key is not None:
        return _parse_private_key(
            settings.audit_signing_key.get_secret_value(),
            "TURNLEDGER_AUDIT_SIGNING_KEY",
        )
    if settings.audit_signing_key_file is not None:
        try:
            text = settings.audit_signing_key_file.read_text()
        except OSError as error:
            raise CheckpointError(
                f"cannot read TURNLEDGER_AUDIT_SIGNING_KEY_FILE: {error}"
            ) from None
        return _parse_private_key(text, str(settings.audit_signing_key_file))
    raise CheckpointError(
        "no signing key: set TURNLEDGER_AUDIT_SIGNING_KEY or "
        "TURNLEDGER_AUDIT_SIGNING_KEY_FILE (see docs/transparency.md)"
    )


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _parse_public_key(text: str, source: str) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(
            base64.b64decode(text.strip(), validate=True)
        )
    except (ValueError, TypeError, binascii.Error) as error:
        raise CheckpointError(
            f"{source} is not an Ed25519 public key (base64 of 32 bytes): {error}"
        ) from None


def trusted_public_key(settings: Settings) -> Ed25519PublicKey | None:
    """The key checkpoints must be signed with, if the settings pin one."""
    if settings.audit_public_key is not None:
        return _parse_public_key(
            settings.audit_public_key, "TURNLEDGER_AUDIT_PUBLIC_KEY"
        )
    if settings.audit_signing_key is not None or settings.audit_signing_key_file:
        return signing_key(settings).public_key()
    return None
