"""served_model_name: the one name clients see and must send, everywhere the model is named."""

from __future__ import annotations

import httpx
import pytest

from llmd.client import Client
from llmd.config import EngineConfig
from llmd.errors import InvalidParameterError
from llmd.http.http_settings import HttpSettings
from llmd.http.server import HttpServer
from tests.daemon.harness import free_tcp_port, inprocess_daemon


def test_the_served_name_replaces_the_path_for_clients(tiny_model_dir, tmp_path):
    address = f"ipc://{tmp_path / 's.sock'}"
    engine = {"served_model_name": "acme/tiny-chat"}
    with inprocess_daemon(tiny_model_dir, address, engine=engine):
        server = HttpServer(HttpSettings("127.0.0.1", free_tcp_port(), address))
        server.start()
        try:
            server.wait_ready()
            v1 = f"{server.url}/v1"
            models = httpx.get(f"{v1}/models", timeout=10).json()["data"]
            assert [model["id"] for model in models] == ["acme/tiny-chat"]
            assert httpx.get(f"{v1}/models/acme/tiny-chat", timeout=10).status_code == 200
            body = {"model": "acme/tiny-chat", "prompt": "hi", "max_tokens": 2}
            reply = httpx.post(f"{v1}/completions", json=body, timeout=30)
            assert reply.status_code == 200 and reply.json()["model"] == "acme/tiny-chat"
            by_path = httpx.post(
                f"{v1}/completions", json={**body, "model": str(tiny_model_dir)}, timeout=30
            )
            assert by_path.status_code == 404
            assert by_path.json()["error"]["code"] == "model_not_found"
            metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
            assert 'model_name="acme/tiny-chat"' in metrics
        finally:
            server.stop()
        with Client(address) as client:
            assert client.stats(include_block_map=False).daemon.model == "acme/tiny-chat"


@pytest.mark.parametrize("name", ["", " padded ", 7])
def test_a_blank_or_padded_name_is_a_typed_error(name):
    with pytest.raises(InvalidParameterError) as error:
        EngineConfig(served_model_name=name)
    assert error.value.parameter == "served_model_name"


def test_the_flag_reaches_the_engine_config():
    import click
    from click.testing import CliRunner

    from llmd.cli_options import ENGINE_OPTIONS, apply_options, pop_engine_kwargs

    seen = {}

    @click.command()
    @apply_options(ENGINE_OPTIONS)
    def command(**kwargs):
        seen["config"] = EngineConfig(**pop_engine_kwargs(kwargs))

    flags = ["--served-model-name", "acme/tiny-chat", "--kv-cache-dtype", "bfloat16"]
    result = CliRunner().invoke(command, flags)
    assert result.exit_code == 0, result.output
    assert seen["config"].served_model_name == "acme/tiny-chat"
    assert seen["config"].kv_cache_dtype == "bfloat16"
    result = CliRunner().invoke(command, ["--served-model-name", ""])
    assert result.exit_code != 0 and "served_model_name" in str(result.exception)
