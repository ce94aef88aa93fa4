"""kit.source against real sglang releases, on this machine and over a real sshd."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from rich.console import Console

from kit._paths import cache_dir
from kit._wheels import install_package_source
from kit.errors import (
    AmbiguousSymbol,
    CommandFailed,
    LineRangeError,
    PackageNotFound,
    SourceError,
    SourceFileNotFound,
    SourceInputError,
    SymbolNotFound,
)
from kit.hosts import LocalHost, SSHHost
from kit.source import GrepMatch, SourceSnippet, SourceTree
from kit.source.snapshot import content_hash, extract, unpack

RULE8 = [
    "        # 8. Multimodal / VLM models",
    "        if self.get_model_config().is_multimodal:",
    "            self.disable_piecewise_cuda_graph = True",
]
PY_TAG = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _ssh_host(server, **kw) -> SSHHost:
    return SSHHost(
        server.host,
        port=server.port,
        user=server.user,
        key_filename=str(server.key_path),
        known_hosts=str(server.known_hosts),
        config_file=None,
        allow_agent=False,
        look_for_keys=False,
        **kw,
    )


@pytest.fixture(scope="module")
def local_host():
    host = LocalHost()
    yield host
    host.close()


@pytest.fixture(scope="module")
def ssh_host(sshd):
    host = _ssh_host(sshd)
    yield host
    host.close()


@pytest.fixture(scope="module", params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def host(request):
    return request.getfixturevalue(f"{request.param}_host")


@pytest.fixture(scope="module")
def src511(sglang_source) -> Path:
    return Path(sglang_source("0.5.11"))


@pytest.fixture(scope="module")
def tree511(host, src511) -> SourceTree:
    return SourceTree.at(host, str(src511))


@pytest.fixture(scope="module")
def venv(tmp_path_factory, src511) -> Path:
    """A venv laid out like the incident's /root/ml-env, with sglang unpacked into it."""
    root = tmp_path_factory.mktemp("ml-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    install_package_source("sglang", "0.5.11", prefix=root, python_tag=PY_TAG)
    site = root / "lib" / PY_TAG / "site-packages"
    # A package whose import leaves a trace: locate() must find it without importing it.
    (site / "kitcanary").mkdir()
    (site / "kitcanary" / "__init__.py").write_text(
        f"open({str(root / 'imported')!r}, 'w').write('yes')\n"
    )
    (site / "kitcanary-1.2.3.dist-info").mkdir()
    (site / "kitcanary-1.2.3.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: kitcanary\nVersion: 1.2.3\n\n")
    return root


def _lines_with(root: Path, needle: str) -> set[tuple[str, int, str]]:
    """What grep -F should find: computed here, file by file, from the same tree."""
    found = set()
    for p in root.rglob("*.py"):
        for n, raw in enumerate(p.read_bytes().split(b"\n"), 1):
            if needle.encode() in raw:
                found.add((p.relative_to(root).as_posix(), n, raw.decode("utf-8", "replace")))
    return found


# --------------------------------------------------------------------------- locating


def test_locate_finds_sglang_in_a_venv_with_its_version(host, venv):
    tree = SourceTree.locate(host, python=str(venv / "bin" / "python"))
    site = venv / "lib" / PY_TAG / "site-packages"
    assert (tree.root, tree.version, tree.package) == (str(site / "sglang"), "0.5.11", "sglang")
    assert tree.dist_info == str(site / "sglang-0.5.11.dist-info")
    assert tree.read("srt/server_args.py", 1228, 1230).lines == RULE8


def test_locate_does_not_import_the_package(host, venv):
    tree = SourceTree.locate(host, "kitcanary", python=str(venv / "bin" / "python"))
    assert tree.version == "1.2.3"
    assert not (venv / "imported").exists()
    # The canary works: importing it does leave the trace.
    subprocess.run([str(venv / "bin" / "python"), "-c", "import kitcanary"], check=True, timeout=60)
    assert (venv / "imported").exists()
    (venv / "imported").unlink()


def test_locate_missing_interpreter_names_it_and_the_host(host):
    with pytest.raises(PackageNotFound) as err:
        SourceTree.locate(host, python="/nonexistent/bin/python3.12")
    text = str(err.value)
    assert "/nonexistent/bin/python3.12" in text and host.name in text
    assert "--python PATH" in err.value.hint and "--package-dir DIR" in err.value.hint


@pytest.mark.ssh
def test_locate_missing_interpreter_without_the_helper(sshd):
    with _ssh_host(sshd, use_helper=False) as host:
        assert host.mode == "exec"
        with pytest.raises(PackageNotFound, match="could not run interpreter"):
            SourceTree.locate(host, python="/nonexistent/python3")


def test_locate_missing_package_shows_that_interpreters_sys_path(host, venv):
    with pytest.raises(PackageNotFound) as err:
        SourceTree.locate(host, "no_such_pkg_kit", python=str(venv / "bin" / "python"))
    assert "sys.path" in str(err.value)
    assert str(venv / "lib" / PY_TAG / "site-packages") in str(err.value)
    assert "--python PATH" in err.value.hint


def test_locate_rejects_dotted_or_hostile_package_names(local_host):
    for bad in ("sglang.srt", "-c", "x; rm -rf /", ""):
        with pytest.raises(SourceInputError):
            SourceTree.locate(local_host, bad)


# --------------------------------------------------------------------------- explicit directories


def test_at_reads_version_from_the_sibling_dist_info(host, sglang_source):
    assert SourceTree.at(host, sglang_source("0.5.11")).version == "0.5.11"
    assert SourceTree.at(host, sglang_source("0.5.10.post1")).version == "0.5.10.post1"


def test_at_missing_directory(host, tmp_path):
    with pytest.raises(PackageNotFound, match="does not exist"):
        SourceTree.at(host, str(tmp_path / "nope" / "sglang"))


def test_at_site_packages_instead_of_the_package_suggests_the_package(host, src511):
    with pytest.raises(PackageNotFound, match="no __init__.py") as err:
        SourceTree.at(host, str(src511.parent), package="sglang")
    assert str(src511) in err.value.hint


def test_at_without_dist_info_has_no_version(local_host, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    tree = SourceTree.at(local_host, str(tmp_path / "pkg"))
    assert (tree.version, tree.dist_info, tree.package) == (None, None, "pkg")


# --------------------------------------------------------------------------- reads


def test_read_rule8_lines_by_any_path_spelling(tree511, src511):
    for path in ("srt/server_args.py", "sglang/srt/server_args.py", str(src511 / "srt/server_args.py")):
        snip = tree511.read(path, 1228, 1230)
        assert snip.lines == RULE8
        assert (snip.path, snip.start, snip.end, snip.total_lines) == ("srt/server_args.py", 1228, 1230, 7506)
        assert snip.version == "0.5.11"


def test_read_matches_sed(tree511, src511):
    sed = subprocess.run(
        ["sed", "-n", "1222,1260p", str(src511 / "srt/server_args.py")], capture_output=True, text=True, check=True
    )
    assert tree511.read("srt/server_args.py", 1222, 1260).text == sed.stdout.rstrip("\n")


def test_read_whole_file_and_to_eof(tree511, src511):
    text = (src511 / "srt/server_args.py").read_text()
    assert tree511.read_text("srt/server_args.py") == text
    tail = tree511.read("srt/server_args.py", 7500)
    assert (tail.start, tail.end) == (7500, 7506)
    assert tail.lines == text.split("\n")[7499:7506]


def test_read_past_the_end_tells_the_real_length(tree511):
    with pytest.raises(LineRangeError, match=r"has 7506 lines.*7500-7600"):
        tree511.read("srt/server_args.py", 7500, 7600)
    with pytest.raises(LineRangeError, match="7506"):
        tree511.read("srt/server_args.py", 9000, 9001)
    with pytest.raises(LineRangeError):
        tree511.read("srt/server_args.py", 10, 5)
    with pytest.raises(LineRangeError):
        tree511.read("srt/server_args.py", 0, 5)


def test_missing_file(tree511):
    with pytest.raises(SourceFileNotFound, match="srt/server_argz.py") as err:
        tree511.read("srt/server_argz.py", 1, 2)
    assert "0.5.11" in str(err.value) and "files(" in err.value.hint
    with pytest.raises(SourceFileNotFound):
        tree511.read_text("srt/nope.py")


def test_paths_cannot_leave_the_package_root(tree511, src511):
    for bad in ("../sglang-0.5.11.dist-info/METADATA", "srt/../../x.py", "/etc/passwd", str(src511) + "x/a.py", "", "a\0b"):
        with pytest.raises(SourceInputError):
            tree511.read(bad, 1, 1)
    with pytest.raises(ValueError):  # SourceInputError is also a ValueError
        tree511.read_text("../../etc/passwd")


def test_non_utf8_and_form_feeds_read_like_sed(host, tmp_path):
    pkg = tmp_path / "weird"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "bad.py").write_bytes(b"x = 1\n# caf\xe9 \xff\xfe\n\x0cy = 2  # after a form feed\nz = '\xe2\x80\xa8'\nw = 3\n")
    tree = SourceTree.at(host, str(pkg))
    snip = tree.read("bad.py")
    assert snip.total_lines == 5 and len(snip.lines) == 5
    assert snip.lines[1] == "# caf\ufffd \ufffd\ufffd"
    assert snip.lines[2] == "\x0cy = 2  # after a form feed"
    assert tree.read("bad.py", 5, 5).lines == ["w = 3"]
    assert tree.read("bad.py", 3, 4).lines == ["\x0cy = 2  # after a form feed", "z = '\u2028'"]
    # grep still searches a file that is not valid UTF-8, and function() parses it.
    assert [(m.path, m.line) for m in tree.grep("form feed")] == [("bad.py", 3)]
    assert [(m.path, m.line) for m in tree.grep("caf")] == [("bad.py", 2)]


def test_crlf_files_read_grep_and_parse_alike(host, tmp_path):
    pkg = tmp_path / "crlf"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "win.py").write_bytes(b"class A:\r\n    def f(self):\r\n        return 1\r\n")
    tree = SourceTree.at(host, str(pkg))
    assert tree.read("win.py").lines == ["class A:", "    def f(self):", "        return 1"]
    assert tree.function("A.f").lines == ["    def f(self):", "        return 1"]
    assert [m.text for m in tree.grep("return", fixed=True)] == ["        return 1"]


