#!/usr/bin/env python
"""Soak and fault suite: drive real `llmd serve` processes and report counted figures as JSON.

Every scenario runs against a daemon started exactly as a user would (with a soft
descriptor limit of 1024 and --max-message-bytes 1 MiB) and reports pass/fail against
its figure with the counts behind it; docs/reliability.md lists the promises.

    .venv/bin/python scripts/soak.py --json /tmp/soak.json          # everything (~30 min)
    .venv/bin/python scripts/soak.py --quick --scenario malformed   # one, reduced counts
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from scripts.soak_suite.daemon_process import DEFAULT_MODEL, REPO_ROOT, DaemonProcess
from scripts.soak_suite.plan import DAEMON_ARGS, SCENARIOS, run_scenario
from scripts.soak_suite.report import markdown_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable; default: all, in table order)",
    )
    parser.add_argument("--quick", action="store_true", help="reduced counts (about 2 minutes)")
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint to serve")
    parser.add_argument(
        "--markdown", type=Path, metavar="REPORT_JSON",
        help="print the figures of an earlier --json report as a Markdown table and exit",
    )  # fmt: skip
    return parser.parse_args(argv)


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios in order; print (and optionally write) the JSON report."""
    args = parse_args(argv)
    if args.markdown:
        print(markdown_table(json.loads(args.markdown.read_text())))
        return 0
    names = [name for name in SCENARIOS if not args.scenario or name in args.scenario]
    # SIGTERM (e.g. from `timeout`) unwinds normally so that the daemon is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": _git_commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_at_start": list(os.getloadavg()),
        "is_quick": args.quick,
        "daemon_args": list(DAEMON_ARGS),
        "scenarios": [],
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmd-soak-") as runtime:
        daemon = DaemonProcess(Path(runtime), model=args.model, extra_args=DAEMON_ARGS)
        try:
            daemon.start()
            for name in names:
                print(f"[soak] {name} ...", file=sys.stderr, flush=True)
                result = run_scenario(name, daemon, is_quick=args.quick)
                verdict = "PASS" if result.passed else "FAIL"
                print(f"[soak] {name}: {verdict} ({result.wall_s}s)", file=sys.stderr, flush=True)
                for note in result.notes[:5]:
                    print(f"[soak]   {note[:300]}", file=sys.stderr, flush=True)
                report["scenarios"].append(result.to_json())
        finally:
            daemon.stop()
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["passed"] = all(s["passed"] for s in report["scenarios"]) and len(
        report["scenarios"]
    ) == len(names)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
