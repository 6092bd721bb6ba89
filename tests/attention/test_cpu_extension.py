"""The C++ CPU extension's sources: all packaged, all in the build key, a missing one typed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from llmd.attention import cpu_extension
from llmd.attention.cpu_extension import CpuExtensionUnavailableError
from llmd.attention.factory import create_attention_backend

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "llmd"


def packaged_files() -> set[Path]:
    """The files under llmd/ that the package-data globs of pyproject.toml select."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["llmd"]
    return {path.resolve() for pattern in patterns for path in PACKAGE_DIR.glob(pattern)}


def test_every_source_and_header_the_extension_reads_is_package_data():
    """A wheel built from pyproject.toml ships each file the extension compiles or includes."""
    needed = {path.resolve() for path in cpu_extension.SOURCE_PATHS + cpu_extension.HEADER_PATHS}
    missing = sorted(str(path.relative_to(PACKAGE_DIR)) for path in needed - packaged_files())
    assert missing == []


def test_every_file_in_a_csrc_folder_is_a_source_or_header_of_the_extension():
    """A new .cpp or .h under llmd/*/csrc joins the build key, so editing it rebuilds the op."""
    on_disk = {path.resolve() for path in PACKAGE_DIR.glob("*/csrc/*") if path.is_file()}
    known = {path.resolve() for path in cpu_extension.SOURCE_PATHS + cpu_extension.HEADER_PATHS}
    assert len(on_disk) >= 10
    assert sorted(str(path.relative_to(PACKAGE_DIR)) for path in on_disk - known) == []


def test_a_missing_source_raises_the_typed_error_naming_it(monkeypatch, tmp_path):
    missing = tmp_path / "int8_linear.cpp"
    monkeypatch.setattr(cpu_extension, "SOURCE_PATHS", (*cpu_extension.SOURCE_PATHS[:-1], missing))
    with pytest.raises(CpuExtensionUnavailableError, match=re.escape(f"cannot read {missing}")):
        cpu_extension.build_key()


def test_a_missing_header_falls_back_to_torch_with_one_warning_naming_it(
    monkeypatch, tmp_path, caplog
):
    """An install without a header (a wheel that lacked it) runs the torch backend, no crash."""
    missing = tmp_path / "weight_only_rows.h"
    monkeypatch.setattr(cpu_extension, "HEADER_PATHS", (missing,))
    monkeypatch.setattr(cpu_extension, "load_cpu_ops", cpu_extension.load_cpu_ops.__wrapped__)
    with caplog.at_level("WARNING"):
        backend = create_attention_backend("cpu", torch.device("cpu"))
    assert backend.name == "torch"
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and str(missing) in warnings[0].getMessage()
