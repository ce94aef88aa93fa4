"""kit._pysource.skeleton: a module parsed with its functions left for later is the module a whole parse gives.

On every file of real sglang 0.5.11 and 0.5.23, the skeleton's tree, once each function has been
looked into, dumps (fields and positions) exactly as ``ast.parse`` of the file does. A stored
layout that does not fit the text is refused, a function whose lines changed is taken from a
whole parse, and a warm ``why`` leaves the functions it never reads unparsed. The tree's own
greps and function places come back from the index without a command on the host.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit import _index as index_mod
from kit._pysource import is_deferred, modules_for
from kit._pysource.modules import parse
from kit._pysource.skeleton import deferred_defs, skeleton
from kit.hosts import LocalHost
from kit.provenance import explain
from kit.server_args import parse_log
from kit.source import SourceTree

DATA = Path(__file__).parent / "data" / "provenance"


@pytest.fixture(scope="module")
def trees(sglang_source) -> dict[str, str]:
    return {v: sglang_source(v) for v in ("0.5.11", "0.5.23")}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("SGL_KIT_CACHE", str(path))
    monkeypatch.delenv("SGL_KIT_INDEX", raising=False)
    return path


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=True)  # reads every field: each deferred function is parsed


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_the_largest_files_of_a_real_tree_come_out_as_a_whole_parse(trees, version):
    # The files where leaving functions for later pays most (the 25 largest: server_args.py, the schedulers,
    # the model runners) and the ones the kit's questions read first.
    root = Path(trees[version])
    every = sorted(root.rglob("*.py"))
    largest = sorted(every, key=lambda p: (-p.stat().st_size, str(p)))[:25]
    first = [root / "srt" / rel for rel in ("server_args.py", "environ.py", "configs/model_config.py", "utils/common.py",
                                            "utils/__init__.py")]
    files = sorted({p for p in [*largest, *first] if p.is_file()})
    deferred = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            whole = parse(text)
        except SyntaxError:
            continue
        layout = deferred_defs(whole, text)
        made = skeleton(text, layout, parse)
        assert made is not None, path
        deferred += sum(is_deferred(n) for n in [*made.body, *(s for c in made.body if isinstance(c, ast.ClassDef)
                                                                for s in c.body)])
        assert _dump(made) == _dump(whole), path
    assert len(files) >= 26 and deferred > 1000  # the real trees, and most of their functions left for later


SOURCE = '''import os


@decorator(
    arg=1,
)
def top(a, b=2):
    """Doc."""
    x = a + b
    return x


class Box:
    size: int = 3

    def method(self, n):
        if n:
            return n
        return self.size

    async def fetch(self):
        await thing()
        await other()
        return 1
        # a comment at the end

    def short(self): return 1


def tail():
    y = 1
    z = 2
    return y + z
'''


def test_a_skeleton_defers_the_longer_functions_and_keeps_their_places():
    layout = deferred_defs(parse(SOURCE), SOURCE)
    assert [d[7] for d in layout["defs"]] == ["top", "method", "fetch", "tail"]  # `short` is one line: kept
    made = skeleton(SOURCE, layout, parse)
    top, box, tail = made.body[1], made.body[2], made.body[3]
    assert is_deferred(top) and is_deferred(tail) and isinstance(top, ast.FunctionDef)
    assert (top.name, top.lineno, top.end_lineno) == ("top", 7, 10) and is_deferred(top)  # positions need no parse
    assert type(top).__name__ == "FunctionDef"  # the evaluator dispatches on it
    assert (box.lineno, box.end_lineno) == (13, 27)  # the class ends where its last method does
    method, fetch = box.body[1], box.body[2]
    assert isinstance(fetch, ast.AsyncFunctionDef) and is_deferred(fetch)
    assert [n.arg for n in method.args.args] == ["self", "n"] and not is_deferred(method)
    assert type(method) is ast.FunctionDef and is_deferred(fetch)  # one read parses that function only
    assert _dump(made) == _dump(parse(SOURCE))


@pytest.mark.parametrize("change", ["lines", "name", "position"])
def test_a_layout_that_does_not_fit_the_text_is_refused(change):
    layout = deferred_defs(parse(SOURCE), SOURCE)
    if change == "lines":
        layout["lines"] += 1
    elif change == "name":
        layout["defs"][0][7] = "other"
    else:
        layout["defs"][0][3] += 1
    assert skeleton(SOURCE, layout, parse) is None


def test_a_function_whose_lines_changed_is_taken_from_a_whole_parse():
    layout = deferred_defs(parse(SOURCE), SOURCE)
    made = skeleton(SOURCE, layout, parse)
    entry = next(d for d in layout["defs"] if d[7] == "method")
    entry[6] += 5  # the stored end column no longer matches what its own lines parse to
    again = skeleton(SOURCE, layout, parse)
    method = again.body[2].body[1]
    assert method.name == "method" and _dump(method) == _dump(made.body[2].body[1])


def test_a_warm_why_leaves_what_it_never_reads_unparsed(trees, cache):
    def why():
        tree = SourceTree.at(LocalHost(), trees["0.5.11"])
        found = explain(tree, "disable_piecewise_cuda_graph", parse_log((DATA / "incident-0.5.11.log").read_text()),
                        DATA / "qwen3.6-27b" / "config.json")
        index_mod.flush()
        return tree, found

    _, cold = why()
    tree, warm = why()
    assert warm.to_dict() == cold.to_dict()
    server_args = modules_for(tree).module("srt/server_args.py")
    cls = server_args.classes["ServerArgs"]
    methods = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert is_deferred(methods["add_cli_args"])  # 2,500 lines of argparse that the question never needs
    assert not is_deferred(methods["_handle_piecewise_cuda_graph"])  # where the flag is written: read
    assert sum(map(is_deferred, methods.values())) > len(methods) // 3


class CountingHost(LocalHost):
    def __init__(self) -> None:
        super().__init__()
        self.commands: list = []

    def run(self, argv, **kwargs):
        self.commands.append(argv)
        return super().run(argv, **kwargs)


def test_the_trees_greps_and_function_places_come_back_from_its_index(trees, cache):
    def ask():
        host = CountingHost()
        tree = SourceTree.at(host, trees["0.5.11"])
        tree.fingerprint()  # what the index is keyed by: one command, asked once per tree
        before = len(host.commands)
        hits = [(m.path, m.line, m.text) for m in tree.grep("_handle_piecewise_cuda_graph", fixed=True)]
        snippet = tree.function("ServerArgs._handle_piecewise_cuda_graph")
        other = tree.grep("is_cpu", glob="*.txt")  # not what a fingerprint covers: never stored
        index_mod.flush()
        greps = [c for c in host.commands[before:] if "grep" in c]
        return hits, (snippet.path, snippet.start, snippet.end, snippet.text), greps, other

    hits, snippet, greps, _ = ask()
    assert len(greps) == 3 and hits and snippet[0] == "srt/server_args.py"
    hits2, snippet2, greps2, _ = ask()
    assert (hits2, snippet2) == (hits, snippet)
    assert len(greps2) == 1 and "--include=*.txt" in greps2[0]  # only the grep outside the index ran again
