"""The transparency log on PostgreSQL: audit rate, checkpoint cost, proof growth.

    .venv/bin/python bench/checkpoint_bench.py --conversations 1000 --events 100

Builds conversations x events sealed events in a fresh schema (dropped
afterwards), inserted through the library's recorder in batches of 1,000:
each event's state is ~800 bytes of JSON sealed into its conversation's hash
chain (the first release's seal), or with `--envelope` ~800 bytes in the
binary envelope the ledger writes now, so the chain pass verifies them as it
would real turns. Then, in the same run:

- audit rate: a raw SELECT of the same rows (notification id, originator id,
  version, topic, state; keyset pages of 5,000; psycopg's default text
  results, and binary results as the audit itself reads them) against the
  audit of every
  row's chain plus the Merkle comparison with a signed checkpoint
  (`audit_store(..., checkpoint=...)`, receipts on), alternating, `--repeat`
  rounds; the paired ratio audit/raw (target >= 0.5), and this process's
  CPU per event for each (the client's work, which other load on a shared
  machine changes less than it changes throughput);
- checkpoint cost: `--rounds` times, 1,000 new events are inserted, then
  `write_checkpoint` is timed (target <= 50 ms), beside a checkpoint that
  rebuilds the tree from scratch;
- proofs: inclusion and consistency proof size and time at tree sizes from
  1,000 to the whole log (expected to grow as log n).
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from eventsourcing.persistence import StoredEvent  # noqa: E402
from psycopg import sql  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from turnledger.domain.chain import (  # noqa: E402
    GENESIS,
    encode_envelope,
    seal_state,
)
from turnledger.domain.merkle import (  # noqa: E402
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from turnledger.infra.checkpoint import (  # noqa: E402
    CheckpointWriter,
    write_checkpoint,
)
from turnledger.infra.merkle_store import open_leaf_store  # noqa: E402
from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.service_layer.application import Conversations  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.signing import new_signing_key  # noqa: E402
from turnledger.infra.transparency_audit import audit_store  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402

TOPIC = "bench:Event"
BATCH = 1000
PAGE = 5000


class Writer:
    """Appends sealed events to conversations, keeping each chain's head."""

    def __init__(self, ledger: Conversations, *, envelope: bool = False) -> None:
        self.ledger = ledger
        self.envelope = envelope
        self.heads: dict[uuid.UUID, tuple[int, str]] = {}

    def event(self, conversation_id: uuid.UUID) -> StoredEvent:
        version, previous = self.heads.get(conversation_id, (0, GENESIS))
        if self.envelope:  # as the ledger writes events: raw sealed bytes
            sealed, digest = encode_envelope(
                originator_id=conversation_id,
                version=version + 1,
                topic=TOPIC,
                previous_digest=previous,
                timestamp=datetime.now(UTC),
                blobs={"sealed_question": os.urandom(700)},
                json=b'{"n":%d}' % (version + 1),
            )
            self.heads[conversation_id] = (version + 1, digest)
            return StoredEvent(conversation_id, version + 1, TOPIC, sealed)
        payload = base64.b64encode(os.urandom(576)).decode()
        body = f'{{"n":{version + 1},"payload":"{payload}"}}'.encode()
        sealed, digest = seal_state(
            originator_id=conversation_id,
            version=version + 1,
            topic=TOPIC,
            state=body,
            previous_digest=previous,
        )
        self.heads[conversation_id] = (version + 1, digest)
        return StoredEvent(conversation_id, version + 1, TOPIC, sealed)

    def insert(self, events: list[StoredEvent]) -> None:
        for start in range(0, len(events), BATCH):
            self.ledger.recorder.insert_events(events[start : start + BATCH])


def build(writer: Writer, conversations: int, events: int) -> None:
    ids = [uuid.uuid4() for _ in range(conversations)]
    batch: list[StoredEvent] = []
    for _ in range(events):
        for conversation_id in ids:
            batch.append(writer.event(conversation_id))
            if len(batch) == BATCH:
                writer.insert(batch)
                batch = []
    writer.insert(batch)


