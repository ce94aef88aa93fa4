"""Run sglang's own argument resolution for a launch, in the dry-run environment, and read it back."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kit._argv import option_values
from kit._proc import run
from kit.dryrun import _worker
from kit.dryrun._env import (
    INSIDE,
    DryRunError,
    inside_environment,
    parse_answer,
    require_environment,
    setup,
    stub_args,
)
from kit.dryrun._gpus import GpuProfile, cuda_profile
from kit.dryrun._requirements import check_version
from kit.dryrun._result import DryRunResult, StartupError, build_changes, in_place_changes
from kit.errors import ModelConfigError, NotGiven
from kit.model_config import load_model_config

PROTOCOL = 1
# Besides config.json, files sglang reads from a model directory while resolving its args.
_MODEL_FILES = ("generation_config.json", "hf_quant_config.json", "quant_config.json", "quantize_config.json")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TP_OPTIONS = ("--tp-size", "--tensor-parallel-size")
MODEL_OPTIONS = ("--model-path", "--model")


def dry_run(
    flags: str | Sequence[str] = (),
    *,
    model: str | os.PathLike | None = None,
    gpu: str | GpuProfile | None = None,
    tp: int | None = None,
    sglang: str | None = None,
    env: Mapping[str, str] | None = None,
    install: bool = False,
    timeout: float = 300.0,
    warm: bool | None = None,
    warm_timeout: float | None = None,
) -> DryRunResult:
    """Resolve one launch's effective server args with the real sglang code, on this CPU-only machine.

    `flags` are sglang's own (`"--speculative-algorithm EAGLE ..."` or a list); `model` is
    the model's directory or its config.json (only config.json and a few small JSON files
    are read); `gpu` is the target's GPU: a key of kit/data/gpus.yaml or the name nvidia-smi
    prints; `sglang` the version the target runs (both required: no default stands in for the
    target, see `kit.dryrun.gpu_profiles()` and `kit.dryrun.versions()`); `tp` adds `--tp-size`;
    `env` sets SGLANG_* variables for the server. `install=True` builds the environment
    first if needed (about 1.2 GB, a few minutes); otherwise a missing one is an error.

    `warm` (default: on, unless `$SGL_KIT_DRYRUN_WARM=0`) sends the launch to the version's
    warm worker, which keeps sglang imported between calls (see kit/dryrun/_worker.py);
    `warm=False` runs a new process that imports sglang (a cold run). Both give the same
    result; a worker that fails or runs past `warm_timeout` (default: `timeout`) is replaced by
    a cold run, which has `timeout` of its own, and the result's `notes` say so.
    """
    return dry_run_many([flags], model=model, gpu=gpu, tp=tp, sglang=sglang, env=env,
                        install=install, timeout=timeout, warm=warm, warm_timeout=warm_timeout)[0]


def dry_run_many(
    launches: Sequence[str | Sequence[str]],
    *,
    model: str | os.PathLike | None = None,
    gpu: str | GpuProfile | None = None,
    tp: int | None = None,
    sglang: str | None = None,
    env: Mapping[str, str] | None = None,
    install: bool = False,
    timeout: float = 300.0,
    warm: bool | None = None,
    warm_timeout: float | None = None,
) -> list[DryRunResult]:
    """`dry_run` for several launches of the same model and GPUs, paying sglang's import once (or never,
    when the warm worker has it imported already)."""
    need_version(sglang)
    check_version(sglang)  # an unsupported version fails before anything else
    profile = cuda_profile(gpu)
    tp = _check_tp(tp)
    variables = _check_env(env)
    runtime = setup(sglang).env if install else require_environment(sglang)
    notes: list[str] = []
    used_worker = False
    with tempfile.TemporaryDirectory(prefix="sgl-kit-dryrun-") as scratch:
        prepared = [_prepare(flag_tokens(flags), model, tp, Path(scratch) / f"model-{i}")
                    for i, flags in enumerate(launches)]
        request = {"protocol": PROTOCOL, "seed": 0, "gpu": profile.probe_request(),
                   "launches": [p["launch"] for p in prepared], "env": variables, "cwd": os.getcwd(),
                   "stubs": stub_args(runtime.version)[1].split(","), "launch_timeout": timeout}
        reply = None
        if _worker.warm_enabled(warm):
            try:
                reply = _worker.call(runtime, variables, request,
                                     timeout=timeout if warm_timeout is None else warm_timeout)
                used_worker = True
            except _worker.WorkerUnavailable as exc:
                notes.append(exc.note)
        if reply is None:
            proc = run([str(runtime.python), str(INSIDE), "--resolve"], timeout=timeout,
                       env=inside_environment(variables), input=json.dumps(request))
            reply = parse_answer(proc)
    if not reply.get("ok"):
        raise DryRunError(
            f"the dry-run process for sglang {sglang} failed: {reply.get('error')}",
            hint=f"its traceback ends: {_last(reply.get('traceback', ''))}; if imports fail, rebuild with "
            f"`rm -r {runtime.path}` and `sgl-kit dryrun setup --sglang {sglang}`",
        )
    results = [_result(r, reply, p, profile, tp, sglang, variables) for r, p in zip(reply["results"], prepared,
                                                                                strict=True)]
    for result in results:
        result.warm = used_worker
        result.notes = list(notes)
    return results


def need_version(sglang: str | None) -> str:
    """The sglang version a dry-run runs, which the caller must give: it is the target's, and no default is."""
    if not sglang or not str(sglang).strip():
        raise NotGiven("the dry-run needs the sglang version the target runs, and none was given",
                       hint="pass sglang='X.Y.Z': the version in the server's log, its /server_info, or `pip show "
                            "sglang` on the box; kit.dryrun.versions() lists those the dry-run covers",
                       cli_hint="add --sglang VERSION: the version in the server's log, its /server_info, or "
                                "`pip show sglang` on the box (`sgl-kit dryrun versions` lists them)")
    return str(sglang)


