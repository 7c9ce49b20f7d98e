"""The master key: its encoding, its public id, and the key file made on
first use. The vault (vault.py) wraps every turn's data key under it."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from turnledger.domain.errors import TurnLedgerError


class MasterKeyError(TurnLedgerError, ValueError):
    """Raised when the configured master key is missing or malformed."""


def decode_master_key(encoded: str) -> bytes:
    try:
        key = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise MasterKeyError("the master key must be base64 of 32 bytes") from None
    if len(key) != 32:
        raise MasterKeyError(f"the master key must be 32 bytes, got {len(key)}")
    return key


def master_key_id(master_key: bytes) -> str:
    """A public id of a master key (HKDF of it: says nothing of the key)."""
    return (
        HKDF(
            algorithm=hashes.SHA256(),
            length=8,
            salt=None,
            info=b"turnledger/master-key-id/v1",
        )
        .derive(master_key)
        .hex()
    )


def new_master_key() -> str:
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode("ascii")


def load_or_create_key_file(path: Path, *, data_exists: bool = False) -> bytes:
    """Read the master key file, creating it with mode 0600 on first use.

    Refuses to create one when `data_exists`: data sealed under a lost key
    would silently become unreadable (every old turn a MasterKeyError), and a
    restored backup without its key file must be noticed, not papered over.
    Refuses a file that group or others may read, as ssh does a private key.
    """
    if not path.exists():
        if data_exists:
            raise MasterKeyError(
                f"{path} is missing but data sealed under it exists beside it: "
                "restore the key file (or set TURNLEDGER_MASTER_KEY); a new key "
                "would not open any of it"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(new_master_key() + "\n")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise MasterKeyError(
            f"{path} may be read by group or others (mode {mode:04o}): "
            f"run chmod 600 {path}"
        )
    return decode_master_key(path.read_text())
