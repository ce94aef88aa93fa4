"""Dry-run: resolve sglang's effective server args with the real sglang code, on a machine without a GPU.

`resolve(flags, model=..., gpu="a6000", tp=2, sglang="0.5.11")` runs sglang's own
`prepare_server_args` in a separate virtualenv (one per sglang version, built once by
`setup(version)` or `sgl-kit dryrun setup`), with the hardware probes answering like the
target GPU. It returns a `DryRunResult`: the exact `server_args=ServerArgs(...)` line the
server would log, every value sglang changed on its own during `__post_init__` (field,
before, after, function, file:line, and the log message emitted there, if any), and the
error sglang would stop with. The kit talks to that environment as a subprocess, JSON in
and out; `_inside.py` is the half that runs there.
"""

from kit.dryrun._cli import add_cli, add_why_options, cmd_why_dryrun
from kit.dryrun._env import (
    DryRunEnv,
    DryRunError,
    EnvironmentMissing,
    SetupFailed,
    SetupReport,
    SetupStep,
    UnsupportedVersion,
    environment,
    requirements,
    setup,
    supported_versions,
)
from kit.dryrun._gpus import GpuProfile, UnknownGPU, gpu_profile, gpu_profiles
from kit.dryrun._result import Change, DryRunResult, LogMessage, StartupError
from kit.dryrun._run import resolve, resolve_many
from kit.dryrun._why import DryRunWhy, SiteCheck, why_with_dryrun

__all__ = [
    "add_cli",
    "add_why_options",
    "Change",
    "cmd_why_dryrun",
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
    "requirements",
    "resolve",
    "resolve_many",
    "setup",
    "SetupFailed",
    "SetupReport",
    "SetupStep",
    "SiteCheck",
    "StartupError",
    "supported_versions",
    "UnknownGPU",
    "UnsupportedVersion",
    "why_with_dryrun",
]
