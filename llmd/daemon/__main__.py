"""`python -m llmd.daemon [serve flags]`: the same as `llmd serve`.

`--detach` re-runs this module with `--options-json` so the child gets the parent's
validated options verbatim.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """Run the daemon from JSON options, or parse `llmd serve` flags."""
    if len(argv) == 2 and argv[0] == "--options-json":
        from llmd.daemon.serve import run_serve
        from llmd.daemon.serve_options import ServeOptions
        from llmd.errors import LLMDError

        try:
            run_serve(ServeOptions.from_json(argv[1]))
        except LLMDError as error:
            print(f"error: {error.code}: {error}", file=sys.stderr)
            return 1
        return 0
    from llmd.cli import main as cli_main

    return cli_main(["serve", *argv], prog_name="python -m llmd.daemon")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
