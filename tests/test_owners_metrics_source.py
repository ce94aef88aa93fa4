"""One owner each: sglang's metric names (kit.metrics.names), the /server_info reader
(kit.target.get_server_info) and "a server, then its sglang source on this machine"
(kit.source.source_for_server). Each structural test fails when a second owner appears again."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kit.errors import HostError, SourceInputError
from kit.hosts import LocalHost
from kit.metrics import metric_names
from kit.metrics.names import KIT_READS
from kit.source import SourceTree, source_for_server
from kit.target import get_server_info

KIT = Path(__file__).resolve().parent.parent / "kit"


def _strings(tree: ast.AST):
    """(node, text) of every string constant but docstrings."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node, node.value


def _modules(*parts: str, skip: tuple[str, ...] = ()):
    for path in sorted(KIT.joinpath(*parts).rglob("*.py")):
        rel = path.relative_to(KIT.parent).as_posix()
        if not rel.startswith(skip):
            yield rel, ast.parse(path.read_text(), rel)


# --------------------------------------------------------------------------- metric names

_METRIC = re.compile(r"\bsglang:[a-z_]")


def metric_literals(source: str, where: str = "<text>") -> list[str]:
    return [f"{where}:{node.lineno} {text!r}" for node, text in _strings(ast.parse(source)) if _METRIC.search(text)]


def test_no_sglang_metric_name_is_spelled_in_kit_metrics_outside_its_owner():
    found = [hit for rel, _ in _modules("metrics", skip=("kit/metrics/names.py",))
             for hit in metric_literals((KIT.parent / rel).read_text(), rel)]
    assert found == [], "name sglang's metrics through kit.metrics.names (one constant each)"


def test_the_check_sees_a_second_map_and_a_name_inside_promql():
    assert len(metric_literals('PANELS = {"gen": "sglang:gen_throughput"}\n'
                               'Q = "avg_over_time(sglang:token_usage{sel}[5m])"\n')) == 2
    assert metric_literals('"""Reads sglang:gen_throughput."""\nP = "sglang:"\nR = r"\\bsglang:[A-Za-z]+"\n') == []


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_every_metric_the_kit_reads_is_declared_by_sglang(version):
    declared = metric_names(version)
    assert [name for name in KIT_READS if name not in declared] == []
    assert len(set(KIT_READS)) == len(KIT_READS)


# --------------------------------------------------------------------------- /server_info

_INFO = re.compile(r"/(get_)?server_info\b")
_REQUESTS = {"urlopen", "Request", "get", "request", "http_body", "get_json", "ClientSession"}
# The owner; the lab serves /server_info; kit/_remote/ runs on the target with the standard library only
# (discovery's prefetch), so it cannot call the owner.
_INFO_EXEMPT = ("kit/target.py", "kit/lab/", "kit/_remote/")


