"""``sgl-kit profile TARGET``: the real sglang 0.5.11 server on CPU (tests/_real_server_support.py).

Real HTTP to the server's own ``/start_profile`` and ``/stop_profile``, the kit's bench as load, the
traces copied from the box over ``kit.hosts`` (locally, and over the test sshd as a remote target)
and summarized. The refusal is sglang's own: a profile already running (started here the way any
client would) answers HTTP 500 and logs why.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request

import pytest
from _real_server_support import START_TIMEOUT

from kit.metrics.trace import CPU_ONLY, summarize_trace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) + 900)]


def _kit(*argv, timeout=600):
    return subprocess.run([sys.executable, "-m", "kit.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=dict(os.environ))


def _post(url, path, body=None, timeout=120):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else b"",
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_profile_the_real_server_summarizes_its_own_trace(real_server, tmp_path):
    out = tmp_path / "prof"
    proc = _kit("profile", "lab", "--steps", "4", "--requests", "2", "--max-tokens", "8", "--out", str(out),
                "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["api"]["request_class"] == "ProfileReqInput" and doc["api"]["version"] == "0.5.11"
    assert doc["body"]["activities"] == ["CPU"] and doc["body"]["num_steps"] == 4
    assert doc["stopped_by"] in ("num_steps", "/stop_profile") and not doc["failed"]
    [path] = doc["files"]
    assert path.startswith(str(out)) and "-TP-0" in path
    # what the kit copied is what the server wrote: the same file, read whole by the standard library
    with gzip.open(path, "rt") as fh:
        whole = json.load(fh)
    steps = [e for e in whole["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    [trace] = doc["traces"]
    assert sum(s["count"] for s in trace["steps"].values()) == len(steps) >= 2
    assert trace["cpu_only"] and trace["graphs"].startswith(CPU_ONLY)
    assert summarize_trace(path).events == len(whole["traceEvents"])
    text = _kit("profile", "--trace", path)
    assert text.returncode == 0 and "CPU trace: no CUDA events" in text.stdout and "aten::" in text.stdout
    shutil.rmtree(doc["remote_dir"])  # what the profile left on the box


def test_a_profile_already_running_is_refused_in_one_line_and_the_server_keeps_serving(real_server, tmp_path):
    url = real_server.url
    hold = tmp_path / "held"
    hold.mkdir()
    status, _ = _post(url, "/start_profile", {"output_dir": str(hold), "start_step": 1, "num_steps": 10000,
                                              "activities": ["CPU"]})
    assert status == 200
    try:
        status, _ = _post(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
        assert status == 200  # a step ran: the held profile is now in progress
        proc = _kit("profile", "lab", "--steps", "2", "--out", str(tmp_path / "second"))
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        error = [line for line in lines if "error:" in line]
        assert len(error) == 1 and "HTTP 500" in error[0] and "Profiling is already in progress" in error[0]
        assert lines[lines.index(error[0]) + 1].strip().startswith("-> ")
    finally:
        status, _ = _post(url, "/stop_profile")
    assert status == 200 and [p.name for p in hold.iterdir() if p.name.endswith(".trace.json.gz")]
    status, _ = _post(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert status == 200


def test_a_port_with_no_sglang_server_is_a_clear_error(real_server, tmp_path):
    from dataclasses import replace

    from kit.errors import MetricsError
    from kit.metrics.profile import profile_server

    class Plain(http.server.BaseHTTPRequestHandler):  # an HTTP server that is not sglang
        def do_GET(self):  # noqa: N802 - http.server's hook
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"not sglang\n")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        proc = _kit("profile", "local", "--port", str(port), timeout=120)
        # the same server handed to the Python API as if it were sglang's: its /start_profile is no endpoint
        fake = replace(real_server.server(), url=f"http://127.0.0.1:{port}")
        with pytest.raises(MetricsError) as err:
            profile_server(fake, steps=2, local_dir=tmp_path / "none", timeout=10)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no SGLang server on local matches" in proc.stderr and "\n  -> " in proc.stderr
    assert "no such endpoint (not an sglang server" in err.value.message and "HTTP 501" in err.value.message
    assert not (tmp_path / "none").exists() or not list((tmp_path / "none").iterdir())


@pytest.mark.ssh
def test_profile_over_ssh_copies_the_traces_through_the_host(real_server, sshd, tmp_path):
    out = tmp_path / "over-ssh"
    proc = _kit("profile", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--port", str(real_server.port),
                "--steps", "3", "--requests", "2", "--max-tokens", "6", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    [path] = doc["files"]
    remote = os.path.join(doc["remote_dir"], os.path.basename(path))
    with open(remote, "rb") as a, open(path, "rb") as b:  # the same machine: the remote copy is at hand
        assert a.read() == b.read()
    assert doc["traces"][0]["cpu_only"]
    shutil.rmtree(doc["remote_dir"])
