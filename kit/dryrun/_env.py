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
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kit._paths import cache_dir
from kit._wheels import install_package_source
from kit.dryrun._torch import choose_torch
from kit.errors import DryRunError, EnvironmentMissing, SetupFailed, UnsupportedVersion

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "dryrun"
INSIDE = Path(__file__).resolve().parent / "_inside.py"
PYTHON_TAG = "3.11"  # sglang 0.5.11+ ships cp311 wheels only, and torch's CPU wheel here is cp311
_CHUNK = 14  # packages per pip call: progress and resumability without paying pip's start-up 50 times
_LAYOUT = "1"  # bump when the way an environment is built changes, so old ones are rebuilt
_FREE_BYTES_NEEDED = 2 * 1024**3
_PIP_TIMEOUT = 1200.0
_CHECK_TIMEOUT = 300.0



# --------------------------------------------------------------------------- versions


def supported_versions() -> list[str]:
    """The sglang versions with a pinned list in kit/data/dryrun/, oldest first."""
    found = [p.name[len("requirements-") : -len(".txt")] for p in DATA_DIR.glob("requirements-*.txt")]
    return sorted(found, key=_version_key)


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]|post", version))


def requirements_file(version: str) -> Path:
    path = DATA_DIR / f"requirements-{version}.txt"
    if not isinstance(version, str) or "/" in version or not path.is_file():
        raise UnsupportedVersion(
            f"the dry-run has no package list for sglang {version!r}; "
            f"supported: {', '.join(supported_versions())}",
            hint="use one of those versions, or add one (README, 'Adding an sglang version')",
        )
    return path


def requirements(version: str) -> list[str]:
    """The exact `name==version` lines for this sglang version, torch first."""
    lines = []
    for raw in requirements_file(version).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+", line):
                raise DryRunError(f"{requirements_file(version)}: {line!r} is not an exact name==version pin")
            lines.append(line)
    return sorted(lines, key=lambda r: not r.lower().startswith("torch=="))


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
    text = requirements_file(version).read_text()
    return hashlib.sha256(f"{_LAYOUT}\n{PYTHON_TAG}\n{text}".encode()).hexdigest()[:10]


def environment(version: str = "0.5.11") -> DryRunEnv:
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


def setup(version: str = "0.5.11", *, progress: Progress | None = None, python: str | None = None,
          torch_wheel: str | None = None, torch_index_url: str | None = None,
          allow_cuda_torch: bool = False) -> SetupReport:
    """Build (or finish building) the environment for `version`; free when it is complete.

    torch comes from ``torch_wheel``, else from what pip finds when that is a CPU build,
    else from ``torch_index_url`` (default: the PyTorch CPU index); the CUDA build (several
    GB) only with ``allow_cuda_torch`` (see kit/dryrun/_torch.py).
    """
    started = time.monotonic()
    env = environment(version)
    pins = requirements(version)
    chunks = [pins[1:][i : i + _CHUNK] for i in range(0, len(pins) - 1, _CHUNK)]
    plan = [("venv", f"virtualenv with Python {PYTHON_TAG}")]
    plan.append(("torch", f"{pins[0]} (CPU build)"))
    plan += [(f"packages-{i + 1}", _chunk_label(c, i, len(chunks))) for i, c in enumerate(chunks)]
    plan += [("sglang", f"sglang=={version} (no dependencies)"), ("check", "import sglang.srt.server_args")]
    steps = [SetupStep(name, label, i + 1, len(plan)) for i, (name, label) in enumerate(plan)]
    report = SetupReport(env, steps)
    say = progress or (lambda step: None)
    if env.ready:
        for step in steps:
            step.state = "cached"
            say(step)
        report.seconds = time.monotonic() - started
        return report
    torch = {"wheel": torch_wheel, "index_url": torch_index_url, "allow_cuda": allow_cuda_torch}
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(env.path.parent / (env.path.name + ".lock")):
        actions = {"venv": lambda: _make_venv(env, python), "torch": lambda: _install_torch(env, pins[0], torch),
                   "sglang": lambda: _install_sglang(env), "check": lambda: _check(env)}
        for i, chunk in enumerate(chunks):
            actions[f"packages-{i + 1}"] = lambda chunk=chunk, step=f"packages-{i + 1}": _install_chunk(
                env, chunk, step
            )
        for step in steps:
            _run_step(env, step, actions[step.name], say)
        _remove_stale(env)
    report.seconds = time.monotonic() - started
    return report


