"""Retry a pending compaction in the background of a long-running service.

A purge's compaction can be held by something outside turnledger: a
transaction older than the deletion (in any database of the cluster), a lock
on a key partition, WAL the server still keeps. Nobody may ever delete again
or run `turnledger purge`, so the service retries by itself: every
`interval_seconds` it runs the purge if compaction is pending. It skips its
turn while the service's database check says the database is unavailable, so
that during an outage it does not wait in the pools' queues, and after one it
does not take the first connections ahead of the requests. At start it
also logs what in the server's configuration would keep a purge pending.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.purge import PurgeReport, purge_state
from turnledger.infra.settings import Settings

logger = logging.getLogger("turnledger.purge")

DEFAULT_INTERVAL_SECONDS = 5.0


def server_findings(settings: Settings) -> list[str]:
    """What would keep a purge pending on this server (PostgreSQL only)."""
    if settings.persistence != "postgres":
        return []
    from turnledger.infra.wal import server_check

    return server_check(settings.postgres_conninfo())


class PurgeRetry:
    """A daemon thread that completes pending compactions."""

    def __init__(
        self,
        ledger: Conversations,
        settings: Settings,
        *,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        database_available: Callable[[], bool] = lambda: True,
    ) -> None:
        self._ledger = ledger
        self._database_available = database_available
        self._settings = settings
        self._interval = interval_seconds
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="turnledger-purge-retry", daemon=True
        )
        self.findings: list[str] = []
        self.last_report: PurgeReport | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def state(self) -> PurgeReport:
        return purge_state(self._ledger.vault.purge_view, self._ledger.name)

    def _loop(self) -> None:
        try:
            self.findings = server_findings(self._settings)
        except Exception as error:  # a check must never stop the service
            logger.warning("could not check the server's WAL settings: %s", error)
        for finding in self.findings:
            logger.warning("deletion: %s (docs/deletion.md)", finding)
        was_available = True
        while not self._stopping.wait(self._interval):
            # After an outage, one interval more: the requests come first.
            available = self._database_available()
            if available and was_available:
                self.retry_once()
            was_available = available

    def retry_once(self) -> PurgeReport | None:
        """Run the purge if compaction is pending; None if it was not."""
        try:
            if not self.state().compaction_pending:
                return None
            report = self._ledger.purge_deleted_history()
        except Exception as error:  # the next round tries again
            logger.warning("purge retry failed (%s); retrying", error)
            return None
        self.last_report = report
        if report.compaction_pending:
            logger.info("deletion compaction %s", report.state)
        else:
            logger.info("deletion compaction complete")
        return report