def test_empty_file_reads_as_empty_snippet(local_host, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    snip = SourceTree.at(local_host, str(tmp_path / "p")).read("__init__.py")
    assert (snip.lines, snip.total_lines) == ([], 0)


# --------------------------------------------------------------------------- functions by name


def test_function_finds_the_incident_method_in_0_5_11(tree511):
    snip = tree511.function("ServerArgs._handle_piecewise_cuda_graph")
    assert (snip.path, snip.start, snip.qualname) == ("srt/server_args.py", 1194, "ServerArgs._handle_piecewise_cuda_graph")
    assert snip.lines[0] == "    def _handle_piecewise_cuda_graph(self):"
    assert snip.find(r"if self\.get_model_config\(\)\.is_multimodal:") == [1229]
    assert snip.line(1229) == RULE8[1]
    assert snip.end == 1261 and snip.total_lines == 7506


def test_function_finds_the_same_rule_elsewhere_in_0_5_10(host, sglang_source):
    tree = SourceTree.at(host, sglang_source("0.5.10.post1"))
    snip = tree.function("ServerArgs._handle_piecewise_cuda_graph")
    assert snip.start == 1078
    assert snip.find(r"is_multimodal:") == [1110]
    assert snip.line(1109).strip() == "# 9. Multimodal / VLM models"


def test_function_includes_decorators(local_host, tmp_path):
    pkg = tmp_path / "deco"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "import functools\n\nclass A:\n    @property\n    @functools.lru_cache\n    def f(self):\n"
        "        return 1\n\n    @f.setter\n    def f(self, v):\n        pass\n"
    )
    snip = SourceTree.at(local_host, str(pkg)).function("A.f")
    assert (snip.start, snip.end) == (4, 7)  # the getter, decorators included
    assert snip.lines[0] == "    @property"


