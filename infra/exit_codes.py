"""The exit statuses every `turnledger` command keeps (README, "Exit codes").

A script or a monitoring job can tell "found a problem" (1) from "could not
look" (2): a database that is down is never reported as tampering.
"""

from __future__ import annotations

EXIT_OK = 0
# The command ran and found a problem: an integrity failure (audit, checkpoint,
# prove), a read side that differs from the log (rebuild --check), a demo check.
EXIT_FAILED = 1
# The command could not run: a bad argument or setting, refused input (an
# unknown conversation, another owner's, a text over a limit), an unreadable
# file, a database that cannot be reached.
EXIT_CANNOT_RUN = 2
# `purge` or `delete` ran, but a deletion's compaction is still held by
# something outside turnledger (the output says what): run it again later.
EXIT_PENDING = 3

EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_FAILED: "the command ran and found a problem",
    EXIT_CANNOT_RUN: "the command could not run",
    EXIT_PENDING: "purge or delete: a deletion is still pending",
}
