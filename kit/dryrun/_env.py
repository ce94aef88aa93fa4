"""The dry-run's own virtualenv, one per sglang version, built on demand under the kit cache.

The kit itself stays light: sglang, a CPU build of torch and the few dozen packages
that `sglang.srt.server_args` needs to import live in `<cache>/dryrun/sglang-V-py311-H/`.
Every package is installed with `pip install --no-deps` from an exact list in
`kit/data/dryrun/requirements-V.txt`, so pip never resolves anything and never pulls a
CUDA build. Each finished step leaves a marker, so an interrupted setup resumes
where it stopped, and a failed one names the step and the package.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kit._paths import cache_dir
from kit._proc import pip, pip_said, python_env, run
from kit._versions import key as version_key
from kit._wheels import install_package_source
from kit.dryrun._requirements import (
    check_version,
    generated_requirements,
    load_rules,
    pins_for,
    plan,
    read_pins,
    verified_file,
    verified_versions,
)
from kit.dryrun._torch import choose_torch
from kit.errors import CommandTimeout, DryRunError, EnvironmentMissing, SetupFailed

INSIDE = Path(__file__).resolve().parent / "_inside.py"
PYTHON_TAG = "3.11"  # sglang 0.5.11+ ships cp311 wheels only, and torch's CPU wheel here is cp311
_CHUNK = 14  # packages per pip call: progress and resumability without paying pip's start-up 50 times
_LAYOUT = "1"  # bump when the way an environment is built changes, so old ones are rebuilt
_FREE_BYTES_NEEDED = 2 * 1024**3
_PIP_TIMEOUT = 1200.0
_CHECK_TIMEOUT = 300.0
_SLOW = "a slow network or disk; run it again (finished setup steps are kept)"



# --------------------------------------------------------------------------- versions


def supported_versions() -> list[str]:
    """Versions a dry-run can use here: every verified one, and each best-effort one already set up."""
    return sorted(set(verified_versions()) | set(built_versions()), key=version_key)


def built_versions() -> list[str]:
    """Versions whose environment under the kit cache is complete (for its current package list)."""
    found = []
    for path in _env_root().glob("sglang-*-py*-*"):
        version = path.name[len("sglang-"):].rsplit("-", 2)[0]
        with contextlib.suppress(DryRunError):
            check_version(version)
            if environment(version).path == path and environment(version).ready:
                found.append(version)
    return sorted(found, key=version_key)



def requirements(version: str) -> list[str]:
    """The exact `name==version` lines for this sglang version, torch first."""
    if check_version(version) == "verified":
        return read_pins(verified_file(version))
    own = environment(version).path / "requirements.txt"
    return read_pins(own) if own.is_file() else pins_for(version)


# --------------------------------------------------------------------------- the environment


@dataclass
class DryRunEnv:
    """Where the environment for one sglang version lives, and whether it is complete."""

    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.path / "lib" / f"python{PYTHON_TAG}" / "site-packages"

    @property
    def sglang_dir(self) -> Path:
        return self.site_packages / "sglang"

    @property
    def markers(self) -> Path:
        return self.path / ".sgl-kit-steps"

    @property
    def ready(self) -> bool:
        return (self.markers / "check.done").is_file() and self.python.exists()

    def check_info(self) -> dict:
        """What the final check recorded: versions, import time, missing probes."""
        try:
            return json.loads((self.markers / "check.done").read_text()).get("check", {})
        except (OSError, ValueError):
            return {}

    def size_bytes(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return total

    def __repr__(self) -> str:
        state = "ready" if self.ready else "not set up"
        return f"<DryRunEnv sglang {self.version} at {self.path} ({state})>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code>"


def _env_root() -> Path:
    return cache_dir() / "dryrun"


def _fingerprint(version: str) -> str:
    if check_version(version) == "verified":
        text = (verified_file(version)).read_text()
    else:  # the list is made by the rules from the wheel: the rules name the environment
        text = f"best-effort sglang {version}\n{load_rules().digest}\n"
    return hashlib.sha256(f"{_LAYOUT}\n{PYTHON_TAG}\n{text}".encode()).hexdigest()[:10]


def environment(version: str) -> DryRunEnv:
    """The environment for `version` (it may not exist yet: see `.ready`)."""
    tag = PYTHON_TAG.replace(".", "")
    return DryRunEnv(version, _env_root() / f"sglang-{version}-py{tag}-{_fingerprint(version)}")


def require_environment(version: str) -> DryRunEnv:
    env = environment(version)
    if not env.ready:
        raise EnvironmentMissing(
            f"the dry-run environment for sglang {version} is not set up ({env.path})",
            hint=f"run `sgl-kit dryrun setup --sglang {version}` once (about 1.2 GB, a few minutes), "
            "or pass install=True",
            cli_hint=f"run `sgl-kit dryrun setup --sglang {version}` once (about 1.2 GB, a few minutes), "
            "or add --install",
        )
    return env


# --------------------------------------------------------------------------- setup


@dataclass
class SetupStep:
    name: str
    label: str
    index: int = 0
    total: int = 0
    state: str = "pending"  # pending, running, done, cached
    seconds: float = 0.0
    detail: str = ""

    def __str__(self) -> str:
        head = f"[{self.index}/{self.total}] {self.label}"
        if self.state == "running":
            return f"{head} ..."
        if self.state == "cached":
            return f"{head}: already done"
        return f"{head}: done in {self.seconds:.1f}s" + (f" ({self.detail})" if self.detail else "")


@dataclass
class SetupReport:
    env: DryRunEnv
    steps: list[SetupStep] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cached(self) -> bool:
        return all(s.state == "cached" for s in self.steps)

    def __repr__(self) -> str:
        built = sum(s.state == "done" for s in self.steps)
        return (
            f"<SetupReport sglang {self.env.version}: {built} steps run, "
            f"{len(self.steps) - built} cached, {self.seconds:.1f}s>"
        )

    def _repr_html_(self) -> str:
        rows = "".join(f"<li>{html.escape(str(s))}</li>" for s in self.steps)
        return f"<div><b>{html.escape(repr(self)[1:-1])}</b><ul>{rows}</ul></div>"


Progress = Callable[[SetupStep], None]


def already_built(report: SetupReport, say: Progress, started: float) -> SetupReport:
    """A complete environment: every step reported as cached, nothing run."""
    for step in report.steps:
        step.state = "cached"
        say(step)
    report.seconds = time.monotonic() - started
    return report


def setup(version: str, *, progress: Progress | None = None, python: str | None = None,
          torch_wheel: str | None = None, torch_index_url: str | None = None,
          allow_cuda_torch: bool = False) -> SetupReport:
    """Build (or finish building) the environment for `version`; free when it is complete.

    torch comes from ``torch_wheel``, else from what pip finds when that is a CPU build,
    else from ``torch_index_url`` (default: the PyTorch CPU index); the CUDA build (several
    GB) only with ``allow_cuda_torch`` (see kit/dryrun/_torch.py).
    """
    started = time.monotonic()
    status = check_version(version)
    env = environment(version)
    steps = _plan(env, status)
    report = SetupReport(env, steps)
    say = progress or (lambda step: None)
    if env.ready:
        return already_built(report, say, started)
    torch = {"wheel": torch_wheel, "index_url": torch_index_url, "allow_cuda": allow_cuda_torch}
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(env.path.parent / (env.path.name + ".lock")):
        actions = {"venv": lambda: _make_venv(env, python), "requirements": lambda: _make_requirements(env, steps),
                   "torch": lambda: _install_torch(env, _pins(env)[0], torch),
                   "sglang": lambda: _install_sglang(env), "check": lambda: _check(env, status)}
        for step in steps:
            if step.name.startswith("packages-"):
                actions[step.name] = lambda step=step: _install_chunk(env, _chunks(env, status)[_chunk_no(step)],
                                                                      step.name)
        for step in steps:
            _run_step(env, step, actions[step.name], say)
        _remove_stale(env)
    report.seconds = time.monotonic() - started
    return report


_GENERATED_CHUNKS = 4  # a generated list's length is known only after its step; its chunk count is not


def _plan(env: DryRunEnv, status: str) -> list[SetupStep]:
    plan = [("venv", f"virtualenv with Python {PYTHON_TAG}")]
    if status == "best-effort":
        plan.append(("requirements", f"package list from the sglang {env.version} wheel's Requires-Dist "
                                     "(kit/data/dryrun/rules.yaml, resolved by pip)"))
    known = status == "verified" or (env.path / "requirements.txt").is_file()
    torch_pin = _pins(env)[0] if known else f"torch=={load_rules().torch}"
    plan.append(("torch", f"{torch_pin} (CPU build)"))
    if known:
        chunks = _chunks(env, status)
        plan += [(f"packages-{i + 1}", _chunk_label(c, i, len(chunks))) for i, c in enumerate(chunks)]
    else:
        plan += [(f"packages-{i + 1}", f"packages {i + 1}/{_GENERATED_CHUNKS}") for i in range(_GENERATED_CHUNKS)]
    plan += [("sglang", f"sglang=={env.version} (no dependencies)"), ("check", "import sglang.srt.server_args")]
    return [SetupStep(name, label, i + 1, len(plan)) for i, (name, label) in enumerate(plan)]


def _pins(env: DryRunEnv) -> list[str]:
    return requirements(env.version)


def _chunks(env: DryRunEnv, status: str) -> list[list[str]]:
    rest = _pins(env)[1:]
    size = _CHUNK if status == "verified" else max(1, -(-len(rest) // _GENERATED_CHUNKS))
    chunks = [rest[i : i + size] for i in range(0, len(rest), size)]
    if status != "verified":
        chunks += [[] for _ in range(_GENERATED_CHUNKS - len(chunks))]
    return chunks


def _chunk_no(step: SetupStep) -> int:
    return int(step.name.split("-", 1)[1]) - 1


def _make_requirements(env: DryRunEnv, steps: list[SetupStep]) -> str:
    """Make (or take from the cache) the list for a best-effort version; keep a copy in the environment."""
    listed = generated_requirements(env.version, str(env.python))
    shutil.copyfile(listed, env.path / "requirements.txt")
    chunks = _chunks(env, "best-effort")
    for step in steps:  # now the packages steps can say what they install
        if step.name.startswith("packages-"):
            step.label = _chunk_label(chunks[_chunk_no(step)], _chunk_no(step), len(chunks))
    made = plan(env.version)
    return (f"{len(_pins(env))} packages; dropped {len(made.dropped)} of the wheel's {len(made.requires)} "
            f"requirements; list in {listed}")


def _chunk_label(chunk: list[str], index: int, total: int) -> str:
    names = [r.split("==")[0] for r in chunk]
    if not names:
        return f"packages {index + 1}/{total}: (none)"
    return f"packages {index + 1}/{total}: {names[0]} .. {names[-1]} ({len(names)})"


def _run_step(env: DryRunEnv, step: SetupStep, action: Callable[[], object], say: Progress) -> None:
    marker = env.markers / f"{step.name}.done"
    if marker.is_file():
        step.state = "cached"
        say(step)
        return
    step.state = "running"
    say(step)
    t0 = time.monotonic()
    detail = action()
    step.seconds = time.monotonic() - t0
    step.state = "done"
    step.detail = detail if isinstance(detail, str) else ""
    env.markers.mkdir(parents=True, exist_ok=True)
    payload = {"step": step.name, "label": step.label, "seconds": round(step.seconds, 2)}
    if isinstance(detail, dict):
        payload["check"] = detail
    marker.write_text(json.dumps(payload) + "\n")
    say(step)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One setup per environment at a time; a second one waits, then finds the markers."""
    import fcntl

    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove_stale(env: DryRunEnv) -> None:
    """Environments of the same version built from an older package list are dead weight (1.2 GB each)."""
    prefix = env.path.name.rsplit("-", 1)[0] + "-"
    for other in env.path.parent.glob(prefix + "*"):
        if other != env.path and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


