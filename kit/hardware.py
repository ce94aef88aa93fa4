"""GPUs, how they are linked, and the environment that steers NCCL and CUDA, from a live host or from
outputs a colleague pasted.

- ``parse_smi(text)``: the default ``nvidia-smi`` table, with the classic header
  (``Driver Version / CUDA Version``) or the newer one (``KMD Version / CUDA UMD Version``);
- ``parse_query_csv(text)``: ``nvidia-smi --query-gpu=... --format=csv``;
- ``parse_topo(text)``: ``nvidia-smi topo -m``, tab- or space-aligned, with or without the
  legend, with NIC rows and columns, any number of GPUs;
- ``parse_p2p(text)``: ``nvidia-smi topo -p2p r`` (or ``rw``): peer access per GPU pair;
- ``read_hardware(host, server)``: all of it on a live host, plus the server's NCCL_/CUDA_/
  SGLANG_ variables and the versions of torch, sglang and the driver.
- ``match_gpu(name)``: the entry of the GPU table (``kit/data/gpus.yaml``: datasheet bandwidth,
  memory, SM or gfx target, dense BF16, each with its source) for a name as nvidia-smi, rocm-smi or
  torch print it, or None. The kit's one matcher: the dry-run's ``--gpu``, the roofline and
  ``Hardware.profile`` use it; ``gpu_profile(name)`` is the same with an UnknownGPU error.

Nothing here knows about SGLang flags: the doctor (kit.doctor) reads these facts.
"""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ._secrets import redact_env
from .errors import ParseError

__all__ = ["GPU", "GpuProfile", "Hardware", "P2P", "Topology", "gpu_profile", "gpu_profiles", "link_rank",
           "match_gpu", "parse_p2p", "parse_query_csv", "parse_smi", "parse_topo", "read_hardware"]

QUERY = ("name,memory.total,clocks.max.sm,driver_version,pcie.link.gen.max,pcie.link.width.current,"
         "index,pci.bus_id,compute_cap")
_HEADER = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?P<dlabel>Driver Version|KMD Version):\s*(?P<driver>\S+)"
                     r"\s+(?P<clabel>CUDA Version|CUDA UMD Version):\s*(?P<cuda>\S+)")
_GPU_ROW = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<mode>On|Off|WDDM|TCC|N/A)\s+\|"
                      r"\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s")
_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[A-Za-z]+\d+_\d+)$")
# Nearest first: how directly two devices talk (nvidia-smi topo -m legend).
_LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass
class GPU:
    index: int
    name: str
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    bus_id: str = ""
    driver: str = ""
    max_sm_clock_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    compute_cap: str = ""


@dataclass
class Topology:
    """``nvidia-smi topo -m``: the link between every pair of devices, and each GPU's CPU and NUMA affinity."""

    gpus: list[str]
    nics: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # "GPU0-GPU1": "NV4"; pairs in row order
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    legend: bool = False

    def link(self, a: str, b: str) -> str | None:
        return self.links.get(f"{a}-{b}") or self.links.get(f"{b}-{a}")

    def gpu_links(self) -> dict[str, str]:
        return {k: v for k, v in self.links.items() if all(p.startswith("GPU") for p in k.split("-"))}

    def nvlink(self, a: str, b: str) -> int:
        """How many NVLinks join two GPUs (0: none)."""
        link = self.link(a, b) or ""
        return int(link[2:]) if link.startswith("NV") and link[2:].isdigit() else 0


@dataclass
class P2P:
    """``nvidia-smi topo -p2p r``: whether each GPU can read its peers' memory directly."""

    gpus: list[str]
    status: dict[str, str]  # "GPU0-GPU1": "OK" | "CNS" | "GNS" | "TNS" | "NS" | "DR" | "U"
    capability: str = "r"
    basis: str = "nvidia-smi topo -p2p r"  # or what else decided it (kit.hardware_caps: the GPU model)

    def supported(self, a: str, b: str) -> bool | None:
        value = self.status.get(f"{a}-{b}")
        return None if value is None else value == "OK"


