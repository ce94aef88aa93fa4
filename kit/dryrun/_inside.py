"""The half of the dry-run that runs inside the dry-run virtualenv, next to sglang.

The kit is not installed in that environment, so this file is loaded by path and uses
only the standard library plus what the environment holds (sglang, torch CPU, ...).
The kit sends one JSON request on stdin and reads one JSON answer from stdout;
everything else the process prints goes to stderr.

What it does, in order:
1. stands in for what a CPU-only machine lacks: triton (sglang's own
   `_triton_stub.py`, loaded by path), torchvision (an import-time stub), and
   `torch.compile` (a no-op, because sglang decorates functions with it at import);
2. imports `sglang.srt.configs.model_config`, then `sglang.srt.server_args`, and
   replaces the hardware probes in the `server_args` namespace only, so they answer
   like the target GPU (patching `sglang.srt.utils.common` itself would make other
   modules run CUDA code);
3. for each launch, runs sglang's own `prepare_server_args(argv)` and then
   `check_server_args()` (the server calls it before it logs its args), recording every
   write to a `ServerArgs` attribute during `__post_init__` and that check (field, old,
   new, function, file:line) and every log record and warning emitted meanwhile.

Usage: `python _inside.py --check` or `python _inside.py --resolve < request.json`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import importlib.util
import io
import json
import logging
import math
import os
import random
import sys
import time
import traceback
import types
import warnings

PROTOCOL = 1
_THIS_FILE = os.path.abspath(__file__)
_LOGGING_FILE = os.path.abspath(logging.__file__)
_WARNINGS_FILE = os.path.abspath(warnings.__file__)
_MAX_REPR = 20_000

# The hardware probes `sglang.srt.server_args` imports by name, answered from the GPU profile.
PROBES = (
    "is_cuda",
    "get_device_memory_capacity",
    "get_device_sm",
    "is_sm90_supported",
    "is_sm100_supported",
    "is_sm120_supported",
    "is_blackwell_supported",
    "is_hopper_with_cuda_12_3",
    "is_flashinfer_available",
    "get_device_name",
    "get_nvidia_driver_version",
)


# --------------------------------------------------------------------------- stand-ins


def _sglang_dir() -> str:
    spec = importlib.util.find_spec("sglang")  # finds without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("sglang is not installed in this environment")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def _install_triton_stub(sglang_dir: str) -> str:
    if importlib.util.find_spec("triton") is not None:
        return "real triton"
    path = os.path.join(sglang_dir, "_triton_stub.py")
    if not os.path.isfile(path):
        raise RuntimeError(f"this sglang has no {path}; the dry-run needs it to stand in for triton")
    spec = importlib.util.spec_from_file_location("_sgl_kit_triton_stub", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()
    return "sglang/_triton_stub.py"


class _StandIn:
    """A torchvision function: importable, but calling it says what it is."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a dry-run stand-in for torchvision, which is not installed")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(f"{self._name}.{name}")


class _StandInClass(type):
    """A torchvision class or enum: every member is a distinct, hashable placeholder."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        member = f"{cls.__name__}.{name}"
        setattr(cls, name, member)
        return member


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            value = _StandInClass(name, (), {"__module__": self.__name__})
        else:
            value = _StandIn(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _TorchvisionFinder:
    """Answers `import torchvision[.x.y]` with stand-in modules (PyPI builds need CUDA libraries)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+dryrun.stand.in"
        return module

    def exec_module(self, module) -> None:
        pass


def _install_torchvision_stub() -> str:
    if importlib.util.find_spec("torchvision") is not None:
        return "real torchvision"
    sys.meta_path.insert(0, _TorchvisionFinder())
    return "import-time stub"


def _no_compile(model=None, **_options):
    """torch.compile(fn), @torch.compile and @torch.compile(...) all return the function unchanged."""
    if model is None:
        return lambda fn: fn
    return model


