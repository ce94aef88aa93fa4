"""A real Prometheus (Debian's ``prometheus`` package) for the tests: its own config, TSDB dir and free port.

``make test`` installs the package when root (the ``prometheus-tools`` target). Without it
the tests skip and say why, and fail in CI, where a skip would hide a broken install step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
STARTUP_TIMEOUT = 30.0


def require_prometheus() -> None:
    if os.access(PROMETHEUS, os.X_OK):
        return
    reason = ("Prometheus is not installed here (no `prometheus` on PATH). `make test` installs Debian's "
              "prometheus package when run as root; otherwise run `sudo apt-get install prometheus`.")
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(reason + " CI must run the Prometheus tests.", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PromServer:
    url: str
    port: int
    proc: subprocess.Popen
    directory: Path
    auth: tuple[str, str] | None = None

    def log(self) -> str:
        return (self.directory / "prometheus.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def get(self, path: str) -> dict:
        req = urllib.request.Request(self.url + path)
        if self.auth:
            import base64

            req.add_header("Authorization", "Basic " + base64.b64encode(":".join(self.auth).encode()).decode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def wait_for(self, query: str, timeout: float = 30.0, at_least: int = 1) -> list:
        """The instant vector of ``query`` once it has ``at_least`` series (scrapes are ~1 s apart)."""
        import urllib.parse

        deadline = time.monotonic() + timeout
        result: list = []
        while time.monotonic() < deadline:
            doc = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": query}))
            result = doc["data"]["result"]
            if len(result) >= at_least:
                return result
            time.sleep(0.3)
        raise AssertionError(f"{query} had {len(result)} series after {timeout}s; log:\n{self.log()[-3000:]}")


def start_prometheus(directory: Path, targets: list[str], *, interval: str = "1s", basic_auth=None,
                     storage: Path | None = None, extra_args: tuple[str, ...] = ()) -> PromServer:
    """Prometheus scraping ``targets`` (host:port) every ``interval``; ``basic_auth=(user, password)``
    puts its web config's bcrypt-hashed basic auth in front of the API."""
    require_prometheus()
    directory.mkdir(parents=True, exist_ok=True)
    targets_yaml = ", ".join(f'"{t}"' for t in targets)
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        "  - job_name: sglang\n"
        f"    scrape_timeout: {interval}\n"
        f"    static_configs:\n      - targets: [{targets_yaml}]\n"
        if targets else "global:\n  scrape_interval: 15s\n")
    args = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={storage or directory / 'data'}",
            "--storage.tsdb.retention.time=30d", "--web.enable-lifecycle"]
    if basic_auth:
        import bcrypt

        user, password = basic_auth
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        web = directory / "web.yml"
        web.write_text(f"basic_auth_users:\n  {user}: {hashed}\n")
        args.append(f"--web.config.file={web}")
    for _ in range(5):
        port = free_port()
        log = open(directory / "prometheus.log", "wb")  # noqa: SIM115 - the process owns it
        proc = subprocess.Popen([*args, f"--web.listen-address=127.0.0.1:{port}", *extra_args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        server = PromServer(f"http://127.0.0.1:{port}", port, proc, directory, basic_auth)
        if _ready(server):
            return server
        server.stop()
        if "address already in use" not in server.log():
            raise RuntimeError(f"prometheus did not start:\n{server.log()[-3000:]}")
    raise RuntimeError("prometheus found no free port in 5 tries")


def _ready(server: PromServer) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False
        try:
            req = urllib.request.Request(server.url + "/-/ready")
            if server.auth:
                import base64

                req.add_header("Authorization",
                               "Basic " + base64.b64encode(":".join(server.auth).encode()).decode())
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


def page_total(port: int, sample: str, timeout: float = 30.0) -> float | None:
    """The sum of ``sample`` on the server's own ``/metrics`` page (read directly), or None when the page
    has no such sample (a counter sglang has not created yet is missing, not zero)."""
    from kit.metrics import scrape

    page = scrape(f"http://127.0.0.1:{port}/metrics", timeout=timeout)
    rows = page[page["sample"] == sample]
    return float(rows["value"].sum()) if len(rows) else None


def caught_up(server: PromServer, port: int, sample: str, timeout: float = 30.0) -> float | None:
    """Read ``sample`` from the server's page, then wait until Prometheus holds that same value for it (the
    scrape after the read); returns the page's value. A span that starts and ends at such points has the
    server's own numbers at both ends."""
    import urllib.parse

    value = page_total(port, sample)
    if value is None:  # not on the page: nothing to wait for but the next scrapes
        time.sleep(2.5)
        return None
    query = f'sum({sample}{{instance="127.0.0.1:{port}"}}) or sum({sample.replace(":", "_")}{{instance="127.0.0.1:{port}"}})'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = server.get("/api/v1/query?" + urllib.parse.urlencode({"query": query}))
        result = doc["data"]["result"]
        if result and abs(float(result[0]["value"][1]) - value) < 1e-9:
            return value
        time.sleep(0.3)
    raise AssertionError(f"Prometheus did not reach {sample} = {value} in {timeout}s; log:\n{server.log()[-2000:]}")
