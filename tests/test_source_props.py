"""Hostile paths and patterns reach kit.source's commands as data, never as shell code."""

from __future__ import annotations

import posixpath
import re
import shutil
import uuid
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from kit.errors import PackageNotFound, SourceInputError
from kit.hosts import LocalHost, SSHHost
from kit.source import GrepMatch, SourceTree
from kit.source.search import glob_regex, parse_grep

CANARY = f"pwned-{uuid.uuid4().hex[:12]}"
ABS_CANARY = f"/tmp/{CANARY}"
# File names cannot hold '/', so their payloads touch a relative name; patterns use the absolute one.
NAME_PAYLOADS = [f"$(touch {CANARY})", f"`touch {CANARY}`", f";touch {CANARY};", f"|touch {CANARY}", f"&&touch {CANARY}"]
ARG_PAYLOADS = [p.replace(CANARY, ABS_CANARY) for p in NAME_PAYLOADS] + [f"'$(touch {ABS_CANARY})'", f'"`touch {ABS_CANARY}`"']
HOSTILE = " '\"$`();|&<>*?[]{}\\!#~-=:\t\r\n\x0c%^é日\u2028"
SETTINGS = {
    "local": settings(max_examples=80, deadline=None),
    "ssh": settings(max_examples=30, deadline=None),
    "ssh-exec": settings(max_examples=12, deadline=None),
}

hostile_text = st.text(st.sampled_from(HOSTILE) | st.characters(codec="utf-8", exclude_characters="\0/"), max_size=12)


def _with_payload(payloads):
    return st.builds(lambda a, p, b: a + p + b, hostile_text, st.sampled_from(payloads), hostile_text)


name_part = (
    (hostile_text | _with_payload(NAME_PAYLOADS))
    .map(lambda s: s.replace("/", "").replace("\0", "")[:60])
    .filter(lambda s: s not in ("", ".", ".."))
)
rel_paths = st.lists(name_part, min_size=1, max_size=3).map("/".join)
line_text = st.text(st.sampled_from(HOSTILE.replace("\n", "")) | st.characters(codec="utf-8", exclude_characters="\0\n"), max_size=40)
patterns = (
    st.text(st.sampled_from(HOSTILE.replace("\n", "")) | st.characters(codec="utf-8", exclude_characters="\0\n"), min_size=1, max_size=10)
    | _with_payload(ARG_PAYLOADS).map(lambda s: s.replace("\n", " "))
    | st.sampled_from(["-rf", "--include=*", "-e", "--", "-", "-f/etc/passwd", "--help"])
)