def install_stand_ins(sglang_dir: str) -> dict:
    triton = _install_triton_stub(sglang_dir)
    torchvision = _install_torchvision_stub()
    import torch

    torch.compile = _no_compile
    return {"triton": triton, "torchvision": torchvision, "torch.compile": "no-op"}


# --------------------------------------------------------------------------- hardware probes


def _cuda_at_least(gpu: dict, major: int, minor: int) -> bool:
    parts = str(gpu.get("cuda_version", "12.9")).split(".")
    return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= (major, minor)


def _flashinfer_enabled() -> bool:
    # The real probe also checks that flashinfer is installed; on a real sglang box it is.
    flag = os.environ.get("SGLANG_IS_FLASHINFER_AVAILABLE", "true").strip().lower()
    return flag in ("1", "true", "yes", "y", "on")


def probe_answers(gpu: dict) -> dict:
    """What each probe returns on the target: values, computed the way sglang computes them."""
    sm, major = int(gpu["sm"]), int(gpu["sm"]) // 10
    driver = tuple(int(p) for p in str(gpu.get("driver_version", "580.95.05")).split(".") if p.isdigit())
    return {
        "is_cuda": True,
        "get_device_memory_capacity": float(gpu["memory_mib"]),
        "get_device_sm": sm,
        "is_sm90_supported": bool(gpu.get("hopper")) and _cuda_at_least(gpu, 12, 3),
        "is_sm100_supported": major == 10 and _cuda_at_least(gpu, 12, 8),
        "is_sm120_supported": major == 12 and _cuda_at_least(gpu, 12, 8),
        "is_blackwell_supported": bool(gpu.get("blackwell")) and _cuda_at_least(gpu, 12, 8),
        "is_hopper_with_cuda_12_3": bool(gpu.get("hopper")) and _cuda_at_least(gpu, 12, 3),
        "is_flashinfer_available": _flashinfer_enabled(),
        "get_device_name": str(gpu["name"]),
        "get_nvidia_driver_version": driver,
    }


def _constant(value):
    def probe(*_args, **_kwargs):
        return value

    return probe


def patch_probes(server_args_module, gpu: dict) -> tuple[dict, list[str]]:
    answers = probe_answers(gpu)
    patched, missing = {}, []
    for name in PROBES:
        if hasattr(server_args_module, name):
            setattr(server_args_module, name, _constant(answers[name]))
            patched[name] = repr(answers[name])
        else:
            missing.append(name)
    return patched, missing


# --------------------------------------------------------------------------- values


