"""Progress of a long wait, on stderr, for a person watching a terminal.

stdout may be the command's product (an export, a body to send) and a script
reading stderr wants only the error line: notes are written only when stderr
is a terminal.
"""

from __future__ import annotations

import sys


def note(message: str) -> None:
    if sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)