def raw_select(settings: Settings, *, binary: bool = False) -> int:
    table = sql.Identifier(settings.postgres_schema, "conversations_events")
    query = sql.SQL(
        "SELECT notification_id, originator_id, originator_version, topic, state "
        "FROM {} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
    ).format(table)
    count, after = 0, 0
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        while True:
            with connection.cursor(binary=binary) as cursor:
                rows = cursor.execute(query, (after, PAGE)).fetchall()
            if not rows:
                return count
            count += len(rows)
            after = rows[-1][0]


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = action()
    return time.perf_counter() - began, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--envelope",
        action="store_true",
        help="store events in the binary envelope the ledger writes since the "
        "second release (default: the first release's JSON seal)",
    )
    arguments = parser.parse_args()

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
        audit_signing_key=SecretStr(new_signing_key()),
    )
    ledger = open_conversations(settings)
    out = Path(tempfile.mkdtemp(prefix="checkpoints-"))
    try:
        writer = Writer(ledger, envelope=arguments.envelope)
        seconds, _ = timed(
            lambda: build(writer, arguments.conversations, arguments.events)
        )
        total = ledger.recorder.max_notification_id() or 0
        form = "envelope" if arguments.envelope else "JSON seal"
        print(
            f"store: {total:,} sealed events ({form}) on PostgreSQL, "
            f"built in {seconds:.1f} s"
        )
        seconds, checkpoint = timed(lambda: write_checkpoint(ledger, settings, out))
        print(
            f"first checkpoint (tree built from nothing): {seconds * 1000:,.0f} ms "
            f"for {checkpoint.tree_size:,} events"
        )

        def audit() -> int:
            # The events are written straight through the recorder (no read
            # side): what is measured is the chain and the Merkle verification.
            report = audit_store(
                ledger,
                settings,
                checkpoint=checkpoint,
                checkpoint_location=out,
                read_side=False,
            )
            assert report.ok, report.failures[:3]
            return report.events_verified

        rates: dict[str, list[float]] = {"raw": [], "binary": [], "audit": []}
        # This process's CPU per event (all its threads; not the server's):
        # what the other work on a shared machine does not change.
        cpu: dict[str, list[float]] = {"raw": [], "binary": [], "audit": []}
        for _ in range(arguments.repeat):
            for name, action in (
                ("raw", lambda: raw_select(settings)),
                ("binary", lambda: raw_select(settings, binary=True)),
                ("audit", audit),
            ):
                began_cpu = time.process_time()
                seconds, count = timed(action)
                cpu[name].append((time.process_time() - began_cpu) / count)
                assert count == total, (name, count, total)
                rates[name].append(count / seconds)
        raw = statistics.median(rates["raw"])
        rate = statistics.median(rates["audit"])
        paired = statistics.median(
            a / b for a, b in zip(rates["audit"], rates["raw"], strict=True)
        )
        print(f"{'measure':<52}{'events/s':>10}{'ratio':>7}{'paired':>8}")
        print(f"{'raw SELECT of the same rows (pages of 5,000)':<52}{raw:>10,.0f}")
        binary = statistics.median(rates["binary"])
        paired_binary = statistics.median(
            a / b for a, b in zip(rates["audit"], rates["binary"], strict=True)
        )
        label = "the same SELECT, binary results"
        binary_paired = statistics.median(
            b / a for a, b in zip(rates["raw"], rates["binary"], strict=True)
        )
        print(f"{label:<52}{binary:>10,.0f}{binary / raw:>7.2f}{binary_paired:>8.2f}")
        label = "audit: chains + Merkle root vs signed checkpoint"
        print(f"{label:<52}{rate:>10,.0f}{rate / raw:>7.2f}{paired:>8.2f}")
        print(
            f"audit / binary SELECT: {rate / binary:.2f} (paired {paired_binary:.2f}); "
            "the audit reads binary results"
        )
        print(f"medians of {arguments.repeat} rounds; target ratio >= 0.50")
        print(
            "client CPU per event (this process, median): "
            + ", ".join(
                f"{name} {statistics.median(values) * 1e6:.2f} us"
                for name, values in cpu.items()
            )
        )

        # The service keeps one writer (and its connections); the command opens
        # one per run: both are timed, each after 1,000 new events.
        conversation_ids = list(writer.heads)

        def new_events() -> None:
            writer.insert(
                [writer.event(random.choice(conversation_ids)) for _ in range(1000)]
            )

        kept: list[float] = []
        one_shot: list[float] = []
        checkpoints = CheckpointWriter(ledger, settings, out)
        try:
            for _ in range(arguments.rounds):
                new_events()
                seconds, checkpoint = timed(checkpoints.write)
                kept.append(seconds)
                new_events()
                seconds, checkpoint = timed(
                    lambda: write_checkpoint(ledger, settings, out)
                )
                one_shot.append(seconds)
        finally:
            checkpoints.close()
        for label, costs in (
            ("a kept CheckpointWriter (serve)", kept),
            ("write_checkpoint (the command: new connections)", one_shot),
        ):
            print(
                f"checkpoint after 1,000 new events, {label}: median "
                f"{statistics.median(costs) * 1000:.1f} ms, max "
                f"{max(costs) * 1000:.1f} ms over {arguments.rounds} rounds"
            )
        print(f"(tree of {checkpoint.tree_size:,} at the end; target <= 50 ms)")

        store = open_leaf_store(settings, ledger)
        try:
            size = store.size()
            print(
                f"{'tree size':>10}{'incl. hashes':>14}{'incl. ms':>10}"
                f"{'cons. hashes':>14}{'cons. ms':>10}"
            )
            n = 1000
            while True:
                n = min(n, size)
                tree_root = root(n, store.read_nodes)
                indices = [random.randrange(n) for _ in range(20)]
                began = time.perf_counter()
                proofs = [inclusion_proof(i, n, store.read_nodes) for i in indices]
                inclusion_ms = (time.perf_counter() - began) * 1000 / len(indices)
                leaves = store.leaf_inputs(indices[0], indices[0] + 1)
                assert verify_inclusion(
                    leaf_hash(leaves[0]), indices[0], n, proofs[0], tree_root
                )
                olds = [random.randrange(1, n) for _ in range(20)]
                began = time.perf_counter()
                consistency = [consistency_proof(o, n, store.read_nodes) for o in olds]
                consistency_ms = (time.perf_counter() - began) * 1000 / len(olds)
                assert verify_consistency(
                    olds[0],
                    n,
                    consistency[0],
                    root(olds[0], store.read_nodes),
                    tree_root,
                )
                print(
                    f"{n:>10,}{statistics.mean(map(len, proofs)):>14.1f}"
                    f"{inclusion_ms:>10.2f}"
                    f"{statistics.mean(map(len, consistency)):>14.1f}"
                    f"{consistency_ms:>10.2f}"
                )
                if n == size:
                    break
                n *= 10
        finally:
            store.close()
    finally:
        ledger.close()
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