def _result(raw: dict, reply: dict, prepared: dict, profile: GpuProfile, tp, sglang: str, env) -> DryRunResult:
    explicit = set(raw.get("explicit") or [])
    changes, writes, messages = build_changes(raw.get("events", []), explicit)
    if raw.get("final"):
        changes += in_place_changes(raw.get("initial") or {}, raw["final"], changes, explicit)
    error = raw.get("error")
    return DryRunResult(
        sglang=reply.get("versions", {}).get("sglang") or sglang,
        gpu=profile,
        tp=tp,
        model=prepared["display"],
        argv=[prepared["display"] if a == prepared["launch"]["model_dir"] else a for a in raw.get("argv", [])],
        server_args_line=raw.get("server_args_line"),
        changes=changes,
        writes=writes,
        messages=messages,
        error=StartupError(**{k: error.get(k) for k in StartupError.__dataclass_fields__}) if error else None,
        explicit=sorted(explicit),
        initial={k: v.get("json") if v.get("exact") else v.get("repr") for k, v in (raw.get("initial") or {}).items()},
        final={k: v.get("json") if v.get("exact") else v.get("repr") for k, v in (raw.get("final") or {}).items()},
        env=dict(env),
        probes=reply.get("probes", {}),
        probes_missing=reply.get("probes_missing", []),
        seconds=raw.get("seconds", 0.0),
        import_seconds=reply.get("import_seconds", 0.0),
        console=raw.get("console", ""),
    )


# --------------------------------------------------------------------------- preparing a launch


def flag_tokens(flags: str | Sequence[str]) -> list[str]:
    if isinstance(flags, str):
        return shlex.split(flags)
    tokens = list(flags)
    if not all(isinstance(t, str) for t in tokens):
        raise DryRunError(f"sglang flags must be strings, got {tokens!r}")
    return tokens


def _check_tp(tp) -> int | None:
    if tp is None:
        return None
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise DryRunError(f"tp must be a positive integer, not {tp!r}")
    return tp


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise DryRunError(f"not an environment variable name: {key!r}")
        out[key] = str(value)
    return out




def _mentions_option(tokens: list[str], names: Sequence[str], shortest: int) -> bool:
    # argparse accepts any unambiguous prefix (`--tp` for `--tp-size`), so look for those too.
    for tok in tokens:
        name = tok.partition("=")[0]
        if name.startswith("--") and len(name) >= shortest and any(n.startswith(name) for n in names):
            return True
    return False


def _prepare(tokens: list[str], model, tp: int | None, model_dir: Path) -> dict:
    declared, at, width = option_values(tokens, MODEL_OPTIONS)
    source = model_source(model, declared)
    _copy_model(source, model_dir)
    display = declared or str(source.parent if source.is_file() else source)
    if at is not None:
        tokens = tokens[:at] + tokens[at + width :]
    if tp is not None and _mentions_option(tokens, _TP_OPTIONS, 4):
        raise DryRunError("tensor parallelism is given twice: with --tp and among the sglang flags",
                          hint="give it once: --tp N, or --tp-size N after --")
    head = ["--model-path", str(model_dir)]
    if option_values(tokens, ("--device",))[1] is None:
        head += ["--device", "cuda"]  # auto-detection would find no GPU here
    if tp is not None:
        head += ["--tp-size", str(tp)]
    argv = head + tokens
    return {"display": display,
            "launch": {"argv": argv, "model_dir": str(model_dir), "display_model_path": display}}


def model_source(model, declared: str | None) -> Path:
    if model is not None:
        path = Path(os.fspath(model)).expanduser()
    elif declared and Path(declared).expanduser().exists():
        path = Path(declared).expanduser()
    else:
        raise DryRunError(
            "the dry-run needs the model's config.json"
            + (f"; {declared} is not on this machine" if declared else ""),
            hint="pass --model DIR_OR_CONFIG_JSON (a copy of config.json is enough)",
        )
    config = path / "config.json" if path.is_dir() else path
    if not config.is_file():
        raise ModelConfigError(f"no model config at {config}",
                               hint="pass the model's directory or its config.json")
    load_model_config(config)  # refuses a file that is not a JSON object, naming it
    return path.resolve()


def _copy_model(source: Path, model_dir: Path) -> None:
    model_dir.mkdir(parents=True)
    folder = source if source.is_dir() else None
    shutil.copyfile(source / "config.json" if folder else source, model_dir / "config.json")
    for name in _MODEL_FILES if folder else ():
        if (folder / name).is_file():
            shutil.copyfile(folder / name, model_dir / name)


def _last(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-2:]) or "(none)"


__all__ = ["dry_run", "dry_run_many"]