def _chunk_label(chunk: list[str], index: int, total: int) -> str:
    names = [r.split("==")[0] for r in chunk]
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
        proc = subprocess.run(
            [python, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
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
    proc = run_process([interpreter, "-m", "venv", str(env.path)], timeout=300)
    if proc.returncode != 0:
        raise SetupFailed(
            f"`{interpreter} -m venv {env.path}` failed: {_tail(proc)}",
            step="venv",
            hint=f"install the venv module for Python {PYTHON_TAG} (apt-get install python{PYTHON_TAG}-venv)",
        )
    return interpreter


def _pip(env: DryRunEnv, *args: str) -> list[str]:
    return [str(env.python), "-m", "pip", *args, "--no-input", "--disable-pip-version-check"]


def _install_torch(env: DryRunEnv, pin: str, torch: dict) -> str:
    choice = choose_torch(pin, str(env.python), **torch)
    proc = run_process(_pip(env, "install", "--only-binary=:all:", "--quiet", *choice.args), timeout=_PIP_TIMEOUT)
    if proc.returncode != 0:
        raise _pip_failure("torch", [pin], proc)
    return choice.label


def _install_chunk(env: DryRunEnv, chunk: list[str], step: str) -> None:
    proc = run_process(_pip(env, "install", "--no-deps", "--only-binary=:all:", "--quiet", *chunk), timeout=_PIP_TIMEOUT)
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
        proc = run_process(_pip(env, "install", "--no-deps", "--only-binary=:all:", "--quiet", pin), timeout=_PIP_TIMEOUT)
        if proc.returncode != 0:
            return pin
    return None


def _pip_failure(step: str, pins: list[str], proc: subprocess.CompletedProcess) -> SetupFailed:
    what = pins[0] if len(pins) == 1 else f"one of {', '.join(pins)}"
    return SetupFailed(
        f"dry-run setup step {step!r}: pip could not install {what}: {_tail(proc)}",
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


def _check(env: DryRunEnv) -> dict:
    proc = run_process([str(env.python), str(INSIDE), "--check"], timeout=_CHECK_TIMEOUT, env=inside_environment())
    reply = parse_answer(proc)
    if not reply.get("ok"):
        missing = re.search(r"No module named '([\w.]+)'", reply.get("error", ""))
        package = missing.group(1).split(".")[0] if missing else None
        raise SetupFailed(
            f"dry-run setup step 'check': importing sglang.srt.server_args failed: {reply.get('error')}",
            step="check",
            package=package,
            hint="the pinned list lacks a package (README, 'Adding an sglang version'); "
            f"{_last_lines(reply.get('traceback', ''), 3)}",
        )
    versions = reply.get("versions", {})
    if versions.get("sglang") != env.version:
        raise SetupFailed(f"the environment holds sglang {versions.get('sglang')}, not {env.version}",
                          step="check", package=f"sglang=={env.version}")
    return {k: reply.get(k) for k in ("versions", "stand_ins", "probes_missing", "import_seconds")}


# --------------------------------------------------------------------------- processes


def inside_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment for the inside process: no SGLANG_* from this shell, hub offline."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env.update(extra or {})
    return env


def run_process(argv: list[str], *, timeout: float, env: dict | None = None, stdin: str | None = None):
    """subprocess.run in its own process group, which is killed whole on timeout."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise DryRunError(f"`{' '.join(argv[:4])} ...` ran past {timeout:g}s and was killed",
                          hint="a slow network or disk; run it again (finished setup steps are kept)") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


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
