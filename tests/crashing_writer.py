"""``python tests/crashing_writer.py``: iceberg-writer as ``python -m services.iceberg_writer``
runs it, except that it exits abruptly (code 137, no cleanup) right after its first Iceberg
commit, before that commit's CommitDone is published. The crash test's fault on purpose."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from services.iceberg_writer.__main__ import main

log = logging.getLogger("services.iceberg_writer")

EXIT_KILLED = 137  # what a SIGKILL leaves


class CrashAfterCommits:
    """A commit observer that ends the process once this many data commits are in."""

    def __init__(self, commits: int) -> None:
        self.commits = commits

    def committed(self, table: str, freshness_s: Sequence[float], commits: int) -> None:
        if commits == self.commits:
            log.warning("fault injection: exiting between commit and CommitDone")
            os._exit(EXIT_KILLED)


if __name__ == "__main__":
    sys.exit(main(CrashAfterCommits(1)))
