"""What the lab's host needs installed, as wheels built or fetched on this machine.

A remote lab host needs nothing but ``python3``. The kit travels as a wheel built here
from the installed ``kit`` package, holding only the modules the server can import and the
data it reads, and so do the third-party packages that
``python -m kit.lab.launch_server`` imports, fetched once with ``pip download`` for the
remote's Python version and platform and cached. The list of those packages is not
written down: it is what importing the server actually loads, so it cannot drift.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import sys
import sysconfig
import zipfile
from pathlib import Path

from kit._paths import cache_dir
from kit._proc import pip, pip_said, run
from kit._version import __version__
from kit._wheels import wheel
from kit.errors import LabError

__all__ = ["BUILD_ENTRY", "build_modules", "kit_wheel", "local_pth", "runtime_requirements", "runtime_wheels",
           "server_modules", "sglang_wheel", "sha256"]

_KIT = Path(__file__).resolve().parent.parent
_DIST = "sglang_investigation_kit"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same files give the same wheel


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache() -> Path:
    return cache_dir() / "lab-wheels"


def sglang_wheel(version: str) -> Path:
    """The sglang wheel in the kit's download cache, fetched with pip the first time."""
    return wheel("sglang", version)


# --------------------------------------------------------------------------- the kit as a wheel


# What the server reads besides code: scenarios, the resolved launches, the model's config.
_SERVER_DATA = ("data/scenarios", "data/resolved", "data/lab", "data/fast_paths.yaml",
                "_remote")  # the scripts kit.hosts reads as text, for the LocalHost the gate reader uses
# Imported by the server only when present (the dry-run needs its own environment, which a
# remote lab host does not have); the server runs without it.
_OPTIONAL = ("kit.dryrun",)
# This machine's side of the lab (preparing, starting and finding it), named by kit.lab's
# lazy functions but never run on the lab's host.
_KIT_SIDE = ("kit.lab.control", "kit.lab.packaging", "kit.target")
# The real engine's environment is built on the lab's host by the kit itself (kit/lab/real_remote.py runs
# setup_serve there): that host's wheel also carries kit.dryrun.serve_env with everything it can import,
# and the package lists, stand-ins and GPU profiles it reads.
BUILD_ENTRY = "kit.dryrun.serve_env"
_BUILD_DATA = ("data/serve", "data/dryrun", "data/gpus.yaml")


