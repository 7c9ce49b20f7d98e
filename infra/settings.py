"""Configuration: one typed object, read from TURNLEDGER_* variables once."""

from __future__ import annotations

import base64
import binascii
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.text import DEFAULT_MAX_TURN_BYTES
from turnledger.projections.formats import WireFormatName
from turnledger.projections.policy import (
    DEFAULT_MAX_BYTES,
    WindowPolicy,
    check_fold_gap,
)

ENV_PREFIX = "TURNLEDGER_"
Port = Annotated[int, Field(ge=1, le=65_535)]
SessionAttrs = Literal["any", "read-write", "primary", "standby", "prefer-standby"]
"""libpq's target_session_attrs."""


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "turnledger"


class Settings(BaseSettings):
    """Every setting, with its TURNLEDGER_ variable (see the README's table)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", frozen=True
    )

    persistence: Literal["memory", "sqlite", "postgres"] = "sqlite"
    data_dir: Path = Field(default_factory=default_data_dir)

    postgres_host: str = "127.0.0.1"
    postgres_port: Port = 5432
    postgres_dbname: str = "postgres"
    postgres_user: str = "postgres"
    postgres_password: SecretStr = SecretStr("")
    postgres_schema: str = Field(
        default="turnledger", pattern=r"^[a-z_][a-z0-9_]{0,62}$"
    )
    # With several hosts in postgres_host ("h1,h2,h3": the members of a
    # Patroni cluster, docs/ha.md), "read-write" or "primary": every
    # connection goes to whichever member accepts writes now.
    postgres_target_session_attrs: SessionAttrs = "any"
    postgres_pool_size: PositiveInt = 5
    postgres_connect_timeout: PositiveInt = 5
    # lock_timeout (ms) of each connection: replica_settings sets it, not the primary.
    postgres_lock_timeout_ms: NonNegativeInt = 0
    # Write transactions kept going at once: above one, the next batch of
    # writes is prepared and sent while the last one waits for its commit
    # (never two batches of one conversation; docs/read-side.md).
    postgres_batches_in_flight: int = Field(default=1, ge=1, le=4)

    # A streaming replica of that server, for reads (docs/scaling.md). Unset
    # host: no replica. The schema and master key are the primary's.
    postgres_replica_host: str | None = None
    postgres_replica_port: Port = 5432
    postgres_replica_dbname: str = "postgres"
    postgres_replica_user: str = "postgres"
    postgres_replica_password: SecretStr = SecretStr("")
    postgres_replica_pool_size: PositiveInt = 5
    # libpq's target_session_attrs for each replica host's connections.
    postgres_replica_target_session_attrs: SessionAttrs = "any"
    # How long a read that must see a write waits for the replica to replay it
    # before it is served by the primary instead.
    postgres_replica_max_wait_seconds: NonNegativeFloat = 0.05
    # What a replica read sees at least. "session": the client's own writes
    # and reads (the TurnLedger-Position header, the sync cursor) and every
    # commit this process has heard of. "strict": every commit made before the
    # read began, at the cost of one position query to the primary per read.
    postgres_replica_reads: Literal["session", "strict"] = "session"
    # A replica read's lock wait before the primary serves it (docs/sync.md).
    postgres_replica_lock_timeout_ms: PositiveInt = 250

    # Base64 of 32 random bytes. Wraps every per-turn data key. When unset, the
    # SQLite store keeps one in data_dir/master.key (mode 0600) and the memory
    # store makes a throwaway one; PostgreSQL requires it to be set.
    master_key: SecretStr | None = None
    master_key_file: Path | None = None
    # Where the deletion record lives (docs/deletion.md, "Restores"): outside
    # every backup of the store. Unset: beside master_key_file when that is
    # set, else $XDG_STATE_HOME/turnledger (~/.local/state/turnledger).
    deletion_record_dir: Path | None = None

    @field_validator("master_key")
    @classmethod
    def _master_key_is_32_bytes(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked here so that the message names the variable; the secret itself
        # is never echoed.
        if value is None:
            return None
        encoded = value.get_secret_value().strip()
        if not encoded:
            raise ValueError("is empty: unset it, or give base64 of 32 random bytes")
        try:
            size = len(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("is not base64 (expected base64 of 32 bytes)") from None
        if size != 32:
            raise ValueError(f"must be base64 of 32 bytes, got {size} bytes")
        return value

    max_turn_bytes: PositiveInt = DEFAULT_MAX_TURN_BYTES

    # The request window (projections/policy.py documents each limit).
    window_format: WireFormatName = "openai-chat"
    window_max_bytes: PositiveInt = DEFAULT_MAX_BYTES
    window_max_tokens: PositiveInt = 4_000
    window_reserved_output_tokens: NonNegativeInt = 1_000
    window_context_tokens: PositiveInt | None = None
    window_max_messages: PositiveInt = 25
    window_max_pairs: PositiveInt | None = None
    window_floor_messages: NonNegativeInt = 10
    window_max_message_tokens: PositiveInt = 1_000
    window_fold_max_tokens: PositiveInt = 2_000
    window_tokenizer: Literal["char4", "o200k_base", "cl100k_base"] = "char4"
    fold_threshold_tokens: PositiveInt = 2_000

    @model_validator(mode="after")
    def _window_covers_the_fold_gap(self) -> Self:
        # Refuse to start rather than silently lose context (seed 002).
        try:
            check_fold_gap(self.window_max_tokens, self.fold_threshold_tokens)
        except ValueError as error:
            raise ValueError(
                f"TURNLEDGER_WINDOW_MAX_TOKENS / TURNLEDGER_FOLD_THRESHOLD_TOKENS: "
                f"{error}"
            ) from None
        try:
            self.window_policy()  # every other rule of the policy, checked now too
        except ValidationError as error:
            raise ValueError(_policy_problems(error)) from None
        return self

    def window_policy(self) -> WindowPolicy:
        return WindowPolicy(
            wire_format=self.window_format,
            max_bytes=self.window_max_bytes,
            max_tokens=self.window_max_tokens,
            reserved_output_tokens=self.window_reserved_output_tokens,
            context_tokens=self.window_context_tokens,
            max_messages=self.window_max_messages,
            max_pairs=self.window_max_pairs,
            floor_messages=self.window_floor_messages,
            max_message_tokens=self.window_max_message_tokens,
            fold_max_tokens=self.window_fold_max_tokens,
            fold_threshold_tokens=self.fold_threshold_tokens,
        )

    # HTTP service (`turnledger serve`). The body limit leaves room for a turn at
    # max_turn_bytes even when JSON escaping inflates it (a control character
    # becomes six bytes), so it is checked on the raw request before parsing.
    http_host: str = "127.0.0.1"
    http_port: Port = 8000
    http_max_body_bytes: PositiveInt = 8 * 1_048_576
    sync_max_wait_seconds: PositiveFloat = 30.0
    sync_poll_interval_seconds: PositiveFloat = 0.05

    # Transparency-log checkpoints (docs/transparency.md). The Ed25519 key that
    # signs them: base64 of its 32 private bytes, or a PKCS#8 PEM; never stored
    # in the database. An auditor who holds only the public key (base64 of 32
    # bytes) sets audit_public_key to pin it.
    audit_signing_key: SecretStr | None = None
    audit_signing_key_file: Path | None = None
    audit_public_key: str | None = None
    # Where the service writes checkpoints, and how often (unset with a signing
    # key: data_dir/checkpoints; without a key it writes none).
    audit_checkpoint_dir: Path | None = None
    audit_checkpoint_interval_seconds: PositiveFloat = 60.0
    # Limits at the edge (docs/sync.md, "Limits"). The request line and the whole
    # request head (line + headers) are bounded in bytes (414 / 431), the head and
    # the body in time from their first byte (408), and long-polls in number.
    http_max_request_line_bytes: PositiveInt = 8_192
    http_max_header_bytes: PositiveInt = 16_384
    http_header_timeout_seconds: PositiveFloat = 10.0
    http_body_timeout_seconds: PositiveFloat = 30.0
    http_max_long_polls_per_device: PositiveInt = 4
    http_max_long_polls_per_user: PositiveInt = 20
    # Database outages (docs/sync.md, "When the database is down"): how often the
    # service checks the database, how long one check may take, and the
    # Retry-After it sends with every 503 meanwhile.
    http_database_check_interval_seconds: PositiveFloat = 0.5
    http_database_timeout_seconds: PositiveFloat = 1.0
    http_retry_after_seconds: PositiveInt = 2
    # A turn write or conversation start not answered in this time is answered
    # 503 with Retry-After (its outcome is left to the database: a retry with
    # the same turn id gets the receipt). A primary that lost its synchronous
    # standby holds commits until a new one attaches (docs/ha.md).
    http_write_deadline_seconds: PositiveFloat = 3.0
    # How long a stopping service waits for requests in flight (long-polls are
    # answered at once) before it cancels them.
    http_shutdown_timeout_seconds: PositiveFloat = 10.0
    # uvicorn's line per request on stderr. Off unless asked for, as in
    # gunicorn: formatting it cost about a tenth of a turn write's CPU in the
    # service, and the proxy in front usually keeps that log already.
    http_access_log: bool = False

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> Self:
        if self.http_max_request_line_bytes > self.http_max_header_bytes:
            raise ValueError(
                "TURNLEDGER_HTTP_MAX_REQUEST_LINE_BYTES must be <= "
                "TURNLEDGER_HTTP_MAX_HEADER_BYTES "
                "(the request line is part of the request head)"
            )
        if self.http_max_long_polls_per_device > self.http_max_long_polls_per_user:
            raise ValueError(
                "TURNLEDGER_HTTP_MAX_LONG_POLLS_PER_DEVICE must be <= "
                "TURNLEDGER_HTTP_MAX_LONG_POLLS_PER_USER"
            )
        if self.postgres_replica_host is not None and self.persistence != "postgres":
            raise ValueError(
                "TURNLEDGER_POSTGRES_REPLICA_HOST is set: a replica needs "
                "TURNLEDGER_PERSISTENCE=postgres"
            )
        if "," in self.postgres_host and self.postgres_target_session_attrs not in (
            "read-write",
            "primary",
        ):
            raise ValueError(
                "postgres_host names several hosts: set "
                "postgres_target_session_attrs=read-write, or writes may reach a "
                "read-only member"
            )
        if self.master_key is not None and self.master_key_file is not None:
            raise ValueError(
                "set TURNLEDGER_MASTER_KEY or TURNLEDGER_MASTER_KEY_FILE, not both"
            )
        if (
            self.persistence == "postgres"
            and self.master_key is None
            and self.master_key_file is None
        ):
            raise ValueError(
                "TURNLEDGER_PERSISTENCE=postgres needs TURNLEDGER_MASTER_KEY or "
                "TURNLEDGER_MASTER_KEY_FILE: the key that wraps turn keys must not "
                "live beside the data it protects"
            )
        return self

    @property
    def checkpoint_dir_in_effect(self) -> Path | None:
        """Where the service checkpoints: the configured directory, else, once
        a signing key is set, data_dir/checkpoints (publish it to a witness:
        docs/transparency.md); None without a key."""
        if self.audit_checkpoint_dir is not None:
            return self.audit_checkpoint_dir
        if self.audit_signing_key is None and self.audit_signing_key_file is None:
            return None
        return self.data_dir / "checkpoints"

    @property
    def sqlite_events_path(self) -> Path:
        return self.data_dir / "events.sqlite3"

    @property
    def sqlite_keys_path(self) -> Path:
        return self.data_dir / "keys.sqlite3"

    @property
    def default_master_key_path(self) -> Path:
        return self.data_dir / "master.key"

    @property
    def deletion_record_directory(self) -> Path:
        if self.deletion_record_dir is not None:
            return self.deletion_record_dir
        if self.master_key_file is not None:
            return self.master_key_file.parent
        base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
        return Path(base) / "turnledger"

    def replica_settings(self) -> Settings | None:
        """These settings with the replica as the database (None: no replica)."""
        if self.postgres_replica_host is None:
            return None
        return self.model_copy(
            update={
                "postgres_host": self.postgres_replica_host,
                "postgres_port": self.postgres_replica_port,
                "postgres_dbname": self.postgres_replica_dbname,
                "postgres_user": self.postgres_replica_user,
                "postgres_password": self.postgres_replica_password,
                "postgres_pool_size": self.postgres_replica_pool_size,
                "postgres_target_session_attrs": (
                    self.postgres_replica_target_session_attrs
                ),
                "postgres_replica_host": None,
                "postgres_lock_timeout_ms": self.postgres_replica_lock_timeout_ms,
            }
        )

    def postgres_conninfo(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.postgres_host,
            port=self.postgres_port,
            dbname=self.postgres_dbname,
            user=self.postgres_user,
            password=self.postgres_password.get_secret_value(),
            connect_timeout=self.postgres_connect_timeout,
            target_session_attrs=None
            if self.postgres_target_session_attrs == "any"
            else self.postgres_target_session_attrs,
            options=self.postgres_session_options(),
        )

    def postgres_session_options(self) -> str | None:
        """libpq's `options` for this database's connections (None: none)."""
        ms = self.postgres_lock_timeout_ms
        return f"-c lock_timeout={ms}" if ms else None


# Fields whose values a message must never echo.
_SECRET_FIELDS = frozenset(
    name
    for name, field in Settings.model_fields.items()
    if "SecretStr" in repr(field.annotation)
)


def _policy_problems(error: ValidationError) -> str:
    """A WindowPolicy's complaint, naming the TURNLEDGER_ variables behind it."""
    names = {"wire_format": "window_format", "fold_threshold_tokens": None}
    problems = []
    for item in error.errors(include_url=False):
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        location = item.get("loc", ())
        if location:
            field = str(location[0])
            setting = names.get(field, f"window_{field}") or field
            message = f"{ENV_PREFIX}{setting.upper()}: {message}"
        else:
            message = f"{ENV_PREFIX}WINDOW_* settings: {message}"
        problems.append(message)
    return "; ".join(problems)


def setting_names() -> list[str]:
    """Every TURNLEDGER_* variable a Settings field reads."""
    return [ENV_PREFIX + name.upper() for name in Settings.model_fields]


def check_environment_names(environ: Mapping[str, object]) -> None:
    """Refuse a TURNLEDGER_* variable that is no setting (a typo runs on defaults).

    pydantic-settings never looks at a variable that names no field, so a
    misspelled TURNLEDGER_PERSISTANCE=postgres would otherwise run on SQLite.
    """
    known = setting_names()
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        closest = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {closest[0]}?" if closest else "see the README's table"
        raise InvalidInputError(name, f"no such setting; {hint}")


def describe_settings_error(error: ValidationError) -> str:
    """One line naming each variable that is wrong, and why (no pydantic dump)."""
    problems = []
    for item in error.errors(include_url=False):
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        location = item.get("loc", ())
        if not location:
            problems.append(message)
            continue
        field = str(location[0])
        name = ENV_PREFIX + field.upper()
        value = item.get("input")
        if field in _SECRET_FIELDS or isinstance(value, dict) or value is None:
            problems.append(f"{name}: {message}")
        else:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            problems.append(f"{name}={shown}: {message}")
    return "; ".join(problems)
