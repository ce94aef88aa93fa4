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

Usage: `python _inside.py --check`, `python _inside.py --resolve < request.json`, or
`python _inside.py --serve SOCKET IDLE STATE_FILE`: the warm worker (`_inside_worker.py`),
which imports sglang once and answers resolve requests on a Unix socket.
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
import select
import signal
import sys
import time
import traceback
import warnings

PROTOCOL = 1
_THIS_FILE = os.path.abspath(__file__)
_LOGGING_FILE = os.path.abspath(logging.__file__)
_WARNINGS_FILE = os.path.abspath(warnings.__file__)
_MAX_REPR = 20_000

# The hardware probes sglang's argument code imports by name, answered from the GPU profile.
# A dry-run reports the ones of these it found nowhere to answer (`probes_missing`).
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
# Answered too where a version has them, never reported missing (newer releases).
MORE_PROBES = (
    "is_blackwell",
    "is_sm80_supported",
    "is_ampere_with_cuda_12_3",
    "is_sm100_or_sm110_supported",
    "is_sm110_supported",
    "get_device_capability",
)
# Modules whose namespaces get the answers: sglang's argument code, not the kernels.
ARG_PATH = ("sglang.srt.server_args", "sglang.srt.arg_groups")
# Probes argument code imports from the `sglang.srt.utils` package while it runs.
LAZY_PROBES = ("is_cuda",)


# --------------------------------------------------------------------------- stand-ins


def _sglang_dir() -> str:
    spec = importlib.util.find_spec("sglang")  # finds without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("sglang is not installed in this environment")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


DEFAULT_STUBS = ("triton", "torchvision")
_STUBS_FILE = os.path.join(os.path.dirname(_THIS_FILE), "_inside_stubs.py")


