"""Wheels: fetched once with ``pip download --no-deps``, cached, and unpacked to be read.

A wheel is the cheapest way to hold the real source of any sglang release: it takes
seconds to fetch, needs none of sglang's heavy dependencies, and is what the source
reads, the dry-run and the lab all start from. Nothing here imports or runs the package.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

from ._paths import cache_dir
from ._proc import pip, pip_said
from .errors import CommandTimeout, NotGiven, PackageNotFound, SourceError, SourceInputError

__all__ = ["cached_wheel", "download_wheel", "install_package_source", "norm_dist", "unzip_wheel", "wheel"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PIP_TIMEOUT = 900.0


def norm_dist(name: str) -> str:
    """PEP 503 normalisation, with "_" because that is what dist-info and wheel names use."""
    return re.sub(r"[-_.]+", "_", name).lower()


def cached_wheel(wheels: Path, package: str, version: str) -> Path | None:
    """The wheel of ``package==version`` in ``wheels``, if one is there."""
    prefix = f"{norm_dist(package)}-{version}-"
    hits = sorted(p for p in Path(wheels).glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    return hits[0] if hits else None


def download_wheel(wheels: Path, package: str, version: str) -> Path:
    """``pip download --no-deps package==version`` into ``wheels``; the wheel's path."""
    wheels = Path(wheels)
    wheels.mkdir(parents=True, exist_ok=True)
    base = ["download", "--no-deps", "--only-binary=:all:"]
    spec = f"{package}=={version}"
    res = _pip(base + [spec, "-d", str(wheels)])
    if res.returncode != 0 and "matching distribution" in res.stderr.lower():
        # Some versions ship only cp311 manylinux wheels; the source is the same for any platform.
        extra = ["--platform", "manylinux_2_34_x86_64", "--python-version", "3.11"]
        res = _pip(base + extra + [spec, "-d", str(wheels)])
    found = cached_wheel(wheels, package, version)
    if res.returncode != 0 or found is None:
        raise PackageNotFound(
            f"could not download {spec} with pip (exit {res.returncode}): {pip_said(res)}",
            hint=f"check network/proxy/index settings, or copy the wheel into {wheels}",
        )
    return found


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return pip(args, python=sys.executable, timeout=_PIP_TIMEOUT)
    except CommandTimeout as exc:
        raise PackageNotFound(f"pip did not finish within {_PIP_TIMEOUT:g}s: {' '.join(args)}",
                              hint="check the network or the package index; pip may be waiting on it") from exc


def wheel(package: str, version: str, wheels: Path | None = None) -> Path:
    """The wheel of ``package==version`` from the kit's cache, downloaded the first time."""
    wheels = Path(wheels) if wheels is not None else cache_dir() / "wheels"
    return cached_wheel(wheels, package, version) or download_wheel(wheels, package, version)


def install_package_source(
    package: str = "sglang",
    version: str | None = None,
    prefix: str | os.PathLike = "",
    python_tag: str = "python3.12",
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> str:
    """Unpack the wheel of `package==version` into `<prefix>/lib/<python_tag>/site-packages`.

    The wheel is fetched with `pip download --no-deps` once and kept under the kit
    cache, so later runs work offline. Only the files are installed (no dependencies,
    nothing imported): enough for source reads, not for running the package.
    Returns the package directory. A marker file makes repeated calls free; a
    different version already installed at the prefix is removed first. With
    ``download=False`` a wheel that is not cached is a PackageNotFound (no network).
    """
    if not version:
        raise NotGiven(f"install_package_source needs the version of {package} to unpack, and none was given",
                       hint="pass version=: the one the server runs (its log, /server_info, or `pip show` there)")
    if not prefix:
        raise SourceInputError("install_package_source needs prefix=, e.g. a lab directory")
    if not isinstance(package, str) or not _IDENT.match(package):
        raise SourceInputError(f"not a top-level package name: {package!r}")
    base = Path(cache_dir) if cache_dir is not None else _cache_root()
    site = Path(prefix) / "lib" / python_tag / "site-packages"
    marker = site / f".sgl-kit-{norm_dist(package)}-{version}.installed"
    if marker.is_file() and (site / package / "__init__.py").is_file():
        return str(site / package)
    if not download and cached_wheel(base / "wheels", package, version) is None:
        raise PackageNotFound(f"{package} {version}'s source is not in this machine's cache, and nothing is "
                              "downloaded here", hint=f"run once with network (sgl-kit source {version} fetches it), "
                                                      f"or copy the wheel into {base / 'wheels'}")
    found = wheel(package, version, base / "wheels")
    _remove_installed(site, package)
    unzip_wheel(found, site)
    marker.write_text(found.name + "\n")
    return str(site / package)


_cache_root = cache_dir  # the parameter `cache_dir` shadows the function inside install_package_source


def _remove_installed(site: Path, package: str) -> None:
    shutil.rmtree(site / package, ignore_errors=True)
    for old in site.glob(f"{norm_dist(package)}-*.dist-info"):
        shutil.rmtree(old, ignore_errors=True)
    for old in site.glob(f".sgl-kit-{norm_dist(package)}-*.installed"):
        old.unlink()


def unzip_wheel(path: Path, site: Path) -> None:
    """Unpack a wheel into ``site``, refusing any member that would land outside it."""
    with zipfile.ZipFile(path) as zf:
        # Vet every name before writing anything, so a bad wheel leaves nothing behind.
        targets = [(info, _safe_target(site, info.filename, path)) for info in zf.infolist()]
        for info, target in targets:
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _safe_target(site: Path, name: str, wheel_path: Path) -> Path:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or "\\" in name or ".." in parts or ":" in parts[0]:
        raise SourceError(f"wheel {wheel_path.name} has an unsafe member {name!r}; refusing to unpack")
    return site.joinpath(*parts)