@dataclass
class Hardware:
    """What the kit knows of a host's GPUs; ``note`` says what is missing and why."""

    host: str
    gpus: list[GPU] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""
    topology: Topology | None = None
    p2p: P2P | None = None
    env: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    note: str = ""
    sources: list[str] = field(default_factory=list)  # what each fact came from (command or file)

    @property
    def gpu_name(self) -> str | None:
        names = {g.name for g in self.gpus}
        return names.pop() if len(names) == 1 else None

    @property
    def profile(self) -> GpuProfile | None:
        """The GPU table's entry for these GPUs (one model), or None: unknown, mixed, or no GPU."""
        return match_gpu(self.gpu_name) if self.gpu_name else None

    def table_line(self) -> str:
        """What the GPU table says of these GPUs, or that it does not know them (and how to add them)."""
        if not self.gpu_name:
            return ""
        p = self.profile
        if p is None:
            return (f"{self.gpu_name!r} is not in the kit's GPU table: bandwidth unknown; add it to "
                    f"kit/data/gpus.yaml with its datasheet (`sgl-kit dryrun gpus` lists the known ones)")
        flops = f", {p.bf16_tflops:g} TFLOP/s bf16" if p.bf16_tflops else ""
        return f"{p.key}: {p.arch}, {p.memory_gb:g} GB, {p.bandwidth_gbs:g} GB/s{flops} (datasheet {p.source})"

    def __repr__(self) -> str:
        if not self.gpus:
            return f"<Hardware {self.host}: {self.note or 'no GPU'}>"
        return f"<Hardware {self.host}: {len(self.gpus)}x {self.gpu_name or 'mixed GPUs'}, driver {self.driver or '?'}>"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        if not self.gpus:
            return f"hardware  {self.host}: {self.note or 'no NVIDIA GPU visible'}"
        gpus = f"{len(self.gpus)}x {self.gpu_name or ', '.join(g.name for g in self.gpus)}"
        memory = self.gpus[0].memory_total_mib
        lines = [f"hardware  {gpus}" + (f", {memory} MiB each" if memory else "")
                 + (f"; driver {self.driver}" if self.driver else "") + (f", CUDA {self.cuda}" if self.cuda else "")]
        if self.gpu_name:
            lines.append(f"table     {self.table_line()}")
        if self.topology is not None and len(self.topology.gpus) > 1:
            pairs = ", ".join(f"{k} {v}" for k, v in list(self.topology.gpu_links().items())[:6])
            lines.append(f"links     {pairs}" + (" ..." if len(self.topology.gpu_links()) > 6 else ""))
        if self.p2p is not None:
            bad = sorted({v for v in self.p2p.status.values() if v not in ("OK", "X")})
            lines.append("p2p       " + ("supported between all pairs" if not bad else f"not everywhere: {', '.join(bad)}")
                         + ("" if self.p2p.basis.startswith("nvidia-smi") else f" (from {self.p2p.basis})"))
        if self.env:
            lines.append("env       " + " ".join(f"{k}={v}" for k, v in sorted(self.env.items())))
        if self.versions:
            lines.append("versions  " + ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items())))
        if self.note:
            lines.append(f"note      {self.note}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.to_text())}</pre>"


def link_rank(link: str | None) -> int:
    """0 for NVLink, then PIX, PXB, PHB, NODE, SYS (5); 6 when unknown."""
    if not link:
        return 6
    for rank, prefix in enumerate(_LINK_ORDER):
        if link.startswith(prefix):
            return rank
    return 6


# --------------------------------------------------------------------------- nvidia-smi (the table)


def parse_smi(text: str) -> Hardware:
    """The default ``nvidia-smi`` table (classic or KMD header) as Hardware with its GPUs."""
    header = _HEADER.search(text)
    if header is None:
        raise ParseError("no `NVIDIA-SMI ... Driver Version/KMD Version ... CUDA Version` header in this "
                         "nvidia-smi output", hint="give the output of plain `nvidia-smi` (the table), "
                         "or of `nvidia-smi --query-gpu=... --format=csv`")
    lines = text.splitlines()
    gpus = []
    for i, line in enumerate(lines):
        row = _GPU_ROW.match(line)
        if row is None:
            continue
        memory = _MEMORY.search(lines[i + 1]) if i + 1 < len(lines) else None
        gpus.append(GPU(int(row["index"]), row["name"].strip(), int(memory["total"]) if memory else None,
                        int(memory["used"]) if memory else None, row["bus"], header["driver"]))
    return Hardware("(pasted nvidia-smi)", gpus, header["driver"], header["cuda"], sources=["nvidia-smi"])


def parse_query_csv(text: str) -> list[GPU]:
    """``nvidia-smi --query-gpu=... --format=csv`` (with header; units in the header or the values)."""
    rows = [r for r in (line.strip() for line in text.splitlines()) if r]
    if not rows or "name" not in rows[0].lower():
        raise ParseError("no header line in this --format=csv output", hint="run it with --format=csv, "
                         "not csv,noheader, so the columns are named")
    columns = [_column(c) for c in _csv(rows[0])]
    gpus = []
    for position, row in enumerate(rows[1:]):
        cells = dict(zip(columns, _csv(row), strict=False))
        gpus.append(GPU(
            index=_int(cells.get("index")) if cells.get("index") is not None else position,
            name=cells.get("name", ""),
            memory_total_mib=_int(cells.get("memory.total")),
            memory_used_mib=_int(cells.get("memory.used")),
            bus_id=cells.get("pci.bus_id", ""),
            driver=cells.get("driver_version", ""),
            max_sm_clock_mhz=_int(cells.get("clocks.max.sm") or cells.get("clocks.max.sm_clock")),
            pcie_gen=_int(cells.get("pcie.link.gen.max")),
            pcie_width=_int(cells.get("pcie.link.width.current")),
            compute_cap=cells.get("compute_cap", ""),
        ))
    return gpus


def _csv(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def _column(name: str) -> str:
    return name.split(" [", 1)[0].strip().lower()  # "memory.total [MiB]" -> "memory.total"


def _int(value: str | None) -> int | None:
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- nvidia-smi topo


def parse_topo(text: str) -> Topology:
    """``nvidia-smi topo -m``; ParseError names the row where a truncated or mangled matrix stops."""
    lines = [line.rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line) and "Legend" not in line
                      and not line.strip().startswith("GPU0 ")), None)
    if header_at is None:
        header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"] and
                          len(line.split()) > 1 and _DEVICE.match(line.split()[1] or "")), None)
    if header_at is None:
        raise ParseError("no GPU0 column header: this is not `nvidia-smi topo -m` output",
                         hint="paste the whole matrix, from its header line (GPU0 GPU1 ... CPU Affinity)")
    columns = _split_header(lines[header_at])
    devices = [c for c in columns if _DEVICE.match(c)]
    topo = Topology(gpus=[d for d in devices if d.startswith("GPU")], nics=[d for d in devices if not d.startswith("GPU")],
                    legend=any(line.strip().startswith("Legend") for line in lines))
    seen = []
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        if not line.strip():
            if seen:
                break
            continue
        if line.strip().startswith("Legend"):
            break
        cells = _split_row(line)
        name = cells[0]
        if name not in devices:
            break
        links = cells[1:1 + len(devices)]
        if len(links) < len(devices):
            raise ParseError(f"topology row {name} (line {number}) has {len(links)} of {len(devices)} links: the "
                             "matrix looks cut off", position=number,
                             hint="paste the whole output of `nvidia-smi topo -m`")
        for other, link in zip(devices, links, strict=True):
            if other != name and other not in seen:
                topo.links[f"{name}-{other}"] = link
        rest = cells[1 + len(devices):]
        if name.startswith("GPU"):
            topo.cpu_affinity[name] = rest[0] if rest else ""
            topo.numa_affinity[name] = rest[1] if len(rest) > 1 else ""
            topo.gpu_numa_id[name] = rest[-1] if len(rest) > 2 else ""
        seen.append(name)
    missing = [d for d in devices if d not in seen]
    if missing:
        raise ParseError(f"topology rows missing for {', '.join(missing)}: the matrix looks cut off",
                         hint="paste the whole output of `nvidia-smi topo -m`")
    return topo


