"""kit.target.discover: SGLang server processes found through /proc, here and over real SSH.

Real sglang cannot serve without a GPU, so its processes are played by a stand-in: a
package named `sglang` whose `launch_server` module only listens on the port and answers
/health. What discovery reads (argv, environ, fd/1, the interpreter's import of
`sglang`, the dist-info version) is real; only the server behind it is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _lab_support import free_port

from kit.errors import TargetError
from kit.hosts import LocalHost
from kit.lab import find_lab_server
from kit.server_args import effective_args
from kit.target import connect, discover, find_server, inventory, parse_target

FAKE_SERVER = '''
import http.server, sys
args = sys.argv[1:]
host = args[args.index("--host") + 1] if "--host" in args else "127.0.0.1"
port = int(args[args.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
print("server_args=ServerArgs(model_path='/m', port=%d)" % port, flush=True)
http.server.HTTPServer((host, port), H).serve_forever()
'''


@pytest.fixture(scope="module")
def fake_site(tmp_path_factory) -> Path:
    """A site directory with a runnable stand-in `sglang` package and its dist-info."""
    site = tmp_path_factory.mktemp("fake-site")
    pkg = site / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_SERVER)
    (site / "sglang-0.5.11.dist-info").mkdir()
    (site / "sglang-0.5.11.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.5.11\n")
    bindir = site / "bin"
    bindir.mkdir()
    script = bindir / "sglang"  # a console script, as `pip install sglang` makes
    script.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv = sys.argv[1:]\n"
                      "runpy.run_module('sglang.launch_server', run_name='__main__')\n")
    script.chmod(0o755)
    return site


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the stand-in server did not listen on {port}")


def _start(site: Path, argv: list[str], log: Path | None, port: int, env=None) -> subprocess.Popen:
    out = open(log, "wb") if log else subprocess.PIPE
    proc = subprocess.Popen(argv, cwd=site, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(site), NCCL_DEBUG="INFO", CUDA_VISIBLE_DEVICES="0,1",
                                     HF_TOKEN="hf_secret", **(env or {})))
    _wait_listening(port)
    return proc


@pytest.fixture(scope="module")
def servers(fake_site, tmp_path_factory):
    """Two stand-in servers: `python -m sglang.launch_server` logging to a file, `sglang serve` to a pipe."""
    logs = tmp_path_factory.mktemp("fake-logs")
    port_m, port_s = free_port(), free_port()
    procs = [
        _start(fake_site, [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1",
                           "--port", str(port_m)], logs / "server.log", port_m),
        _start(fake_site, [str(fake_site / "bin" / "sglang"), "serve", "--model-path", "/m", "--port", str(port_s)],
               None, port_s),
    ]
    yield {"module": (procs[0], port_m, logs / "server.log"), "serve": (procs[1], port_s)}
    for proc in procs:
        proc.kill()
        proc.wait(10)


def _by_pid(found, pid):
    hits = [s for s in found if s.pid == pid]
    assert len(hits) == 1, found
    return hits[0]


def test_discover_finds_a_launch_server_process_with_its_log_python_and_sglang(servers, fake_site):
    proc, port, log = servers["module"]
    server = _by_pid(discover(LocalHost()), proc.pid)
    assert server.kind == "sglang" and server.port == port and server.bind_host == "127.0.0.1"
    assert server.argv[1:3] == ["-m", "sglang.launch_server"] and server.python == sys.executable
    assert server.log_path == str(log) and server.sglang_dir == str(fake_site / "sglang")
    assert server.sglang_version == "0.5.11" and server.cwd == str(fake_site)
    assert server.env["NCCL_DEBUG"] == "INFO" and server.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert server.env["HF_TOKEN"] == "<redacted>" and "PATH" not in server.env
    assert server.url == f"http://127.0.0.1:{port}"
    assert urllib.request.urlopen(server.url + "/health", timeout=5).read() == b"ok"
    assert server.log_tail(5) == [f"server_args=ServerArgs(model_path='/m', port={port})"]
    assert effective_args(server)["port"] == port  # no /server_info here: read from the log


def test_discover_finds_sglang_serve_and_says_why_it_has_no_log_file(servers, fake_site):
    proc, port = servers["serve"]
    server = _by_pid(discover(LocalHost()), proc.pid)
    assert server.kind == "sglang" and server.port == port and server.argv[2] == "serve"
    assert server.python == sys.executable and server.sglang_version == "0.5.11"
    assert server.log_path is None and "pipe" in server.log_note
    with pytest.raises(TargetError) as err:
        server.log_text()
    assert "--log" in err.value.hint


def test_find_server_picks_by_port_and_refuses_to_guess(servers):
    host = LocalHost()
    found = [s for s in discover(host) if s.pid in (servers["module"][0].pid, servers["serve"][0].pid)]
    _, port, _ = servers["module"]
    assert find_server(host, port=port, servers=found).pid == servers["module"][0].pid
    with pytest.raises(TargetError) as err:
        find_server(host, servers=found)
    assert "--pid" in err.value.hint and str(servers["serve"][0].pid) in err.value.message
    with pytest.raises(TargetError):
        find_server(host, port=1, servers=found)


def test_the_lab_target_is_this_machine_and_says_when_the_lab_is_not_running(monkeypatch, tmp_path):
    assert parse_target("lab") == {"kind": "lab"}
    host = connect("lab")
    assert isinstance(host, LocalHost)
    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "no-lab-here"))
    with pytest.raises(TargetError) as err:
        find_lab_server(host, servers=[])
    assert "sgl-kit lab up" in err.value.hint


def test_inventory_reports_this_machine_without_a_gpu():
    inv = inventory(LocalHost())
    assert inv.cpus == os.cpu_count() and inv.memory_gb and inv.memory_gb > 0.5
    assert inv.gpus == [] and "nvidia-smi" in inv.gpu_note
    assert "cpus" in inv.to_text() and "<pre>" in inv._repr_html_()


@pytest.mark.ssh
def test_discover_over_ssh_reaches_a_loopback_server_through_a_forward(servers, sshd):
    proc, port, log = servers["module"]
    with connect(sshd.alias, config_file=str(sshd.ssh_config)) as host:
        server = _by_pid(discover(host), proc.pid)
        assert server.host_name == host.name and server.log_path == str(log)
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(f":{port}")
        assert urllib.request.urlopen(server.url + "/health", timeout=10).read() == b"ok"
        assert server.log_tail(1) == [f"server_args=ServerArgs(model_path='/m', port={port})"]
