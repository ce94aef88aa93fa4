"""The real-server environment: one virtualenv per sglang version in which the real server runs on CPU.

Built by the same machinery as the dry-run's environment (``_env.py``: a venv, the CPU torch,
``pip install --no-deps`` of exact lists in chunks, sglang from the kit's wheel cache, a
marker per finished step so a half-built environment resumes where it stopped), with:

- the dry-run's list for that version (kit/data/dryrun/requirements-V.txt) plus the server's
  own packages (kit/data/serve/requirements-V.txt: the HTTP server, triton, xgrammar, ...);
- the narrow stand-ins of kit/data/serve/stand_ins/ (torchvision, sgl_kernel.kvcacheio and
  sgl_kernel.mamba, and sgl_kit_routes, imported at start by a ``.pth`` file), copied into
  site-packages, each listed with its reason in kit/data/serve/stand_ins.yaml;
- a final check that imports the server's modules with ``SGLANG_USE_CPU_ENGINE=1``.

It lives under ``<cache>/serve/sglang-V-py311-H/`` (about 2.5 GB). Only versions with a list in
kit/data/serve/ can be built: the CPU path of another version is not known to work.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import yaml

from kit._paths import cache_dir
from kit._proc import run
from kit.dryrun._env import (
    PYTHON_TAG,
    DryRunEnv,
    Progress,
    SetupReport,
    SetupStep,
    _chunk_label,
    _install_chunk,
    _install_sglang,
    _install_torch,
    _locked,
    _make_venv,
    _run_step,
    _tail,
    already_built,
    parse_answer,
)
from kit.dryrun._requirements import read_pins, verified_file
from kit.errors import SetupFailed, UnsupportedVersion

__all__ = ["SERVE_ENV", "ServeEnv", "serve_environment", "serve_requirements", "serve_versions", "setup_serve",
           "stand_ins"]

_DATA = Path(__file__).resolve().parent.parent / "data" / "serve"
_LAYOUT = "1"
_CHUNK = 16
_FREE_BYTES_NEEDED = 4 * 1024**3
_CHECK_TIMEOUT = 300.0
# What the server's process needs in its environment on CPU: without it sglang's is_cpu() is
# False and the rotary embedding imports vllm (sglang/srt/utils/common.py, is_cpu()).
SERVE_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
_CHECK_MODULES = ("sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
                  "sglang.srt.managers.detokenizer_manager", "sglang.srt.models.qwen3", "sglang.srt.models.qwen3_5",
                  "sglang.srt.layers.attention.linear.gdn_backend")
_CHECK = """
import json, sys, time
t0 = time.monotonic()
import importlib, importlib.metadata as md
for name in sys.argv[1].split(","):
    importlib.import_module(name)
import torchvision, sgl_kernel
stand = [m.__name__ for m in (torchvision, sgl_kernel) if getattr(m, "SGL_KIT_STAND_IN", False)]
routes = list(sys.modules["sgl_kit_routes"].routed) if "sgl_kit_routes" in sys.modules else []
versions = {p: md.version(p) for p in ("sglang", "torch", "transformers", "triton", "kernels", "fastapi")}
print(json.dumps({"ok": True, "versions": versions, "stand_ins": stand, "routes": routes,
                  "import_seconds": round(time.monotonic() - t0, 1)}))
