"""The Patroni cluster the HA tests share (started once; about 20 s)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.ha.patroni import PatroniCluster, available, patroni_cluster


@pytest.fixture(scope="session")
def patroni() -> Iterator[PatroniCluster]:
    if not available():
        message = "patroni and etcd are not installed (scripts/install-patroni)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with patroni_cluster() as cluster:
        yield cluster


@pytest.fixture
def healthy(patroni: PatroniCluster) -> PatroniCluster:
    """The cluster with three members running, as each test expects it."""
    patroni.start()
    patroni.wait_healthy()
    return patroni