def server_modules(entry: str = "kit.lab.launch_server", optional: tuple[str, ...] = _OPTIONAL) -> list[str]:
    """The kit modules the lab server (or another ``entry``) can import, found by reading every import (lazy
    ones too); those under ``optional`` are left out."""
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen or name.startswith(optional + _KIT_SIDE):
            continue
        path = _module_path(name)
        if path is None:
            continue
        seen.add(name)
        todo.extend(_kit_imports(name, path))
        todo.extend(".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1))  # parent packages
    return sorted(seen)


def _module_path(name: str) -> Path | None:
    base = _KIT.parent.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _kit_imports(name: str, path: Path) -> list[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "kit"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] == "kit":
                found.append(base)
                found += [f"{base}.{a.name}" for a in node.names]  # submodules; names that are not are skipped
    return found


def build_modules() -> list[str]:
    """The kit modules on a host that builds the real engine's environment: the server's and the build's."""
    return sorted(set(server_modules()) | set(server_modules(BUILD_ENTRY, optional=())))


def _kit_files(build: bool = False) -> list[Path]:
    files = {_module_path(m) for m in (build_modules() if build else server_modules())}
    for folder in _SERVER_DATA + (_BUILD_DATA if build else ()):
        path = _KIT / folder
        files.update([path] if path.is_file() else (p for p in path.rglob("*") if p.is_file()))
    return sorted(p for p in files if p is not None)


def kit_wheel(build: bool = False) -> Path:
    """A wheel of the installed kit package (pure Python), rebuilt when its files change. ``build``: with
    what builds the real engine's environment on the host (``BUILD_ENTRY``), for ``--engine sglang``."""
    files = _kit_files(build)
    out = _cache() / ("kit-build" if build else "kit") / f"{_DIST}-{__version__}-py3-none-any.whl"
    content = hashlib.sha256(b"".join(p.relative_to(_KIT.parent).as_posix().encode() + b"\0" + p.read_bytes()
                                      for p in files)).hexdigest()
    stamp = out.with_suffix(".content")
    if out.is_file() and stamp.is_file() and stamp.read_text() == content:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    _write_wheel(tmp, files, __version__)
    os.replace(tmp, out)
    stamp.write_text(content)
    return out


def _write_wheel(path: Path, files: list[Path], version: str) -> None:
    info = f"{_DIST}-{version}.dist-info"
    entries = [(p.relative_to(_KIT.parent).as_posix(), p.read_bytes()) for p in files]
    entries += [
        (f"{info}/METADATA", f"Metadata-Version: 2.1\nName: sglang-investigation-kit\nVersion: {version}\n".encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: kit.lab.packaging\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/top_level.txt", b"kit\n"),
    ]
    record = [f"{name},sha256={_urlsafe(data)},{len(data)}" for name, data in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)


def _urlsafe(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# --------------------------------------------------------------------------- third-party packages


_PROBE = """
import importlib, importlib.metadata as md, json, sys
import kit.lab.launch_server, yaml  # yaml: the server loads its scenario with it
for name in sys.argv[1:]:
    importlib.import_module(name)
dists = md.packages_distributions()
skip = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {"kit", "__main__"}
found = {}
for mod in sorted({m.split(".")[0] for m in sys.modules} - skip):
    for dist in dists.get(mod, []):
        if dist.lower() != "setuptools":
            found[dist] = md.version(dist)
print(json.dumps(found))
"""


def runtime_requirements(build: bool = False) -> dict[str, str]:
    """{distribution: version} of every third-party package the lab server (and, with ``build``, the real
    engine's build) imports here."""
    res = run([sys.executable, "-c", _PROBE, *([BUILD_ENTRY] if build else [])], timeout=120,
              hint="check that `python -m kit.lab.launch_server --help` imports on this machine")
    if res.returncode != 0:
        raise LabError(f"could not list what the lab server imports: {res.stderr.strip()[-500:]}",
                       hint="check that `python -m kit.lab.launch_server --help` imports on this machine")
    return json.loads(res.stdout)


def _platforms(info: dict) -> list[str]:
    arch = info["machine"]
    libc, version = info.get("libc") or ["", ""]
    if libc != "glibc":
        raise LabError(f"the lab host's C library is {libc or 'unknown'}, not glibc; no wheels fit it",
                       hint="run the lab on a glibc Linux host (Debian, Ubuntu, RHEL, ...)")
    minor = int(str(version).split(".")[1]) if "." in str(version) else 17
    return [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)] + [f"manylinux2014_{arch}", "linux_" + arch]


def runtime_wheels(info: dict, build: bool = False) -> list[Path]:
    """Wheels of the server's (and the build's) third-party imports for the remote's python and platform."""
    wanted = runtime_requirements(build)
    pyver = "{}{}".format(*info["version_info"])
    target = _cache() / f"cp{pyver}-{info['machine']}"
    target.mkdir(parents=True, exist_ok=True)
    missing = {d: v for d, v in wanted.items() if _find(target, d, v) is None}
    if missing:
        _download(target, missing, info, pyver)
    return [_find(target, d, v) for d, v in sorted(wanted.items())]


def _norm(name: str) -> str:
    return name.replace("-", "_").replace(".", "_").lower()


def _find(directory: Path, dist: str, version: str) -> Path | None:
    prefix = f"{_norm(dist)}-{version}-"
    hits = sorted(p for p in directory.glob("*.whl") if p.name.lower().startswith(prefix))
    return hits[0] if hits else None


def _download(target: Path, wanted: dict[str, str], info: dict, pyver: str) -> None:
    args = ["download", "--no-deps", "--only-binary=:all:", "--python-version", pyver, "--implementation", "cp",
            "-d", str(target)]
    for plat in _platforms(info):
        args += ["--platform", plat]
    args += [f"{d}=={v}" for d, v in sorted(wanted.items())]
    res = pip(args, python=sys.executable, timeout=900,
              hint=f"check PyPI access from this machine, or put the wheels into {target}")
    still = [d for d, v in wanted.items() if _find(target, d, v) is None]
    if res.returncode != 0 or still:
        raise LabError(f"could not fetch wheels of {', '.join(still or wanted)} for python {pyver} on "
                       f"{info['machine']}: {pip_said(res, 3)}",
                       hint=f"check PyPI access from this machine, or put the wheels into {target}")


# --------------------------------------------------------------------------- local labs


def local_pth() -> str:
    """A .pth for a lab on this machine: it sees this environment's packages and kit."""
    lines = [f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})"]
    root = str(_KIT.parent)
    if not root.startswith(sysconfig.get_paths()["purelib"]):
        lines.append(root)
    return "\n".join(lines) + "\n"
