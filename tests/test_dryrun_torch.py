"""Where the dry-run's torch comes from, decided by real pip against real package indexes on loopback.

The indexes serve small stand-in wheels named like torch's (this machine cannot fetch the real
ones); pip reads them exactly as it reads torch's, which is all the choice depends on.
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from kit.dryrun._torch import choose_torch
from kit.errors import SetupFailed


def _wheel(folder: Path, version: str) -> Path:
    path = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch/__init__.py", "")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    """index(versions) -> the URL of a PEP 503 index on 127.0.0.1 serving torch wheels of those versions."""
    servers = []

    def make(*versions: str) -> str:
        root = tmp_path / f"index{len(servers)}"
        (root / "simple" / "torch").mkdir(parents=True)
        links = "".join(f'<a href="{_wheel(root / "simple" / "torch", v).name}">{v}</a>' for v in versions)
        (root / "simple" / "torch" / "index.html").write_text(f"<html><body>{links}</body></html>")
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/simple"

    yield make
    for server in servers:
        server.shutdown()


@pytest.fixture(autouse=True)
def isolated_pip(monkeypatch, tmp_path):
    """No pip configuration of this machine (its find-links hold a real CPU torch)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)


def test_a_cpu_build_that_pip_finds_is_taken_first(index, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", index("2.13.0+cpu"))
    choice = choose_torch("torch==2.13.0", sys.executable, index_url="http://127.0.0.1:9/unused")
    assert choice.args == ("--no-deps", "torch==2.13.0+cpu") and not choice.cuda
    assert choice.label == "torch 2.13.0+cpu from torch-2.13.0+cpu-py3-none-any.whl"


def test_the_cpu_index_is_tried_when_pip_finds_only_the_cuda_build(index, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", index("2.13.0"))
    cpu = index("2.13.0+cpu")
    choice = choose_torch("torch==2.13.0", sys.executable, index_url=cpu)
    assert choice.args == ("--no-deps", "--index-url", cpu, "torch==2.13.0+cpu")
    assert choice.label == f"torch 2.13.0+cpu from the CPU index {cpu}"


def test_the_cuda_build_is_refused_unless_allowed_and_its_size_is_said(index, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", index("2.13.0"))
    empty = index()
    with pytest.raises(SetupFailed) as err:
        choose_torch("torch==2.13.0", sys.executable, index_url=empty)
    message = err.value.message
    assert message.startswith("the dry-run needs torch==2.13.0 (a CPU build), and none was found: ")
    assert "pip's own configuration offers torch 2.13.0 (CUDA build)" in message
    assert f"the CPU index {empty}: " in message
    assert "the package index offers torch 2.13.0, a CUDA build: size unknown with its CUDA libraries" in message
    assert "--allow-cuda-torch" in err.value.cli_hint and "--torch-wheel FILE" in err.value.cli_hint
    allowed = choose_torch("torch==2.13.0", sys.executable, index_url=empty, allow_cuda=True)
    assert allowed.cuda and allowed.args == ("torch==2.13.0",)
    assert allowed.label.startswith("torch 2.13.0, the CUDA build, from torch-2.13.0-py3-none-any.whl")


def test_a_given_wheel_is_used_as_it_is(tmp_path):
    wheel = _wheel(tmp_path, "2.13.0+cpu")
    choice = choose_torch("torch==2.13.0", sys.executable, wheel=str(wheel))
    assert choice.args == ("--no-deps", str(wheel)) and choice.label == f"torch 2.13.0+cpu from {wheel}"
    with pytest.raises(SetupFailed, match="not a torch wheel file"):
        choose_torch("torch==2.13.0", sys.executable, wheel=str(tmp_path / "missing.whl"))
