"""kit._index: the persistent index of an sglang tree gives the same answers, faster.

Every answer is computed twice on real sglang 0.5.11 and 0.5.23 trees, with the index off
(``SGL_KIT_INDEX=0``) and on (cold: an empty cache; warm: read back from the file), and the JSON
compared byte for byte. Then what makes the index forget: the tree's fingerprint, the kit's
version, the index format, a corrupt file; and several processes building it at once.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit import _index as index_mod
from kit._pysource import index_of, modules_for
from kit.hosts import LocalHost
from kit.provenance import CUDA_PROBES, explain
from kit.server_args import defaults, flag_table, lineage, parse_log
from kit.source import SourceTree

DATA = Path(__file__).parent / "data" / "provenance"
LOG = DATA / "incident-0.5.11.log"
QWEN36 = DATA / "qwen3.6-27b" / "config.json"
SGL_KIT = str(Path(sys.executable).parent / "sgl-kit")

# (flag, with the incident's log and config.json, with CUDA's probe answers)
QUESTIONS = [
    ("disable_piecewise_cuda_graph", True, False),
    ("cuda_graph_config.prefill.backend", False, True),
    ("mem_fraction_static", True, False),
    ("chunked_prefill_size", True, True),
    ("enable_piecewise_cuda_graph", False, False),
]


@pytest.fixture(scope="module")
def trees(sglang_source) -> dict[str, str]:
    return {v: sglang_source(v) for v in ("0.5.11", "0.5.23")}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty kit cache of its own (asked for after the trees, whose wheels live in the real one)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SGL_KIT_CACHE", str(path))
    monkeypatch.delenv("SGL_KIT_INDEX", raising=False)
    return path


def _answers(package_dir: str) -> str:
    """Every question on a fresh tree object (so nothing is shared in memory), as one JSON text."""
    tree = SourceTree.at(LocalHost(), package_dir)
    snapshot = parse_log(LOG.read_text())
    out = {}
    for flag, with_log, cuda in QUESTIONS:
        found = explain(tree, flag, snapshot if with_log else None, QWEN36 if with_log else None,
                        probes=CUDA_PROBES if cuda else None)
        out[f"why {flag}"] = [found.to_dict(), found.to_text()]
    out["flags"] = [repr(spec) + spec.source + repr(spec.default_value) for spec in flag_table(tree)]
    out["defaults"] = [[repr(fd), fd.value, fd.source, fd.origin] for fd in defaults(tree).values()]
    out["lineage"] = [str(lineage(tree, name)) for name in ("disable_piecewise_cuda_graph", "cuda_graph_config",
                                                            "enable_piecewise_cuda_graph")]
    index_mod.flush()  # what a command does when it exits
    return json.dumps(out, sort_keys=True, default=repr)


def _index_file(cache: Path) -> list[Path]:
    return sorted((cache / "index").glob("*.json"))


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_answers_are_the_same_with_the_index_off_cold_and_warm(trees, cache, monkeypatch, version):
    monkeypatch.setenv("SGL_KIT_INDEX", "0")
    off = _answers(trees[version])
    assert not (cache / "index").exists()
    monkeypatch.delenv("SGL_KIT_INDEX")
    cold = _answers(trees[version])
    (stored,) = _index_file(cache)
    sections = json.loads(stored.read_text())["sections"]
    assert {"flags", "defaults", "candidates", "calls"} <= set(sections)
    warm = _answers(trees[version])
    assert cold == off
    assert warm == off
    tree = SourceTree.at(LocalHost(), trees[version])
    assert index_of(modules_for(tree)).loaded


def test_the_cli_prints_the_same_bytes_with_and_without_the_index(trees, cache):
    runs = {}
    for how, env in (("off", {"SGL_KIT_INDEX": "0"}), ("cold", {}), ("warm", {})):
        env = {**os.environ, **env}
        outs = []
        for argv in (["why", "disable_piecewise_cuda_graph", "local", "--package-dir", trees["0.5.11"],
                      "--log", str(LOG), "--model-config", str(QWEN36)],
                     ["why", "disable_piecewise_cuda_graph", "local", "--package-dir", trees["0.5.23"], "--cuda"],
                     ["args", "parse", str(LOG), "--package-dir", trees["0.5.11"]]):
            proc = subprocess.run([SGL_KIT, "--json", *argv], capture_output=True, timeout=300, env=env)
            assert proc.returncode == 0, proc.stderr.decode()
            outs.append(proc.stdout)
        runs[how] = outs
    assert runs["cold"] == runs["off"]
    assert runs["warm"] == runs["off"]
    assert len(_index_file(cache)) == 2


def _copy_tree(src: str, dest: Path) -> str:
    shutil.copytree(Path(src).parent / "sglang", dest / "sglang")
    return str(dest / "sglang")


def test_an_edited_tree_gets_a_new_index(trees, cache, tmp_path):
    package = _copy_tree(trees["0.5.11"], tmp_path / "site")
    before = defaults(SourceTree.at(LocalHost(), package))["chunked_prefill_size"]
    assert before.known and before.value is None
    path = Path(package) / "srt" / "server_args.py"
    text = path.read_text()
    declared = "    chunked_prefill_size: Optional[int] = None\n"
    assert declared in text
    path.write_text(text.replace(declared, "    chunked_prefill_size: Optional[int] = 4096\n"))
    edited = SourceTree.at(LocalHost(), package)
    assert defaults(edited)["chunked_prefill_size"].value == 4096
    assert not index_of(modules_for(edited)).loaded  # a new fingerprint: nothing read from the old index
    index_mod.flush()
    assert len(_index_file(cache)) == 2


def _plant(cache: Path, package: str, **header) -> Path:
    """Build the index of a tree, then change one stored default (and the header) in the file."""
    defaults(SourceTree.at(LocalHost(), package))
    index_mod.flush()
    (stored,) = _index_file(cache)
    data = json.loads(stored.read_text())
    planted = index_mod.decode(data["sections"]["defaults"][""])
    for fd in planted:
        if fd["name"] == "chunked_prefill_size":
            fd["value"] = 123
    data["sections"]["defaults"][""] = index_mod.encode(planted)
    data.update(header)
    stored.write_text(json.dumps(data))
    return stored


def test_a_stored_fact_is_read_back_when_the_header_matches(trees, cache):
    _plant(cache, trees["0.5.11"])
    # The planted value comes back: the warm path really reads the file (and the tests below can fail).
    assert defaults(SourceTree.at(LocalHost(), trees["0.5.11"]))["chunked_prefill_size"].value == 123


@pytest.mark.parametrize("header", [{"kit": "0.0.1"}, {"format": index_mod.FORMAT + 1}, {"code": "0" * 16},
                                    {"python": "2.7"}, {"fingerprint": "listing:other"}])
def test_a_different_kit_version_or_format_is_not_read(trees, cache, header):
    stored = _plant(cache, trees["0.5.11"], **header)
    tree = SourceTree.at(LocalHost(), trees["0.5.11"])
    assert defaults(tree)["chunked_prefill_size"].value is None
    assert not index_of(modules_for(tree)).loaded
    index_mod.flush()
    rebuilt = json.loads(stored.read_text())
    assert {k: rebuilt[k] for k in header} != header  # rewritten with this kit's header


def test_the_kit_version_and_format_are_in_the_header(trees, cache, monkeypatch):
    defaults(SourceTree.at(LocalHost(), trees["0.5.11"]))
    index_mod.flush()
    monkeypatch.setattr(index_mod, "__version__", "9.9.9")
    tree = SourceTree.at(LocalHost(), trees["0.5.11"])
    defaults(tree)
    assert not index_of(modules_for(tree)).loaded
    index_mod.flush()
    monkeypatch.setattr(index_mod, "FORMAT", index_mod.FORMAT + 1)
    tree = SourceTree.at(LocalHost(), trees["0.5.11"])
    defaults(tree)
    assert not index_of(modules_for(tree)).loaded
    index_mod.flush()
    header = json.loads(_index_file(cache)[0].read_text())
    assert (header["kit"], header["format"]) == ("9.9.9", index_mod.FORMAT)


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"\xff\xfe\x00", b'{"format": 1}', b"[1, 2]",
                                     b'{"sections": {"defaults": "x"}}'])
def test_a_corrupt_index_is_rebuilt_without_an_error(trees, cache, garbage):
    want = _answers(trees["0.5.11"])
    (stored,) = _index_file(cache)
    stored.write_bytes(garbage)
    assert _answers(trees["0.5.11"]) == want
    assert json.loads(stored.read_text())["sections"]["defaults"][""]


def test_a_stored_value_of_the_wrong_shape_is_recomputed(trees, cache):
    _answers(trees["0.5.11"])
    (stored,) = _index_file(cache)
    data = json.loads(stored.read_text())
    data["sections"]["flags"][""] = {"nonsense": 1}
    stored.write_text(json.dumps(data))
    tree = SourceTree.at(LocalHost(), trees["0.5.11"])
    index = index_of(modules_for(tree))
    assert index.get("flags") is index_mod.MISSING


_BUILD = """
import sys
from kit.hosts import LocalHost
from kit.provenance import explain
from kit.source import SourceTree
tree = SourceTree.at(LocalHost(), sys.argv[1])
print(explain(tree, sys.argv[2]).to_text())
"""


def test_concurrent_builds_leave_one_whole_index(trees, cache):
    flags = ["disable_piecewise_cuda_graph", "mem_fraction_static", "chunked_prefill_size", "attention_backend"]
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD, trees["0.5.11"], flag], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for flag in flags]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e.decode() for _, e in outs]
    (stored,) = _index_file(cache)
    assert not [p for p in stored.parent.iterdir() if p.suffix == ".tmp"]
    data = json.loads(stored.read_text())
    assert {"flags", "defaults"} <= set(data["sections"])
    # Each process's facts may or may not have survived the others' writes; what is there is whole.
    tree = SourceTree.at(LocalHost(), trees["0.5.11"])
    assert index_of(modules_for(tree)).loaded
    for flag, (out, _) in zip(flags, outs, strict=True):
        fresh = SourceTree.at(LocalHost(), trees["0.5.11"])
        assert explain(fresh, flag).to_text() + "\n" == out.decode()


def test_a_tree_without_a_fingerprint_has_no_index(cache):
    from _source_support import DictTree

    tree = DictTree({"__init__.py": ""})
    assert index_of(modules_for(tree)) is None


def test_the_index_can_be_turned_off(trees, cache, monkeypatch):
    monkeypatch.setenv("SGL_KIT_INDEX", "0")
    assert index_of(modules_for(SourceTree.at(LocalHost(), trees["0.5.11"]))) is None


_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(st.integers() | st.text() | st.tuples(st.integers()), inner, max_size=4)
                   | st.frozensets(st.integers() | st.text(), max_size=4)
                   | st.sets(st.integers(), max_size=4)),
    max_leaves=12,
)


def _typed(value):
    """A value with the type of every part spelled out, so True == 1 and (1,) == [1] do not pass."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted((_typed(v) for v in value), key=repr))
    return (type(value).__name__, value)


