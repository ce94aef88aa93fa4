"""Communication kernels grouped into logical collectives across ranks, skew apart from transfer.

Each rank runs one kernel per collective (an NCCL ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``,
``ncclKernel_AllReduce_...`` in older NCCL, or a custom all-reduce such as
``cross_device_reduce_1stage``). Every rank's kernel starts when that rank gets there and ends
when the data has moved, which needs every rank: a rank that arrives first waits inside its
kernel for the last one. So the kernel time summed over ranks counts the wait once per waiting
rank, and overstates the all-reduce.

The k-th kernel of one kind on a rank's k-th communication stream of that kind is matched with
the k-th of the other ranks (ranks issue collectives in the same order on the same group).
Per logical collective, with times aligned on each file's ``baseTimeNanoseconds``:

- **arrival skew**: last start - first start (the wait for the last rank);
- **transfer**: last end - last start (from the moment every rank is there);
- **wall**: last end - first start.

One rank alone cannot show skew: its kernel time is then reported as such, skew "not measured".
Ranks on several machines need their clocks in step (PTP/NTP); the result says how many ranks
it aligned and does not correct clocks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = ["Collectives", "comm_kind", "group_collectives"]

_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_CUSTOM = re.compile(r"cross_device_reduce|custom_?all_?reduce|custom_ar|(?:one|two)_?shot.*all_?reduce|"
                     r"all_?reduce_?fusion|quick_?all_?reduce|\ballreduce", re.I)


@lru_cache(maxsize=8192)  # kernel names repeat: one regex pass per distinct name
def comm_kind(name: str) -> str:
    """``AllReduce``, ``AllGather``, ``ReduceScatter``, ... for an NCCL kernel, ``custom AllReduce`` for a
    custom all-reduce kernel, '' for anything else."""
    m = _NCCL.match(name)
    if m:
        return m.group(1)
    if name.startswith("nccl"):
        return "nccl other"
    return "custom AllReduce" if _CUSTOM.search(name) else ""


@dataclass
class Collectives:
    ranks: list = field(default_factory=list)  # the rank labels aligned
    kernels: int = 0
    collectives: int = 0
    summed_us: float = 0.0  # kernel time summed over every rank
    wall_us: float = 0.0  # per collective: last end - first start, summed
    skew_us: float | None = None  # per collective: last start - first start, summed (None: one rank)
    transfer_us: float = 0.0  # per collective: last end - last start, summed
    by_kind: dict = field(default_factory=dict)  # kind -> the same numbers
    problems: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def to_text(self) -> str:
        if not self.kernels:
            return "collectives: no NCCL or custom all-reduce kernel in these traces\n"
        lines = [f"collectives: {self.kernels} kernels on {len(self.ranks)} rank(s) are {self.collectives} "
                 f"logical collectives"]
        for kind, k in sorted(self.by_kind.items(), key=lambda x: -x[1]["summed_us"]):
            skew = ("skew not measured (one rank)" if k["skew_us"] is None
                    else f"arrival skew {k['skew_us'] / 1000:.2f} ms")
            lines.append(f"  {kind:<18} {k['collectives']:>6} x  kernel time summed {k['summed_us'] / 1000:.2f} ms, "
                         f"wall {k['wall_us'] / 1000:.2f} ms = {skew} + transfer {k['transfer_us'] / 1000:.2f} ms")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines) + "\n"


def _label(summary) -> str:
    r = summary.rank or {}
    if r.get("tp") is not None:
        return f"TP{r['tp']}" + (f"-DP{r['dp']}" if r.get("dp") is not None else "")
    if (summary.world or {}).get("rank") is not None:
        return f"rank{summary.world['rank']}"
    return summary.path


def group_collectives(summaries) -> Collectives:
    """The logical collectives of several ranks' traces (kit.metrics.trace.TraceSummary, one per rank;
    traces of one rank split by stage are joined)."""
    per_rank: dict[str, list] = defaultdict(list)
    for s in summaries:
        per_rank[_label(s)].extend(s.comm_kernels)
    out = Collectives(ranks=sorted(per_rank))
    # rank -> (kind, stream ordinal) -> kernels in time order
    seqs: dict[str, dict] = {}
    for rank, kernels in per_rank.items():
        kernels.sort()
        first_seen: dict = {}
        streams: dict = defaultdict(list)
        for ts, dur, tid, name in kernels:
            kind = comm_kind(name)
            first_seen.setdefault((kind, tid), ts)
            streams[(kind, tid)].append((ts, dur))
        ordinal: dict = defaultdict(int)
        keyed: dict = {}
        for (kind, tid), _ in sorted(first_seen.items(), key=lambda x: x[1]):
            keyed[(kind, ordinal[kind])] = streams[(kind, tid)]
            ordinal[kind] += 1
        seqs[rank] = keyed
        out.kernels += len(kernels)
        out.summed_us += sum(k[1] for k in kernels)
    keys = sorted({k for keyed in seqs.values() for k in keyed})
    multi = len(seqs) > 1
    if multi:
        out.skew_us = 0.0
    for key in keys:
        kind = key[0]
        lists = {r: keyed.get(key, []) for r, keyed in seqs.items()}
        counts = {r: len(v) for r, v in lists.items()}
        n = min(counts.values())
        if multi and len(set(counts.values())) > 1:
            out.problems.append(f"{kind} stream {key[1]}: ranks hold different counts ({counts}); the first {n} "
                                "of each were matched (a trace cut off, or ranks profiled different steps)")
        k = out.by_kind.setdefault(kind, {"collectives": 0, "kernels": 0, "summed_us": 0.0, "wall_us": 0.0,
                                          "skew_us": 0.0 if multi else None, "transfer_us": 0.0})
        k["kernels"] += sum(counts.values())
        k["summed_us"] += sum(d for v in lists.values() for _, d in v)
        for i in range(n if multi else max(counts.values())):
            items = [v[i] for v in lists.values() if i < len(v)]
            first, last = min(t for t, _ in items), max(t for t, _ in items)
            end = max(t + d for t, d in items)
            k["collectives"] += 1
            k["wall_us"] += end - first
            k["transfer_us"] += max(end - last, 0.0)
            if multi:
                k["skew_us"] += last - first
    for k in out.by_kind.values():
        out.collectives += k["collectives"]
        out.wall_us += k["wall_us"]
        out.transfer_us += k["transfer_us"]
        if multi:
            out.skew_us += k["skew_us"]
    return out
