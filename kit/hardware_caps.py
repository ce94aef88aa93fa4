"""What a GPU model can do beyond its bandwidth, from kit/data/gpu_capabilities.yaml: the number formats
its tensor cores multiply (per architecture) and how its boards reach each other (per model: peer access
over PCIe, NVLink). Each fact carries its source.

The doctor uses it when the GPU is named but its links were not read: a model whose driver refuses peer
access (GeForce RTX 4090, 5090) decides the question that `nvidia-smi topo -p2p r` would answer, and is
told as the model's fact, not as read on the box (:func:`p2p_from_model`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .hardware import P2P, GpuProfile, Hardware, match_gpu

__all__ = ["Architecture", "Capabilities", "Links", "P2P_VALUES", "NVLINK_VALUES", "capabilities", "link_note",
           "p2p_from_model", "table"]

_DATA = Path(__file__).resolve().parent / "data" / "gpu_capabilities.yaml"
P2P_VALUES = ("offered", "not-offered", "bridge-only", "unknown")
NVLINK_VALUES = ("board", "partial", "bridge", "none")
MODEL_BASIS = "the GPU model's capabilities (kit/data/gpu_capabilities.yaml)"


@dataclass(frozen=True)
class Architecture:
    name: str
    vendor: str
    fp8: bool
    fp4: bool
    source: str
    sm: tuple[int, int] | None = None
    gfx: tuple[str, ...] = ()

    def holds(self, profile: GpuProfile) -> bool:
        if self.vendor != profile.vendor:
            return False
        if self.sm is not None and profile.sm is not None:
            return self.sm[0] <= profile.sm <= self.sm[1]
        return bool(profile.gfx) and profile.gfx in self.gfx


@dataclass(frozen=True)
class Links:
    p2p: str  # one of P2P_VALUES
    nvlink: str  # one of NVLINK_VALUES
    source: str
    checked: bool = False
    gbs: float | None = None

    def sentence(self, name: str) -> str:
        """What the model's links are, in one sentence with its source."""
        p2p = {"offered": "its driver offers peer access over PCIe (the platform's IOMMU/ACS may still block it)",
               "not-offered": "its driver refuses peer-to-peer access between boards",
               "bridge-only": "peer access only through an NVLink bridge between two boards, not over PCIe",
               "unknown": "whether its driver offers peer access is not known to the kit"}[self.p2p]
        rate = f" at {self.gbs:g} GB/s" if self.gbs else ""
        nvlink = {"board": f"every GPU of its baseboard reaches every other over NVLink{rate}",
                  "partial": f"its baseboard joins GPUs over NVLink{rate}, not every pair",
                  "bridge": f"an optional NVLink bridge{rate} joins two boards (`nvidia-smi topo -m` shows NV# "
                            "when one is fitted)",
                  "none": "it has no NVLink"}[self.nvlink]
        checked = "" if self.checked else "; taken from the datasheet, not compared with a stored copy"
        return f"{name}: {p2p}; {nvlink} (source: {self.source}{checked})"


@dataclass(frozen=True)
class Capabilities:
    profile: GpuProfile
    architecture: Architecture | None
    links: Links | None

    @property
    def fp8(self) -> bool | None:
        return self.architecture.fp8 if self.architecture else None

    @property
    def fp4(self) -> bool | None:
        return self.architecture.fp4 if self.architecture else None

    def to_dict(self) -> dict:
        arch, links = self.architecture, self.links
        return {"gpu": self.profile.key, "name": self.profile.name, "arch": self.profile.arch,
                "architecture": arch.name if arch else None, "fp8": self.fp8, "fp4": self.fp4,
                "arch_source": arch.source if arch else None,
                "p2p": links.p2p if links else "unknown", "nvlink": links.nvlink if links else None,
                "nvlink_gbs": links.gbs if links else None, "links_source": links.source if links else None,
                "links_checked": links.checked if links else False}


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[Architecture, ...], dict[str, Links]]:
    from ._data import load_yaml

    data = load_yaml(_DATA)
    archs = tuple(Architecture(a["name"], a["vendor"], bool(a["fp8"]), bool(a["fp4"]), a["source"],
                               tuple(a["sm"]) if "sm" in a else None, tuple(a.get("gfx") or ()))
                  for a in data["architectures"])
    links = {key: Links(v["p2p"], v["nvlink"], " ".join(str(v["source"]).split()), bool(v.get("checked")),
                        v.get("gbs")) for key, v in data["links"].items()}
    return archs, links


def capabilities(gpu: str | GpuProfile | None) -> Capabilities | None:
    """The capabilities of a GPU model (a key, an alias, or the name nvidia-smi prints); None when the
    GPU table does not know the model."""
    profile = match_gpu(gpu) if gpu is not None else None
    if profile is None:
        return None
    archs, links = _load()
    arch = next((a for a in archs if a.holds(profile)), None)
    return Capabilities(profile, arch, links.get(profile.key))


def table() -> list[Capabilities]:
    """Every model of the GPU table with its capabilities (`sgl-kit dryrun gpus --capabilities`)."""
    from .hardware import gpu_profiles

    return [c for key in gpu_profiles() if (c := capabilities(key)) is not None]


def link_note(hw: Hardware | None) -> str | None:
    """What the GPU model says of the links `nvidia-smi topo` was not asked for, or None (unknown model,
    mixed GPUs)."""
    caps = capabilities(hw.gpu_name) if hw is not None and hw.gpu_name else None
    if caps is None or caps.links is None:
        return None
    return caps.links.sentence(caps.profile.name)


def p2p_from_model(hw: Hardware | None) -> P2P | None:
    """Peer access decided by the GPU model alone, for GPUs whose `topo -p2p` was not read: every pair
    refused when the model's driver offers none and it has no NVLink (``basis`` says so); every pair OK
    when every GPU of the model's baseboard is joined by NVLink. None when the model leaves it to the box
    (offered over PCIe, a bridge that may or may not be fitted, unknown)."""
    if hw is None or hw.p2p is not None or len(hw.gpus) < 2:
        return None
    caps = capabilities(hw.gpu_name) if hw.gpu_name else None
    if caps is None or caps.links is None:
        return None
    links = caps.links
    if links.p2p == "not-offered" and links.nvlink == "none":
        status = "GNS"
    elif links.nvlink == "board" and links.p2p == "offered":
        status = "OK"
    else:
        return None
    names = [f"GPU{g.index}" for g in hw.gpus]
    pairs = {f"{a}-{b}": ("X" if a == b else status) for a in names for b in names}
    return P2P(names, pairs, basis=f"{MODEL_BASIS}: {links.sentence(caps.profile.name)}")