def test_function_by_unique_suffix_and_with_explicit_path(tree511):
    assert tree511.function("_handle_piecewise_cuda_graph").start == 1194
    snip = tree511.function("ModelConfig.__init__", path="srt/configs/model_config.py")
    assert snip.path == "srt/configs/model_config.py" and snip.lines[0].lstrip().startswith("def __init__")


def test_function_typo_lists_near_misses(tree511):
    with pytest.raises(SymbolNotFound) as err:
        tree511.function("ServerArgs._handle_piecewise_cuda_grap")
    assert "near misses: ServerArgs._handle_piecewise_cuda_graph" in str(err.value)


def test_function_ambiguous_names_the_files(tree511):
    # Two ServerArgs classes ship in 0.5.11: srt/ and multimodal_gen/.
    with pytest.raises(AmbiguousSymbol) as err:
        tree511.function("ServerArgs")
    assert "srt/server_args.py:302" in str(err.value)
    assert "multimodal_gen/runtime/server_args.py" in str(err.value)
    assert tree511.function("ServerArgs", path="srt/server_args.py").start == 302


def test_function_rejects_non_names(tree511):
    with pytest.raises(SourceInputError):
        tree511.function("ServerArgs._x; rm -rf /")


# --------------------------------------------------------------------------- grep and files