def _split_header(line: str) -> list[str]:
    return [c for c in re.split(r"\t+| {2,}", line.strip()) if c]


def _split_row(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.strip(" ").split("\t")]
    return line.split()


def parse_p2p(text: str) -> P2P:
    """``nvidia-smi topo -p2p r`` (or w/rw/n/a): the peer-access status of every GPU pair."""
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"] and "X" not in line.split()),
                     None)
    if header_at is None:
        raise ParseError("no GPU0 header: this is not `nvidia-smi topo -p2p` output",
                         hint="paste the output of `nvidia-smi topo -p2p r`")
    gpus = lines[header_at].split()
    status = {}
    for line in lines[header_at + 1:]:
        cells = line.split()
        if not cells or cells[0] not in gpus:
            break
        for other, value in zip(gpus, cells[1:], strict=False):
            if other != cells[0]:
                status[f"{cells[0]}-{other}"] = value
    return P2P(gpus, status)


# --------------------------------------------------------------------------- a live host


def read_hardware(host, server=None, timeout: float = 30.0) -> Hardware:
    """nvidia-smi query, topo -m and topo -p2p r on ``host``; the server's environment and versions.

    No nvidia-smi is a result ("no NVIDIA GPU visible on HOST"), not an error.
    """
    hw = Hardware(host.name)
    smi = host.run(["sh", "-c", "command -v nvidia-smi"], timeout=timeout)
    if not smi.ok:
        hw.note = f"no NVIDIA GPU visible on {host.name} (nvidia-smi not found)"
    else:
        query = host.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv"], timeout=timeout)
        if query.ok:
            hw.gpus = parse_query_csv(query.stdout)
            hw.driver = hw.gpus[0].driver if hw.gpus else ""
            hw.sources.append("nvidia-smi --query-gpu")
        else:
            hw.note = f"nvidia-smi failed on {host.name}: {(query.stderr or query.stdout).strip()[-200:]}"
        topo = host.run(["nvidia-smi", "topo", "-m"], timeout=timeout)
        if topo.ok and len(hw.gpus) > 1:
            hw.topology = _try(parse_topo, topo.stdout, hw)
            p2p = host.run(["nvidia-smi", "topo", "-p2p", "r"], timeout=timeout)
            hw.p2p = _try(parse_p2p, p2p.stdout, hw) if p2p.ok else None
    if server is not None:
        hw.env = redact_env({k: v for k, v in server.env.items()
                             if k.startswith(("NCCL_", "CUDA_", "SGLANG_", "SGL_"))})
        if server.sglang_version:
            hw.versions["sglang"] = server.sglang_version
        torch = _torch_version(host, server.python, timeout)
        if torch:
            hw.versions["torch"] = torch
    if hw.driver:
        hw.versions["driver"] = hw.driver
    return hw




