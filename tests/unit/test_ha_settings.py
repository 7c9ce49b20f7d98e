"""Several PostgreSQL hosts (a Patroni cluster's members): writes must go to
the one that takes them, so the settings refuse a list without
`target_session_attrs=read-write` (or `primary`)."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from turnledger.infra.http.standbys import standby_settings
from turnledger.infra.persistence import eventsourcing_env
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key
from turnledger.infra.wal_members import members

HOSTS = "10.0.0.1,10.0.0.2,10.0.0.3"


def settings(**values: object) -> Settings:
    return Settings(
        _env_file=None,
        persistence="postgres",
        master_key=new_master_key(),
        **values,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("attrs", ["any", "standby", "prefer-standby"])
def test_several_hosts_without_read_write_are_refused(attrs: str) -> None:
    with pytest.raises(ValidationError, match="read-write"):
        settings(postgres_host=HOSTS, postgres_target_session_attrs=attrs)


@pytest.mark.parametrize("attrs", ["read-write", "primary"])
def test_several_hosts_reach_every_connection_of_the_service(attrs: str) -> None:
    chosen = settings(postgres_host=HOSTS, postgres_target_session_attrs=attrs)
    conninfo = conninfo_to_dict(chosen.postgres_conninfo())
    assert conninfo["host"] == HOSTS
    assert conninfo["target_session_attrs"] == attrs
    env = eventsourcing_env(chosen)
    assert env["POSTGRES_HOST"] == HOSTS
    assert env["POSTGRES_TARGET_SESSION_ATTRS"] == attrs


def test_one_host_keeps_libpq_default_and_the_replica_its_own() -> None:
    chosen = settings(
        postgres_replica_host=HOSTS,
        postgres_replica_target_session_attrs="prefer-standby",
    )
    assert "target_session_attrs" not in conninfo_to_dict(chosen.postgres_conninfo())
    replica = chosen.replica_settings()
    assert replica is not None
    assert (
        conninfo_to_dict(replica.postgres_conninfo())["target_session_attrs"]
        == "prefer-standby"
    )


def test_a_bad_session_attribute_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="target_session_attrs"):
        settings(postgres_target_session_attrs="read_write")


def test_the_purge_asks_every_host_of_a_list_and_none_of_one_host() -> None:
    assert members("host=db port=5432") == []
    assert members(f"host={HOSTS} port=5433 target_session_attrs=read-write") == [
        ("10.0.0.1", "5433"),
        ("10.0.0.2", "5433"),
        ("10.0.0.3", "5433"),
    ]
    assert members("host=a,b port=1,2") == [("a", "1"), ("b", "2")]


def test_each_replica_host_is_a_standby_of_its_own() -> None:
    """One pool per host (infra/http/standbys.py): a standby's check and the
    read relying on it reach the same server."""
    chosen = settings(
        postgres_replica_host=HOSTS,
        postgres_replica_port=6432,
        postgres_replica_user="reader",
    )
    standbys = standby_settings(chosen)
    assert [s.postgres_host for s in standbys] == HOSTS.split(",")
    for standby in standbys:
        parameters = conninfo_to_dict(standby.postgres_conninfo())
        assert "," not in parameters["host"]
        assert (parameters["port"], parameters["user"]) == ("6432", "reader")
        assert standby_settings(standby) == []  # a standby of the standby: none
    one = standby_settings(settings(postgres_replica_host="db2"))
    assert [s.postgres_host for s in one] == ["db2"]
    assert standby_settings(settings()) == []
