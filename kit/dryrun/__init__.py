"""Dry-run: resolve sglang's effective server args with the real sglang code, on a machine without a GPU.

`dry_run(flags, model=..., gpu="a6000", tp=2, sglang="0.5.11")` runs sglang's own
`prepare_server_args` in a separate virtualenv (one per sglang version, built once by
`setup(version)` or `sgl-kit dryrun setup`), with the hardware probes answering like the
target GPU. It returns a `DryRunResult`: the exact `server_args=ServerArgs(...)` line the
server would log, every value sglang changed on its own during `__post_init__` (field,
before, after, function, file:line, and the log message emitted there, if any), and the
error sglang would stop with. The kit talks to that environment as a subprocess, JSON in
and out; `_inside.py` is the half that runs there.

Versions: `versions()` lists them. A "verified" version has a hand-pinned package list in
kit/data/dryrun/ and tests; any other 0.5.x from 0.5.6 on is "best-effort": its list is
made from the sglang wheel's own requirements by kit/data/dryrun/rules.yaml (`plan(v)`).

Warm: by default a dry-run goes to a worker process that keeps sglang imported between
calls and `sgl-kit` invocations (`workers()`, `stop_workers()`; kit/dryrun/_worker.py).
"""

from kit.dryrun._env import (
    DryRunEnv,
    SetupReport,
    SetupStep,
    built_versions,
    environment,
    requirements,
    setup,
    supported_versions,
)
from kit.dryrun._gpus import GpuProfile, gpu_profile, gpu_profiles
from kit.dryrun._inside import probe_answers
from kit.dryrun._requirements import RequirementPlan, load_rules, plan
from kit.dryrun._result import Change, DryRunResult, LogMessage, StartupError
from kit.dryrun._run import dry_run, dry_run_many
from kit.dryrun._versions import VersionInfo, versions
from kit.dryrun._why import DryRunWhy, SiteCheck, why_with_dryrun
from kit.dryrun._worker import WorkerInfo, stop_workers, workers
from kit.errors import DryRunError, EnvironmentMissing, NotGiven, SetupFailed, UnknownGPU, UnsupportedVersion

__all__ = [
    "built_versions",
    "Change",
    "DryRunEnv",
    "DryRunError",
    "DryRunResult",
    "DryRunWhy",
    "environment",
    "EnvironmentMissing",
    "gpu_profile",
    "gpu_profiles",
    "GpuProfile",
    "LogMessage",
    "load_rules",
    "plan",
    "probe_answers",
    "RequirementPlan",
    "requirements",
    "dry_run",
    "dry_run_many",
    "setup",
    "SetupFailed",
    "SetupReport",
    "SetupStep",
    "SiteCheck",
    "StartupError",
    "supported_versions",
    "UnknownGPU",
    "NotGiven",
    "UnsupportedVersion",
    "VersionInfo",
    "versions",
    "why_with_dryrun",
    "WorkerInfo",
    "workers",
    "stop_workers",
]
