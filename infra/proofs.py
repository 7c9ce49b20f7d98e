"""Inclusion and consistency proofs from the tree cache, checked before they are
given out (formats in docs/transparency.md)."""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

from turnledger.domain.errors import CheckpointError
from turnledger.domain.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from turnledger.domain.transparency import (
    leaf_input,
    read_leaf_input,
)
from turnledger.infra.checkpoint import Checkpoint, LogInconsistentError
from turnledger.infra.merkle_store import (
    follow_checked,
    open_leaf_store,
)
from turnledger.infra.raw_log import open_raw_log
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

INCLUSION_FORMAT = "turnledger-inclusion-proof/v1"
CONSISTENCY_FORMAT = "turnledger-consistency-proof/v1"


def _event_json(data: bytes) -> dict[str, Any]:
    facts = read_leaf_input(data)
    assert facts is not None

    def number(text: str) -> int | str:
        return int(text) if text.lstrip("-").isdigit() else text

    return {
        "originator_id": facts.conversation,
        "originator_version": number(facts.version),
        "notification_id": number(facts.notification_id),
        "leaf_input": data.hex(),
    }


def prove_event(
    ledger: Conversations | None,
    settings: Settings,
    conversation_id: UUID,
    version: int,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """An inclusion proof of one stored event in a checkpoint's tree."""
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        rows = [r for r in log.rows_of(conversation_id) if r.version == version]
        if not rows:
            raise CheckpointError(
                f"conversation {conversation_id} has no stored event at version "
                f"{version}"
            )
        row = rows[0]
        follow_checked(log, store)  # every row, up to the newest, is a leaf
        position = store.position_of(row.notification_id)
        if position is None:
            raise LogInconsistentError(
                f"the event (notification id {row.notification_id}) sits inside the "
                "log's range but no checkpoint covers it: it was inserted"
            )
        if position >= checkpoint.tree_size:
            raise CheckpointError(
                f"the event (notification id {row.notification_id}) is newer than "
                f"the checkpoint's {checkpoint.tree_size} events: take a new one"
            )
        data = leaf_input(row)
        path = inclusion_proof(position, checkpoint.tree_size, store.read_nodes)
    finally:
        log.close()
        if settings.persistence != "memory":
            store.close()
    leaf = leaf_hash(data)
    if not verify_inclusion(
        leaf, position, checkpoint.tree_size, path, checkpoint.root_hash
    ):
        raise LogInconsistentError(
            "the stored event or the tree cache no longer matches the checkpoint: "
            "run `turnledger audit --checkpoint` to locate the change"
        )
    return {
        "format": INCLUSION_FORMAT,
        "checkpoint": checkpoint.to_json(),
        "leaf_index": position,
        "event": {
            **_event_json(data),
            "topic": row.topic if isinstance(row.topic, str) else None,
            "state_sha256": hashlib.sha256(_state_bytes(row.state)).hexdigest(),
        },
        "leaf_hash": leaf.hex(),
        "audit_path": [h.hex() for h in path],
    }


def _state_bytes(state: Any) -> bytes:
    if isinstance(state, bytes | bytearray | memoryview):
        return bytes(state)
    return b""


def prove_consistency(
    ledger: Conversations | None,
    settings: Settings,
    old: Checkpoint,
    new: Checkpoint,
) -> dict[str, Any]:
    """A proof that `old`'s tree is a prefix of `new`'s."""
    if old.tree_size > new.tree_size:
        raise CheckpointError(
            f"the old checkpoint has {old.tree_size} events, more than the new "
            f"one's {new.tree_size}: give them in order"
        )
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        size = follow_checked(log, store).frontier.size
        if new.tree_size > size:
            raise CheckpointError(
                f"the new checkpoint has {new.tree_size} events, the log {size}"
            )
        proof = consistency_proof(old.tree_size, new.tree_size, store.read_nodes)
    finally:
        log.close()
        if settings.persistence != "memory":
            store.close()
    if not verify_consistency(
        old.tree_size, new.tree_size, proof, old.root_hash, new.root_hash
    ):
        raise LogInconsistentError(
            "the two checkpoints are not consistent with each other and this log: "
            "one of them, or the tree cache, commits to other events"
        )
    return {
        "format": CONSISTENCY_FORMAT,
        "old": old.to_json(),
        "new": new.to_json(),
        "proof": [h.hex() for h in proof],
    }