@given(_plain)
def test_plain_data_comes_back_as_it_was(value):
    back = index_mod.decode(json.loads(json.dumps(index_mod.encode(value))))
    assert _typed(back) == _typed(value)


def test_non_finite_floats_and_objects():
    back = index_mod.decode(json.loads(json.dumps(index_mod.encode([math.inf, -math.inf]))))
    assert back == [math.inf, -math.inf]
    assert math.isnan(index_mod.decode(json.loads(json.dumps(index_mod.encode(math.nan)))))
    with pytest.raises(index_mod.NotPlain):
        index_mod.encode(object())
    with pytest.raises(index_mod.NotPlain):
        index_mod.encode({"a": [1, LocalHost()]})


def test_only_the_most_recently_used_indexes_are_kept(trees, cache, monkeypatch):
    monkeypatch.setattr(index_mod, "MAX_INDEXES", 3)
    folder = cache / "index"
    folder.mkdir(parents=True)
    for i in range(5):
        old = folder / f"sglang-0.0.{i}-old.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    defaults(SourceTree.at(LocalHost(), trees["0.5.11"]))
    index_mod.flush()
    kept = sorted(p.name for p in folder.glob("*.json"))
    assert len(kept) == 3
    assert "sglang-0.0.4-old.json" in kept and "sglang-0.0.3-old.json" in kept
    assert any(name.startswith("sglang-0.5.11-") for name in kept)