def test_grep_is_multimodal_matches_a_scan_done_here(tree511, src511):
    result = tree511.grep("is_multimodal", fixed=True)
    assert {(m.path, m.line, m.text) for m in result} == _lines_with(src511, "is_multimodal")
    assert [m.line for m in result.in_file("srt/server_args.py")] == [1229, 1486]
    assert result.matches == sorted(result.matches, key=lambda m: (m.path, m.line))
    assert not result.truncated


def test_grep_regex_ignore_case_and_no_match(tree511):
    hits = tree511.grep(r"IS_MULTIMODAL:$", ignore_case=True)
    assert ("srt/server_args.py", 1229) in [(m.path, m.line) for m in hits]
    empty = tree511.grep("no such text anywhere 8c1f", fixed=True)
    assert (len(empty), bool(empty), empty.truncated) == (0, False, False)


def test_grep_truncates_at_max_matches(tree511):
    result = tree511.grep("import", fixed=True, max_matches=5)
    assert len(result) == 5 and result.truncated
    assert "(truncated)" in repr(result)


def test_grep_bad_regex_is_a_clear_error(tree511):
    with pytest.raises(CommandFailed) as err:
        tree511.grep("(unclosed")
    assert "fixed=True" in err.value.hint


def test_grep_patterns_with_leading_dashes_are_patterns(local_host, tmp_path):
    pkg = tmp_path / "dash"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = '--include=*.txt'\ny = '-rf'\n")
    tree = SourceTree.at(local_host, str(pkg))
    assert [m.line for m in tree.grep("--include=*.txt", fixed=True)] == [1]
    assert [m.line for m in tree.grep("-rf", fixed=True)] == [2]
    with pytest.raises(SourceInputError):
        tree.grep("a\nb")


def test_files_lists_relative_sorted_paths(tree511, src511):
    expected = sorted(p.relative_to(src511).as_posix() for p in src511.rglob("*.py"))
    assert tree511.files() == expected
    assert tree511.files("server_args.py") == ["multimodal_gen/runtime/server_args.py", "srt/server_args.py"]
    assert tree511.files("srt/configs/*.py")[:2] == ["srt/configs/__init__.py", "srt/configs/afmoe.py"]
    assert "srt/configs/model_config.py" in tree511.files("srt/**/model_*.py")


