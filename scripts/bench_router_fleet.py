"""Goodput of N `llmd serve` daemons behind SMG against one daemon behind it (issue 27).

Each fleet size in --num-workers starts its daemons (one forward thread each, unless
--num-threads) and SMG in cache_aware mode in front of them, drives the router with
`llmd bench serve --http` (the same seeded Poisson workload every time: text prompts in
groups sharing a system prompt, written as a ShareGPT file) and stops
everything; the report is each size's goodput and its ratio to the first size. SMG comes
from its own venv under llmd's cache dir (installed on first use, never into the project's).
Not part of the tests: run it on an idle machine, the figures mean nothing on a busy one.

    python scripts/bench_router_fleet.py --num-workers 1,2 --request-rate 4 --num-prompts 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from llmd.config import default_model_dir  # noqa: E402
from tests.daemon.harness import daemon_env  # noqa: E402
from tests.integration.router_fleet import Router, Worker, router_binary  # noqa: E402

SERVED_MODEL = "tiny"
"""The name the fleet helper serves every daemon under."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The fleet sizes, the workload and the daemons' flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=default_model_dir())
    parser.add_argument("--num-workers", default="1,2", help="fleet sizes, comma-separated")
    parser.add_argument("--num-threads", type=int, default=1, help="forward threads per daemon")
    parser.add_argument("--serve-args", default="", help="more `llmd serve` flags, one string")
    parser.add_argument("--request-rate", default="4")
    parser.add_argument("--num-prompts", type=int, default=200)
    parser.add_argument("--num-groups", type=int, default=8, help="system prompts shared")
    parser.add_argument("--prefix-words", type=int, default=60, help="words per system prompt")
    parser.add_argument("--output-len", type=int, default=64, help="about this many tokens")
    parser.add_argument("--slo", default="ttft=2000,tpot=200")
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON reports")
    return parser.parse_args(argv)


WORDS = ("river", "stone", "lamp", "cloud", "garden", "window", "bridge", "forest", "north")


def write_workload(path: Path, num_prompts: int, num_groups: int, prefix_words: int,
                   reply_words: int) -> None:  # fmt: skip
    """A ShareGPT-format file of text prompts in `num_groups` groups sharing a long system
    prompt: SMG takes text prompts only (no token ids), and routes on their prefixes."""
    items = []
    for index in range(num_prompts):
        group = index % num_groups
        system = " ".join(WORDS[(group * 5 + i * (group + 2)) % len(WORDS)]
                          for i in range(prefix_words))  # fmt: skip
        prompt = f"Assistant {group}: {system}. Question {index}:"
        reply = " ".join(WORDS[(index + i) % len(WORDS)] for i in range(reply_words))
        items.append({"conversations": [{"from": "human", "value": prompt},
                                        {"from": "gpt", "value": reply}]})  # fmt: skip
    path.write_text(json.dumps(items))


def run_fleet(args: argparse.Namespace, num_workers: int, work: Path) -> dict[str, object]:
    """One fleet size: start, drive, stop; the bench's JSON report."""
    serve_args = tuple(args.serve_args.split())
    if args.num_threads != 1:
        serve_args += ("--num-threads", str(args.num_threads))  # the last one wins
    workers = [Worker(Path(args.model), work / f"n{num_workers}-w{i}", serve_args=serve_args)
               for i in range(num_workers)]  # fmt: skip
    router = Router(router_binary(), [w.url for w in workers], work / f"n{num_workers}-smg.log")
    report = work / f"n{num_workers}.json"
    workload = work / "workload.json"
    write_workload(workload, args.num_prompts, args.num_groups, args.prefix_words,
                   round(args.output_len / 1.3))  # fmt: skip
    try:
        for worker in workers:
            worker.start()
        router.start()
        command = [sys.executable, "-m", "llmd.cli", "bench", "serve", "--http", router.url,
                   "--served-model", SERVED_MODEL, "--dataset", "sharegpt",
                   "--dataset-path", str(workload), "--request-rate", args.request_rate,
                   "--num-prompts", str(args.num_prompts), "--slo", args.slo,
                   "--json", str(report), "--no-progress"]  # fmt: skip
        subprocess.run(command, check=True, env=daemon_env(), cwd=REPO_ROOT)
    finally:
        router.stop()
        for worker in workers:
            worker.stop()
    return json.loads(report.read_text())


def main(argv: list[str] | None = None) -> int:
    """Run each fleet size and print goodput and the ratio to the first size."""
    args = parse_args(argv)
    sizes = [int(size) for size in args.num_workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="llmd-fleet-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = {size: run_fleet(args, size, work) for size in sizes}
    base = results[sizes[0]]["goodput"]["requests_per_s"] or 0.0  # type: ignore[index]
    print(f"{'workers':>8} {'goodput req/s':>14} {'ratio':>6} {'completed':>10} {'failed':>7}")
    for size, result in results.items():
        good = result["goodput"]["requests_per_s"] or 0.0  # type: ignore[index]
        ratio = good / base if base else float("nan")
        print(f"{size:>8} {good:>14.2f} {ratio:>6.2f} {result['num_completed']:>10} "
              f"{result['num_failed']:>7}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
