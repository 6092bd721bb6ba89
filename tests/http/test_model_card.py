"""/v1/models names the served weights' quantization and bytes, read from the daemon's stats."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from llmd.http.app import create_app
from llmd.http.context import HttpContext
from llmd.protocol import StatsSnapshot
from tests.protocol.snapshot_samples import daemon_section, sample_snapshot


class StatsOnlyClient:
    """A daemon client that answers `stats` with one fixed snapshot and counts the asks."""

    def __init__(self, snapshot: StatsSnapshot) -> None:
        self.snapshot = snapshot
        self.num_stats = 0

    async def stats(self, **options: Any) -> StatsSnapshot:
        self.num_stats += 1
        return self.snapshot

    async def close(self) -> None:
        pass


class StatsOnlyContext(HttpContext):
    """The real HttpContext (its `served_model` reads the snapshot) over a StatsOnlyClient."""

    def __init__(self, client: StatsOnlyClient) -> None:
        super().__init__("ipc:///nonexistent", None, 1 << 20)
        self.stats_client = client

    @property
    def client(self) -> Any:
        return self.stats_client


def cards_of(**daemon: object) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The /v1/models entry, the /v1/models/{id} card and how often the daemon was asked."""
    client = StatsOnlyClient(sample_snapshot(daemon=daemon_section(**daemon)))
    http = TestClient(create_app(StatsOnlyContext(client)))
    listed = http.get("/v1/models")
    assert listed.status_code == 200
    (entry,) = listed.json()["data"]
    card = http.get(f"/v1/models/{entry['id']}")
    assert card.status_code == 200
    return entry, card.json(), client.num_stats


@pytest.mark.parametrize(
    ("quantization", "weight_bytes", "card_quantization"),
    [
        ("", 538_100_000, None),  # dense
        ("compressed-tensors w4a16-g128", 96_300_000, "compressed-tensors w4a16-g128"),
    ],
)
def test_the_model_card_has_the_quantization_and_the_weight_bytes(
    quantization, weight_bytes, card_quantization
):
    entry, card, num_stats = cards_of(
        model="org/m", quantization=quantization, weight_bytes=weight_bytes
    )
    assert entry == card
    assert (card["id"], card["object"], card["max_model_len"]) == ("org/m", "model", 256)
    assert card["quantization"] == card_quantization
    assert card["weight_bytes"] == weight_bytes
    assert num_stats == 1  # read once, on first use


def test_a_daemon_that_predates_weight_bytes_gives_none():
    _, card, _ = cards_of(weight_bytes=0)
    assert card["weight_bytes"] is None and card["quantization"] is None