# --------------------------------------------------------------------------- snippets


def test_snippet_text_marks_and_repr(tree511):
    snip = tree511.function("ServerArgs._handle_piecewise_cuda_graph")
    assert snip.mark(snip.find("is_multimodal:")[0], "rule 8: multimodal") is snip
    lines = str(snip).splitlines()
    assert lines[0] == "  1194 |     def _handle_piecewise_cuda_graph(self):"
    assert lines[1229 - 1194] == "> 1229 |         if self.get_model_config().is_multimodal:    <-- rule 8: multimodal"
    where = f"srt/server_args.py:1194-1261 sglang 0.5.11 @ {tree511.host.name}"
    assert repr(snip) == f"<SourceSnippet ServerArgs._handle_piecewise_cuda_graph {where}>"
    with pytest.raises(LineRangeError):
        snip.mark(1300, "outside")


def test_snippet_html_is_self_styled_and_escaped(tree511):
    snip = tree511.read("srt/server_args.py", 1228, 1230).mark(1229, "rule 8 <multimodal>")
    page = snip._repr_html_()
    assert "1229" in page and "1227" not in page
    assert not re.search(r'class="(?!highlight")', page)  # inline styles only, so export keeps colours
    assert "background-color: #ffffcc" in page  # the marked line
    assert "rule 8 &lt;multimodal&gt;" in page


def test_snippet_renders_in_a_terminal(tree511):
    snip = tree511.read("srt/server_args.py", 1228, 1230).mark(1229, "rule 8")
    console = Console(record=True, width=120, color_system=None)
    console.print(snip)
    out = console.export_text()
    assert "1229" in out and "is_multimodal" in out and "> 1229: rule 8" in out


def test_snippet_is_plain_data():
    snip = SourceSnippet("a.py", 3, 4, ["x = 1", "y = 2"], 10)
    assert snip.find(r"y") == [4] and snip.text == "x = 1\ny = 2"
    assert repr(GrepMatch("a.py", 4, "y = 2")) == "<GrepMatch a.py:4 'y = 2'>"


# --------------------------------------------------------------------------- snapshots


@pytest.fixture()
def remote_copy(tmp_path, src511) -> Path:
    """A private copy of the 0.5.11 tree (py files + dist-info) that a test may edit."""
    site = tmp_path / "site-packages"
    shutil.copytree(src511, site / "sglang", ignore=shutil.ignore_patterns("*.json", "*.so", "*.cu*", "*.h"))
    shutil.copytree(src511.parent / "sglang-0.5.11.dist-info", site / "sglang-0.5.11.dist-info")
    return site / "sglang"


@pytest.mark.ssh
def test_snapshot_over_ssh_cold_then_warm_then_changed(ssh_host, remote_copy, tmp_path):
    remote = SourceTree.at(ssh_host, str(remote_copy))
    cold = remote.snapshot(cache_dir=tmp_path / "cache")
    info = cold.snapshot_info
    assert info.transferred_bytes > 1_000_000 and not info.warm
    assert info.files == len(list(remote_copy.rglob("*.py"))) + 4  # + METADATA WHEEL top_level entry_points
    assert (cold.version, cold.origin, cold.host.name) == ("0.5.11", remote, "local")
    assert cold.read("srt/server_args.py", 1228, 1230).lines == RULE8
    snip = cold.function("ServerArgs._handle_piecewise_cuda_graph")
    assert snip.start == 1194 and snip.host == f"{ssh_host.name} (snapshot)"

    warm = remote.snapshot(cache_dir=tmp_path / "cache")
    assert warm.snapshot_info.transferred_bytes == 0 and warm.snapshot_info.warm
    assert warm.root == cold.root and warm.snapshot_info.content_hash == info.content_hash

    target = remote_copy / "srt" / "server_args.py"
    target.write_text(target.read_text().replace("# 8. Multimodal / VLM models", "# 8. patched"))
    changed = remote.snapshot(cache_dir=tmp_path / "cache")
    assert changed.snapshot_info.transferred_bytes > 0
    assert changed.root != cold.root and changed.read("srt/server_args.py", 1228, 1228).lines == ["        # 8. patched"]
    assert Path(cold.root).is_dir()  # the old snapshot stays: a report may still point at it


