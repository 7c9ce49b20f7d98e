"""A verifier that knows only the published format: cryptography and hashlib.

This file imports nothing from turnledger. It runs the `turnledger` command
in child processes (with every TURNLEDGER_* variable of this one), then
checks the checkpoints' signatures against the public key it derived itself,
an inclusion proof and a consistency proof, by docs/transparency.md alone.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def leaf_input(event: dict[str, Any]) -> bytes:
    return b"".join(
        (
            b"turnledger/leaf/v1\n",
            b"u" + uuid.UUID(event["originator_id"]).bytes,
            b"i" + event["originator_version"].to_bytes(8, "big", signed=True),
            b"i" + event["notification_id"].to_bytes(8, "big", signed=True),
            b"s" + hashlib.sha256(event["topic"].encode()).digest(),
            b"b" + bytes.fromhex(event["state_sha256"]),
        )
    )


def signature_ok(checkpoint: dict[str, Any], public_key: Any) -> bool:
    message = "".join(
        f"{line}\n"
        for line in (
            "turnledger-checkpoint/v1",
            checkpoint["origin"],
            str(checkpoint["tree_size"]),
            checkpoint["root_hash"],
            checkpoint["timestamp"],
        )
    ).encode()
    try:
        public_key.verify(base64.b64decode(checkpoint["signature"]), message)
    except Exception:  # noqa: BLE001
        return False
    return True


def inclusion_ok(
    leaf: bytes, index: int, size: int, path: list[bytes], root: bytes
) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def consistency_ok(
    first: int, second: int, proof: list[bytes], first_root: bytes, second_root: bytes
) -> bool:
    """RFC 9162 section 2.1.4.2."""
    if first == second:
        return not proof and first_root == second_root
    if first & (first - 1) == 0:
        proof = [first_root, *proof]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root


def turnledger(env: dict[str, str], *arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_checkpoints_and_proofs_verify_with_nothing_but_the_public_key(
    tmp_path: Path,
) -> None:
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    env = {
        **os.environ,  # every TURNLEDGER_* variable of this process, then ours
        "TURNLEDGER_PERSISTENCE": "sqlite",
        "TURNLEDGER_DATA_DIR": str(tmp_path / "data"),
        "TURNLEDGER_AUDIT_SIGNING_KEY": base64.b64encode(seed).decode(),
    }
    env.pop("TURNLEDGER_AUDIT_SIGNING_KEY_FILE", None)
    env.pop("TURNLEDGER_AUDIT_PUBLIC_KEY", None)
    out = tmp_path / "checkpoints"
    turnledger(env, "demo", "--configured-store")
    turnledger(env, "checkpoint", "--out", str(out))
    turnledger(env, "demo", "--configured-store")
    turnledger(env, "demo", "--configured-store")
    turnledger(env, "checkpoint", "--out", str(out))
    old_path, new_path = sorted(out.glob("checkpoint-*.json"))
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    public = key.public_key()
    assert signature_ok(old, public) and signature_ok(new, public)
    assert 0 < old["tree_size"] < new["tree_size"]
    forged = {**new, "tree_size": new["tree_size"] - 1}
    assert not signature_ok(forged, public)

    with sqlite3.connect(tmp_path / "data" / "events.sqlite3") as connection:
        rows = connection.execute(
            "SELECT originator_id, originator_version FROM stored_events ORDER BY rowid"
        ).fetchall()
    for originator, version in (rows[0], rows[len(rows) // 2], rows[-1]):
        conversation = str(uuid.UUID(hex=originator))
        proof = json.loads(
            turnledger(
                env,
                "prove",
                "event",
                conversation,
                str(version),
                "--checkpoint",
                str(new_path),
            )
        )
        event = proof["event"]
        assert event["originator_id"] == conversation
        assert event["originator_version"] == version
        assert proof["checkpoint"] == new
        leaf = hashlib.sha256(b"\x00" + leaf_input(event)).digest()
        path = [bytes.fromhex(h) for h in proof["audit_path"]]
        root = bytes.fromhex(new["root_hash"])
        index, size = proof["leaf_index"], new["tree_size"]
        assert inclusion_ok(leaf, index, size, path, root)
        assert not inclusion_ok(leaf, index ^ 1, size, path, root)
        other = hashlib.sha256(b"\x00" + leaf_input({**event, "topic": "x"})).digest()
        assert not inclusion_ok(other, index, size, path, root)

    consistency = json.loads(
        turnledger(env, "prove", "consistency", str(old_path), str(new_path))
    )
    proof_hashes = [bytes.fromhex(h) for h in consistency["proof"]]
    old_root, new_root = (
        bytes.fromhex(old["root_hash"]),
        bytes.fromhex(new["root_hash"]),
    )
    assert consistency_ok(
        old["tree_size"], new["tree_size"], proof_hashes, old_root, new_root
    )
    assert not consistency_ok(
        old["tree_size"], new["tree_size"], proof_hashes, new_root, new_root
    )
