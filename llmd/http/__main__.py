"""`python -m llmd.http ...`: the HTTP server process that `llmd serve` starts."""

from __future__ import annotations

import sys

from llmd.http.worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
