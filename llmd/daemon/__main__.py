"""`python -m llmd.daemon --options-json JSON`: the entry point of a detached daemon.

`llmd serve --detach` re-runs this module with `--options-json` so the child gets the
parent's validated options verbatim. Flags are parsed by `llmd serve` alone: the daemon
imports no CLI code (tests/test_import_rules.py).
"""

from __future__ import annotations

import sys

USAGE = (
    "usage: python -m llmd.daemon --options-json JSON\n"
    "(the entry point of `llmd serve --detach`; to start a daemon from flags, run `llmd serve`)"
)
EXIT_USAGE = 2


def main(argv: list[str]) -> int:
    """Run the daemon from JSON options; anything else is a usage error."""
    if len(argv) != 2 or argv[0] != "--options-json":
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    from llmd.daemon.serve import run_serve
    from llmd.daemon.serve_options import ServeOptions
    from llmd.errors import LLMDError

    try:
        run_serve(ServeOptions.from_json(argv[1]))
    except LLMDError as error:
        print(f"error: {error.code}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
