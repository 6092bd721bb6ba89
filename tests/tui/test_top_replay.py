"""`llmd top --record` and `--replay`: a replay draws the live run's frames (one daemon and a
fleet), at the recorded pace, and cut or bad recordings are handled or named by line."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from llmd.cli import main
from llmd.errors import InvalidParameterError
from llmd.tui.top.app import create_top_app
from llmd.tui.top.fleet_app import create_fleet_app
from llmd.tui.top.recording import RecordingClient, SnapshotRecorder
from llmd.tui.top.replay import RecordingError, ReplayClient, ReplayClock, read_recording
from llmd.tui.top.top_settings import read_addresses
from tests.tui.fake_client import FakeAsyncClient
from tests.tui.fleet_fakes import FLEET_ADDRESSES, fleet_snapshot, make_fleet
from tests.tui.sample_snapshots import busy_snapshot
from tests.tui.screen_text import screen_text
from tests.tui.waiting import settle, wait_for

ADDRESS = "ipc:///run/user/1000/llmd/llmd.sock"


def ticking_clock(step_s: float = 0.25):
    """A wall clock that moves `step_s` on every reading (the recorder's timestamps)."""
    now = [1_800_000_000.0]

    def read() -> float:
        now[0] += step_s
        return now[0]

    return read


class Gate:
    """A replay sleep that lets one snapshot through per `open()`, so no frame is skipped."""

    def __init__(self) -> None:
        self.tokens: asyncio.Queue[None] = asyncio.Queue()
        self.delays: list[float] = []

    async def sleep(self, delay_s: float) -> None:
        self.delays.append(delay_s)
        await self.tokens.get()

    def open(self) -> None:
        self.tokens.put_nowait(None)


async def test_a_replay_of_one_daemon_draws_the_frames_of_the_live_run(tmp_path):
    path = tmp_path / "one.jsonl"
    recorder = SnapshotRecorder(path, wall_clock=ticking_clock())
    client = FakeAsyncClient()
    live = create_top_app(lambda: RecordingClient(client, recorder, ADDRESS), ADDRESS,
                          clock=lambda: 0.0, slow_redraw_s=0.0)  # fmt: skip
    live_frames, live_snapshots = [], []
    async with live.run_test(size=(80, 24)) as pilot:
        for step in range(6):
            snapshot = busy_snapshot(step, live.feed.timeline_request_id)
            live_snapshots.append(snapshot)
            await client.push(snapshot)
            await wait_for(pilot, lambda snapshot=snapshot: live.model.snapshot is snapshot)
            await settle(pilot)
            live_frames.append(screen_text(live))
    recorder.close()
    recording = read_recording(path)
    assert [item.snapshot for item in recording.snapshots] == live_snapshots  # lossless
    assert recording.addresses() == [ADDRESS] and not recording.is_truncated

    gate = Gate()
    replay_client = ReplayClient(
        recording.of(ADDRESS), ReplayClock(recording.snapshots[0].time, sleep=gate.sleep)
    )
    replay = create_top_app(lambda: replay_client, ADDRESS, clock=lambda: 0.0, slow_redraw_s=0.0)
    replay_frames = []
    async with replay.run_test(size=(80, 24)) as pilot:
        for step in range(6):
            gate.open()
            await wait_for(pilot, lambda step=step: len(replay.model.history["time"]) == step + 1)
            await settle(pilot)
            replay_frames.append(screen_text(replay))
        gate.open()  # a recorded second after the last snapshot: the replay says it ended
        await wait_for(pilot, lambda: replay.model.connection.status == "lost")
        assert "end of the recording (last snapshot at line 6)" in replay.model.connection.message
        assert "✗ daemon gone" in screen_text(replay)
    assert replay_frames == live_frames
    assert len(set(live_frames)) == 6  # the frames really differ from one another


async def test_a_replay_of_a_fleet_draws_the_frames_of_the_live_run(tmp_path):
    path = tmp_path / "fleet.jsonl"
    recorder = SnapshotRecorder(path, wall_clock=ticking_clock())
    live, clients = make_fleet(
        wrap=lambda client, address: RecordingClient(client, recorder, address)
    )
    order = [(index, step) for step in range(3) for index in range(3)]
    live_frames = []
    async with live.run_test(size=(80, 24)) as pilot:
        for index, step in order:
            snapshot = fleet_snapshot(index, step)
            await clients[index].push(snapshot)
            model = live.models[index]
            await wait_for(pilot, lambda model=model, snapshot=snapshot: model.snapshot is snapshot)
            await settle(pilot)
            live.show_fleet()
            await settle(pilot)
            live_frames.append(screen_text(live))
    recorder.close()
    recording = read_recording(path)
    assert recording.addresses() == FLEET_ADDRESSES
    assert [item.address for item in recording.snapshots] == [FLEET_ADDRESSES[i] for i, _ in order]

    gate = Gate()
    clock = ReplayClock(recording.snapshots[0].time, sleep=gate.sleep)
    replay_clients = [ReplayClient(recording.of(address), clock) for address in FLEET_ADDRESSES]
    replay = create_fleet_app([lambda c=c: c for c in replay_clients], FLEET_ADDRESSES,
                              interval_s=0.25, clock=lambda: 0.0, slow_redraw_s=0.0)  # fmt: skip
    replay_frames = []
    async with replay.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(gate.delays) == 3)  # each daemon waits its first
        for number in range(1, len(order) + 1):
            gate.open()  # the daemons' sleeps queue in their recorded order
            await wait_for(pilot, lambda number=number: applied(replay) == number)
            await settle(pilot)
            replay.show_fleet()
            await settle(pilot)
            replay_frames.append(screen_text(replay))
    assert replay_frames == live_frames
    assert len(set(live_frames)) == len(order)


