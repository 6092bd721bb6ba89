"""Take SVG screenshots of `llmd top` and `llmd chat` against a real daemon under load.

Starts `llmd serve` on a private socket, keeps it busy from a few client threads, runs
both apps headless and saves what they show, so the README pictures are real output:
    python scripts/take_screenshots.py [--model DIR] [--out docs/screenshots]
Without --model it uses llmd's default model when present, else a tiny random model
(whose replies are gibberish, but whose serving numbers are real).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from llmd.client import AsyncClient, Client, DaemonNotRunningError  # noqa: E402
from llmd.errors import LLMDError  # noqa: E402
from llmd.sampling_params import SamplingParams  # noqa: E402

DAEMON_FLAGS = [
    "--num-blocks", "64", "--max-model-len", "256", "--max-num-seqs", "6",
    "--max-num-batched-tokens", "96", "--slo-ttft-ms", "250", "--slo-tpot-ms", "25",
]  # fmt: skip
"""Small enough that a few clients fill the KV cache, queue up and chunk their prefills."""
NUM_LOAD_THREADS = 8
SHARED_PREFIX = "You are a helpful assistant who answers in one short paragraph. "
"""Half the load starts with this, so the prefix cache has something to hit."""
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "paged",
         "attention", "serves", "many")  # fmt: skip


def pick_model(model: str | None, scratch: Path) -> str:
    """--model, else the shipped default model, else a freshly built tiny random one."""
    if model:
        return model
    default = REPO_ROOT / "llmd" / "default_model"
    if (default / "config.json").exists():
        return str(default)
    from tests.tiny_model import make_tiny_model

    return str(make_tiny_model(scratch / "tiny-llama", "llama"))


def start_daemon(model: str, address: str, log_path: Path) -> subprocess.Popen:
    """`llmd serve` in the background; returns once it answers health checks."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "llmd.cli", "serve", "--model", model, "--address", address]
    command += ["--no-http"]  # screenshots need no HTTP port
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command + DAEMON_FLAGS, env=env, stderr=log)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited:\n{log_path.read_text()}")
        try:
            with Client(address, timeout=1.0) as client:
                if client.health()["is_healthy"]:
                    return process
        except DaemonNotRunningError:
            time.sleep(0.2)
    raise TimeoutError("the daemon did not become healthy")


def keep_busy(address: str, seed: int, stop: threading.Event) -> None:
    """One client thread: streams requests of varied lengths until `stop` is set."""
    rng = random.Random(seed)
    with Client(address, timeout=30) as client:
        while not stop.is_set():
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30)))
            prompt = SHARED_PREFIX + words if rng.random() < 0.5 else words
            params = SamplingParams(
                temperature=0.8, max_tokens=rng.randint(40, 120), ignore_eos=True, seed=seed
            )
            try:
                for _ in client.stream(prompt, params=params):
                    if stop.is_set():
                        break
            except LLMDError as error:  # e.g. a prompt too long for a small model: next one
                print(f"load client {seed}: {error.code}: {error}", file=sys.stderr)


async def shoot_top(address: str, out: Path, size: tuple[int, int], name: str) -> None:
    """Let top collect a few seconds of history, select a running request, save."""
    from llmd.tui.top.app import create_top_app

    app = create_top_app(lambda: AsyncClient(address, timeout=5.0), address, 0.25)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(6.0)
        for _ in range(20):  # move the selection onto the oldest running request
            rows = [row.request_id for row in app.model.view().requests]
            running = [
                row.request_id for row in app.model.view().requests if row.state == "running"
            ]
            selected = app.model.selected_request_id
            if not running or selected == running[0] or selected not in rows:
                break
            below = rows.index(running[0]) > rows.index(selected)
            await pilot.press("down" if below else "up")
        await pilot.pause(1.0)
        app.save_screenshot(name, path=str(out))
        print_screen(app)


def print_screen(app) -> None:
    """With LLMD_SHOW_SCREENS=1, print the screen as text (to check a shot without a viewer)."""
    if os.environ.get("LLMD_SHOW_SCREENS") == "1":
        strips = app.screen._compositor.render_strips()
        print("\n".join(strip.text.rstrip() for strip in strips))


async def shoot_chat(address: str, out: Path) -> None:
    """A short conversation with the model, saved once the second reply has finished."""
    from llmd.tui.chat.app import create_chat_app
    from llmd.tui.chat.prompt_input import PromptInput

    params = SamplingParams(temperature=0.3, top_p=0.95, max_tokens=120, seed=7)
    app = create_chat_app(AsyncClient(address), address, None, params)
    async with app.run_test(size=(100, 30)) as pilot:
        for prompt in ("Who are you?", "Tell me a story about a cat.", "What is 2 plus 5?"):
            app.query_one(PromptInput).value = prompt
            await pilot.press("enter")
            deadline = time.monotonic() + 60
            while app.conversation.is_waiting and time.monotonic() < deadline:
                await pilot.pause(0.1)
        await pilot.pause(0.5)
        app.save_screenshot("chat.svg", path=str(out))
        print_screen(app)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Model directory to serve.")
    parser.add_argument("--out", default=str(REPO_ROOT / "docs" / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llmd-shots-") as scratch:
        scratch_dir = Path(scratch)
        socket_dir = Path("/tmp/llmd-screenshots")  # a short, neutral path for the header
        socket_dir.mkdir(mode=0o700, exist_ok=True)
        address = f"ipc://{socket_dir / 'llmd.sock'}"
        model = pick_model(args.model, scratch_dir)
        daemon = start_daemon(model, address, scratch_dir / "daemon.log")
        stop = threading.Event()
        threads = [
            threading.Thread(target=keep_busy, args=(address, seed, stop), daemon=True)
            for seed in range(NUM_LOAD_THREADS)
        ]
        try:
            for thread in threads:
                thread.start()
            asyncio.run(shoot_top(address, out, (120, 40), "top.svg"))
            asyncio.run(shoot_top(address, out, (80, 24), "top-80x24.svg"))
            asyncio.run(shoot_chat(address, out))
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
            daemon.terminate()
            daemon.wait(30)
    print(f"saved top.svg, top-80x24.svg and chat.svg in {out}")


if __name__ == "__main__":
    main()