def test_snapshot_of_a_local_tree_lands_in_the_cache(local_host, remote_copy, tmp_path):
    snap = SourceTree.at(local_host, str(remote_copy)).snapshot(cache_dir=tmp_path / "c")
    assert Path(snap.root).is_relative_to(tmp_path / "c" / "snapshots" / "local")
    assert re.fullmatch(r"sglang-0\.5\.11-[0-9a-f]{12}", Path(snap.root).parent.name)
    assert snap.files("**/*.py") == SourceTree.at(local_host, str(remote_copy)).files("**/*.py")


def test_snapshot_default_cache_honours_env(local_host, remote_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "envcache"))
    assert cache_dir() == tmp_path / "envcache"
    snap = SourceTree.at(local_host, str(remote_copy)).snapshot()
    assert Path(snap.root).is_relative_to(tmp_path / "envcache")


@pytest.mark.parametrize(
    "member",
    [
        tarfile.TarInfo("../escape.py"),
        tarfile.TarInfo("/abs.py"),
        tarfile.TarInfo("other/x.py"),
        tarfile.TarInfo("sglang/link.py"),
    ],
)
def test_snapshot_refuses_hostile_archives(tmp_path, member):
    if member.name == "sglang/link.py":
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    (tmp_path / "a.tgz").write_bytes(buf.getvalue())
    with pytest.raises(SourceError, match="unexpected member"):
        extract(tmp_path / "a.tgz", tmp_path / "out", {"sglang"})
    assert not (tmp_path / "escape.py").exists()