def _plain(value, depth: int = 0):
    """The value if JSON holds it exactly (lists for tuples aside), else raise TypeError."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise TypeError("not finite")
    if depth > 20:
        raise TypeError("too deep")
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def describe(value) -> dict:
    """{"repr": text, "json": value or None, "exact": whether json holds the value}."""
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not end the dry-run
        text = f"<unrepresentable {type(value).__name__}: {exc}>"
    if len(text) > _MAX_REPR:
        text = text[:_MAX_REPR] + "...<cut>"
    try:
        return {"repr": text, "json": _plain(value), "exact": not isinstance(value, tuple)}
    except TypeError:
        return {"repr": text, "json": None, "exact": False}


_MISSING = object()


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return repr(a) == repr(b)


# --------------------------------------------------------------------------- recording


class _Capture(logging.Handler):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__(logging.NOTSET)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception as exc:
            message = f"{record.msg!r} (unformattable: {exc})"
        frame = _caller(sys._getframe(1), (_LOGGING_FILE, _THIS_FILE))
        self.recorder.event(
            "log",
            frame,
            level=record.levelname,
            logger=record.name,
            message=message,
            file=self.recorder.rel(record.pathname),
            line=record.lineno,
            function=frame.f_code.co_qualname if frame is not None else record.funcName,
        )


def _caller(frame, skip: tuple[str, ...]):
    while frame is not None and os.path.abspath(frame.f_code.co_filename) in skip:
        frame = frame.f_back
    return frame


class Recorder:
    """Wraps ServerArgs.__setattr__ and __post_init__ for one launch; restores them on exit."""

    def __init__(self, cls, field_names: list[str], sglang_dir: str) -> None:
        self.cls = cls
        self.fields = set(field_names)
        self.field_order = list(field_names)
        self.site = os.path.dirname(sglang_dir) + os.sep
        self.events: list[dict] = []
        self.initial: dict | None = None
        self.recording = False
        self._frames: list = []  # kept alive so that id(frame) names one activation
        self._activation: dict[int, int] = {}
        self._saved: dict[str, object] = {}

    def rel(self, path: str) -> str:
        path = os.path.abspath(path)
        return path[len(self.site) :] if path.startswith(self.site) else path

    def activation(self, frame) -> int | None:
        if frame is None:
            return None
        key = id(frame)
        if key not in self._activation:
            self._frames.append(frame)
            self._activation[key] = len(self._activation) + 1
        return self._activation[key]

    def event(self, kind: str, frame, **data) -> None:
        data.update(seq=len(self.events) + 1, kind=kind, activation=self.activation(frame))
        self.events.append(data)

    def __enter__(self) -> Recorder:
        cls = self.cls
        for name in ("__setattr__", "__post_init__"):
            self._saved[name] = cls.__dict__.get(name, _MISSING)
        base_setattr = cls.__setattr__
        original_post_init = cls.__post_init__
        recorder = self

        def __setattr__(obj, name, value):
            if recorder.recording:
                recorder.write(obj, name, value, sys._getframe(1))
            base_setattr(obj, name, value)

        def __post_init__(obj):
            recorder.begin(obj)
            try:
                original_post_init(obj)
            finally:
                recorder.end()

        cls.__setattr__ = __setattr__
        cls.__post_init__ = __post_init__
        return self

    def __exit__(self, *exc) -> None:
        for name, value in self._saved.items():
            if value is _MISSING:
                delattr(self.cls, name)
            else:
                setattr(self.cls, name, value)
        self._frames.clear()
        self.end()

    def write(self, obj, name: str, value, frame) -> None:
        before = getattr(obj, name, _MISSING)
        self.event(
            "write",
            frame,
            field=name,
            is_field=name in self.fields,
            before=None if before is _MISSING else describe(before),
            after=describe(value),
            changed=before is _MISSING or not _same(before, value),
            function=frame.f_code.co_qualname,
            file=self.rel(frame.f_code.co_filename),
            line=frame.f_lineno,
        )

    def begin(self, obj) -> None:
        if self.initial is None:
            self.initial = {name: describe(getattr(obj, name, None)) for name in self.field_order}
        self._handler = _Capture(self)
        logging.getLogger().addHandler(self._handler)
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._warning
        self.recording = True

    def check(self, obj) -> None:
        """Run `check_server_args`, which the server calls before it logs the args, recording it too."""
        check = getattr(obj, "check_server_args", None)
        if check is None:
            return
        self.begin(obj)
        try:
            check()
        finally:
            self.end()

    def end(self) -> None:
        if not self.recording:
            return
        self.recording = False
        logging.getLogger().removeHandler(self._handler)
        warnings.showwarning = self._showwarning

    def _warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        frame = _caller(sys._getframe(1), (_WARNINGS_FILE, _THIS_FILE))
        self.event(
            "log",
            frame,
            level="WARNING",
            logger=f"warnings.{category.__name__}",
            message=str(message),
            file=self.rel(filename),
            line=lineno,
            function=frame.f_code.co_qualname if frame is not None else "",
        )
        self._showwarning(message, category, filename, lineno, file, line)


# --------------------------------------------------------------------------- one launch


def _explicit_fields(server_args_module, argv: list[str]) -> list[str] | None:
    """The fields the command line sets, read with sglang's own parser (defaults suppressed)."""
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    server_args_module.ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    try:
        if "--config" in argv:
            from sglang.srt.server_args_config_parser import ConfigArgumentMerger

            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        with _quiet():
            namespace = parser.parse_args(argv)
    except (SystemExit, Exception):
        return None
    return sorted(vars(namespace))


