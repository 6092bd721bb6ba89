"""Addresses: parsing, the loopback rule, the per-user default and its private directory."""

from __future__ import annotations

import os
import stat

import pytest

from llmd.errors import InvalidParameterError
from llmd.protocol.address import (
    ADDRESS_ENV,
    default_address,
    ensure_private_dir,
    parse_address,
    runtime_dir,
)


@pytest.mark.parametrize(
    ("text", "is_loopback"),
    [
        ("ipc:///tmp/x.sock", True),
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.3.2.1:5555", True),
        ("tcp://localhost:5555", True),
        ("tcp://[::1]:5555", True),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://192.168.1.4:5555", False),
        ("tcp://example.com:5555", False),
    ],
)
def test_loopback_rule(text, is_loopback):
    assert parse_address(text).is_loopback is is_loopback


def test_parsed_addresses_print_back():
    assert str(parse_address("tcp://[::1]:80")) == "tcp://[::1]:80"
    assert str(parse_address("tcp://127.0.0.1:80")) == "tcp://127.0.0.1:80"
    assert parse_address("ipc://rel.sock").path == os.path.abspath("rel.sock")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "http://x",
        "tcp://127.0.0.1",
        "tcp://:5",
        "tcp://h:0",
        "tcp://h:70000",
        "tcp://h:x",
        "ipc://",
        "ipc://@abstract",
        "ipc:///" + "d" * 120,
        "inproc://x",
    ],
)
def test_bad_addresses_name_the_parameter(text):
    with pytest.raises(InvalidParameterError) as error:
        parse_address(text)
    assert error.value.parameter == "address"


def test_instance_names_are_file_safe():
    for text in ("ipc:///tmp/a b/c.sock", "tcp://[::1]:9", "tcp://127.0.0.1:9"):
        name = parse_address(text).instance_name
        assert "/" not in name and " " not in name and ":" not in name


def test_default_address_follows_xdg_runtime_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runtime_dir() == tmp_path / "llmd"
    assert default_address() == f"ipc://{tmp_path / 'llmd' / 'llmd.sock'}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert str(runtime_dir()) == f"/tmp/llmd-{os.getuid()}"
    monkeypatch.setenv(ADDRESS_ENV, "tcp://127.0.0.1:7000")
    assert default_address() == "tcp://127.0.0.1:7000"


def test_private_dir_is_created_0700_and_tightened(tmp_path):
    created = ensure_private_dir(tmp_path / "a" / "llmd")
    assert stat.S_IMODE(created.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    ensure_private_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(InvalidParameterError):
        ensure_private_dir(not_a_dir)
    link = tmp_path / "link"
    link.symlink_to(created)
    with pytest.raises(InvalidParameterError):
        ensure_private_dir(link)
