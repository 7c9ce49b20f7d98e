"""Where the log departs from a signed checkpoint: the findings that name it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from uuid import UUID

from turnledger.domain.findings import (
    CHECKPOINT_MISMATCH,
    LOG_CHANGED,
    LOG_INSERTED,
    LOG_REMOVED,
    LOG_TRUNCATED,
    Finding,
)
from turnledger.domain.merkle import (
    leaf_hash,
    root_of_leaves,
)
from turnledger.domain.transparency import (
    LeafFacts,
    RawLog,
    differences,
    first_difference,
    leaf_input,
    read_leaf_input,
)
from turnledger.infra.checkpoint import (
    LEAVES_FILE,
    Checkpoint,
    read_leaf_inputs_file,
    read_leaves_file,
)
from turnledger.infra.merkle_store import (
    LeafStore,
)

MAX_LOCATED = 50  # findings listed one by one; the rest are counted


def _conversation(facts: LeafFacts | None) -> UUID | None:
    if facts is None:
        return None
    try:
        return UUID(facts.conversation)
    except ValueError:
        return None


def _version(facts: LeafFacts | None) -> int | None:
    try:
        return None if facts is None else int(facts.version)
    except ValueError:
        return None


def _finding(kind: str, facts: LeafFacts | None, detail: str) -> Finding:
    notification_id: int | None = None
    if facts is not None:
        try:
            notification_id = int(facts.notification_id)
        except ValueError:
            notification_id = None
    return Finding(kind, _conversation(facts), _version(facts), detail, notification_id)


def _root_of(leaves: Sequence[bytes], size: int) -> bytes:
    return root_of_leaves(leaves[:size])


def _reference(
    checkpoint: Checkpoint, directory: Path | None, store: LeafStore | None
) -> tuple[list[bytes], dict[int, LeafFacts], str] | None:
    """The checkpoint's own leaves, from a copy whose root is the signed root.

    leaves.bin (outside the database) first, then the tree cache. A leaf
    hash binds the row's identity, so a leaf input that hashes to an
    authenticated leaf names that leaf's event: the directory's
    leaf-inputs.bin first, then the cache's, wherever the cache keeps it.
    """
    size = checkpoint.tree_size
    inputs: list[bytes] = []
    if store is not None:
        try:
            inputs = store.leaf_inputs(0, 2**62)
        except Exception:  # noqa: BLE001 - an unreadable cache is no reference
            inputs = []
    by_hash = {leaf_hash(data): data for data in inputs}
    candidates: list[tuple[list[bytes], str]] = []
    if directory is not None:
        candidates.append((read_leaves_file(directory, size), LEAVES_FILE))
    candidates.append(([leaf_hash(data) for data in inputs[:size]], "the tree cache"))
    recorded = [] if directory is None else read_leaf_inputs_file(directory, size)
    for leaves, source in candidates:
        if len(leaves) == size and _root_of(leaves, size) == checkpoint.root_hash:
            facts: dict[int, LeafFacts] = {}
            for position, leaf in enumerate(leaves):
                data = by_hash.get(leaf)
                if position < len(recorded) and leaf_hash(recorded[position]) == leaf:
                    data = recorded[position]
                fact = None if data is None else read_leaf_input(data)
                if fact is not None:
                    facts[position] = fact
            return leaves, facts, source
    return None


def compare_with_checkpoint(
    leaves: Sequence[bytes],
    notification_ids: Sequence[int],
    checkpoint: Checkpoint,
    *,
    log: RawLog,
    store: LeafStore | None,
    directory: Path | None,
) -> list[Finding]:
    """Findings if the log (its leaves, in order) does not extend the checkpoint."""
    size = checkpoint.tree_size
    if len(leaves) >= size and _root_of(leaves, size) == checkpoint.root_hash:
        return []
    findings = [
        Finding(
            CHECKPOINT_MISMATCH,
            None,
            None,
            f"the log's first {min(size, len(leaves))} of {len(leaves)} events do not "
            f"hash to the root signed at {checkpoint.timestamp} for {size} events: "
            "events it covers were changed, removed, inserted or renumbered",
        )
    ]
    reference = _reference(checkpoint, directory, store)
    if reference is None:
        findings.append(
            Finding(
                CHECKPOINT_MISMATCH,
                None,
                None,
                f"no copy of the checkpoint's leaves matches its root ({LEAVES_FILE} "
                "missing or altered, and the tree cache altered): the change cannot "
                "be located to an event",
            )
        )
        return findings

    def current(position: int) -> LeafFacts | None:
        rows = log.rows(notification_ids[position] - 1, 1)
        return read_leaf_input(leaf_input(rows[0])) if rows else None

    return findings + _locate(leaves, notification_ids, size, reference, current)


# The facts of the row at a position of the log as it is now (None: unreadable).
CurrentFacts = Callable[[int], LeafFacts | None]


def _locate(
    leaves: Sequence[bytes],
    notification_ids: Sequence[int],
    size: int,
    reference: tuple[list[bytes], dict[int, LeafFacts], str],
    current: CurrentFacts,
) -> list[Finding]:
    """Where the log departs from the checkpoint's own leaves (`reference`)."""
    expected, facts, source = reference
    position = first_difference(leaves[:size], expected)
    original = facts.get(position)
    if position >= len(leaves):
        was = original.describe() if original else f"position {position}"
        return [
            _finding(
                LOG_TRUNCATED,
                original,
                f"the log ends after {len(leaves)} events, the checkpoint covers "
                f"{size}: the newest {size - len(leaves)} were removed, from {was} on",
            )
        ]
    now = current(position)
    if original is None or now is None:
        return [
            _finding(
                LOG_CHANGED,
                now,
                f"the first event that differs from the checkpoint is at log position "
                f"{position}: {now.describe() if now else 'unreadable'} is not the "
                f"event the checkpoint recorded there ({source} names no event)",
            )
        ]
    found = _classify(leaves, notification_ids, size, expected, facts, current)
    if len(facts) < size:
        found.append(
            Finding(
                CHECKPOINT_MISMATCH,
                None,
                None,
                f"{size - len(facts)} of the checkpoint's events cannot be named (the "
                "tree cache no longer holds their leaf inputs): differences among "
                "them are counted in the root, not listed",
            )
        )
    return found


