"""The real engine on an SSH host (``sgl-kit lab up --engine sglang --on HOST``).

The server runs where the lab runs, from a real-server environment *on that host*:
``<cache>/serve/sglang-V-py311-H/`` under the host's kit cache (``~/.cache/sglang-investigation-kit``
there unless given). The name carries the fingerprint of the package lists, so an environment the
same kit built there (or this machine's, when the host shares its disk and home) is reused as is.

When it is missing, it is built on the host by the kit itself, shipped as the stand-in lab ships it
(``Lab.prepare``: a venv of the host's ``python3`` with the kit's wheel, here the one that also
carries ``kit.dryrun.serve_env`` and the lists it installs, kit/lab/packaging.py), running
``setup_serve`` there with the host's ``python3.11``: about 2.4 GB fetched by that host's pip and
several minutes; each finished step is streamed back as it ends, and an interrupted build resumes
where it stopped, as it does here. The sglang wheel goes over from this machine's cache (the host's
venv of ``python3`` has no pip to fetch it). What goes wrong there comes back as one LabError: a
step that failed with its reason and advice, or a module the shipped kit lacks; never a traceback.

The tiny model is made on the host by the environment's own python (kit/lab/tiny_model.py, sent
over). Start, stop, status and restart go through the lab agent, as for the stand-in.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.errors import HostError, LabError

from . import tiny_model

__all__ = ["BUILD_PYTHON", "RemoteServeEnv", "remote_env"]

BUILD_PYTHON = "python3.11"  # sglang 0.5.11+ ships cp311 wheels only (kit/dryrun/_env.py, PYTHON_TAG)
_BUILD_TIMEOUT = 3600.0
_MODEL_TIMEOUT = 300.0
_PROBE_TIMEOUT = 30.0
_BUILD_MARK = "KIT-BUILD "  # the line _BUILD prints its outcome on
# Run on the host by the shipped kit: argv is version, build python, the environment's expected path.
# Every outcome is one marked JSON line, so the kit reports it as a LabError and never as a traceback.
_BUILD = """
import json, sys


def say(kind, **what):
    print("KIT-BUILD " + json.dumps(dict(what, kind=kind)), flush=True)


try:
    from kit.dryrun.serve_env import serve_environment, setup_serve
    from kit.errors import KitError
except ImportError as exc:
    say("missing", module=exc.name, error=str(exc))
    sys.exit(3)
version, python, expected = sys.argv[1:4]
env = serve_environment(version)
if str(env.path) != expected:  # the same lists give the same name: anything else was not shipped whole
    say("elsewhere", path=str(env.path))
    sys.exit(5)
try:
    report = setup_serve(version, progress=lambda step: print(step, flush=True), python=python)
except KitError as exc:
    say("failed", message=exc.message, hint=exc.cli_hint or exc.hint, step=getattr(exc, "step", None),
        package=getattr(exc, "package", None))
    sys.exit(4)
