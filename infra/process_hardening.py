"""What a serving process does to keep opened text out of core dumps.

Python cannot wipe a string: a turn's text opened to answer a request stays
in the process's memory until the allocator reuses it, after the turn is
deleted too (docs/deletion.md, "Process memory"). What the process can do is
keep that memory from being written anywhere: no core file (RLIMIT_CORE 0)
and not dumpable (PR_SET_DUMPABLE 0, which also stops another process of the
same user from attaching with ptrace or reading /proc/PID/mem).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource
import sys

_log = logging.getLogger("turnledger.serve")
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def disable_core_dumps() -> None:
    """No core file and no dumpable memory for this process (and, for the
    limit, its children); Linux only for the dumpable flag, logged if refused."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux") and _prctl(PR_SET_DUMPABLE, 0) != 0:
        _log.warning("could not mark the process not dumpable (prctl refused)")


def is_dumpable() -> bool:
    return sys.platform.startswith("linux") and _prctl(PR_GET_DUMPABLE) == 1
