"""The worker's log line: time, worker id, message, on stderr (one line per event, flushed)."""

from __future__ import annotations

import os
import sys
from datetime import datetime

from evalwf.contract import WORKER_ID_ENV


def log(message: str) -> None:
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"[{stamp} worker {os.environ.get(WORKER_ID_ENV, os.getpid())}] {message}", file=sys.stderr, flush=True)