say("done", seconds=round(report.seconds))
"""


class RemoteServeEnv:
    """The real-server environment of one sglang version on the lab's SSH host."""

    def __init__(self, lab, local_env, cache: str | None = None, build_python: str = BUILD_PYTHON) -> None:
        self.lab = lab
        self.local_env = local_env  # where it would live here: its name (version, python, fingerprint)
        self.version = local_env.version
        home = lab.info["home"]
        self.cache = (cache or f"{home}/.cache/sglang-investigation-kit").replace("~", home, 1)
        self.path = f"{self.cache}/serve/{local_env.path.name}"
        self.build_python = build_python

    def __repr__(self) -> str:
        return f"<RemoteServeEnv sglang {self.version} at {self.lab.host.name}:{self.path}>"

    @property
    def python(self) -> str:
        return f"{self.path}/bin/python"

    @property
    def ready(self) -> bool:
        marker = f"{self.path}/.sgl-kit-steps/check.done"
        have = self.lab._agent("have", {"paths": [marker, self.python]})["have"]
        return bool(have.get(marker)) and bool(have.get(self.python))

    # -- build ----------------------------------------------------------------------
    def ensure(self, progress) -> str:
        """The environment on the host: reused when complete, else built there (minutes; progress streamed)."""
        host = self.lab.host.name
        if self.ready:
            progress(f"real-server environment on {host}: {self.path} (already built, reused)")
            return "cached"
        self._check_build_python()
        progress(f"building the real-server environment for sglang {self.version} on {host} at {self.path}: "
                 f"about 2.4 GB downloaded and installed by {host}'s pip with its {self.build_python}; this takes "
                 "minutes, and an interrupted build resumes where it stopped")
        self._ship_kit(progress)
        argv = [f"{self.lab.directory}/ml-env/bin/python", "-c", _BUILD, self.version, self.build_python, self.path]
        tail: list[str] = []
        outcome: dict = {}
        with self.lab.host.stream(argv, timeout=_BUILD_TIMEOUT, env={"SGL_KIT_CACHE": self.cache}) as stream:
            buffer = ""
            for name, data in stream:
                buffer += data.decode("utf-8", "replace")
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    if name == "stdout" and line.startswith(_BUILD_MARK):
                        outcome = json.loads(line[len(_BUILD_MARK):])
                        continue
                    tail = (tail + [line])[-12:]
                    if name == "stdout" and line.strip():
                        progress(f"  {host}: {line}")
        again = f"run the same `sgl-kit lab up --engine sglang --on {host}` again: finished steps are kept"
        kind = outcome.get("kind")
        if kind == "missing":
            raise LabError(f"the kit shipped to {host} cannot import {outcome.get('module')} ({outcome.get('error')}), "
                           "which builds the real-server environment there",
                           hint="the kit's package for a host lacks it (kit/lab/packaging.py, BUILD_ENTRY): report "
                                f"it; meanwhile run `sgl-kit lab up --engine sglang` on {host} itself")
        if kind == "elsewhere":
            raise LabError(f"the kit shipped to {host} would build the environment at {outcome.get('path')}, not at "
                           f"{self.path}: it reads other package lists than this machine's kit",
                           hint="the kit's package for a host lacks some of kit/data/serve or kit/data/dryrun "
                                "(kit/lab/packaging.py): report it")
        if kind == "failed":
            step = f" at step {outcome['step']!r}" if outcome.get("step") else ""
            hint = (f"the build runs on {host} with that host's pip and network: make {outcome['package']} "
                    "reachable there (a package index it can reach, or PIP_FIND_LINKS in its environment)"
                    if outcome.get("package") else f"on {host}: {outcome.get('hint') or 'fix what it names'}")
            raise LabError(f"building the real-server environment on {host} failed{step}: {outcome.get('message')}",
                           hint=f"{hint}; then {again}")
        if kind != "done" or stream.exited != 0 or not self.ready:
            last = [line for line in tail if line.strip()][-1:] or [f"no output; exit {stream.exited}"]
            raise LabError(f"building the real-server environment on {host} stopped (exit {stream.exited}): "
                           f"{last[0].strip()}", hint=f"fix what it names on {host}, then {again}")
        return "built"

    def _check_build_python(self) -> None:
        host = self.lab.host.name
        try:
            res = self.lab.host.run([self.build_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                    timeout=_PROBE_TIMEOUT)
            why = res.stdout.strip() if res.ok else ((res.stderr or res.stdout).strip().splitlines() or
                                                      [f"exit {res.exited}"])[-1]
        except HostError as exc:
            res, why = None, exc.message
        if res is None or not res.ok or res.stdout.strip() != "3.11":
            raise LabError(f"{host} has no Python 3.11 as `{self.build_python}` ({why}), and the real-server "
                           f"environment for sglang {self.version} is not built there ({self.path})",
                           hint=f"install python3.11 on {host} (sglang {self.version}'s wheels are cp311), then run "
                                "the same command again; or build it on that host with `sgl-kit lab up --engine "
                                "sglang` run there")

    def _ship_kit(self, progress) -> None:
        """The kit on the host, as the stand-in lab ships it (its venv with the kit's wheel, the one that
        builds), and the sglang wheel in the host's kit cache, where the build looks for it first."""
        from . import packaging
        from .control import Lab

        progress(f"  shipping the kit to {self.lab.host.name}:{self.lab.directory}/ml-env")
        Lab.prepare(self.lab)
        wheel = packaging.sglang_wheel(self.version)
        there = f"{self.cache}/wheels/{wheel.name}"
        if self.lab._agent("have", {"paths": [there]})["have"].get(there) != packaging.sha256(wheel):
            self.lab._agent("put", {"path": there}, stdin=wheel.read_bytes(), timeout=600)

    # -- the tiny model ----------------------------------------------------------------
    def make_model(self, model: str, model_dir: str, server_env: dict, progress) -> dict:
        """The tiny model on the host (once), made by the environment's python from kit/lab/tiny_model.py."""
        marker = f"{model_dir}/.sgl-kit-model.json"
        if self.lab._agent("have", {"paths": [marker]})["have"].get(marker):
            return json.loads(self.lab.host.read_text(marker))
        script = f"{self.lab.directory}/run/tiny_model.py"
        self.lab._agent("put", {"path": script}, stdin=Path(tiny_model.__file__).read_bytes())
        res = self.lab.host.run([self.python, "-P", script, model_dir, "--model", model], timeout=_MODEL_TIMEOUT,
                                env={"PATH": "/usr/bin:/bin", **server_env})
        lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
        if not res.ok or not lines:
            tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
            raise LabError(f"making the tiny {model} model in {self.lab.host.name}:{model_dir} failed: {tail}",
                           hint=f"the real-server environment on {self.lab.host.name} may be damaged; remove "
                                f"{self.path} there and run the same command again")
        info = json.loads(lines[-1])
        self.lab._agent("put", {"path": marker}, stdin=(json.dumps(info) + "\n").encode())
        progress(f"tiny model {info['architecture']} made in {self.lab.host.name}:{model_dir} "
                 f"({info['bytes'] / 1e3:.0f} kB)")
        return info

    def make_dirs(self) -> None:
        res = self.lab.host.run(["mkdir", "-p", *(f"{self.lab.directory}/{sub}" for sub in ("logs", "run", "models"))],
                                timeout=_PROBE_TIMEOUT)
        if not res.ok:
            raise LabError(f"cannot make the lab directory {self.lab.directory} on {self.lab.host.name}: "
                           f"{res.stderr.strip()}", hint="pass a writable one with --dir")


def remote_env(lab, local_env, cache: str | None = None, build_python: str = BUILD_PYTHON) -> RemoteServeEnv:
    """The real-server environment of ``local_env``'s version on ``lab``'s host."""
    return RemoteServeEnv(lab, local_env, cache, build_python)
