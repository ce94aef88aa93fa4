"""The lab's real engine: PyPI's sglang serving a tiny random model on CPU.

``RealLab`` (``sgl-kit lab up --engine sglang``) starts the real ``python -m sglang.launch_server``
from the real-server environment (kit/dryrun/serve_env.py: built once under the kit cache,
cached, resumable) with a tiny model made on this machine (kit/lab/tiny_model.py). It shares
the stand-in lab's directory layout and agent (logs/server.log, run/server.json, start, stop,
status), so ``lab status``, ``down`` and ``restart`` work the same for both engines.

What it needs on CPU, each from sglang 0.5.11's own source:

- ``SGLANG_USE_CPU_ENGINE=1`` in the server's environment: ``--device cpu`` alone does not set
  sglang's ``is_cpu()``, and without it the rotary embedding imports vllm;
- ``--device cpu --attention-backend torch_native``;
- ``--max-total-tokens 16384``: otherwise the KV pool is sized from free host memory (about
  13 GB and 30 s here) for a model that needs a few MB;
- ``--sleep-on-idle``: the idle scheduler otherwise busy-polls a whole core;
- two narrow import-time stand-ins (kit/data/serve/stand_ins.yaml): torchvision and
  sgl_kernel.kvcacheio, listed by ``lab status`` with the reason each exists.

``model="qwen3.5"`` (``--model qwen3.5``) serves a tiny ``Qwen3_5ForConditionalGeneration``, the
incident's class (hybrid Gated DeltaNet and full attention, a vision tower), text only. Its
Gated DeltaNet layers run five CPU ops of sgl-kernel, here in plain torch (``sgl_kernel.mamba``),
and sglang's gated RMSNorm routed to its own torch reference (``sgl_kit_routes``), both in
kit/data/serve/stand_ins.yaml. Its launch always carries (MODEL_FLAGS) ``--skip-server-warmup``:
sglang's warmup sends a VLM an image (srt/entrypoints/http_server.py:1887 and 1923), which the
torchvision stand-in refuses; and ``--max-mamba-cache-size 256``: otherwise the linear-attention
state pool is sized from free host memory (model_executor/model_runner_kv_cache_mixin.py:94-123),
1.35 million slots and 6.1 GB here.
"""

from __future__ import annotations

import html
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit._argv import option_value
from kit._secrets import mask_argv
from kit.dryrun.serve_env import SERVE_ENV, serve_environment, serve_versions, setup_serve, stand_ins
from kit.errors import LabError
from kit.hosts import Host

from . import tiny_model
from .control import LAUNCH_ENV, Lab, LabStatus, _flags_of, _what_failed, _without_place

__all__ = ["ENGINES", "RealLab", "RealLabStatus", "default_flags", "lab_for"]

ENGINES = ("stand-in", "sglang")
LAUNCHER = "sglang.launch_server"
DEFAULT_SGLANG = "0.5.11"
DEFAULT_MODEL = "qwen3"
DEFAULT_WAIT = 300.0
_MODEL_TIMEOUT = 300.0
_SERVER_ENV = {**SERVE_ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Flags a tiny model's launch always carries unless the flags given name them (see the module docstring).
MODEL_FLAGS = {"qwen3": [], "qwen3.5": [("--skip-server-warmup",), ("--max-mamba-cache-size", "256")]}


def default_flags() -> list[str]:
    """The launch the real engine starts when no flags are given (see the module docstring for why)."""
    return ["--device", "cpu", "--attention-backend", "torch_native", "--max-total-tokens", "16384",
            "--sleep-on-idle", "--enable-metrics"]


@dataclass
class RealLabStatus(LabStatus):
    """A LabStatus of the real engine: which sglang, model and environment, and its stand-ins."""

    engine: str = "sglang"
    sglang: str | None = None
    model: str | None = None
    env_path: str | None = None
    stand_ins: dict[str, str] = field(default_factory=dict)
    stand_in_ops: dict[str, str] = field(default_factory=dict)  # op -> what sglang calls it for, and where

    def to_text(self) -> str:
        lines = [super().to_text(), f"  engine:  real sglang {self.sglang or '?'} on CPU, model {self.model or '?'}"]
        if self.env_path:
            lines.append(f"  env:     {self.env_path}")
        for name, reason in self.stand_ins.items():
            lines.append(f"  stand-in {name}: {reason}")
            lines += [f"    op {op}: {why}" for op, why in self.stand_in_ops.items() if f"{name}." in op]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.to_text())}</pre>"


