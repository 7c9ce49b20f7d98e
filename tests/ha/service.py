"""The real `turnledger serve` on a Patroni cluster, with devices to drive it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.e2e.conftest import Server, start_server, stop_server
from tests.ha.patroni import HOSTS, PatroniCluster
from tests.ha.workload import LongPoller, Workload, Writer
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key


def cluster_settings(cluster: PatroniCluster, schema: str, **more: object) -> Settings:
    """The service on every member: writes to whichever accepts them, reads on
    a standby when it has replayed far enough (docs/ha.md)."""
    hosts = ",".join(HOSTS)
    return Settings(
        _env_file=None,
        persistence="postgres",
        postgres_host=hosts,
        postgres_port=cluster.port,
        postgres_target_session_attrs="read-write",
        postgres_connect_timeout=2,
        postgres_schema=schema,
        postgres_replica_host=hosts,
        postgres_replica_port=cluster.port,
        master_key=new_master_key(),
        **more,  # type: ignore[arg-type]
    )


@contextmanager
def serving(settings: Settings, log: Path) -> Iterator[Server]:
    server = start_server(settings, log)
    try:
        yield server
    finally:
        stop_server(server)


def devices_workload(
    settings: Settings, server: Server, *, users: int = 2, writers_per_user: int = 2
) -> Workload:
    """`writers_per_user` writing devices and one long-polling device per user;
    the first writer checks read-your-writes after each write."""
    registry = open_device_registry(settings)
    writers: list[Writer] = []
    pollers: list[LongPoller] = []
    try:
        for u in range(1, users + 1):
            user = f"u{u}"
            for d in range(1, writers_per_user + 1):
                token = registry.add(user, f"writer{d}").token
                created = httpx.post(
                    f"{server.base_url}/v1/conversations",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=30,
                )
                created.raise_for_status()
                writers.append(
                    Writer(
                        server.base_url,
                        token,
                        f"{user}-d{d}",
                        created.json()["conversation_id"],
                        check_reads=not writers,
                    )
                )
            pollers.append(
                LongPoller(server.base_url, registry.add(user, "reader").token, user)
            )
    finally:
        registry.close()
    return Workload(writers, pollers)