def _archive(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_an_archive_is_unpacked_and_hashed_in_one_pass_as_content_hash_reads_it(tmp_path, sglang_source):
    root = Path(sglang_source("0.5.11")).parent
    members = [(f"./sglang/{p.relative_to(root / 'sglang').as_posix()}", p.read_bytes())
               for p in sorted((root / "sglang" / "srt" / "configs").rglob("*.py"))]
    digest, count = unpack(io.BytesIO(_archive(members)), tmp_path / "out", {"sglang"})
    assert (digest, count) == content_hash(tmp_path / "out") and count == len(members) > 20
    assert (tmp_path / "out" / "sglang" / "srt" / "configs" / "model_config.py").read_bytes() == \
        (root / "sglang" / "srt" / "configs" / "model_config.py").read_bytes()


@pytest.mark.parametrize("damage", ["twice", "cut off"])
def test_an_archive_named_twice_or_cut_off_is_refused(tmp_path, damage):
    members = [("sglang/a.py", b"a = 1\n"), ("sglang/b.py", b"b = 2\n" * 5000)]
    data = _archive(members + [("sglang/a.py", b"a = 3\n")] if damage == "twice" else members)
    if damage == "cut off":
        data = data[: len(data) // 2]
    with pytest.raises(SourceError, match="twice" if damage == "twice" else "not a whole gzip'd tar"):
        unpack(io.BytesIO(data), tmp_path / "out", {"sglang"})


# --------------------------------------------------------------------------- installing sources


def test_install_is_idempotent_and_uses_the_cached_wheel(tmp_path, sglang_source):
    sglang_source("0.5.11")  # caches the wheel, whatever ran before
    wheel = next((cache_dir() / "wheels").glob("sglang-0.5.11-*.whl"))
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    shutil.copy(wheel, cache / "wheels")
    pkg = Path(install_package_source("sglang", "0.5.11", prefix=tmp_path / "env", cache_dir=cache))
    assert pkg == tmp_path / "env" / "lib" / "python3.12" / "site-packages" / "sglang"
    assert (pkg / "srt" / "server_args.py").read_text().split("\n")[1228] == RULE8[1]
    stamp = (pkg / "srt" / "server_args.py").stat().st_mtime_ns
    time.sleep(0.01)
    assert install_package_source("sglang", "0.5.11", prefix=tmp_path / "env", cache_dir=cache) == str(pkg)
    assert (pkg / "srt" / "server_args.py").stat().st_mtime_ns == stamp  # nothing re-extracted


def test_install_another_version_replaces_the_old_one(tmp_path, sglang_source):
    for version in ("0.5.11", "0.5.10.post1"):
        sglang_source(version)  # caches the wheels, whatever ran before
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    for version in ("0.5.11", "0.5.10.post1"):
        shutil.copy(next((cache_dir() / "wheels").glob(f"sglang-{version}-*.whl")), cache / "wheels")
    only_new = sorted(_wheel_files(cache, "0.5.11") - _wheel_files(cache, "0.5.10.post1"))[0]
    env = tmp_path / "env"
    install_package_source("sglang", "0.5.11", prefix=env, cache_dir=cache)
    site = env / "lib" / "python3.12" / "site-packages"
    assert (site / only_new).is_file()
    pkg = Path(install_package_source("sglang", "0.5.10.post1", prefix=env, cache_dir=cache))
    assert [p.name for p in site.glob("sglang-*.dist-info")] == ["sglang-0.5.10.post1.dist-info"]
    assert not (site / only_new).exists()
    assert SourceTree.at(LocalHost(), str(pkg)).version == "0.5.10.post1"


def _wheel_files(cache: Path, version: str) -> set[str]:
    with zipfile.ZipFile(next((cache / "wheels").glob(f"sglang-{version}-*.whl"))) as zf:
        return {n for n in zf.namelist() if n.startswith("sglang/") and n.endswith(".py")}


@pytest.mark.slow
def test_install_downloads_when_the_wheel_is_missing(tmp_path, sglang_source, monkeypatch):
    sglang_source("0.5.10.post1")
    # A real `pip download`, served from the kit's own wheel cache: offline once the caches are warm.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(cache_dir() / "wheels"))
    cache = tmp_path / "cache"
    pkg = install_package_source("sglang", "0.5.10.post1", prefix=tmp_path / "env", cache_dir=cache)
    assert [p.name for p in (cache / "wheels").iterdir()] == ["sglang-0.5.10.post1-py3-none-any.whl"]
    assert SourceTree.at(LocalHost(), pkg).function("ServerArgs._handle_piecewise_cuda_graph").start == 1078


def test_install_offline_failure_quotes_pip(tmp_path, monkeypatch):
    # No index and an empty place to find wheels: a box with no network.
    (tmp_path / "nothing").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing"))
    with pytest.raises(PackageNotFound) as err:
        install_package_source("sglang", "0.5.11", prefix=tmp_path / "env", cache_dir=tmp_path / "cache")
    assert err.value.message.startswith("could not download sglang==0.5.11 with pip (exit 1): ")
    assert "No matching distribution found for sglang==0.5.11" in err.value.message
    assert str(tmp_path / "cache" / "wheels") in err.value.hint


def test_install_refuses_unsafe_wheels(tmp_path):
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "evil-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("evil/__init__.py", "")
        zf.writestr("../../outside.py", "boom")
    with pytest.raises(SourceError, match="unsafe member"):
        install_package_source("evil", "1.0", prefix=tmp_path / "env", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "outside.py").exists() and not (tmp_path / "env" / "outside.py").exists()
    site = tmp_path / "env" / "lib" / "python3.12" / "site-packages"
    assert not site.exists() or os.listdir(site) == []  # nothing written, no marker


def test_mark_spans_join_consecutive_lines_with_one_label():
    snippet = SourceSnippet("srt/x.py", 10, 14, ["a", "b", "c", "d", "e"], 20)
    snippet.mark(11, "rule 8").mark(12, "rule 8").mark(13, "rule 8").mark(14, "other")
    assert snippet.mark_spans() == [("11-13", "rule 8"), ("14", "other")]
    assert "11-13</code>: rule 8" in snippet._repr_html_()