def install_stand_ins(sglang_dir: str, stubs=DEFAULT_STUBS) -> dict:
    """Stand in for the modules named (rules.yaml `stub`) and make torch.compile a no-op: _inside_stubs.py."""
    spec = importlib.util.spec_from_file_location("_sgl_kit_inside_stubs", _STUBS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.install_stand_ins(sglang_dir, stubs)


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
    blackwell = bool(gpu.get("blackwell")) and _cuda_at_least(gpu, 12, 8)
    return {
        "is_cuda": True,
        "get_device_memory_capacity": float(gpu["memory_mib"]),
        "get_device_sm": sm,
        "is_sm90_supported": bool(gpu.get("hopper")) and _cuda_at_least(gpu, 12, 3),
        "is_sm100_supported": major == 10 and _cuda_at_least(gpu, 12, 8),
        "is_sm120_supported": major == 12 and _cuda_at_least(gpu, 12, 8),
        "is_blackwell_supported": blackwell,
        "is_hopper_with_cuda_12_3": bool(gpu.get("hopper")) and _cuda_at_least(gpu, 12, 3),
        "is_flashinfer_available": _flashinfer_enabled(),
        "get_device_name": str(gpu["name"]),
        "get_nvidia_driver_version": driver,
        "is_blackwell": blackwell,
        "is_sm80_supported": major == 8 and _cuda_at_least(gpu, 11, 0),
        "is_ampere_with_cuda_12_3": major == 8 and _cuda_at_least(gpu, 12, 3),
        "is_sm100_or_sm110_supported": major in (10, 11) and _cuda_at_least(gpu, 12, 8),
        "is_sm110_supported": major == 11 and _cuda_at_least(gpu, 12, 8),
        "get_device_capability": (major, sm % 10),
    }


def _constant(value):
    def probe(*_args, **_kwargs):
        return value

    return probe


def _arg_path_modules(server_args_module) -> list:
    out = [server_args_module]
    for name, module in list(sys.modules.items()):
        if module is not None and module is not server_args_module and any(
                name == p or name.startswith(p + ".") for p in ARG_PATH):
            out.append(module)
    return out


def _platform_facts() -> dict:
    """sglang's own table of platform facts (0.5.2x: runtime_context), fact -> probe name."""
    context = sys.modules.get("sglang.srt.runtime_context")
    table = {**getattr(context, "_PLATFORM_PROBES", {}), **getattr(context, "_PLATFORM_VALUES", {})}
    return table if hasattr(context, "override_platform") else {}


def probe_sites(server_args_module) -> dict:
    """Probe name -> where the dry-run will answer it: module namespaces, platform facts."""
    sites: dict = {}
    for module in _arg_path_modules(server_args_module):
        for name in (*PROBES, *MORE_PROBES):
            if callable(vars(module).get(name)):
                sites.setdefault(name, []).append(module.__name__)
    for fact, probe in _platform_facts().items():
        if probe in (*PROBES, *MORE_PROBES):
            sites.setdefault(probe, []).append(f"platform fact {fact}")
    if _cuda_platform() is not None:
        for probe in ("get_device_memory_capacity", "get_device_name", "get_device_capability"):
            sites.setdefault(probe, []).append("current_platform")
    return sites


def patch_probes(server_args_module, gpu: dict) -> tuple[dict, list[str]]:
    """Answer like `gpu` in the argument code's namespaces, sglang's platform facts and its platform
    object; never in sglang.srt.utils.common itself (other modules would then run CUDA code)."""
    answers = probe_answers(gpu)
    for module in _arg_path_modules(server_args_module):
        for name in (*PROBES, *MORE_PROBES):
            if callable(vars(module).get(name)):
                setattr(module, name, _constant(answers[name]))
    # Argument code that imports a probe when it runs (0.5.18+: `default_prefill_backend` does
    # `from sglang.srt.utils import is_cuda`) reads the package attribute: answer there too. Each
    # launch runs in its own fork, and by now every kernel module that checks is_cuda() at import
    # has been imported with the real answer, so only this launch's argument code sees it.
    utils = sys.modules.get("sglang.srt.utils")
    if utils is not None:
        for name in LAZY_PROBES:
            if callable(vars(utils).get(name)):
                setattr(utils, name, _constant(answers[name]))
    facts = {fact: answers[probe] for fact, probe in _platform_facts().items() if probe in answers}
    if facts:
        sys.modules["sglang.srt.runtime_context"].override_platform(**facts).install()
    _install_cuda_platform(gpu)
    sites = probe_sites(server_args_module)
    return {n: repr(answers[n]) for n in sites}, [n for n in PROBES if n not in sites]


def _cuda_platform():
    platforms = sys.modules.get("sglang.srt.platforms")
    if platforms is None or "_current_platform" not in vars(platforms):
        return None
    return getattr(platforms, "CudaSRTPlatform", None)


def _install_cuda_platform(gpu: dict) -> None:
    """sglang 0.5.2x picks a platform object by what torch sees; make it CUDA's, answering like `gpu`."""
    cuda = _cuda_platform()
    if cuda is None:
        return
    platforms = sys.modules["sglang.srt.platforms"]
    memory, name, sm = int(gpu["memory_mib"]) << 20, str(gpu["name"]), int(gpu["sm"])
    capability = getattr(sys.modules.get(cuda.__module__), "DeviceCapability", None)
    methods = {"get_device_total_memory": lambda self, device_id=0: memory,
               "get_device_name": lambda self, device_id=0: name}
    if capability is not None:
        methods["get_device_capability"] = lambda self, device_id=0: capability(sm // 10, sm % 10)
    old = vars(platforms).get("_current_platform")
    new = type("DryRunCudaSRTPlatform", (cuda,), methods)()
    platforms._current_platform = new
    for module in list(sys.modules.values()):  # `from sglang.srt.platforms import current_platform` copies
        if old is not None and getattr(module, "__name__", "").startswith("sglang") and \
                vars(module).get("current_platform") is old:
            module.current_platform = new


# --------------------------------------------------------------------------- values


# Standalone (loaded by path in sglang's environment, where kit is not installed): not kit._text.plain.
def _exact_json(value, depth: int = 0):
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
        return [_exact_json(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _exact_json(v, depth + 1) for k, v in value.items()}
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
        return {"repr": text, "json": _exact_json(value), "exact": not isinstance(value, tuple)}
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
        self._rebound: list = []
        self._nested: dict = {}  # class -> its own __setattr__ (or _MISSING), while wrapped
        self._paths: dict = {}  # id(config object) -> (the object, its path from a field)

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
            if recorder.recording:
                recorder.track(value, name)

        def __post_init__(obj):
            recorder.begin(obj)
            try:
                original_post_init(obj)
            finally:
                recorder.end()

        cls.__setattr__ = __setattr__
        cls.__post_init__ = __post_init__
        self._wrap_declarations()
        return self

    def track(self, value, path: str, depth: int = 0) -> None:
        """Follow writes into a config object a field holds (`self.cuda_graph_config.prefill.backend = X`
        in 0.5.1x): they are recorded as writes to the field `cuda_graph_config.prefill.backend`."""
        import dataclasses

        if depth > 3 or isinstance(value, type) or not dataclasses.is_dataclass(value):
            return
        self._paths[id(value)] = (value, path)
        cls = type(value)
        if cls not in self._nested:
            original, base, recorder = cls.__dict__.get("__setattr__", _MISSING), cls.__setattr__, self

            def __setattr__(obj, name, new):
                entry = recorder._paths.get(id(obj))
                if recorder.recording and entry is not None and entry[0] is obj:
                    recorder.write(obj, name, new, sys._getframe(1), field=f"{entry[1]}.{name}")
                base(obj, name, new)

            try:
                cls.__setattr__ = __setattr__
            except (TypeError, AttributeError):
                return
            self._nested[cls] = original
        for item in dataclasses.fields(value):
            self.track(getattr(value, item.name, None), f"{path}.{item.name}", depth + 1)

    def __exit__(self, *exc) -> None:
        for cls, original in self._nested.items():
            if original is _MISSING:
                delattr(cls, "__setattr__")
            else:
                cls.__setattr__ = original
        self._paths.clear()
        for module, original in self._rebound:
            module.declare_resolution = original
        for name, value in self._saved.items():
            if value is _MISSING:
                delattr(self.cls, name)
            else:
                setattr(self.cls, name, value)
        self._frames.clear()
        self.end()

    def write(self, obj, name: str, value, frame, field: str | None = None) -> None:
        before = getattr(obj, name, _MISSING)
        self.event(
            "write",
            frame,
            field=field or name,
            is_field=field is not None or name in self.fields,
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

    def run(self, obj, method: str) -> None:
        """Run `obj.method()` recording it too: `check_server_args`, which the server calls before it logs
        the args; `resolve_once`, where 0.5.2x resolves them."""
        call = getattr(obj, method, None)
        if call is None:
            return
        self.begin(obj)
        try:
            call()
        finally:
            self.end()

    def _wrap_declarations(self) -> None:
        """Record 0.5.2x's declarations (`declare_resolution(args, source, **fields)`) as writes."""
        overrides = _overrides_module()
        if overrides is None:
            return
        original, resolved = overrides.declare_resolution, overrides.resolution_result
        recorder = self

        def declare_resolution(server_args, source, **fields):
            if recorder.recording:
                frame = sys._getframe(1)
                function, path, line = _declaring_site(frame, source)
                for name, value in fields.items():
                    try:
                        before = resolved(server_args, name)
                    except Exception:
                        before = _MISSING
                    recorder.event("write", frame, field=name, is_field=name in recorder.fields,
                                   before=None if before is _MISSING else describe(before), after=describe(value),
                                   changed=before is _MISSING or not _same(before, value), function=function,
                                   file=recorder.rel(path), line=line, source=str(source))
            return original(server_args, source, **fields)

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("sglang") and \
                    vars(module).get("declare_resolution") is original:
                module.declare_resolution = declare_resolution
                self._rebound.append((module, original))

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


def _declaring_site(frame, source: str) -> tuple[str, str, int]:
    """Where a declaration comes from: the caller, or the pass a dispatcher ran for it (its `source`)."""
    for value in frame.f_locals.values():
        code = getattr(value, "__code__", None)
        if code is not None and getattr(value, "__qualname__", None) == source:
            return code.co_qualname, code.co_filename, code.co_firstlineno
    return frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno


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
    stand_in = path in (_THIS_FILE, _STUBS_FILE) or os.path.basename(path) == "_triton_stub.py"
    in_torch = f"{os.sep}torch{os.sep}" in path
    about_gpu = any(word in str(exc).lower() for word in _HARDWARE_WORDS)
    return stand_in or in_torch or (about_gpu and not path.endswith(f"sglang{os.sep}srt{os.sep}server_args.py"))


def resolve_launch(server_args_module, launch: dict, seed: int, sglang_dir: str) -> dict:
    cls = server_args_module.ServerArgs
    argv = [str(a) for a in launch["argv"]]
    field_names = _field_names(cls)
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
            if callable(getattr(args, "resolve_once", None)):  # 0.5.2x: construction leaves it unresolved
                recorder.run(args, "resolve_once")
            recorder.run(args, "check_server_args")
        out["server_args_line"] = _logged_line(args)
        out["final"] = {name: describe(value) for name, value in _resolved(args, field_names).items()}
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


def _field_names(cls) -> list[str]:
    """ServerArgs' fields in order: a dataclass up to 0.5.1x, a msgspec Struct later."""
    import dataclasses

    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    fields = getattr(cls, "__struct_fields__", None)
    if fields:
        return list(fields)
    raise TypeError(f"{cls!r} is neither a dataclass nor a msgspec Struct; the dry-run cannot list its fields")


def _overrides_module():
    """sglang's declarations (0.5.2x): resolution appends (source, fields) instead of writing fields."""
    module = sys.modules.get("sglang.srt.arg_groups.overrides")
    if module is not None and callable(getattr(module, "declare_resolution", None)) and \
            callable(getattr(module, "resolution_result", None)):
        return module
    return None


def _resolved(args, field_names: list[str]) -> dict:
    """Each field's resolved value: the last declaration (0.5.2x), else the field itself."""
    overrides = _overrides_module()
    if overrides is not None and getattr(args, "_raw_input", None) is not None:
        if callable(getattr(args, "resolved_dict", None)):
            resolved = args.resolved_dict()
            return {name: resolved.get(name) for name in field_names}
        return {name: overrides.resolution_result(args, name) for name in field_names}
    return {name: getattr(args, name, None) for name in field_names}


def _logged_line(args) -> str:
    """The `server_args=...` line the server logs: the record's repr, or (0.5.2x) its resolved dict."""
    if _overrides_module() is not None and callable(getattr(args, "resolved_dict", None)):
        value = args.resolved_dict()
        try:
            from sglang.srt.sampling.watermarking.core import redact_watermark_secrets

            value = redact_watermark_secrets(value)
        except ImportError:
            pass
        return f"server_args={value}"
    return f"server_args={args!r}"


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


def load_sglang(gpu: dict | None, stubs=DEFAULT_STUBS) -> dict:
    started = time.perf_counter()
    sglang_dir = _sglang_dir()
    stand_ins = install_stand_ins(sglang_dir, stubs)
    importlib.import_module("sglang.srt.configs.model_config")
    server_args_module = importlib.import_module("sglang.srt.server_args")
    info = {"sglang_dir": sglang_dir, "stand_ins": stand_ins, "versions": _versions(),
            "not_imported": _preload_arg_path()}
    info.update(_probe_info(server_args_module, gpu))
    info["import_seconds"] = time.perf_counter() - started
    return info, server_args_module


def _preload_arg_path() -> dict:
    """Import every module of the argument code now (0.5.2x imports its hooks lazily), so that each
    gets the probes' answers, and a cold and a warm run see the same modules; failures, by name."""
    import pkgutil

    failed = {}
    for prefix in ARG_PATH:
        package = sys.modules.get(prefix)
        for info in pkgutil.walk_packages(getattr(package, "__path__", None) or [], prefix + "."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # a hook that needs a GPU library: left to fail where it is used
                failed[info.name] = f"{type(exc).__name__}: {exc}"
    return failed


def _probe_info(server_args_module, gpu: dict | None) -> dict:
    """What the probes will answer (they are patched in each launch's own process)."""
    sites = probe_sites(server_args_module)
    missing = [name for name in PROBES if name not in sites]
    if gpu is None:
        return {"probes_missing": missing}
    answers = probe_answers(gpu)
    return {"probes": {n: repr(answers[n]) for n in sites}, "probes_missing": missing}


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


def run_request(request: dict, loaded=None) -> dict:
    """Resolve each launch of `request` in its own fork of the process as it was right after import.

    `loaded` is (info, server_args module) when sglang is already imported (the warm worker);
    a cold run imports it here. Either way a launch sees the same state: the module as imported,
    the probes answering like the request's GPU, the request's environment variables and directory.
    """
    if request.get("protocol") != PROTOCOL:
        raise RuntimeError(f"request protocol {request.get('protocol')!r}, this side speaks {PROTOCOL}")
    if loaded is None:
        loaded = load_sglang(None, request.get("stubs") or DEFAULT_STUBS)
    info, module = loaded
    info = {**info, **_probe_info(module, request["gpu"])}
    seed = int(request.get("seed", 0))
    timeout = float(request.get("launch_timeout") or 0) or None
    results = []
    for launch in request["launches"]:
        def work(launch=launch):
            _enter_launch(module, request)
            return resolve_launch(module, launch, seed, info["sglang_dir"])

        result = _fresh(work, timeout)
        # The model directory is a temporary copy; show the path the launch named instead.
        results.append(_substitute(result, launch.get("model_dir", ""), launch.get("display_model_path", "")))
    return {"protocol": PROTOCOL, "ok": True, **info, "results": results}


def _enter_launch(module, request: dict) -> None:
    """In a launch's own process: the GPU's probes, the server's environment variables, the caller's cwd."""
    patch_probes(module, request["gpu"])
    os.environ.update(request.get("env") or {})
    sys.argv = ["sglang.launch_server"]  # what argparse names itself in sglang's refusals
    if request.get("cwd") and os.path.isdir(request["cwd"]):
        os.chdir(request["cwd"])


def _fresh(work, timeout: float | None = None):
    """Run `work` in a forked child, so each launch starts from the state right after import.

    sglang caches lookups and logs some messages once per process; a second launch in the
    same process would see neither. Forking keeps the cost of the import (seconds) to once.
    A child that runs past `timeout` seconds is killed, and that is the launch's error.
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
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
    chunks, deadline = [], (time.monotonic() + timeout) if timeout else None
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and (wait <= 0 or not select.select([pipe], [], [], wait)[0]):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RuntimeError(f"dry-run of one launch ran past {timeout:g}s and was stopped")
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    data = b"".join(chunks)
    result = json.loads(data) if data else {"child_error": "the launch's process died without an answer"}
    if "child_error" in result:
        raise RuntimeError(f"dry-run of one launch failed: {result['child_error']}\n{result.get('traceback', '')}")
    return result


def _stubs_from(argv: list[str]):
    if "--stubs" in argv:
        return tuple(n for n in argv[argv.index("--stubs") + 1].split(",") if n)
    return DEFAULT_STUBS


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:  # the warm worker: _inside_worker.py, beside this file
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        path = os.path.join(os.path.dirname(_THIS_FILE), "_inside_worker.py")
        spec = importlib.util.spec_from_file_location("_sgl_kit_inside_worker", path)
        worker = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(worker)
        return worker.serve(sys.modules[__name__], argv[1], float(argv[2]), _stubs_from(argv), argv[3])
    # fd 1 carries the answer; anything else that writes to stdout (C code included) goes to stderr.
    answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        if argv[:1] == ["--check"]:
            info, _ = load_sglang(None, _stubs_from(argv))
            payload = {"protocol": PROTOCOL, "ok": True, **info}
        elif argv[:1] == ["--resolve"]:
            payload = run_request(json.load(sys.stdin))
        else:
            raise SystemExit("usage: _inside.py --check | --resolve < request.json | --serve SOCKET IDLE STATE")
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