# --------------------------------------------------------------------------- one round trip

_STAND_IN = '''
import http.server, json, os, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok"
        if self.path == "/server_info" and os.environ.get("STAND_IN_INFO") == "json":
            body = json.dumps({"model_path": "/m", "port": port, "tp_size": 2, "version": "0.5.11"}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
for i in range(5000):
    print("line %d of the log \\u00e9\\r" % i if i % 997 == 0 else "line %d of the log" % i)
print("server_args=ServerArgs(model_path='/m', port=%d)" % port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """Two stand-in sglang servers (real processes, real HTTP, logs of 5000+ lines): one whose
    /server_info answers JSON, one whose answer is not JSON; a torch whose cpu.is_available() is constant."""
    import time
    import urllib.request

    from _lab_support import free_port

    site = tmp_path_factory.mktemp("stand-in-site")
    (site / "sglang").mkdir()
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(_STAND_IN)
    (site / "sglang-0.5.11.dist-info").mkdir()
    (site / "sglang-0.5.11.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.5.11\n")
    (site / "torch" / "cpu").mkdir(parents=True)
    (site / "torch" / "cpu" / "__init__.py").write_text("def is_available():\n    return True\n")
    procs, ports = [], []
    for info in ("json", "text"):
        port = free_port()
        log = open(site / f"server-{info}.log", "wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--port", str(port)], cwd=site,
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=dict(os.environ, PYTHONPATH=str(site), STAND_IN_INFO=info)))
        ports.append(port)
    for port in ports:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, f"the stand-in on {port} did not listen"
                time.sleep(0.05)
    yield dict(zip(("json", "text"), zip(procs, ports, strict=True), strict=True))
    for proc in procs:
        proc.kill()
        proc.wait(10)


class _Counting:
    """Counts the requests a host answers (each one a round trip over SSH)."""

    def __init__(self, host, monkeypatch) -> None:
        self.calls: list[str] = []
        for name in ("_start_stream", "_call_idempotent"):  # every command, every file read
            original = getattr(host, name, None)
            if original is None:
                continue

            def counted(*args, _original=original, _name=name, **kwargs):
                self.calls.append(_name)
                return _original(*args, **kwargs)

            monkeypatch.setattr(host, name, counted)


def _what_the_doctor_reads(server) -> dict:
    from kit.errors import KitError
    from kit.provenance.host_probes import host_probes

    out = {"server": server.to_dict(), "tail": server.log_tail(4000), "head": server.log_head(3000),
           "probes": host_probes(server)}
    try:
        out["server_info"] = server.server_info()
    except KitError as err:
        out["server_info"] = f"{type(err).__name__}: {err.message} -> {err.hint}"
    return out


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_one_round_trip_reads_what_several_do(stand_ins, where, request, monkeypatch):
    from kit.target import connect, discover

    if where == "ssh":
        sshd = request.getfixturevalue("sshd")
        host = connect(sshd.alias, config_file=str(sshd.ssh_config))
    else:
        host = connect("local")
    with host:
        pids = {proc.pid: info for info, (proc, _) in stand_ins.items()}
        several = {pids[s.pid]: s for s in discover(host) if s.pid in pids}
        counter = _Counting(host, monkeypatch)
        one = {pids[s.pid]: s for s in discover(host, prefetch=True) if s.pid in pids}
        assert sorted(one) == sorted(several) == ["json", "text"]
        assert counter.calls == ["_start_stream"]  # discovery: one request
        counter.calls.clear()
        for info in one:
            fetched = one[info].prefetched
            assert {"head", "tail", "machine", "torch_cpu"} <= set(fetched)
            assert ("server_info" in fetched) is True  # both answer 200; one body is not JSON
            got = _what_the_doctor_reads(one[info])
            assert counter.calls == [], counter.calls  # nothing more was asked of the host
            assert not {"head", "tail", "server_info"} & set(one[info].prefetched)  # each used once
            want = _what_the_doctor_reads(several[info])
            assert got == want
            assert len(got["tail"]) == 4000 and len(got["head"]) == 3000
            assert got["probes"] == {"platform.machine": os.uname().machine, "torch.cpu.is_available": True}
            assert len(counter.calls) >= 4  # the several-trip path: tail, head, uname, torch, (/server_info)
            counter.calls.clear()
        assert one["json"].server_info is not None
        assert _what_the_doctor_reads(several["json"])["server_info"]["tp_size"] == 2
        assert _what_the_doctor_reads(several["text"])["server_info"].startswith("HostError: GET ")
        # Asked again, the same server reads afresh: the host answers, with the same lines.
        counter.calls.clear()
        assert one["json"].log_tail(4000) == _what_the_doctor_reads(several["json"])["tail"]
        assert counter.calls


def test_a_prefetch_of_other_line_counts_is_not_used_for_another_count(stand_ins):
    from kit.target import connect, discover

    with connect("local") as host:
        proc, _ = stand_ins["json"]
        (server,) = [s for s in discover(host, prefetch={"tail": 10}) if s.pid == proc.pid]
        assert server.prefetched["tail"][0] == 10 and "head" not in server.prefetched
        (plain,) = [s for s in discover(host) if s.pid == proc.pid]
        assert server.log_tail(20) == plain.log_tail(20)
        assert "tail" in server.prefetched  # not the count it holds: left for a question that asks it
        assert server.log_tail(10) == plain.log_tail(10)