def _try(parse, text: str, hw: Hardware):
    try:
        return parse(text)
    except ParseError as err:
        hw.note = (hw.note + "; " if hw.note else "") + err.message
        return None


def _torch_version(host, python: str | None, timeout: float) -> str | None:
    if not python:
        return None
    code = "import importlib.metadata as m\ntry:\n print(m.version('torch'))\nexcept Exception:\n pass"
    res = host.run([python, "-c", code], timeout=timeout)
    return res.stdout.strip() or None if res.ok else None


# --------------------------------------------------------------------------- the GPU table


GPUS_FILE = Path(__file__).resolve().parent / "data" / "gpus.yaml"
_REQUIRED = ("name", "vendor", "memory_gb", "bandwidth_gbs", "bf16_tflops", "source")
_VENDORS = {"nvidia": "sm", "amd": "gfx"}  # vendor -> the field that names its architecture
# Words tools print around a model name: "NVIDIA ...", "Tesla T4", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X".
_MAKER_WORDS = {"nvidia", "tesla", "geforce", "amd", "instinct"}
# Words after the model name that do not change the GPU: rocm-smi's form factor, a virtual function.
_TRAILING_WORDS = {"oam", "vf"}


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model of ``kit/data/gpus.yaml``: its datasheet figures, and what sglang's probes would see."""

    key: str
    name: str
    vendor: str
    memory_gb: float
    memory_mib: int
    bandwidth_gbs: float
    bf16_tflops: float | None
    source: str
    sm: int | None = None
    gfx: str | None = None
    note: str = ""
    checked: str = ""
    cuda_version: str = "12.9"
    driver_version: str = "580.95.05"
    names: tuple[str, ...] = field(default=(), repr=False)
    aliases: tuple[str, ...] = field(default=(), repr=False)

    @property
    def hopper(self) -> bool:
        """SM 9.x: sglang's is_sm90_supported / is_hopper_with_cuda_12_3."""
        return self.sm is not None and self.sm // 10 == 9

    @property
    def blackwell(self) -> bool:
        """SM 10.x-12.x: sglang's is_blackwell_supported."""
        return self.sm is not None and self.sm // 10 in (10, 11, 12)

    @property
    def arch(self) -> str:
        return f"SM{self.sm}" if self.sm is not None else str(self.gfx)

    @property
    def summary(self) -> str:
        return f"{self.name} ({self.arch}, {self.memory_mib} MiB)"

    def probe_request(self) -> dict:
        """What the inside of the dry-run needs to answer sglang's (CUDA) probes."""
        return {"key": self.key, "name": self.name, "memory_mib": self.memory_mib, "sm": self.sm,
                "hopper": self.hopper, "blackwell": self.blackwell, "bandwidth_gbs": self.bandwidth_gbs,
                "bf16_tflops": self.bf16_tflops, "cuda_version": self.cuda_version,
                "driver_version": self.driver_version}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hopper": self.hopper, "blackwell": self.blackwell}

    def __repr__(self) -> str:
        return f"<GpuProfile {self.key}: {self.summary}>"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self)[1:-1])}</code>"