def info_requests(tree: ast.AST, where: str = "<text>") -> list[str]:
    """URLs ending in /server_info built by concatenation, and request calls that name it (lines)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and _INFO.search(side.value) \
                        and (isinstance(node.op, ast.Mod) or side.value.startswith("/")):
                    out.add(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _REQUESTS and any(_INFO.search(text) for arg in [*node.args, *node.keywords]
                                         for _, text in _strings(arg)):
                out.add(node.lineno)
    return [f"{where}:{line}" for line in sorted(out)]


def test_no_server_info_request_is_built_outside_its_owner():
    found = [hit for rel, tree in _modules(skip=_INFO_EXEMPT) for hit in info_requests(tree, rel)]
    assert found == [], "ask kit.target.get_server_info (kit.bench.client.server_info in a load's loop)"


def test_the_check_sees_each_way_a_request_was_built():
    seen = info_requests(ast.parse(
        'urllib.request.urlopen(url + "/server_info", timeout=5)\n'
        'get_json(session, f"{base}/get_server_info")\n'
        'u = "http://%s:%d/server_info" % (a, p)\n'
        'raise HostError(f"GET {url}/server_info failed")\n'
        'ev.sources["args"] = "/server_info"\n'))
    assert seen == ["<text>:1", "<text>:2", "<text>:3"]


class _Server(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, bytes]] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        status, body = self.routes.get(self.path, (404, b'{"detail": "Not Found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def serve():
    servers = []

    def start(routes: dict[str, tuple[int, bytes]]) -> str:
        handler = type("Handler", (_Server,), {"routes": routes})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


INFO = json.dumps({"tp_size": 2, "api_key": "sk-secret", "version": "0.5.11"}).encode()


def test_server_info_is_read_with_its_keys_masked(serve):
    url = serve({"/server_info": (200, INFO), "/get_server_info": (500, b"{}")})
    assert get_server_info(url + "/", timeout=5) == {"tp_size": 2, "api_key": "<redacted>", "version": "0.5.11"}


def test_a_release_before_0_5_6_is_asked_its_get_server_info(serve):
    url = serve({"/get_server_info": (200, INFO)})  # 0.3.6 .. 0.5.5 serve only this one
    assert get_server_info(url, timeout=5)["tp_size"] == 2


@pytest.mark.parametrize("routes, why", [
    ({"/server_info": (500, b"{}")}, r"GET http://127\.0\.0\.1:\d+/server_info failed: HTTP Error 500"),
    ({}, r"GET http://127\.0\.0\.1:\d+/get_server_info failed: HTTP Error 404"),
    ({"/server_info": (200, b"[1, 2]")}, r"/server_info failed: the answer is a JSON list, not an object"),
    ({"/server_info": (200, b"<html>")}, r"/server_info failed: Expecting value"),
])
def test_what_the_reader_says_when_the_answer_is_no_server_info(serve, routes, why):
    with pytest.raises(HostError) as err:
        get_server_info(serve(routes), timeout=5, host_name="box")
    assert re.search(why, err.value.message) and err.value.host == "box"
    assert "is the server up?" in err.value.hint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_is_a_host_error_and_the_bench_keeps_it_as_an_error_entry():
    from kit.bench.client import server_info

    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(HostError, match=r"GET http://127\.0\.0\.1:\d+/server_info failed: .*refused"):
        get_server_info(url, timeout=5)
    answer = asyncio.run(server_info(url, timeout=5))
    assert list(answer) == ["error"] and answer["error"].startswith(f"GET {url}/server_info failed")


# --------------------------------------------------------------------------- a server, then its source here

def snapshot_calls(tree: ast.AST, where: str = "<text>") -> list[str]:
    return [f"{where}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "snapshot"]


def test_only_kit_source_copies_a_tree_here():
    found = [hit for rel, tree in _modules(skip=("kit/source/",)) for hit in snapshot_calls(tree, rel)]
    assert found == [], "use kit.source.source_for_server(server, tree=...)"


def test_the_check_sees_the_idiom():
    assert snapshot_calls(ast.parse('if host.name != "local":\n    tree = tree.snapshot()\n')) == ["<text>:2"]


@pytest.fixture()
def package(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "site" / "sglang"
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "version.py").write_text('__version__ = "0.5.11"\n')
    (root / "srt" / "server_args.py").write_text("chunked_prefill_size = 8192\n")
    return root


def test_a_tree_on_this_machine_is_read_where_it_is(package):
    host = LocalHost()
    try:
        tree = SourceTree.at(host, str(package))
        told: list[str] = []
        assert source_for_server(None, tree=tree, progress=told.append) is tree and told == []
    finally:
        host.close()


def test_a_tree_on_another_host_is_copied_once_and_copy_false_keeps_it_there(package, tmp_path):
    host = LocalHost()
    host.name = "box"  # this machine, named as another host: the copy is what a remote tree gets
    try:
        remote = SourceTree.at(host, str(package))
        told: list[str] = []
        here = source_for_server(None, tree=remote, progress=told.append)
        assert here.host.name == "local" and here.origin is remote and here.version == "0.5.11"
        assert Path(here.root).is_relative_to(tmp_path / "cache")
        assert told == ["copying the sglang source on box to the local cache (once per version)"]
        assert source_for_server(None, tree=remote, copy=False) is remote
        assert source_for_server(None, tree=here) is here  # already here: not copied again
    finally:
        host.close()


def test_a_server_is_read_through_its_own_install(package):
    class Server:  # what kit.target.ServerProcess gives source_for_server
        pid, host_name, python = 4242, "box", "/usr/bin/python3"
        sglang_dir = str(package)

        def __init__(self, host):
            self.host = host

    host = LocalHost()
    host.name = "box"
    try:
        here = source_for_server(Server(host))
        assert here.origin.root == str(package) and here.host.name == "local"
    finally:
        host.close()
    with pytest.raises(SourceInputError, match="needs a server or a tree"):
        source_for_server(None)