# --------------------------------------------------------------------------- the steps


def find_python(explicit: str | None = None) -> str:
    """A Python 3.11 interpreter: the given one, $SGL_KIT_DRYRUN_PYTHON, this one, or python3.11 on PATH."""
    candidates = [explicit, os.environ.get("SGL_KIT_DRYRUN_PYTHON")]
    if sys.version_info[:2] == tuple(map(int, PYTHON_TAG.split("."))):
        candidates.append(sys.executable)
    candidates.append(shutil.which(f"python{PYTHON_TAG}"))
    tried = []
    for candidate in filter(None, candidates):
        tried.append(candidate)
        if _python_version(candidate) == PYTHON_TAG:
            return candidate
        if candidate == explicit:
            break
    raise SetupFailed(
        f"the dry-run needs Python {PYTHON_TAG} (sglang's wheels and the CPU torch wheel are cp311); "
        f"tried: {', '.join(tried) or 'nothing found'}",
        step="venv",
        hint=f"install python{PYTHON_TAG} (e.g. `apt-get install python{PYTHON_TAG}-venv`, pyenv, uv) "
        "or point SGL_KIT_DRYRUN_PYTHON at one",
    )


def _python_version(python: str) -> str | None:
    try:
        proc = run([python, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"], timeout=30)
    except (OSError, CommandTimeout):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _make_venv(env: DryRunEnv, python: str | None) -> str:
    interpreter = find_python(python)
    free = shutil.disk_usage(env.path.parent).free
    if free < _FREE_BYTES_NEEDED:
        raise SetupFailed(
            f"only {free / 1024**3:.1f} GiB free under {env.path.parent}; the environment takes about 1.2 GB",
            step="venv",
            hint="free some space, or point SGL_KIT_CACHE at a larger disk",
        )
    shutil.rmtree(env.path, ignore_errors=True)  # a half-made venv from an interrupted run
    proc = run([interpreter, "-m", "venv", str(env.path)], timeout=300, env=python_env(), hint=_SLOW)
    if proc.returncode != 0:
        raise SetupFailed(
            f"`{interpreter} -m venv {env.path}` failed: {_tail(proc)}",
            step="venv",
            hint=f"install the venv module for Python {PYTHON_TAG} (apt-get install python{PYTHON_TAG}-venv)",
        )
    return interpreter


def _pip(env: DryRunEnv, *args: str) -> subprocess.CompletedProcess:
    return pip(args, python=env.python, timeout=_PIP_TIMEOUT, hint=_SLOW)


def _install_torch(env: DryRunEnv, pin: str, torch: dict) -> str:
    choice = choose_torch(pin, str(env.python), **torch)
    proc = _pip(env, "install", "--only-binary=:all:", "--quiet", *choice.args)
    if proc.returncode != 0:
        raise _pip_failure("torch", [pin], proc)
    return choice.label


def _install_chunk(env: DryRunEnv, chunk: list[str], step: str) -> None:
    if not chunk:
        return
    proc = _pip(env, "install", "--no-deps", "--only-binary=:all:", "--quiet", *chunk)
    if proc.returncode == 0:
        return
    culprit = _named_in_error(chunk, proc) or _first_failing(env, chunk)
    raise _pip_failure(step, [culprit] if culprit else chunk, proc)


def _named_in_error(chunk: list[str], proc: subprocess.CompletedProcess) -> str | None:
    text = (proc.stderr + proc.stdout).lower()
    for pin in chunk:
        name = pin.split("==")[0].lower()
        variants = {name, name.replace("-", "_"), name.replace("_", "-")}
        if any(f"requirement {v}==" in text or f"found for {v}==" in text for v in variants):
            return pin
    return None


def _first_failing(env: DryRunEnv, chunk: list[str]) -> str | None:
    for pin in chunk:
        proc = _pip(env, "install", "--no-deps", "--only-binary=:all:", "--quiet", pin)
        if proc.returncode != 0:
            return pin
    return None


def _pip_failure(step: str, pins: list[str], proc: subprocess.CompletedProcess) -> SetupFailed:
    what = pins[0] if len(pins) == 1 else f"one of {', '.join(pins)}"
    return SetupFailed(
        f"dry-run setup step {step!r}: pip could not install {what}: {pip_said(proc)}",
        step=step,
        package=pins[0] if len(pins) == 1 else None,
        hint="check that PyPI (or your index) is reachable, then run the same setup again: "
        "finished steps are kept",
    )


def _install_sglang(env: DryRunEnv) -> str:
    from kit.errors import PackageNotFound
    try:
        install_package_source("sglang", env.version, prefix=env.path, python_tag=f"python{PYTHON_TAG}")
    except PackageNotFound as exc:
        raise SetupFailed(f"dry-run setup step 'sglang': {exc.message}", step="sglang",
                          package=f"sglang=={env.version}", hint=exc.hint) from None
    return "from the kit's wheel cache"


def stub_args(version: str) -> list[str]:
    """What `_inside.py` is told to stand in for (rules.yaml's `stub`), for this sglang version."""
    return ["--stubs", ",".join(load_rules().stubs_for(version))]


_HEAL_ROUNDS = 4


def _check(env: DryRunEnv, status: str = "verified") -> dict:
    """Import sglang.srt.server_args there. A best-effort list that dropped a package this version
    imports (and that runs on CPU) gets it back, and the import is tried again."""
    added: list[str] = []
    for _ in range(_HEAL_ROUNDS + 1):
        proc = run([str(env.python), str(INSIDE), "--check", *stub_args(env.version)], timeout=_CHECK_TIMEOUT,
                   env=inside_environment(), hint=_SLOW)
        reply = parse_answer(proc)
        if reply.get("ok"):
            break
        missing = re.search(r"No module named '([\w.]+)'", reply.get("error", ""))
        module = missing.group(1) if missing else None
        package = _healable(env, module) if status == "best-effort" and module else None
        if package is None or package in added:
            raise _check_failure(env, status, reply, module)
        added.append(package)
        before = set(requirements(env.version))
        listed = generated_requirements(env.version, str(env.python), extra=[package])
        shutil.copyfile(listed, env.path / "requirements.txt")
        new = sorted(set(read_pins(listed)) - before)
        if new:
            _install_chunk(env, new, "check")
    else:
        raise _check_failure(env, status, reply, None)
    versions = reply.get("versions", {})
    if versions.get("sglang") != env.version:
        raise SetupFailed(f"the environment holds sglang {versions.get('sglang')}, not {env.version}",
                          step="check", package=f"sglang=={env.version}")
    info = {k: reply.get(k) for k in ("versions", "stand_ins", "probes_missing", "import_seconds")}
    if added:
        info["kept_extra"] = added
    return info


def _healable(env: DryRunEnv, module: str) -> str | None:
    """The package to add for `import module`, unless a `gpu` rule says it cannot work here.

    Either a requirement the rules dropped as not needed (this version needs it after all) or a
    package that came with one (starlette with fastapi); pip resolves it with the rest."""
    rules = load_rules()
    made = plan(env.version)
    owner = rules.package_of(module, made.dropped_names()) or rules.package_for_module(module)
    if owner == "torch" or rules.dropped_by(owner) == "gpu" or module.split(".")[0] in rules.stub:
        return None
    return owner


def _check_failure(env: DryRunEnv, status: str, reply: dict, module: str | None) -> SetupFailed:
    trace = reply.get("traceback", "")
    importer = _sglang_frames(trace)
    via = f" (imported by {importer})" if importer else ""
    if module is None:
        via = f" (at {importer}, the last sglang line of its traceback)" if importer else ""
        return SetupFailed(
            f"dry-run setup step 'check': importing sglang.srt.server_args of sglang {env.version} failed: "
            f"{reply.get('error')}{via}",
            step="check",
            hint=f"this is a limit of the dry-run for sglang {env.version} ({status}); "
                 f"{_last_lines(trace, 3)}")
    top = module.split(".")[0]
    rules = load_rules()
    made = plan(env.version) if status == "best-effort" else None
    owner = (rules.package_of(module, made.dropped_names()) if made else None) or rules.package_for_module(module)
    group = rules.dropped_by(owner)
    if status == "verified":
        hint = ("the pinned list lacks a package (docs/guide.md, 'Adding an sglang version'); "
                f"{_last_lines(trace, 3)}")
    elif group == "gpu" or top in rules.stub:
        hint = (f"{owner} needs a GPU (kit/data/dryrun/rules.yaml drops it as `gpu`), and sglang {env.version} "
                f"imports `{top}` on the way to its server args; add `{top}` under `stub:` in that file so the "
                f"dry-run stands in for it, then run `sgl-kit dryrun setup --sglang {env.version}` again")
    else:
        hint = (f"adding {owner} to the list did not make the import work; name the right package for `{top}` "
                f"under `add:` (or `modules:`) in kit/data/dryrun/rules.yaml, then run setup again")
    return SetupFailed(
        f"dry-run setup step 'check': importing sglang.srt.server_args of sglang {env.version} needs "
        f"`{module}`{via}, which the environment does not have",
        step="check", package=owner or top, hint=hint)


def _sglang_frames(trace: str) -> str:
    """The innermost sglang file:line of a traceback's text, as `sglang/x.py:12`."""
    found = re.findall(r'File "[^"]*?/(sglang/[^"]+)", line (\d+)', trace)
    return f"{found[-1][0]}:{found[-1][1]}" if found else ""


# --------------------------------------------------------------------------- processes


def inside_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment for the inside process: no SGLANG_* from this shell, hub offline."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env.update(extra or {})
    return env


def parse_answer(proc: subprocess.CompletedProcess) -> dict:
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"ok": False, "error": f"no answer (exit {proc.returncode}): {_tail(proc)}", "traceback": proc.stderr}


def _tail(proc: subprocess.CompletedProcess, lines: int = 4) -> str:
    return _last_lines(proc.stderr or proc.stdout, lines) or f"exit {proc.returncode}"


def _last_lines(text: str, lines: int) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip() and "WARNING: Location" not in line]
    return " / ".join(kept[-lines:])