class _quiet:
    def __enter__(self):
        self._stderr, sys.stderr = sys.stderr, io.StringIO()

    def __exit__(self, *exc):
        sys.stderr = self._stderr


def _error(exc: BaseException, console: str, sglang_dir: str, recorder: Recorder) -> dict:
    if isinstance(exc, SystemExit):
        lines = [line for line in console.strip().splitlines() if line.strip()]
        message = lines[-1] if lines else f"argument parsing exited with status {exc.code}"
        return {"kind": "arguments", "type": "SystemExit", "message": message, "function": "",
                "file": "", "line": None, "traceback": ""}
    frames = traceback.extract_tb(exc.__traceback__)
    inner = frames[-1] if frames else None
    in_sglang = [f for f in frames if os.path.abspath(f.filename).startswith(sglang_dir + os.sep)]
    site = in_sglang[-1] if in_sglang else inner
    # Raised by sglang or a library it calls on the config (transformers): a real startup
    # error. Raised by torch, a stand-in, or about CUDA: the dry-run could not follow that path.
    origin = "environment" if _from_missing_hardware(exc, inner) else "sglang"
    function = ""
    tb = exc.__traceback__
    while tb is not None:
        if site is not None and tb.tb_frame.f_code.co_filename == site.filename and tb.tb_lineno == site.lineno:
            function = tb.tb_frame.f_code.co_qualname
        tb = tb.tb_next
    return {
        "kind": "startup" if origin == "sglang" else "environment",
        "type": type(exc).__name__,
        "message": str(exc),
        "function": function,
        "file": recorder.rel(site.filename) if site else "",
        "line": site.lineno if site else None,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
    }


_HARDWARE_WORDS = ("cuda", "nvidia", "nvml", "triton", "stand-in", "gpu")


def _from_missing_hardware(exc: BaseException, inner) -> bool:
    if inner is None:
        return False
    path = os.path.abspath(inner.filename)
    stand_in = path == _THIS_FILE or os.path.basename(path) == "_triton_stub.py"
    in_torch = f"{os.sep}torch{os.sep}" in path
    about_gpu = any(word in str(exc).lower() for word in _HARDWARE_WORDS)
    return stand_in or in_torch or (about_gpu and not path.endswith(f"sglang{os.sep}srt{os.sep}server_args.py"))


def resolve_launch(server_args_module, launch: dict, seed: int, sglang_dir: str) -> dict:
    import dataclasses

    cls = server_args_module.ServerArgs
    argv = [str(a) for a in launch["argv"]]
    field_names = [f.name for f in dataclasses.fields(cls)]
    explicit = _explicit_fields(server_args_module, argv)
    console = io.StringIO()
    out = {"argv": argv, "explicit": explicit, "error": None, "server_args_line": None, "final": None}
    random.seed(seed)  # random_seed is drawn when not given; a fixed seed keeps dry-runs repeatable
    started = time.perf_counter()
    recorder = Recorder(cls, field_names, sglang_dir)
    saved_stderr, sys.stderr = sys.stderr, console
    try:
        with recorder, warnings.catch_warnings():
            warnings.simplefilter("default")
            args = server_args_module.prepare_server_args(argv)
            recorder.check(args)
        out["server_args_line"] = f"server_args={args!r}"
        out["final"] = {name: describe(getattr(args, name, None)) for name in field_names}
    except BaseException as exc:  # SystemExit from argparse included: it is sglang refusing
        if isinstance(exc, KeyboardInterrupt):
            raise
        sys.stderr = saved_stderr
        out["error"] = _error(exc, console.getvalue(), sglang_dir, recorder)
    finally:
        sys.stderr = saved_stderr
        _reset_logging()
    out["seconds"] = time.perf_counter() - started
    out["initial"] = recorder.initial
    out["events"] = recorder.events
    out["console"] = console.getvalue()[-20000:]
    return out