"""


class ServeEnv(DryRunEnv):
    """Where the real-server environment for one sglang version lives, and whether it is complete."""

    def __repr__(self) -> str:
        state = "ready" if self.ready else "not set up"
        return f"<ServeEnv sglang {self.version} at {self.path} ({state})>"


def serve_versions() -> list[str]:
    """The sglang versions whose real server is known to run on CPU here (a list in kit/data/serve/)."""
    return sorted(p.name[len("requirements-"):-len(".txt")] for p in _DATA.glob("requirements-*.txt"))


def _check_version(version: str) -> None:
    if version not in serve_versions():
        raise UnsupportedVersion(
            f"the real-server lab has no CPU environment for sglang {version}: there is no package list "
            f"kit/data/serve/requirements-{version}.txt (known: {', '.join(serve_versions())}), so which packages "
            f"its server needs on CPU, and whether it starts there, is not known",
            hint=f"use sglang {serve_versions()[-1]}, or add that list (start from the dry-run's, follow the server's "
                 "imports with SGLANG_USE_CPU_ENGINE=1) and a stand-in for each CUDA-only import")


def serve_requirements(version: str) -> list[str]:
    """The exact `name==version` lines, torch first: the dry-run's list, then the server's own."""
    _check_version(version)
    base = read_pins(verified_file(version))
    extra = read_pins(_DATA / f"requirements-{version}.txt")
    names = {p.split("==")[0].lower() for p in extra}
    return [p for p in base if p.split("==")[0].lower() not in names] + extra


def stand_ins() -> dict[str, dict]:
    """The stand-in packages, by name: reason, names covered, what they cover (kit/data/serve/stand_ins.yaml)."""
    return yaml.safe_load((_DATA / "stand_ins.yaml").read_text())


def _stand_in_files() -> list[Path]:
    # kept as `x.py.txt`: they are the server environment's modules, not the kit's (tests/test_layers.py)
    return sorted(p for p in (_DATA / "stand_ins").rglob("*.py.txt"))


def _fingerprint(version: str) -> str:
    text = "\n".join(serve_requirements(version)) + "\n" + (_DATA / "stand_ins.yaml").read_text()
    for path in _stand_in_files():
        text += f"\n{str(path.relative_to(_DATA))[:-len('.txt')]}\n{path.read_text()}"
    return hashlib.sha256(f"{_LAYOUT}\n{PYTHON_TAG}\n{text}".encode()).hexdigest()[:10]


def _root() -> Path:
    return cache_dir() / "serve"


def serve_environment(version: str = "0.5.11") -> ServeEnv:
    """The real-server environment for `version` (it may not exist yet: see `.ready`)."""
    _check_version(version)
    tag = PYTHON_TAG.replace(".", "")
    return ServeEnv(version, _root() / f"sglang-{version}-py{tag}-{_fingerprint(version)}")


def _plan(env: ServeEnv) -> list[SetupStep]:
    pins = serve_requirements(env.version)
    chunks = _chunks(pins)
    plan = [("venv", f"virtualenv with Python {PYTHON_TAG}"), ("torch", f"{pins[0]} (CPU build)")]
    plan += [(f"packages-{i + 1}", _chunk_label(c, i, len(chunks))) for i, c in enumerate(chunks)]
    plan += [("sglang", f"sglang=={env.version} (no dependencies)"),
             ("stand-ins", f"stand-ins for {', '.join(stand_ins())} (kit/data/serve/stand_ins.yaml)"),
             ("check", "import the server's modules (SGLANG_USE_CPU_ENGINE=1)")]
    return [SetupStep(name, label, i + 1, len(plan)) for i, (name, label) in enumerate(plan)]


def _chunks(pins: list[str]) -> list[list[str]]:
    rest = pins[1:]
    return [rest[i : i + _CHUNK] for i in range(0, len(rest), _CHUNK)]


def setup_serve(version: str = "0.5.11", *, progress: Progress | None = None, python: str | None = None,
                torch_wheel: str | None = None) -> SetupReport:
    """Build (or finish building) the real-server environment for `version`; free when it is complete."""
    started = time.monotonic()
    env = serve_environment(version)
    steps = _plan(env)
    report = SetupReport(env, steps)
    say = progress or (lambda step: None)
    if env.ready:
        return already_built(report, say, started)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(env.path.parent).free
    if free < _FREE_BYTES_NEEDED and not (env.markers / "venv.done").is_file():
        raise SetupFailed(f"only {free / 1024**3:.1f} GiB free under {env.path.parent}; the real-server "
                          "environment takes about 2.5 GB", step="venv",
                          hint="free some space, or point SGL_KIT_CACHE at a larger disk")
    pins = serve_requirements(version)
    chunks = _chunks(pins)
    torch = {"wheel": torch_wheel, "index_url": None, "allow_cuda": False}
    actions = {"venv": lambda: _make_venv(env, python), "torch": lambda: _install_torch(env, pins[0], torch),
               "sglang": lambda: _install_sglang(env), "stand-ins": lambda: _install_stand_ins(env),
               "check": lambda: _check(env)}
    for i, chunk in enumerate(chunks):
        actions[f"packages-{i + 1}"] = lambda chunk=chunk, i=i: _install_chunk(env, chunk, f"packages-{i + 1}")
    with _locked(env.path.parent / (env.path.name + ".lock")):
        for step in steps:
            _run_step(env, step, actions[step.name], say)
        _remove_stale(env)
    report.seconds = time.monotonic() - started
    return report


def _install_stand_ins(env: ServeEnv) -> str:
    """Copy each stand-in package into site-packages, replacing an older copy."""
    source = _DATA / "stand_ins"
    for name in stand_ins():
        target = env.site_packages / name
        if target.exists() and not (target / "__init__.py").read_text().count("sgl-kit"):
            raise SetupFailed(f"{target} is a real {name}, not the kit's stand-in", step="stand-ins", package=name,
                              hint=f"remove the environment ({env.path}) and set it up again")
        shutil.rmtree(target, ignore_errors=True)
        for path in _stand_in_files():
            rel = path.relative_to(source)
            if rel.parts[0] == name:
                (target.parent / rel.parent).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target.parent / rel.parent / rel.name[: -len(".txt")])
    for name, info in stand_ins().items():
        if info.get("imported_at_start"):  # by site.py, as every interpreter of the environment starts
            (env.site_packages / f"{name}.pth").write_text(f"import {name}\n")
    return ", ".join(stand_ins())


def _check(env: ServeEnv) -> dict:
    from kit.dryrun._env import inside_environment

    proc = run([str(env.python), "-P", "-c", _CHECK, ",".join(_CHECK_MODULES)], timeout=_CHECK_TIMEOUT,
               env=inside_environment(SERVE_ENV))
    reply = parse_answer(proc)
    if not reply.get("ok"):
        raise SetupFailed(f"real-server setup step 'check': importing sglang {env.version}'s server on CPU failed: "
                          f"{_tail(proc)}", step="check",
                          hint="a package is missing from kit/data/serve/requirements-"
                               f"{env.version}.txt or a stand-in lacks a name; the traceback's last line names it")
    if not reply.get("routes"):
        raise SetupFailed("real-server setup step 'check': sgl_kit_routes did not route sglang's gated RMSNorm "
                          "(sglang.srt.layers.attention.fla.layernorm_gated) when the server's modules were imported",
                          step="check", hint=f"remove the environment ({env.path}) and set it up again")
    if reply["versions"].get("sglang") != env.version:
        raise SetupFailed(f"the environment holds sglang {reply['versions'].get('sglang')}, not {env.version}",
                          step="check", package=f"sglang=={env.version}")
    return {k: reply.get(k) for k in ("versions", "stand_ins", "routes", "import_seconds")}


def _remove_stale(env: ServeEnv) -> None:
    """Environments of the same version from an older list are dead weight (2.5 GB each)."""
    prefix = env.path.name.rsplit("-", 1)[0] + "-"
    for other in env.path.parent.glob(prefix + "*"):
        if other != env.path and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


def describe(env: ServeEnv) -> dict:
    """What the finished check recorded, and the size on disk."""
    try:
        check = json.loads((env.markers / "check.done").read_text()).get("check", {})
    except (OSError, ValueError):
        check = {}
    return {"path": str(env.path), "ready": env.ready, "bytes": env.size_bytes() if env.path.exists() else 0,
            **check}
