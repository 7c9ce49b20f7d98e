"""The leaf files beside the checkpoints (infra/checkpoint.py): `leaves.bin`,
every leaf hash in log order, and `leaf-inputs.bin`, every leaf input, with
which an audit names every event that differs even when the tree cache in the
database was altered as well; and the atomic write the checkpoints use."""

from __future__ import annotations

import os
from pathlib import Path

from turnledger.domain.merkle import (
    leaf_hash,
)
from turnledger.infra.merkle_store import (
    Followed,
    LeafStore,
)

LEAVES_FILE = "leaves.bin"
LEAF_INPUTS_FILE = "leaf-inputs.bin"
LEAF_INPUT_RECORD = 185
"""A leaf input's record in leaf-inputs.bin: its length in one byte, then the
input padded with zeros (the longest leaf input is 184 bytes); length 0: not
known (a directory older than the file, whose cache no longer held it)."""


def read_leaves_file(directory: Path, count: int | None = None) -> list[bytes]:
    path = directory / LEAVES_FILE
    if not path.exists():
        return []
    with path.open("rb") as handle:
        data = handle.read() if count is None else handle.read(count * 32)
    return [data[at : at + 32] for at in range(0, len(data) - len(data) % 32, 32)]


def read_leaf_inputs_file(directory: Path, count: int) -> list[bytes]:
    """The first `count` leaf inputs recorded in the directory (b"": unknown)."""
    path = directory / LEAF_INPUTS_FILE
    if not path.exists():
        return []
    with path.open("rb") as handle:
        data = handle.read(count * LEAF_INPUT_RECORD)
    return [
        data[at + 1 : at + 1 + data[at]]
        for at in range(0, len(data) - len(data) % LEAF_INPUT_RECORD, LEAF_INPUT_RECORD)
    ]


def _records(inputs: list[bytes]) -> bytes:
    return b"".join(
        bytes((len(data),)) + data.ljust(LEAF_INPUT_RECORD - 1, b"\0")
        for data in inputs
    )


def append_leaves_file(directory: Path, store: LeafStore, followed: Followed) -> None:
    """Bring leaves.bin and leaf-inputs.bin up to the tree's size: the leaves
    just followed, or (a new directory, a crash between two writes) from the
    tree cache, whose inputs are only recorded where they hash to the leaf."""
    size = followed.frontier.size
    leaves = directory / LEAVES_FILE
    have = leaves.stat().st_size // 32 if leaves.exists() else 0
    with leaves.open("ab") as handle:
        handle.truncate(have * 32)  # a torn record from a crash
        handle.seek(have * 32)
        if have >= followed.first_new:
            handle.write(b"".join(followed.new_leaves[have - followed.first_new :]))
            have = size
        step = 10_000
        for start in range(have, size, step):
            inputs = store.leaf_inputs(start, min(size, start + step))
            handle.write(b"".join(leaf_hash(data) for data in inputs))
        handle.flush()
        os.fsync(handle.fileno())
    records = directory / LEAF_INPUTS_FILE
    have = min(
        size, records.stat().st_size // LEAF_INPUT_RECORD if records.exists() else 0
    )
    with records.open("ab") as handle:
        handle.truncate(have * LEAF_INPUT_RECORD)
        handle.seek(have * LEAF_INPUT_RECORD)
        if have >= followed.first_new:
            handle.write(_records(followed.new_inputs[have - followed.first_new :]))
            have = size
        for start in range(have, size, step):
            signed = read_leaves_file(directory, start + step)[start:]
            inputs = store.leaf_inputs(start, min(size, start + step))
            handle.write(
                _records(
                    [
                        data if leaf_hash(data) == leaf else b""
                        for data, leaf in zip(inputs, signed, strict=False)
                    ]
                )
            )
        handle.flush()
        os.fsync(handle.fileno())


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