def _classify(
    leaves: Sequence[bytes],
    notification_ids: Sequence[int],
    size: int,
    expected: Sequence[bytes],
    facts: dict[int, LeafFacts],
    current: CurrentFacts,
) -> list[Finding]:
    """Every difference, by notification id: changed, removed, inserted."""
    before: dict[int, tuple[int, bytes]] = {}
    for position in range(size):
        fact = facts.get(position)
        if fact is not None:
            before[int(fact.notification_id)] = (position, expected[position])
    last_covered = max(before, default=0)
    now: dict[int, tuple[int, bytes]] = {
        notification_id: (position, leaves[position])
        for position, notification_id in enumerate(notification_ids)
        if notification_id <= last_covered
    }
    found: list[Finding] = []
    newest_now = max(notification_ids, default=0)
    truncated = sorted(n for n in before if n not in now and n > newest_now)
    for notification_id in sorted(before.keys() | now.keys()):
        if notification_id in truncated:
            continue
        finding = _difference(
            notification_id,
            before.get(notification_id),
            now.get(notification_id),
            facts,
            current,
        )
        if finding is not None:
            found.append(finding)
    if truncated:
        first = facts[before[truncated[0]][0]]
        found.append(
            _finding(
                LOG_TRUNCATED,
                first,
                f"the {len(truncated)} newest events the checkpoint covers are gone, "
                f"from {first.describe()} on",
            )
        )
    if len(found) > MAX_LOCATED:
        rest = len(found) - MAX_LOCATED
        found = found[:MAX_LOCATED] + [
            Finding(CHECKPOINT_MISMATCH, None, None, f"and {rest} more differences")
        ]
    return found


def _difference(
    notification_id: int,
    old: tuple[int, bytes] | None,
    new: tuple[int, bytes] | None,
    facts: dict[int, LeafFacts],
    current: CurrentFacts,
) -> Finding | None:
    """How the row at `notification_id` differs: `old` its (position, leaf) at
    the checkpoint, `new` now; None where it is the same."""
    if old is not None and new is not None:
        if old[1] == new[1]:
            return None
        was, is_now = facts[old[0]], current(new[0])
        what = differences(was, is_now) if is_now else "unreadable now"
        return _finding(
            LOG_CHANGED,
            is_now or was,
            f"notification id {notification_id} held {was.describe()} at "
            f"the checkpoint; changed: {what}",
        )
    if old is not None:
        was = facts[old[0]]
        return _finding(
            LOG_REMOVED,
            was,
            f"{was.describe()} was at log position {old[0]} at the "
            "checkpoint and is gone",
        )
    if new is not None:
        is_now = current(new[0])
        return _finding(
            LOG_INSERTED,
            is_now,
            f"{is_now.describe() if is_now else 'an unreadable row'} sits "
            "inside the checkpoint's range but the checkpoint never covered it",
        )
    return None