def _words(name: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", name.lower())


def _norm(name: str) -> str:
    """A name as the matcher compares it: no maker words, case or punctuation ("NVIDIA RTX A6000" -> "rtxa6000")."""
    words = _words(name)
    while words and words[0] in _MAKER_WORDS:
        words.pop(0)
    words = [w for w in words if w != "geforce"]
    while len(words) > 1 and words[-1] in _TRAILING_WORDS:
        words.pop()
    return "".join(words)


def _entry(key: str, entry: dict, defaults: dict) -> GpuProfile:
    missing = [k for k in _REQUIRED if k not in entry]
    vendor = entry.get("vendor")
    arch = _VENDORS.get(str(vendor))
    if arch is None:
        missing.append(f"a vendor of {', '.join(_VENDORS)} (not {vendor!r})")
    elif entry.get(arch) is None:
        missing.append(arch)
    if entry.get("bandwidth_gbs") is None:
        missing.append("bandwidth_gbs (a datasheet figure)")
    if entry.get("bf16_tflops") is None and not entry.get("note"):
        missing.append("bf16_tflops, or a note saying why there is none")
    if missing:
        from .errors import DataFileError

        raise DataFileError(f"GPU {key!r} in {GPUS_FILE} lacks {', '.join(dict.fromkeys(missing))}",
                            hint="every entry needs its datasheet figures and the datasheet's URL in `source`")
    memory_gb = float(entry["memory_gb"])
    return GpuProfile(
        key=key, name=str(entry["name"]), vendor=str(vendor), memory_gb=memory_gb,
        memory_mib=int(entry.get("memory_mib") or round(memory_gb * 1024)),
        bandwidth_gbs=float(entry["bandwidth_gbs"]),
        bf16_tflops=None if entry["bf16_tflops"] is None else float(entry["bf16_tflops"]),
        source=str(entry["source"]), sm=None if entry.get("sm") is None else int(entry["sm"]),
        gfx=entry.get("gfx"), note=str(entry.get("note") or ""), checked=str(entry.get("checked") or ""),
        cuda_version=str(entry.get("cuda_version", defaults.get("cuda_version", "12.9"))),
        driver_version=str(entry.get("driver_version", defaults.get("driver_version", "580.95.05"))),
        names=tuple(str(n) for n in entry.get("names") or ()),
        aliases=tuple(str(a) for a in entry.get("aliases") or ()),
    )


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, GpuProfile], dict[str, str], dict[str, str]]:
    """The profiles by key; the names tools print (normalised) to their key; the keys and aliases to theirs.

    A spelling two entries share is an error: every name belongs to one GPU.
    """
    from kit._data import load_yaml

    data = load_yaml(GPUS_FILE)
    defaults = data.get("defaults") or {}
    profiles = {str(key): _entry(str(key), entry, defaults) for key, entry in (data.get("gpus") or {}).items()}
    printed: dict[str, str] = {}
    short: dict[str, str] = {}
    for profile in profiles.values():
        for table, spellings in ((printed, (profile.name, *profile.names)), (short, (profile.key, *profile.aliases))):
            for spelling in {_norm(n) for n in spellings}:
                if table.setdefault(spelling, profile.key) != profile.key:
                    from .errors import DataFileError

                    raise DataFileError(f"{GPUS_FILE}: {spelling!r} names both {table[spelling]} and {profile.key}",
                                        hint="each name or alias must belong to one GPU")
    return profiles, printed, short


