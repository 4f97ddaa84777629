"""Bad input or params: one clear line per problem on stderr, exit status 1, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable


class StageError(Exception):
    """A problem with the user's input or params; its message says what and how to fix it."""


def run_stage(main: Callable[[], None]) -> None:
    """Run an entry point; turn a StageError into `error: ...` lines on stderr and exit status 1."""
    try:
        main()
    except StageError as error:
        for line in str(error).splitlines() or [""]:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(1)