def _chomp(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line  # CRLF: the "\r" is line ending, not content


def _canaries(*dirs: Path) -> list[Path]:
    # A shell splices neighbouring text onto the name, hence the trailing '*'.
    places = [Path("/tmp"), Path.cwd(), Path.home(), *dirs]
    return [p for d in places if d.exists() for p in d.glob(f"{CANARY}*")] + [
        p for d in dirs if d.exists() for p in d.rglob(f"{CANARY}*")
    ]


def _expected(root: Path, needle: str) -> set[tuple[str, int, str]]:
    """grep -F in the C locale: a byte substring test, line by line, over regular files."""
    hits = set()
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            for n, raw in enumerate(p.read_bytes().split(b"\n"), 1):
                if needle.encode() in raw:
                    hits.add((p.relative_to(root).as_posix(), n, _chomp(raw.decode("utf-8", "replace"))))
    return hits


def _ere_escape(text: str) -> str:
    """`text` as a POSIX extended regex (and a Python regex) that matches it literally."""
    return "".join("\\" + c if c in ".[]()*+?{}|^$\\" else c for c in text)


def _glob_escape(name: str) -> str:
    return "".join("\\" + c if c in "*?[\\" else c for c in name)


def _expected_re(root: Path, rx: re.Pattern) -> set[tuple[str, int, str]]:
    """A Python re scan, line by line over the bytes of every regular file, as grep -E in the C locale."""
    hits = set()
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            for n, raw in enumerate(p.read_bytes().split(b"\n"), 1):
                if rx.search(raw):
                    hits.add((p.relative_to(root).as_posix(), n, _chomp(raw.decode("utf-8", "replace"))))
    return hits


def _ssh(server, **kw) -> SSHHost:
    return SSHHost(server.host, port=server.port, user=server.user, key_filename=str(server.key_path),
                   known_hosts=str(server.known_hosts), config_file=None, allow_agent=False,
                   look_for_keys=False, **kw)


@pytest.fixture(scope="module", params=["local", pytest.param("ssh", marks=pytest.mark.ssh),
                                        pytest.param("ssh-exec", marks=pytest.mark.ssh)])
def any_host(request):
    if request.param == "local":
        host = LocalHost()
    else:
        host = _ssh(request.getfixturevalue("sshd"), use_helper=request.param == "ssh")
    yield request.param, host
    host.close()


@pytest.fixture()
def pkg(tmp_path) -> Path:
    root = tmp_path / "hostile pkg $(x)"
    root.mkdir()
    (root / "__init__.py").write_text("# the package\n")
    return root


def _fresh(pkg: Path) -> None:
    for child in pkg.iterdir():
        if child.name != "__init__.py":
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def test_hostile_file_names_and_contents_round_trip(any_host, pkg):
    kind, host = any_host
    tree = SourceTree.at(host, str(pkg))

    @SETTINGS[kind]
    @given(rel=rel_paths, lines=st.lists(line_text, min_size=1, max_size=6), needle=patterns)
    def check(rel, lines, needle):
        rel_norm = posixpath.normpath(rel)
        assume(rel_norm.split("/")[0] != tree.package)  # "pkgname/x" means a path inside the package
        _fresh(pkg)
        target = pkg / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")

        snip = tree.read(rel)
        assert snip.lines == [_chomp(line) for line in lines] and snip.total_lines == len(lines)
        assert tree.read(rel, len(lines), len(lines)).lines == [_chomp(lines[-1])]
        assert rel_norm in tree.files("**/*")

        expected = _expected(pkg, needle)
        got = tree.grep(needle, None, fixed=True)
        assert {(m.path, m.line, m.text) for m in got} == expected
        # The needle as an ERE that matches it literally: grep -E must find what Python's re finds.
        regex = _ere_escape(needle)
        assert _expected_re(pkg, re.compile(regex.encode())) == expected
        assert {(m.path, m.line, m.text) for m in tree.grep(regex, None)} == expected
        # The file's own name as an --include glob (escaped): only that file's lines.
        only = tree.grep(needle, glob=_glob_escape(posixpath.basename(rel_norm)), fixed=True)
        assert {(m.path, m.line, m.text) for m in only} == {h for h in expected if h[0] == rel_norm}
        assert _canaries(pkg) == []

    check()


def test_hostile_directory_for_at_and_locate(any_host, tmp_path):
    kind, host = any_host

    @SETTINGS[kind]
    @given(name=name_part, python=_with_payload(ARG_PAYLOADS))
    def check(name, python):
        root = tmp_path / "d" / name
        root.mkdir(parents=True, exist_ok=True)
        (root / "__init__.py").write_text("X = 1\n")
        tree = SourceTree.at(host, str(root), package="anything")
        assert tree.read("__init__.py").lines == ["X = 1"]
        assert [m.line for m in tree.grep("X = 1", fixed=True)] == [1]
        with pytest.raises(PackageNotFound, match="could not run interpreter"):
            SourceTree.locate(host, python=python)
        assert _canaries(tmp_path) == []

    check()


def test_snapshot_of_a_hostile_directory(any_host, tmp_path):
    kind, host = any_host

    @settings(max_examples={"local": 10, "ssh": 5, "ssh-exec": 3}[kind], deadline=None)
    @given(parent=name_part, name=name_part)
    def check(parent, name):
        root = tmp_path / "s" / parent / name
        shutil.rmtree(tmp_path / "s", ignore_errors=True)
        (root / "sub").mkdir(parents=True)
        (root / "__init__.py").write_text("A = 1\n")
        (root / "sub" / f"{name}.py").write_text("B = 2\n")
        (root / "notes.txt").write_text("not python\n")
        dist = root.parent / "weird-9.9.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Name: weird\nVersion: 9.9\n\n")
        snap = SourceTree.at(host, str(root), package="weird").snapshot(cache_dir=tmp_path / "cache")
        assert snap.version == "9.9" and snap.snapshot_info.transferred_bytes > 0
        assert snap.files("**/*") == sorted(["__init__.py", f"sub/{name}.py"])
        assert snap.read(f"sub/{name}.py").lines == ["B = 2"]
        assert _canaries(tmp_path) == []

    check()


@settings(max_examples=300, deadline=None)
@given(path=st.text(max_size=30) | rel_paths.map(lambda p: "../" + p) | st.sampled_from(["/", "/root/x", ".", "a/../..", "sglang/../../x"]))
@example(path="../sglang/0")  # climbs out of the root and back in: a file inside it
@example(path="../sglangx/0")
def test_resolve_never_leaves_the_root(path):
    root = "/srv/site-packages/sglang"
    tree = SourceTree(None, root, "sglang")  # paths_of() never touches the host
    full = _file_inside(root, path)
    if full is None:
        with pytest.raises(SourceInputError):
            tree.paths_of(path)
        return
    assert tree.paths_of(path) == (full[len(root) + 1:], full)


def _file_inside(root: str, path: str) -> str | None:
    """The file `path` names inside `root` (a leading "sglang/" is the package itself), or None."""
    if not path or "\0" in path:
        return None
    if path.startswith("/"):
        full = posixpath.normpath(path)
    else:
        rel = posixpath.normpath(path)
        head, _, rest = rel.partition("/")
        full = posixpath.normpath(posixpath.join(root, rest if head == "sglang" and rest else rel))
    return full if full.startswith(root + "/") else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=20),
                          st.integers(1, 10**6),
                          st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=40)), max_size=8))
def test_grep_output_parser_handles_colons_and_newlines_in_names(records):
    root = "/r/sglang"
    data = b"".join(f"{root}/{p}".encode() + b"\0" + str(n).encode() + b":" + t.encode() + b"\n" for p, n, t in records)
    assert parse_grep(data, root, "h") == [GrepMatch(p, n, _chomp(t)) for p, n, t in records]


@settings(max_examples=300, deadline=None)
@given(name=st.text("ab.c-_", min_size=1, max_size=8), pattern=st.text("ab.*?", min_size=1, max_size=6))
def test_glob_matches_fnmatch_on_names(name, pattern):
    import fnmatch

    assert bool(glob_regex(pattern).match(name)) == fnmatch.fnmatchcase(name, pattern)