def gpu_profiles() -> dict[str, GpuProfile]:
    """Every GPU of the table by key, in the file's order."""
    return dict(_table()[0])


def match_gpu(name: str | GpuProfile | None) -> GpuProfile | None:
    """The table's entry for a GPU name as ``nvidia-smi``, ``rocm-smi`` or torch print it, or a key; None if unknown.

    The one matcher of the kit (the dry-run's ``--gpu``, the roofline, the hardware evidence). It ignores case,
    punctuation and the maker words tools add ("NVIDIA", "Tesla", "GeForce", "AMD Instinct"), and the form
    factor rocm-smi appends ("OAM", "VF"). It reads rocm-smi's "Arcturus GL-XL [AMD Instinct MI100]" by its
    bracket. A name nvidia-smi's table cut short ("NVIDIA RTX PRO 6000 Blac...") matches when one GPU has
    that beginning. Memory sizes and PCIe/SXM/NVL are part of the names, so they are never confused.
    """
    if isinstance(name, GpuProfile):
        return name
    if not name or not str(name).strip():
        return None
    profiles, printed, short = _table()
    text = str(name).strip()
    for candidate in [text] + re.findall(r"\[([^\]]+)\]", text):
        # A name as a tool prints it ("NVIDIA H100 ...") is looked up among printed names only, so that a
        # model the table lacks is not taken for the entry whose short key it resembles ("h100").
        as_printed = bool(_words(candidate)) and _words(candidate)[0] in _MAKER_WORDS
        key = printed.get(_norm(candidate)) or (None if as_printed else short.get(_norm(candidate)))
        if key:
            return profiles[key]
    cut = re.match(r"(.+?)\s*(\.\.\.|…)$", text)
    if cut and len(_norm(cut.group(1))) >= 4:
        start = _norm(cut.group(1))
        keys = {k for spelling, k in printed.items() if spelling.startswith(start)}
        if len(keys) == 1:
            return profiles[keys.pop()]
    return None


