"""GPU profiles: what a dry-run tells sglang about the target's GPUs (`kit/data/gpus.yaml`)."""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from kit.errors import KitError, UnknownGPU

GPUS_FILE = Path(__file__).resolve().parent.parent / "data" / "gpus.yaml"
_REQUIRED = ("name", "memory_mib", "sm", "hopper", "blackwell", "bandwidth_gbs", "bf16_tflops")



@dataclass(frozen=True)
class GpuProfile:
    """One GPU model as sglang's hardware probes would see it, plus its peak figures."""

    key: str
    name: str
    memory_mib: int
    sm: int
    hopper: bool
    blackwell: bool
    bandwidth_gbs: float
    bf16_tflops: float
    cuda_version: str = "12.9"
    driver_version: str = "580.95.05"
    aliases: tuple[str, ...] = field(default=(), repr=False)

    @property
    def summary(self) -> str:
        return f"{self.name} (SM{self.sm}, {self.memory_mib} MiB)"

    def probe_request(self) -> dict:
        """What the inside of the dry-run needs to answer sglang's probes."""
        out = asdict(self)
        out.pop("aliases")
        return out

    def __repr__(self) -> str:
        return f"<GpuProfile {self.key}: {self.summary}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code>"


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


@lru_cache(maxsize=1)
def _load() -> dict[str, GpuProfile]:
    import yaml

    data = yaml.safe_load(GPUS_FILE.read_text())
    defaults = data.get("defaults") or {}
    out = {}
    for key, entry in (data.get("gpus") or {}).items():
        missing = [k for k in _REQUIRED if k not in entry]
        if missing:
            raise KitError(f"GPU profile {key!r} in {GPUS_FILE} lacks {', '.join(missing)}")
        out[key] = GpuProfile(
            key=key,
            name=str(entry["name"]),
            memory_mib=int(entry["memory_mib"]),
            sm=int(entry["sm"]),
            hopper=bool(entry["hopper"]),
            blackwell=bool(entry["blackwell"]),
            bandwidth_gbs=float(entry["bandwidth_gbs"]),
            bf16_tflops=float(entry["bf16_tflops"]),
            cuda_version=str(entry.get("cuda_version", defaults.get("cuda_version", "12.9"))),
            driver_version=str(entry.get("driver_version", defaults.get("driver_version", "580.95.05"))),
            aliases=tuple(str(a) for a in entry.get("aliases") or ()),
        )
    return out


def gpu_profiles() -> dict[str, GpuProfile]:
    """Every known profile by key, in the file's order."""
    return dict(_load())


def gpu_profile(name: str | GpuProfile) -> GpuProfile:
    """A profile by key, alias or full name, ignoring case and punctuation ("RTX A6000" -> a6000)."""
    if isinstance(name, GpuProfile):
        return name
    wanted = _norm(str(name))
    for profile in _load().values():
        names = (profile.key, profile.name, *profile.aliases)
        if wanted and wanted in {_norm(n) for n in names}:
            return profile
    known = ", ".join(f"{p.key} ({p.name})" for p in _load().values())
    raise UnknownGPU(
        f"unknown GPU {name!r}; known GPUs: {known}",
        hint=f"pass one of those keys with --gpu, or add a profile to {GPUS_FILE}",
    )
