"""Where the dry-run's torch comes from: a CPU build, found before anything is downloaded.

The dry-run imports torch only to run sglang's argument code, so the CPU build (~200 MB)
is what it wants. In order:

1. ``--torch-wheel FILE``: a wheel the user has;
2. whatever pip's own configuration finds (an index, ``PIP_FIND_LINKS``, a local file) when
   that is a CPU build;
3. the PyTorch CPU index (``--torch-index-url``, default download.pytorch.org/whl/cpu);
4. only with ``--allow-cuda-torch``: the package index's own torch, which on Linux is the
   CUDA build with its CUDA libraries, several GB; its size is said before it is taken.

Each attempt asks pip for an install report first (``--dry-run --report``), so nothing is
downloaded until the choice is made.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kit._proc import pip, pip_said
from kit.errors import CommandTimeout, SetupFailed

__all__ = ["CPU_INDEX", "TorchChoice", "choose_torch"]

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_REPORT_TIMEOUT = 300.0


@dataclass(frozen=True)
class TorchChoice:
    """What to pass to ``pip install`` for torch, and a sentence saying where it comes from."""

    args: tuple[str, ...]
    label: str
    cuda: bool = False


def choose_torch(pin: str, python: str, *, wheel: str | None = None, index_url: str | None = None,
                 allow_cuda: bool = False) -> TorchChoice:
    """The torch to install for ``pin`` (``torch==2.13.0``), or SetupFailed saying what was tried."""
    if wheel:
        return _from_wheel(wheel)
    tried = []
    local = _report(python, [pin], no_deps=True)
    if local.cpu:
        return TorchChoice(("--no-deps", local.exact), f"torch {local.version} from {local.where}")
    tried.append(local.summary("pip's own configuration"))
    index = index_url or CPU_INDEX
    cpu = _report(python, [pin], no_deps=True, extra=["--index-url", index, "--retries", "0", "--timeout", "20"])
    if cpu.cpu:
        return TorchChoice(("--no-deps", "--index-url", index, cpu.exact),
                           f"torch {cpu.version} from the CPU index {index}")
    tried.append(cpu.summary(f"the CPU index {index}"))
    if local.version and not local.error:
        full = _report(python, [local.exact], no_deps=False)
        size = _size_text(full.sizes)
        if allow_cuda:
            return TorchChoice((local.exact,), f"torch {local.version}, the CUDA build, from {local.where}, "
                                               f"with its CUDA libraries: {size}", cuda=True)
        tried.append(f"the package index offers torch {local.version}, a CUDA build: {size} with its CUDA "
                     "libraries")
    raise SetupFailed(
        f"the dry-run needs {pin} (a CPU build), and none was found: " + "; ".join(tried),
        step="torch", package=pin,
        hint="pass torch_wheel= a torch-...+cpu wheel, or torch_index_url= an index that has one "
             "(a mirror of download.pytorch.org/whl/cpu), or allow_cuda_torch=True to take the CUDA build; "
             "then run the same setup again: finished steps are kept",
        cli_hint="give --torch-wheel FILE (a torch-...+cpu wheel) or --torch-index-url URL (a mirror of "
                 "download.pytorch.org/whl/cpu), or --allow-cuda-torch to take the CUDA build; finished "
                 "steps are kept",
    )


def _from_wheel(wheel: str) -> TorchChoice:
    path = Path(wheel).expanduser()
    if not path.is_file() or not path.name.startswith("torch-") or path.suffix != ".whl":
        raise SetupFailed(f"--torch-wheel {wheel}: not a torch wheel file", step="torch", package=str(wheel),
                          hint="give the path of a torch-<version>+cpu-...whl file")
    version = path.name.split("-")[1]
    return TorchChoice(("--no-deps", str(path)), f"torch {version} from {path}", cuda="+cpu" not in version)


@dataclass
class _Report:
    version: str | None = None
    url: str = ""
    error: str = ""
    sizes: tuple[int | None, ...] = ()

    @property
    def cpu(self) -> bool:
        return bool(self.version) and "+cpu" in self.version

    @property
    def exact(self) -> str:
        return f"torch=={self.version}"

    @property
    def where(self) -> str:
        name = urllib.parse.unquote(self.url.rsplit("/", 1)[-1])
        return "a local file" if self.url.startswith("file:") else (name or "the index")

    def summary(self, source: str) -> str:
        if self.error:
            return f"{source}: {self.error}"
        return f"{source} offers torch {self.version} ({'CPU' if self.cpu else 'CUDA'} build)"


def _report(python: str, specs: list[str], *, no_deps: bool, extra: list[str] | None = None) -> _Report:
    args = ["install", "--dry-run", "--only-binary=:all:", "--quiet", "--report", "-",
            *(["--no-deps"] if no_deps else []), *(extra or []), *specs]
    try:
        proc = pip(args, python=python, timeout=_REPORT_TIMEOUT)
    except CommandTimeout:
        return _Report(error=f"pip did not answer within {_REPORT_TIMEOUT:g}s")
    if proc.returncode != 0:
        return _Report(error=pip_said(proc, 1)[:200])
    try:
        items = json.loads(proc.stdout)["install"]
        torch = next(i for i in items if i["metadata"]["name"].lower() == "torch")
    except (ValueError, KeyError, StopIteration):
        return _Report(error=f"pip's report was unreadable: {proc.stdout[:120]!r}")
    urls = [i.get("download_info", {}).get("url", "") for i in items]
    return _Report(torch["metadata"]["version"], torch.get("download_info", {}).get("url", ""),
                   sizes=tuple(_remote_size(u) for u in urls))


def _remote_size(url: str) -> int | None:
    if url.startswith("file:"):
        try:
            return Path(urllib.request.url2pathname(url[5:])).stat().st_size
        except OSError:
            return None
    if not url.startswith("https://"):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15) as response:
            return int(response.headers.get("Content-Length") or 0) or None
    except (OSError, ValueError):
        return None


def _size_text(sizes: tuple[int | None, ...]) -> str:
    known = [s for s in sizes if s]
    if not known:
        return "size unknown"
    total = sum(known) / 1e9
    unknown = len(sizes) - len(known)
    return f"{total:.1f} GB to download in {len(sizes)} wheels" + (f" ({unknown} of unknown size)" if unknown else "")


if __name__ == "__main__":  # a manual check: python -m kit.dryrun._torch torch==2.13.0
    print(choose_torch(sys.argv[1], sys.executable))