_COUNT_WORDS = {"one": 1, "single": 1, "two": 2, "dual": 2, "three": 3, "four": 4, "quad": 4, "six": 6,
                "eight": 8, "sixteen": 16}


@dataclass(frozen=True)
class NamedGpu:
    """A GPU model named in a sentence ("on two RTX 4090s", "8xH100"): its profile, how many the sentence
    says (None: no number next to it) and the 1-based line."""

    profile: GpuProfile
    count: int | None
    line: int
    text: str


def prose_gpus(text: str, *, skip: set[int] | None = None) -> list[NamedGpu]:
    """The GPU models of the kit's table that the sentences of ``text`` name, each with the count written
    next to it. A window of one to four words is looked up with :func:`match_gpu`; a bare number ("4090")
    counts only after "RTX"/"GeForce" or a count ("two 4090s", "2x 4090"), so a port or a size is never a GPU.
    URLs and lines in ``skip`` (other evidence) are not read."""
    out: list[NamedGpu] = []
    for no, line in enumerate(text.split("\n"), 1):
        if skip and no in skip:
            continue
        line = re.sub(r"\S*://\S*|\S+/\S+", " ", line)  # URLs and paths: a model id, an image tag
        words = []
        for w in re.findall(r"[A-Za-z0-9]+|\u00d7", line):
            attached = re.fullmatch(r"(\d{1,2})[xX](\w*[A-Za-z]\w*\d\w*|\d{3,4}s?)", w)  # "8xH100", "2x4090"
            words += [attached.group(1), "x", attached.group(2)] if attached else [w]
        i = 0
        while i < len(words):
            for n in (4, 3, 2, 1):
                window = words[i:i + n]
                if len(window) < n:
                    continue
                last = window[-1]
                if re.fullmatch(r"\d{3,4}s", last):  # "4090s"
                    window = window[:-1] + [last[:-1]]
                if not any(re.search(r"\d", w) for w in window) or window[0].lower() in ("x", "\u00d7"):
                    continue
                profile = match_gpu(" ".join(window))
                if profile is None:
                    continue
                count = _count_before(words[:i])
                if window[0].isdigit() and count is None and (i == 0 or words[i - 1].lower() not in ("rtx", "geforce")):
                    continue  # a bare number with nothing that makes it a GPU
                out.append(NamedGpu(profile, count, no, " ".join(words[i:i + n])))
                i += n - 1
                break
            i += 1
    return out


def _count_before(words: list[str]) -> int | None:
    """The count written just before a GPU name: "2x", "2 x", "8 \u00d7", "two", "dual", "4 RTX"."""
    tail = [w.lower() for w in words[-3:]]
    while tail and tail[-1] in ("nvidia", "geforce", "rtx", "amd", "instinct"):
        tail.pop()
    if len(tail) >= 2 and tail[-1] in ("x", "\u00d7") and tail[-2].isdigit():
        return int(tail[-2]) or None
    if tail and tail[-1].isdigit() and 0 < int(tail[-1]) <= 64:
        return int(tail[-1])
    if tail and tail[-1] in _COUNT_WORDS:
        return _COUNT_WORDS[tail[-1]]
    return None


def gpu_profile(name: str | GpuProfile) -> GpuProfile:
    """``match_gpu``, with an UnknownGPU error (naming the GPU and how to add it) when the table has no entry."""
    found = match_gpu(name)
    if found is not None:
        return found
    from .errors import UnknownGPU

    known = ", ".join(gpu_profiles())
    raise UnknownGPU(
        f"unknown GPU {str(name)!r}: the kit's GPU table has no entry for it, so its bandwidth is unknown "
        f"(known: {known})",
        hint=f"give one of those keys (`sgl-kit dryrun gpus` lists them with their names), or add the GPU to "
             f"{GPUS_FILE}: the name nvidia-smi prints, its datasheet figures and the datasheet's URL")