def _reset_logging() -> None:
    # prepare_server_args calls logging.basicConfig with a stream that was this launch's buffer.
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and isinstance(handler.stream, io.StringIO):
            root.removeHandler(handler)


# --------------------------------------------------------------------------- entry points


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for dist in ("sglang", "torch", "transformers"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def load_sglang(gpu: dict | None) -> dict:
    started = time.perf_counter()
    sglang_dir = _sglang_dir()
    stand_ins = install_stand_ins(sglang_dir)
    importlib.import_module("sglang.srt.configs.model_config")
    server_args_module = importlib.import_module("sglang.srt.server_args")
    info = {"sglang_dir": sglang_dir, "stand_ins": stand_ins, "versions": _versions()}
    if gpu is not None:
        info["probes"], info["probes_missing"] = patch_probes(server_args_module, gpu)
    else:
        info["probes_missing"] = [name for name in PROBES if not hasattr(server_args_module, name)]
    info["import_seconds"] = time.perf_counter() - started
    return info, server_args_module


def _substitute(obj, old: str, new: str):
    if not old or old == new:
        return obj
    if isinstance(obj, str):
        return obj.replace(old, new)
    if isinstance(obj, list):
        return [_substitute(v, old, new) for v in obj]
    if isinstance(obj, dict):
        return {k: _substitute(v, old, new) for k, v in obj.items()}
    return obj


def run_request(request: dict) -> dict:
    if request.get("protocol") != PROTOCOL:
        raise RuntimeError(f"request protocol {request.get('protocol')!r}, this side speaks {PROTOCOL}")
    info, module = load_sglang(request["gpu"])
    seed = int(request.get("seed", 0))
    results = []
    for launch in request["launches"]:
        result = _fresh(lambda launch=launch: resolve_launch(module, launch, seed, info["sglang_dir"]))
        # The model directory is a temporary copy; show the path the launch named instead.
        results.append(_substitute(result, launch.get("model_dir", ""), launch.get("display_model_path", "")))
    return {"protocol": PROTOCOL, "ok": True, **info, "results": results}


def _fresh(work):
    """Run `work` in a forked child, so each launch starts from the state right after import.

    sglang caches lookups and logs some messages once per process; a second launch in the
    same process would see neither. Forking keeps the cost of the import (seconds) to once.
    """
    if not hasattr(os, "fork"):
        return work()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into the caller's code
        os.close(read_end)
        status = 0
        try:
            data = json.dumps(work()).encode()
        except BaseException as exc:
            status = 1
            data = json.dumps({"child_error": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc()[-8000:]}).encode()
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        sys.stderr.flush()
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    result = json.loads(data) if data else {"child_error": "the launch's process died without an answer"}
    if "child_error" in result:
        raise RuntimeError(f"dry-run of one launch failed: {result['child_error']}\n{result.get('traceback', '')}")
    return result


def main(argv: list[str]) -> int:
    # fd 1 carries the answer; anything else that writes to stdout (C code included) goes to stderr.
    answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        if argv[:1] == ["--check"]:
            info, _ = load_sglang(None)
            payload = {"protocol": PROTOCOL, "ok": True, **info}
        elif argv[:1] == ["--resolve"]:
            payload = run_request(json.load(sys.stdin))
        else:
            raise SystemExit("usage: _inside.py --check | --resolve < request.json")
    except Exception as exc:
        payload = {
            "protocol": PROTOCOL,
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-8000:],
        }
    json.dump(payload, answer)
    answer.write("\n")
    answer.flush()
    return 0 if payload["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
