"""The GPU a dry-run answers sglang's hardware probes like: an entry of the kit's GPU table.

The table (``kit/data/gpus.yaml``) and its one matcher live in kit.hardware; the dry-run adds
only what it cannot do: it answers CUDA probes, so a ROCm GPU is refused with a clear error.
"""

from __future__ import annotations

from kit.errors import DryRunError
from kit.hardware import GPUS_FILE, GpuProfile, gpu_profile, gpu_profiles

__all__ = ["GPUS_FILE", "GpuProfile", "cuda_profile", "gpu_profile", "gpu_profiles"]


def cuda_profile(gpu: str | GpuProfile | None) -> GpuProfile:
    """The table's entry for ``gpu``, which the dry-run can stand in for: an NVIDIA GPU.

    No GPU given is an error naming how to give one; so is an unknown GPU (UnknownGPU) and an
    AMD GPU, whose ROCm probes (is_hip, gfx targets, aiter) the dry-run does not emulate.
    """
    from kit.errors import NotGiven

    if gpu is None or (isinstance(gpu, str) and not gpu.strip()):
        raise NotGiven("the dry-run answers sglang's hardware probes as the target's GPU would, and no GPU was given",
                       hint="pass gpu= with a key or the name nvidia-smi prints (gpu='h100'); "
                            "kit.dryrun.gpu_profiles() lists them",
                       cli_hint="add --gpu KEY, e.g. --gpu h100 (see `sgl-kit dryrun gpus`), or the name "
                                "nvidia-smi prints")
    profile = gpu_profile(gpu)
    if profile.vendor != "nvidia":
        raise DryRunError(
            f"the dry-run cannot stand in for {profile.name} ({profile.gfx}): it answers sglang's CUDA probes "
            "only, and does not emulate ROCm (is_hip, the gfx target, aiter kernels)",
            hint="resolve this launch on the AMD machine itself (`sgl-kit args show TARGET`); the roofline "
                 f"still knows its bandwidth ({profile.bandwidth_gbs:g} GB/s)")
    return profile