class RealLab(Lab):
    """The lab with the real sglang server on CPU, on this machine or an SSH host (kit/lab/real_remote.py)."""

    default_wait = DEFAULT_WAIT
    _builds_env = True  # an SSH host builds its real-server environment with the shipped kit

    def __init__(self, host: Host | None = None, directory: str | None = None, python: str = "python3",
                 sglang: str = DEFAULT_SGLANG, model: str = DEFAULT_MODEL, progress=None, *,
                 cache: str | None = None, build_python: str | None = None) -> None:
        super().__init__(host, directory, python)
        # on an SSH host: its kit cache (default ~/.cache/sglang-investigation-kit there) and the python3.11
        # that builds the environment there when it is missing
        self._remote_options = {"cache": cache, "build_python": build_python}
        self._remote = None
        if model not in tiny_model.MODELS:
            raise LabError(f"unknown tiny model {model!r} for the real engine",
                           hint=f"use one of {', '.join(tiny_model.MODELS)}")
        self.env = serve_environment(sglang)  # UnsupportedVersion names what is missing for another version
        self.sglang = sglang
        self.model = model
        self.progress = progress or (lambda step: sys.stderr.write(f"{step}\n"))

    def __repr__(self) -> str:
        return f"<RealLab sglang {self.sglang} {self.model} {self.host.name}:{self.directory}>"

    @property
    def model_dir(self) -> Path:
        return Path(self.directory) / "models" / f"tiny-{self.model}"

    # -- prepare ----------------------------------------------------------------
    @property
    def remote(self):
        """The environment on the lab's SSH host (kit.lab.real_remote.RemoteServeEnv); None here."""
        if self._remote is None and not self.local:
            from .real_remote import BUILD_PYTHON, remote_env

            opts = self._remote_options
            self._remote = remote_env(self, self.env, opts["cache"], opts["build_python"] or BUILD_PYTHON)
        return self._remote

    @property
    def env_python(self) -> str:
        return self.remote.python if self.remote is not None else str(self.env.python)

    def prepare(self) -> dict:
        """Build the environment (once), make the tiny model (once), and the lab's logs/ and run/."""
        if self.remote is not None:
            self.remote.ensure(self.progress)
            self.remote.make_dirs()
            made = self.remote.make_model(self.model, str(self.model_dir), _SERVER_ENV, self.progress)
            return {"env": self.remote.path, "model": made}
        report = setup_serve(self.sglang, progress=self.progress)
        if not report.cached:
            self.progress(f"real-server environment ready: {self.env.path} "
                          f"({self.env.size_bytes() / 1e9:.2f} GB, {report.seconds:.0f} s)")
        for sub in ("logs", "run", "models"):
            (Path(self.directory) / sub).mkdir(parents=True, exist_ok=True)
        made = self._make_model()
        return {"env": str(self.env.path), "model": made}

    def _make_model(self) -> dict:
        marker = self.model_dir / ".sgl-kit-model.json"
        if marker.is_file():
            return json.loads(marker.read_text())
        from kit._proc import run

        proc = run([str(self.env.python), "-P", tiny_model.__file__, str(self.model_dir), "--model", self.model],
                   timeout=_MODEL_TIMEOUT, env={"PATH": "/usr/bin:/bin", **_SERVER_ENV},
                   hint="making the tiny model is seconds of CPU work; on a busy machine run `sgl-kit lab up "
                        "--engine sglang` again")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise LabError(f"making the tiny {self.model} model in {self.model_dir} failed: {tail}",
                           hint="the real-server environment may be damaged; remove "
                                f"{self.env.path} and run `sgl-kit lab up --engine sglang` again")
        info = json.loads(lines[-1])
        marker.write_text(json.dumps(info) + "\n")
        self.progress(f"tiny model {info['architecture']} made in {self.model_dir} ({info['bytes'] / 1e3:.0f} kB)")
        return info

    # -- start and stop -----------------------------------------------------------
    def up(self, variant: str | None = None, flags: list[str] | None = None, port: int | None = None,
           host: str = "127.0.0.1", scenario: str = "incident", timeout: float = DEFAULT_WAIT) -> LabStatus:
        """Start the real server (``flags`` replace the default launch), unless the lab already runs."""
        if variant:
            raise LabError("the real engine has no incident variants (new, old, fixed)",
                           hint="give sglang flags after --, or use the stand-in for the incident's launches")
        current = self.status()
        if current.running:
            self._check_same(current, None, flags)
            if not isinstance(current, RealLabStatus):
                raise LabError(f"the lab on {self.host.name} runs the stand-in (pid {current.pid})",
                               hint="`sgl-kit lab down` first, then `sgl-kit lab up --engine sglang`")
            if port is not None and current.port != port:
                raise LabError(f"the lab on {self.host.name} already runs on port {current.port} (pid {current.pid}); "
                               f"this asked for port {port}", hint=f"RealLab().restart(port={port}) moves it there",
                               cli_hint=f"`sgl-kit lab restart --port {port}` moves it there")
            current.note = "already running; `sgl-kit lab restart` to change its flags"
            return current
        port, moved = self._port(port, host, flags)
        argv = self._real_command(flags, port, host)
        port = int(option_value(argv, "--port") or port)
        host = option_value(argv, "--host") or host
        # a port in use is said before preparing, which may build the environment for minutes
        taken = self._agent("port", {"host": host, "port": port})
        if taken.get("outcome") == "port-in-use":
            return self._real_started(taken, port)
        self.prepare()
        label = "custom flags" if flags else "default CPU launch"
        env = {**_SERVER_ENV, LAUNCH_ENV: f"real sglang {self.sglang} on CPU, tiny {self.model}, {label}"}
        args = {"lab_dir": self.directory, "argv": argv, "env": env, "host": host, "port": port,
                "timeout": timeout, "label": label, "launcher": LAUNCHER, "engine": "sglang", "model": self.model}
        result = self._agent("start", args, timeout=timeout + 60)
        status = self._real_started(result, port)
        if moved and result.get("outcome") == "started":
            status.note = moved
        return status

    def _real_command(self, flags: list[str] | None, port: int, host: str) -> list[str]:
        given = list(flags) if flags else default_flags()
        extra = []
        names = {f.split("=", 1)[0] for f in given}
        if not names & {"--model-path", "--model"}:
            extra += ["--model-path", str(self.model_dir)]
        if "--host" not in names:
            extra += ["--host", host]
        if "--port" not in names:
            extra += ["--port", str(port)]
        extra += [part for flag in MODEL_FLAGS.get(self.model, []) if flag[0] not in names for part in flag]
        return [self.env_python, "-m", LAUNCHER, *extra, *given]

    def _real_started(self, result: dict, port: int) -> LabStatus:
        if result.get("outcome") in ("exited", "timeout"):
            tail = "\n    ".join(_what_failed(result.get("log_tail") or ["(empty log)"]))
            what = (f"exited with status {result.get('exit_code')}" if result["outcome"] == "exited"
                    else f"did not answer /health within {result.get('timeout')} s and was stopped")
            raise LabError(f"the real sglang server on {self.host.name} {what}; the end of its log "
                           f"({self.directory}/logs/server.log):\n    {tail}",
                           hint="fix the flags it names, or start the default CPU launch with "
                                "`sgl-kit lab up --engine sglang` (no flags)")
        return self._started(result, port)

    def down(self, timeout: float = 40) -> LabStatus:
        """Stop the real server: SIGTERM, which sglang handles by stopping its workers (about 5 s idle,
        longer on busy shared cores), SIGKILL after ``timeout``, then what is left of its process group."""
        status = super().down(timeout=timeout)
        if "ignored SIGTERM" in status.note:
            waiting = [line for line in _tail(Path(self.directory) / "logs" / "server.log")
                       if "Gracefully exiting" in line]
            if waiting:  # sglang's own shutdown waits for requests in flight (a /health_generate, say)
                status.note = (status.note.replace("ignored SIGTERM", f"was still waiting for requests after "
                                                   f"{timeout:g} s") + f" (its log: {waiting[-1].split('] ', 1)[-1]})")
        return status

    def restart(self, flags: list[str] | None = None, variant: str | None = None, **options) -> LabStatus:
        """Stop and start again: with new flags, or the same command and port."""
        previous = self.status()
        self.down()
        if previous.running:
            options.setdefault("port", previous.port)
            if not flags:
                flags = _without_place(_flags_of(previous.argv))
        options.pop("scenario", None)
        try:
            return self.up(variant=variant, flags=flags, **options)
        except LabError as exc:
            if not previous.running:
                raise
            old = mask_argv(_without_place(_flags_of(previous.argv)))
            raise LabError(f"{exc.message}\nThe lab's previous server (pid {previous.pid}) was stopped first, "
                           "so none runs now.", hint=f"bring it back with RealLab().up(flags={old!r})",
                           cli_hint=f"bring it back with `sgl-kit lab up --engine sglang --port {previous.port} "
                                    f"-- {shlex.join(old)}`") from None

    def _status(self, result: dict) -> LabStatus:
        status = super()._status(result)
        state = result.get("state") or {}
        if not status.running or state.get("engine") != "sglang":
            return status
        reasons = {name: " ".join(str(info.get("reason", "")).split()) for name, info in stand_ins().items()}
        ops = {op: " ".join(str(why).split()) for info in stand_ins().values() for op, why in (info.get("ops") or {}).items()}
        return RealLabStatus(**status.__dict__, sglang=self.sglang, model=state.get("model"),
                             env_path=self.remote.path if self.remote is not None else str(self.env.path),
                             stand_ins=reasons, stand_in_ops=ops)


def _tail(path: Path, size: int = 8192) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def lab_for(host: Host | None = None, directory: str | None = None, python: str = "python3",
            engine: str | None = None, sglang: str | None = None, model: str | None = None) -> Lab:
    """The Lab for an engine; with no engine given, the one whose server runs in the directory (else the stand-in)."""
    if engine not in (None, *ENGINES):
        raise LabError(f"unknown lab engine {engine!r}", hint=f"use one of {', '.join(ENGINES)}")
    if engine is None:
        plain = Lab(host, directory, python)
        state = plain._agent("status", {"lab_dir": plain.directory}).get("state") or {}
        if state.get("engine") != "sglang":
            return plain
        engine, model = "sglang", model or state.get("model")
        sglang = sglang or _version_of(state.get("argv") or [])
    if engine == "sglang":
        return RealLab(host, directory, python, sglang=sglang or DEFAULT_SGLANG, model=model or DEFAULT_MODEL)
    return Lab(host, directory, python)


def _version_of(argv: list[str]) -> str | None:
    """The sglang version of a real-engine launch, from its interpreter's environment path."""
    for version in serve_versions():
        if argv and f"/sglang-{version}-" in argv[0]:
            return version
    return None