def applied(app) -> int:
    """Snapshots the fleet app applied, over all its daemons."""
    return sum(len(model.history["time"]) for model in app.models)


async def test_the_replay_clock_keeps_the_recorded_spacing_scaled_by_the_speed():
    now = [50.0]
    delays = []

    async def sleep(delay_s: float) -> None:
        delays.append(delay_s)
        now[0] += delay_s

    clock = ReplayClock(1000.0, speed=2.0, sleep=sleep, clock=lambda: now[0])
    for recorded in (1000.0, 1000.5, 1001.0, 1003.0):
        await clock.wait_until(recorded)
    assert delays == pytest.approx([0.0, 0.25, 0.25, 1.0])
    with pytest.raises(RecordingError, match="speed must be > 0"):
        ReplayClock(0.0, speed=0.0)


def write_recording(path, num_snapshots: int, tail: str = "") -> None:
    recorder = SnapshotRecorder(path, wall_clock=ticking_clock())
    for step in range(num_snapshots):
        recorder.record(ADDRESS, busy_snapshot(step))
    recorder.close()
    if tail:
        with path.open("a", encoding="utf-8") as file:
            file.write(tail)


def test_a_last_line_cut_by_a_kill_is_skipped(tmp_path):
    path = tmp_path / "cut.jsonl"
    write_recording(path, 3)
    whole = path.read_text()
    path.write_text(whole + whole.splitlines()[0][:100])  # killed while writing line 4
    recording = read_recording(path)
    assert recording.is_truncated
    assert len(recording.snapshots) == 3
    assert recording.interval_s() == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        ("{not json\n", "line 3: not a JSON line"),
        ('{"time": 1.0, "address": "ipc:///x"}\n', "line 3: missing snapshot"),
        ('{"time": 1.0, "address": "ipc:///x", "snapshot": {"snapshot_version": 9}}\n',
         "line 3: bad snapshot at snapshot_version"),
        ("[1, 2]\n", "line 3: not a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_line_is_an_error_naming_it(tmp_path, tail, problem):
    path = tmp_path / "bad.jsonl"
    write_recording(path, 2, tail + "")
    with path.open("a", encoding="utf-8") as file:  # a good line after it: not a cut tail
        file.write(path.read_text().splitlines()[0] + "\n")
    with pytest.raises(RecordingError, match=problem) as caught:
        read_recording(path)
    assert str(path) in str(caught.value)


def test_an_empty_recording_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(RecordingError, match="holds no snapshot"):
        read_recording(path)


def test_the_cli_names_the_bad_line_of_a_replay(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_recording(path, 1, "garbage\n" + json.dumps({"x": 1}) + "\n")
    result = CliRunner().invoke(main, ["top", "--replay", str(path)])
    assert result.exit_code == 1
    assert f"{path}, line 2: not a JSON line" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay", "r.jsonl", "--address", "ipc:///tmp/a.sock"], "--replay: a recording names"),
        (["--replay", "r.jsonl", "--record", "w.jsonl"], "--replay: cannot record a replay"),
        (["--replay", "r.jsonl", "--speed", "0"], "--speed: must be > 0, got 0.0"),
        (["--speed", "2"], "--speed: applies only with --replay"),
        (["--addresses-file", "no-such.txt"], "--addresses-file: cannot read no-such.txt"),
        (["--address", "ipc:///tmp/a.sock", "--address", "tcp://10.0.0.1:99999"],
         "--address: tcp://10.0.0.1:99999: port 99999 is outside 1..65535"),
    ],
)  # fmt: skip
def test_the_cli_refuses_options_that_do_not_go_together(args, message):
    result = CliRunner().invoke(main, ["top", *args])
    assert result.exit_code == 1
    assert f"Error: {message}" in result.output


def test_an_addresses_file_skips_comments_and_blank_lines():
    text = "# the fleet\ntcp://10.0.0.1:7070\n\n  tcp://10.0.0.2:7070  # rack 2\n"
    assert read_addresses(text, "fleet.txt") == ["tcp://10.0.0.1:7070", "tcp://10.0.0.2:7070"]
    with pytest.raises(InvalidParameterError, match=r"fleet\.txt holds no address"):
        read_addresses("# nothing yet\n", "fleet.txt")
