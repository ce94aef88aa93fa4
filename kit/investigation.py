"""The guided investigation's steps, as calls: what notebooks 01-04 run (they hold prose and calls, no logic).

- 01 ``symptom``: bench the server, and set the rate against a baseline and the roofline;
- 02 ``baseline_launch``, ``compare_launch``, ``differences_that_matter``: what runs, against what ran;
- 03 ``rule_source``, ``dryrun_crosscheck``, ``way_out``: why SGLang switched it off, and the way out;
- 04 ``fix_plan``, ``validate``: relaunch with the fixes one at a time, re-bench, compare with a CI.

Every number a notebook's conclusion states comes from these objects, computed from the runs.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._paths import runs_dir
from .errors import KitError

__all__ = ["FixStep", "Symptom", "Validation", "WhatDiffers", "baseline_launch", "compare_launch",
           "describe_plan", "differences_that_matter", "dryrun_crosscheck", "fix_plan", "measure", "rule_source",
           "symptom", "validate", "way_out", "what_differs", "why_it_fired"]

_RESOLVED = Path(__file__).resolve().parent / "data" / "resolved"


# --------------------------------------------------------------------------- 01 the symptom


def measure(host, server, *, requests: int = 8, max_tokens: int = 128, concurrency: int = 1,
            progress: Any = "auto", out: str | None = None, label: str | None = None):
    """A benchmark of ``server`` (kit.bench.bench through its host: a forward when remote)."""
    from .bench import bench

    if not out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = str(runs_dir() / f"{label or 'run'}-{stamp}-{os.getpid()}-{server.port}.jsonl")
    return bench(host, port=server.port, requests=requests, max_tokens=max_tokens, concurrency=concurrency,
                 warmup=1, progress=progress, out=out)


@dataclass
class Symptom:
    target: str
    rate: float | None  # median per-request decode tok/s
    ttft_ms: float | None
    accept_length: float | None
    requests: int
    baseline_tok_s: float | None
    roofline: Any  # kit.doctor.Roofline

    @property
    def gap(self) -> float | None:
        return self.baseline_tok_s - self.rate if self.baseline_tok_s and self.rate else None

    @property
    def slow(self) -> bool | None:
        """Below 90% of the baseline: the symptom is there."""
        return self.rate < 0.9 * self.baseline_tok_s if self.baseline_tok_s and self.rate else None

    def to_text(self) -> str:
        lines = [f"{self.target}: {self.rate:.1f} tok/s per request (median of {self.requests}), "
                 f"time to first token {self.ttft_ms:.0f} ms"
                 + (f", accept length {self.accept_length:.2f}" if self.accept_length else "")]
        if self.baseline_tok_s:
            lines.append(f"baseline {self.baseline_tok_s:g} tok/s: {self.gap:+.1f} tok/s short "
                         f"({self.rate / self.baseline_tok_s:.0%} of it)" if self.gap > 0 else
                         f"baseline {self.baseline_tok_s:g} tok/s: not slower than the baseline")
        roof = self.roofline
        if roof is not None and roof.ceiling_tok_s:
            lines.append(f"the hardware's single-stream ceiling at this accept length: {roof.ceiling_tok_s:.1f} tok/s; "
                         f"this launch runs at {self.rate / roof.ceiling_tok_s:.0%} of it")
        elif roof is not None:
            lines.append(f"ceiling unknown: {roof.note}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"target": self.target, "rate_tok_s": self.rate, "ttft_ms": self.ttft_ms,
                "accept_length": self.accept_length, "requests": self.requests, "baseline_tok_s": self.baseline_tok_s,
                "gap_tok_s": self.gap, "ceiling_tok_s": getattr(self.roofline, "ceiling_tok_s", None)}

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.to_text()) + "</pre>"


def symptom(host, server, run, *, baseline_tok_s: float | None = None, target: str | None = None) -> Symptom:
    """The measured rate, set against the baseline and the roofline of this server's model and GPUs."""
    from .doctor import from_server, roofline_of

    summary = run.summary()
    evidence = from_server(host, server)
    evidence.bench = bench_numbers(run)
    rate = _median(summary, "decode_tok_s")
    return Symptom(target or host.name, rate, _median(summary, "ttft_ms"), run.totals.get("accept_length"),
                   run.totals["ok"], baseline_tok_s, roofline_of(evidence))


def bench_numbers(run) -> dict:
    """What the doctor reads from a benchmark: the median decode rate and the accept length."""
    return {"tok_s": _median(run.summary(), "decode_tok_s"), "accept_length": run.totals.get("accept_length"),
            "ttft_ms": _median(run.summary(), "ttft_ms"), "concurrency": getattr(getattr(run, "config", None), "concurrency", None),
            "source": run.name}


def _median(summary, row: str) -> float | None:
    value = summary.loc[row, "median"] if row in summary.index else None
    return None if value is None or value != value else float(value)


# --------------------------------------------------------------------------- 02 the configuration


def baseline_launch(spec: str, tree, *, model_dir: str | None = None, server=None):
    """The baseline as a kit.server_args.LaunchSide: ``lab:old`` (the lab's record of the incident's old
    launch), ``defaults`` (sglang's own defaults for this release: ``server``'s model, host and port and no
    other flag), or a file: a log, a /server_info JSON, or a launch command."""
    from .witness import LaunchOptions, read_launch

    if spec == "defaults":
        if server is None:
            raise KitError("the baseline 'defaults' needs the server (its model, host and port)",
                           hint="baseline_launch('defaults', tree, server=server)")
        from .server_args import effective_args

        fields = effective_args(server).fields
        argv = ["--model-path", str(fields.get("model_path")), "--host", str(fields.get("host") or "127.0.0.1"),
                "--port", str(server.port)]
        path = runs_dir() / f"baseline-defaults-{tree.version}-{os.getpid()}-{server.port}.sh"
        path.write_text("python -m sglang.launch_server " + shlex.join(argv) + "\n")
        side = read_launch(str(path), tree, LaunchOptions(dryrun=False))
        side.label = f"sglang {tree.version}'s defaults with this server's model ({path})"
        return side
    elif spec.startswith("lab:"):
        record = _RESOLVED / f"incident-{spec[4:]}-{tree.version}.json"
        if not record.is_file():
            known = sorted(p.name for p in _RESOLVED.glob("incident-*.json"))
            raise KitError(f"no record of the lab's {spec[4:]!r} launch for sglang {tree.version}",
                           hint=f"use one of {', '.join(known)} as lab:NAME, or give a file")
        argv = json.loads(record.read_text())["argv"]
        path = runs_dir() / f"baseline-lab-{spec[4:]}-{tree.version}.sh"
        path.write_text("python -m sglang.launch_server " + shlex.join(argv) + "\n")
        side = read_launch(str(path), tree, LaunchOptions(dryrun=False))
        side.label = f"the lab's record of the incident's {spec[4:]} launch ({path})"
        return side
    return read_launch(spec, tree, LaunchOptions(dryrun=False))


def this_launch(server, tree, snapshot=None):
    """The running server as a LaunchSide: what its argv asked, and what it runs with."""
    from .server_args import LaunchSide, cli_defaults, effective_args, explicit_args

    snapshot = snapshot if snapshot is not None else effective_args(server)
    return LaunchSide(f"pid {server.pid} on {server.host_name}", "log", dict(snapshot.fields),
                      "what the server runs with", explicit=explicit_args(server, tree), defaults=cli_defaults(tree))


def compare_launch(server, tree, baseline):
    """kit.server_args.launch_diff of the baseline against the running server."""
    from .server_args import launch_diff

    return launch_diff(baseline, this_launch(server, tree))


# The fields the doctor's rules read: a difference in one of them can cost throughput.
PERFORMANCE_FIELDS = (
    "speculative_algorithm", "speculative_num_steps", "speculative_num_draft_tokens", "speculative_eagle_topk",
    "disable_piecewise_cuda_graph", "enforce_piecewise_cuda_graph", "disable_cuda_graph", "cuda_graph_max_bs",
    "disable_overlap_schedule", "disable_radix_cache", "mamba_scheduler_strategy", "disable_custom_all_reduce",
    "attention_backend", "max_running_requests", "mem_fraction_static", "chunked_prefill_size", "tp_size",
    "enable_torch_compile", "kv_cache_dtype", "quantization", "cuda_graph_config",
)


def differences_that_matter(diff, server, tree):
    """The rows of ``diff`` in fields that cost throughput, each with why the server has its value:
    asked on its command line, or the sglang line that set it (kit.provenance). A DataFrame."""
    import pandas as pd

    from .provenance import explain_server

    rows = []
    unresolved = diff.a.kind == "command" and "not resolved" in diff.a.method
    for r in diff.shown:
        top = r.flag.split(".")[0]
        if top not in PERFORMANCE_FIELDS:
            continue
        if unresolved and r.a is None and r.a_origin == "default":
            continue  # a None default is sglang's to fill at startup: the baseline's value is not known
        why = "asked on the launch command" if r.b_origin == "asked" else ""
        if not why:
            exp = explain_server(server, top, tree)
            fired = [s for s in exp.fired if "server_args" in s.file or "arg_groups" in s.file]
            why = (f"sglang set it: {fired[0].where.removeprefix('sglang/')} {fired[0].rule or fired[0].function}"
                   if fired else "no flag asked for it; no site of the source was found to fire")
        rows.append({"flag": r.flag, "baseline": r.a, "here": r.b, "why": why})
    return pd.DataFrame(rows, columns=["flag", "baseline", "here", "why"])


@dataclass
class WhatDiffers:
    """Notebook 02's reading of the differences that matter, row by row: asked on the launch command, or set
    by sglang with no flag asking (where silent decisions hide, and what notebook 03 follows)."""

    baseline: str
    asked: list[dict]
    decided: list[dict]  # sglang set it: each with its "why" (the site and rule)
    unexplained: list[dict]

    @property
    def follow(self) -> str | None:
        """The first field sglang changed on its own: the one to ask `why` about."""
        return self.decided[0]["flag"] if self.decided else None

    def to_text(self) -> str:
        if not (self.asked or self.decided or self.unexplained):
            return f"No field that decides throughput differs from the baseline ({self.baseline})."
        out = [f"Against the baseline ({self.baseline}):"]
        for r in self.asked:
            out.append(f"- `{r['flag']}`: {r['baseline']!r} there, {r['here']!r} here, asked on this server's "
                       "launch command.")
        for r in self.decided:
            out.append(f"- `{r['flag']}`: {r['baseline']!r} there, {r['here']!r} here, and no flag asked for it: "
                       f"{r['why']}.")
        for r in self.unexplained:
            out.append(f"- `{r['flag']}`: {r['baseline']!r} there, {r['here']!r} here: {r['why']}.")
        if self.asked:
            out.append("A row asked on the command line has an obvious fix: change the flag.")
        if self.decided:
            names = ", ".join(f"`{r['flag']}`" for r in self.decided)
            out.append(f"Nothing on the command line explains {names}: SGLang decided at startup. **Next:** "
                       f"`03_auto_disable` finds out why, one flag at a time (flag = {self.follow!r} first).")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_markdown_(self) -> str:
        return self.to_text()


def what_differs(differences, baseline=None) -> WhatDiffers:
    """The rows of ``differences_that_matter``, sorted by why the server has its value."""
    rows = differences.to_dict(orient="records")
    asked = [r for r in rows if r["why"].startswith("asked")]
    order = {name: i for i, name in enumerate(PERFORMANCE_FIELDS)}  # the doctor's rules read them in this order
    decided = sorted((r for r in rows if r["why"].startswith("sglang set it")),
                     key=lambda r: order.get(r["flag"].split(".")[0], len(order)))
    rest = [r for r in rows if r not in asked and r not in decided]
    return WhatDiffers(getattr(baseline, "label", None) or "the known-good launch", asked, decided, rest)


# --------------------------------------------------------------------------- 03 the auto-disable


def rule_source(tree, explanation):
    """The function holding the site that fired, as a SourceSnippet with the rule, its guard and the
    assignment marked: the `sed -n` of the incident, found by name."""
    fired = explanation.fired or [s for s in explanation.sites if s.status == "unknown"]
    if not fired:
        raise KitError(f"no site assigning {explanation.flag} fired in sglang {explanation.version}",
                       hint="with no log at hand every site is undecided; give the server's log")
    site = fired[0]
    snippet = tree.function(site.function)
    label = f"{site.rule}" if site.rule else "fired"
    lines = {site.line, site.write_line or site.line, *(g.line for g in site.guards if g.kind in ("if", "rule"))}
    if site.rule_line:
        lines.add(site.rule_line)
    for n in sorted(x for x in lines if x and snippet.start <= x <= snippet.end):
        snippet.mark(n, label)
    return snippet


def evidence_lines(tree, site, around: int = 2) -> list:
    """The source lines a site's evidence cites (``sglang/srt/configs/model_config.py:1384``), as snippets."""
    import re

    out = []
    for text in site.evidence:
        for path, line in re.findall(r"\bsglang/([\w/.]+\.py):(\d+)\b", text):
            n = int(line)
            snippet = tree.read(path, max(1, n - around), n + around)
            snippet.mark(n, text[:60])
            out.append(snippet)
    return out


@dataclass
class CrossCheck:
    """The static reading of a flag against sglang's own run of the same launch: the sites where each says
    a write to it ran. The live check is `sgl-kit why FLAG --dryrun`'s own (kit.dryrun.why_with_dryrun), so
    the notebook and the CLI give one answer."""

    how: str  # "dry-run (live)" or "committed snapshot"
    source: str
    dryrun_sites: list[str]
    static_sites: list[str]
    checked: int = 0  # sites compared one by one (the live check)
    verdict: bool | None = None  # the live check's own verdict; None: compare the two lists

    @property
    def agree(self) -> bool:
        return self.verdict if self.verdict is not None else set(self.dryrun_sites) == set(self.static_sites)

    def to_text(self) -> str:
        verdict = "agree" if self.agree else "DISAGREE"
        count = f" ({self.checked} sites compared one by one)" if self.checked else ""
        return (f"{self.how} ({self.source}): sglang's own run wrote it at {', '.join(self.dryrun_sites) or 'nowhere'}; "
                f"the static reading says {', '.join(self.static_sites) or 'nowhere'} -> {verdict}{count}")

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.to_text()) + "</pre>"


def dryrun_crosscheck(server, tree, explanation, *, gpu: str | None = None) -> CrossCheck:
    """Check the static answer against sglang's own resolution of the server's launch: a live dry-run
    where its environment exists here (the same check as `sgl-kit why FLAG --dryrun`), else the lab's
    committed record of the same launch. A site counts when a write to the flag ran there, whether or not
    it changed the value (an early `= False` before a `return` is a site that fired). ``gpu``: the server's
    GPU (a key or the name nvidia-smi prints); by default the one its host's nvidia-smi (or the lab's
    scenario) names."""
    from .dryrun import environment, supported_versions, why_with_dryrun
    from .model_config import model_config_beside
    from .server_args import effective_args, server_flags

    flag = explanation.flag
    static = [s.where.removeprefix("sglang/") for s in explanation.fired
              if "server_args" in s.file or "arg_groups" in s.file]
    version = tree.version
    if version in supported_versions() and environment(version).ready:
        gpu = gpu or _server_gpu(server)
        config = model_config_beside(server.host, effective_args(server).get("model_path"))
        # the server's own SGLANG_ variables: on a CPU server SGLANG_USE_CPU_ENGINE=1 is what makes is_cpu() true
        env = {k: v for k, v in (server.env or {}).items() if k.startswith("SGLANG_")}
        with tempfile.TemporaryDirectory(prefix="sgl-kit-model-") as model:
            Path(model, "config.json").write_text(json.dumps(config or {}))
            why = why_with_dryrun(flag, list(server_flags(server.argv)), model=model, gpu=gpu, sglang=version,
                                  env=env)
        sites = [w.where for w in why.result.writes_to(flag)]
        fired = [c.where for c in why.checks if c.static == "fired"]
        given = f", with {', '.join(f'{k}={v}' for k, v in sorted(env.items()))}" if env else ""
        return CrossCheck("dry-run (live)", f"sglang {version} in its dry-run environment, GPU {gpu}{given}", sites,
                          fired or static, checked=len(why.checks), verdict=why.agree)
    for record in sorted(_RESOLVED.glob(f"incident-*-{version}.json")):
        data = json.loads(record.read_text())
        if [*data["argv"]] and _same_flags(data["argv"], server_flags(server.argv)):
            sites = [f"{w['file'].removeprefix('sglang/')}:{w['line']}" for w in data["writes"] if w["field"] == flag]
            return CrossCheck("committed snapshot", f"{record.relative_to(record.parents[2])}, made by "
                              f"{data['made_by'][:80]}", sites, static)
    raise KitError(f"no dry-run environment for sglang {version} here, and no committed snapshot of this launch",
                   hint=f"`sgl-kit dryrun setup --sglang {version}` builds one (about 1.2 GB, once)")


def _server_gpu(server) -> str:
    """The GPU a server runs on, from evidence: the lab's scenario, else nvidia-smi on its host."""
    from .errors import NotGiven
    from .hardware import read_hardware

    if server.kind == "lab":
        from .lab.throughput import SCENARIO_ENV, load_scenario

        return str(load_scenario((server.env or {}).get(SCENARIO_ENV)).params["gpu"])
    hw = read_hardware(server.host)
    if hw.gpu_name:
        return hw.gpu_name
    raise NotGiven(f"which GPU the server on {server.host_name} runs on is not known: "
                   f"{hw.note or 'nvidia-smi names no single GPU model'}",
                   hint="pass gpu= with a key or the name nvidia-smi prints (kit.dryrun.gpu_profiles() lists them)")


def _same_flags(a: list[str], b: list[str]) -> bool:
    skip = {"--model-path", "--host", "--port", "--device"}

    def core(argv):
        out, i = [], 0
        while i < len(argv):
            if argv[i] in skip:
                i += 2
                continue
            out.append(argv[i])
            i += 1
        return sorted(" ".join(out).replace("--tensor-parallel-size", "--tp-size").split())
    return core(a) == core(b)


@dataclass
class WhyItFired:
    """What decided the site that fired, for this server, in a sentence or two (notebook 03's story)."""

    flag: str
    version: str | None
    site: Any  # kit.provenance.AssignmentSite that fired, or None
    architecture: str | None

    @property
    def multimodal(self) -> bool:
        return self.site is not None and _multimodal_site(self.site)

    def to_text(self) -> str:
        s = self.site
        if s is None:
            return (f"No site assigning {self.flag} was found to fire in sglang {self.version}: every site and its "
                    f"status are listed above (`sgl-kit why {self.flag} TARGET`).")
        guard = s.guards[-1].condition if s.guards else s.value_text
        head = f"Rule '{s.rule}' fired" if s.rule else "The site fired"
        out = [f"{head} at {s.where.removeprefix('sglang/')}: `{guard}` holds for this server."]
        if self.multimodal:
            arch = f"its architecture, `{self.architecture}`," if self.architecture else "its architecture"
            out.append("The guard calls `self.get_model_config().is_multimodal`. The kit follows that property into "
                       f"`ModelConfig`'s own source and evaluates it against this model's `config.json`: {arch} is "
                       "in SGLang's list of multimodal architectures, so a model served text-only still counts as "
                       "a VLM.")
        elif s.evidence:
            out.append("What decided it: " + "; ".join(s.evidence) + ".")
        out.append("These are the lines the answer rests on:")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_markdown_(self) -> str:
        return self.to_text()


def why_it_fired(explanation, server=None, model_config: dict | None = None) -> WhyItFired:
    """The story of the first site that fired: which rule, its guard, and what decided it (the model's
    architecture for sglang's multimodal rule, the probes and environment for the hardware rule).
    The model's config.json is read beside the server's model_path unless ``model_config`` is given."""
    fired = explanation.fired[0] if explanation.fired else None
    if model_config is None and server is not None:
        from .model_config import model_config_beside
        from .server_args import effective_args

        try:
            model_config = model_config_beside(server.host, effective_args(server).get("model_path"))
        except KitError:
            model_config = None
    arch = ((model_config or {}).get("architectures") or [None])[0]
    return WhyItFired(explanation.flag, explanation.version, fired, arch)


def _multimodal_site(site) -> bool:
    text = " ".join([site.rule or "", *(g.text for g in site.guards)]).lower()
    return "multimodal" in text or "vlm" in text


@dataclass
class WayOut:
    escape: Any  # kit.provenance.Escape or None
    refused: list  # kit.provenance.Refusal: what sglang refuses at startup
    version: str | None
    no_gpu: str = ""  # why there is nothing to turn back on (device = 'cpu'), or ""

    def to_text(self) -> str:
        out = []
        if self.no_gpu:
            out.append(f"This server has no GPU ({self.no_gpu}): there is no CUDA graph to keep, so nothing to "
                       "change." + (f" ({self.escape.option} skips every rule at {self.escape.where}.)"
                                    if self.escape is not None else ""))
        elif self.escape is not None:
            out.append(f"In {self.version} the way out is {self.escape.option} (the early return "
                       f"`if {self.escape.condition}` at {self.escape.where}).")
        else:
            out.append(f"sglang {self.version} has no flag that skips the rule that fired.")
        for r in self.refused:
            out.append(f"--language-only is not it: sglang {self.version} refuses it at startup ({r.where}: "
                       f"\"{r.message}\").")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.to_text()) + "</pre>"


def way_out(tree, explanation, snapshot=None, model_config=None) -> WayOut:
    """The flag that skips the rule that fired, and what sglang says to the fix people try first."""
    from .provenance import escapes, refusals
    from .server_args import cli_defaults

    found = escapes(tree, explanation)
    refused = []
    device = (snapshot or {}).get("device")
    no_gpu = f"device = {device!r}" if isinstance(device, str) and device.lower() == "cpu" else ""
    # the fix people try first, --language-only, is for a model that counts as a VLM
    vlm = any(_multimodal_site(s) for s in explanation.fired) or not explanation.fired
    if "language_only" in cli_defaults(tree) and vlm and not no_gpu:
        refused = [r for r in refusals(tree, snapshot or {}, {"language_only": True}, model_config)
                   if r.status == "fired"]
    return WayOut(found[0] if found else None, refused, tree.version, no_gpu)


# --------------------------------------------------------------------------- 04 fix and validate


@dataclass
class FixStep:
    title: str  # the finding it fixes
    finding: str  # its id
    changes: list  # kit.doctor.Change
    flags: list[str]  # the server's flags with this step and every earlier one applied
    sites: list[str] = field(default_factory=list)  # the sglang file:line behind the finding
    machine: list[str] = field(default_factory=list)  # machine changes so far (the lab stands in for them)

    @property
    def command(self) -> str:
        return "python -m sglang.launch_server " + shlex.join(self.flags)

    @property
    def label(self) -> str:
        """What the step changes: its flags, or the machine (which the lab stands in for)."""
        return _step_label(self)


def fix_plan(diagnosis, server) -> list[FixStep]:
    """One step per finding whose fix is a change of flags, in the doctor's order (largest first),
    each with the flags of every earlier step: the launch to try at that step."""
    from .server_args import server_flags

    flags = server_flags(server.argv)
    machine_fixes = _lab_machine_fixes(server)
    steps, machine = [], []
    for finding in diagnosis.findings:
        changes = [c for c in finding.changes if c.option]
        if not changes and finding.id in machine_fixes:
            # A change to the machine (BIOS, driver), not to the flags: the lab's scenario stands in for it.
            machine.append(finding.id)
            steps.append(FixStep(finding.title, finding.id, [], list(flags), list(finding.sites), list(machine)))
            continue
        if not changes:
            continue
        for change in changes:
            flags = change.apply(flags)
        steps.append(FixStep(finding.title, finding.id, changes, list(flags), list(finding.sites), list(machine)))
    return steps


def describe_plan(plan: list[FixStep], diagnosis=None) -> str:
    """The plan, one line per step; with no step, why: the doctor's findings that do not apply here."""
    if plan:
        return "\n".join(f"step {n}: {step.title}: {step.label}" for n, step in enumerate(plan, 1))
    idle = [f for f in getattr(diagnosis, "findings", []) or []
            if str(getattr(getattr(f, "estimate", None), "reason", "")).startswith("does not apply")]
    lines = ["no step: the doctor found no change of flags to try on this server"]
    lines += [f"  {f.title} ({f.id}): {f.estimate.reason}" for f in idle]
    return "\n".join(lines)


def _lab_machine_fixes(server) -> dict:
    """The machine fixes the lab's scenario can stand in for, by finding id ({} for a real server)."""
    if getattr(server, "kind", None) != "lab":
        return {}
    from .lab.throughput import SCENARIO_ENV, load_scenario

    scenario = load_scenario((server.env or {}).get(SCENARIO_ENV))
    return dict((scenario.params.get("machine") or {}).get("fixes") or {})


def _step_label(step: FixStep) -> str:
    if step.changes:
        return ", ".join(map(str, step.changes))
    return f"the machine changed for {step.finding} (the lab stands in for it)"


@dataclass
class StepResult:
    step: FixStep | None  # None: the launch as found
    run: Any  # kit.bench.BenchRun
    rate: float | None  # mean per-request decode tok/s
    vs_previous: Any = None  # kit.bench.Comparison of decode tok/s
    ttft_ms: float | None = None  # mean time to first token
    ttft_vs_previous: Any = None  # kit.bench.Comparison of time to first token


@dataclass
class Validation:
    target: str
    results: list[StepResult]
    baseline_tok_s: float | None
    ceiling_tok_s: float | None  # at the final accept length
    applied: bool
    notes: list[str] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)  # the doctor's: what else to check, what would decide it
    planned: int | None = None  # steps in the plan (0: the doctor found nothing to change)
    not_applicable: list[str] = field(default_factory=list)  # the doctor's findings that do not apply, with why

    @property
    def before(self) -> float | None:
        return self.results[0].rate if self.results else None

    @property
    def after(self) -> float | None:
        return self.results[-1].rate if self.results else None

    @property
    def symptom_gone(self) -> bool | None:
        if not self.applied or self.after is None or not self.baseline_tok_s:
            return None
        return self.after >= 0.9 * self.baseline_tok_s

    def conclusion(self) -> str:
        """What the runs show, and only that: each fix's effect on decode and on time to first token,
        and the part of the gap to the baseline they leave unexplained."""
        if self.planned == 0:
            return self._nothing_to_fix()
        if not self.applied:
            return ("Not applied: the fixes were printed, not run (set apply_fix = True to relaunch a real server). "
                    f"Before: {self.before:.1f} tok/s.")
        first = self.results[0]
        lines = [f"Before: {self.before:.1f} tok/s per request, time to first token {first.ttft_ms:.0f} ms "
                 f"(means of {first.run.totals['ok']} requests)."]
        for r in self.results[1:]:
            lines.append(f"+ {r.step.title} ({_step_label(r.step)}): {_effect(r)}.")
        if self.ceiling_tok_s:
            lines.append(f"After: {self.after:.1f} tok/s, {self.after / self.ceiling_tok_s:.0%} of the single-stream "
                         f"ceiling ({self.ceiling_tok_s:.1f} tok/s at this accept length).")
        if self.symptom_gone is not None:
            lines.append(f"The symptom is {'gone' if self.symptom_gone else 'still there'}: {self.after:.1f} tok/s "
                         f"against the baseline's {self.baseline_tok_s:g} "
                         f"({'at least' if self.symptom_gone else 'below'} 90% of it).")
        if self.symptom_gone is False:
            lines.append(f"The rest of the gap, {self.baseline_tok_s - self.after:.1f} tok/s, is unexplained: no fix "
                         "measured here closes it. What else to check, and what would decide it:")
            lines += [f"  - {q}" for q in self.open_questions or ["nothing the doctor could name: compare the "
                                                                  "baseline's launch and version by hand"]]
        return "\n".join(lines + self.notes)

    def _nothing_to_fix(self) -> str:
        first = self.results[0]
        lines = ["Nothing to fix: the doctor found no change of flags for this server, so no step was planned, "
                 "nothing was relaunched, and no improvement is claimed."]
        if self.not_applicable:
            lines.append("Its findings that do not apply here:")
            lines += [f"  - {x}" for x in self.not_applicable]
        lines.append(f"Measured as found: {self.before:.1f} tok/s per request, time to first token "
                     f"{first.ttft_ms:.0f} ms (means of {first.run.totals['ok']} requests, "
                     f"{first.run.totals.get('output_tokens', 0)} output tokens counted by the server).")
        if self.baseline_tok_s:
            lines.append(f"Against the baseline's {self.baseline_tok_s:g} tok/s: "
                         f"{'at least' if self.before >= 0.9 * self.baseline_tok_s else 'below'} 90% of it.")
        return "\n".join(lines + self.notes)

    def to_dict(self) -> dict:
        steps = []
        for r in self.results:
            c, t = r.vs_previous, r.ttft_vs_previous
            steps.append({"step": r.step.title if r.step else "as found", "finding": r.step.finding if r.step else None,
                          "changes": [str(x) for x in r.step.changes] if r.step else [],
                          "machine": list(r.step.machine) if r.step else [],
                          "sites": list(r.step.sites) if r.step else [], "rate_tok_s": r.rate, "ttft_ms": r.ttft_ms,
                          "run": str(r.run.path) if r.run is not None and getattr(r.run, "path", None) else None,
                          "vs_previous": c.to_dict() if c is not None else None,
                          "ttft_vs_previous": t.to_dict() if t is not None else None,
                          "effect": _effect(r) if c is not None else None})
        return {"target": self.target, "applied": self.applied, "before_tok_s": self.before,
                "after_tok_s": self.after, "baseline_tok_s": self.baseline_tok_s, "ceiling_tok_s": self.ceiling_tok_s,
                "symptom_gone": self.symptom_gone, "unexplained_tok_s": (self.baseline_tok_s - self.after)
                if self.symptom_gone is False else None, "open_questions": list(self.open_questions),
                "planned": self.planned, "not_applicable": list(self.not_applicable),
                "steps": steps, "conclusion": self.conclusion()}

    def save(self, path: str | os.PathLike) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return out

    def plot(self):
        from .display import steps_chart

        return steps_chart(self)

    def __repr__(self) -> str:
        return f"<Validation {self.target}: {self.before} -> {self.after} tok/s>"

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.conclusion()) + "</pre>"


def _effect(r: StepResult) -> str:
    """One step's measured effect, decode and time to first token, each with its interval."""
    c, t = r.vs_previous, r.ttft_vs_previous
    out = (f"decode {r.rate:.1f} tok/s, {c.diff:+.1f} tok/s ({c.rel_diff:+.0%}), {c.confidence:.0%} CI "
           f"[{c.ci_low:+.1f}, {c.ci_high:+.1f}]: {_word(c.verdict, 'faster', 'slower')}")
    if t is not None:
        out += (f"; time to first token {r.ttft_ms:.0f} ms, {t.diff:+.0f} ms ({t.rel_diff:+.0%}), CI "
                f"[{t.ci_low:+.0f}, {t.ci_high:+.0f}]: {_word(t.verdict, 'lower', 'higher')}")
    return out


def _word(verdict: str, better: str, worse: str) -> str:
    return {"improved": better, "regressed": worse}.get(verdict, "no significant change")


def validate(host, target: str, server, plan: list[FixStep], *, requests: int = 8, max_tokens: int = 128,
             apply_fix: bool = False, baseline_tok_s: float | None = None, progress: Any = "auto",
             say: Callable[[str], None] = print, diagnosis=None) -> Validation:
    """Bench the launch as found, then relaunch with each step and bench again, comparing each with
    the one before (bootstrap CI, decode tok/s and time to first token). The lab is relaunched with
    `Lab.restart`; a real server only when ``apply_fix`` is True (otherwise each step's command is
    printed and nothing is run). ``diagnosis`` (the doctor's) gives what else to check when the
    fixes leave a gap to the baseline."""
    from .bench import compare
    from .target import resolve_server

    questions = list(getattr(diagnosis, "open_questions", []) or [])
    idle = [f"{f.title} ({f.id}): {f.estimate.reason}" for f in getattr(diagnosis, "findings", []) or []
            if str(getattr(getattr(f, "estimate", None), "reason", "")).startswith("does not apply")]
    if not plan:  # nothing to relaunch: the launch as found, measured, is the whole result
        run = measure(host, server, requests=requests, max_tokens=max_tokens, progress=progress, label="as-found")
        say("the doctor planned no step: nothing to relaunch")
        return Validation(target, [StepResult(None, run, _mean(run.summary(), "decode_tok_s"),
                                              ttft_ms=_mean(run.summary(), "ttft_ms"))], baseline_tok_s,
                          None, False, open_questions=questions, planned=0, not_applicable=idle)
    lab = _lab_of(host, server)
    notes = []
    if lab is not None or apply_fix:
        # Every step starts from an empty prefix cache: a relaunch empties it, so a first run against a
        # cache warmed by earlier benchmarks would read a lower time to first token than any step can.
        notes += _flush_cache(server)
    first = measure(host, server, requests=requests, max_tokens=max_tokens, progress=progress, label="as-found")
    results = [StepResult(None, first, _mean(first.summary(), "decode_tok_s"), ttft_ms=_mean(first.summary(),
                                                                                          "ttft_ms"))]
    if lab is None:
        for step in plan:
            say(f"{step.title}:\n  {_prefix(server)}{shlex.join(step.flags)}")
        if not apply_fix:
            say("not applied: set apply_fix = True to relaunch this server with each step in turn")
            return Validation(target, results, baseline_tok_s, None, False, open_questions=questions,
                              planned=len(plan), not_applicable=idle)
    previous = first
    accept = first.totals.get("accept_length")
    for step in plan:
        say(f"relaunching with {_step_label(step)}")
        if lab is not None:
            lab.restart(flags=step.flags, machine=tuple(step.machine))
        else:
            notes += [n for n in [relaunch(host, server, step.flags).get("note")] if n]
        server = resolve_server(host, target, port=server.port)
        notes += _flush_cache(server)  # a fresh server's cache is empty; this says so rather than assumes it
        run = measure(host, server, requests=requests, max_tokens=max_tokens, progress=progress,
                      label=step.finding)
        summary = run.summary()
        results.append(StepResult(step, run, _mean(summary, "decode_tok_s"), compare(previous, run),
                                  _mean(summary, "ttft_ms"), compare(previous, run, metric="ttft_ms")))
        previous, accept = run, run.totals.get("accept_length") or accept
    ceiling = _ceiling(host, server, accept)
    return Validation(target, results, baseline_tok_s, ceiling, True, list(dict.fromkeys(notes)),
                      open_questions=questions, planned=len(plan), not_applicable=idle)


def _flush_cache(server, timeout: float = 30.0) -> list[str]:
    """POST /flush_cache (sglang's endpoint, entrypoints/http_server.py), so that every measured step
    starts with an empty prefix cache; a note when the server refused or could not be reached."""
    import urllib.request

    if not server.url:
        return [f"the prefix cache of pid {server.pid} was not flushed (no URL): times to first token may "
                "compare a warm cache with a cold one"]
    try:
        with urllib.request.urlopen(urllib.request.Request(server.url + "/flush_cache", method="POST"),
                                    timeout=timeout) as resp:
            resp.read()
        return []
    except OSError as exc:
        return [f"the prefix cache was not flushed before a run ({server.url}/flush_cache: {exc}): times to "
                "first token may compare a warm cache with a cold one"]


def _mean(summary, row: str) -> float | None:
    value = summary.loc[row, "mean"] if row in summary.index else None
    return None if value is None or value != value else float(value)


def _head(server) -> list[str]:
    """The server's argv up to its flags (``/root/ml-env/bin/python -m sglang.launch_server``)."""
    from .server_args import server_flags

    flags = server_flags(server.argv)
    return server.argv[:len(server.argv) - len(flags)] if flags else list(server.argv)


def _prefix(server) -> str:
    return shlex.join(_head(server)) + " "


def relaunch(host, server, flags: list[str], *, timeout: float = 900.0, stop_timeout: float = 60.0) -> dict:
    """Stop ``server`` and start it again with ``flags``, the way it ran (its interpreter, module, working
    directory, environment and log), then wait for /health. sglang drains the requests it holds on SIGTERM,
    and one it never finishes keeps it waiting: after ``stop_timeout`` s it is killed, and the answer's
    ``note`` says so. For a server the kit did not start: only when a person asked (``apply_fix``).
    Raises KitError, with the end of the log, when the old one cannot be stopped or the new one does not come up."""
    from ._remote import run_json

    args = {"pid": server.pid, "argv": [*_head(server), *flags], "cwd": server.cwd, "env": dict(server.env or {}),
            "log": server.log_path, "host": server.bind_host or "127.0.0.1", "port": server.port,
            "stop_timeout": stop_timeout, "timeout": timeout}
    result = run_json(host, "lab_agent", "relaunch", json.dumps(args), timeout=timeout + stop_timeout + 120,
                      what=f"relaunch pid {server.pid}")
    outcome, hint = result.get("outcome"), "fix what it names and relaunch by hand with the printed command"
    if outcome == "not-stopped":
        raise KitError(f"pid {server.pid} on {host.name} was still there {stop_timeout:g} s after SIGTERM and 10 s "
                       f"after SIGKILL (state {result.get('stat')}); nothing was started", hint="a process in state "
                       f"D waits on the kernel (a driver, a disk): `ps -o pid,stat,wchan -p {server.pid}` there")
    if outcome == "port-in-use":
        holder = result.get("holder") or {}
        raise KitError(f"port {server.port} on {host.name} is still taken after pid {server.pid} stopped "
                       f"(pid {holder.get('pid', '?')}: {shlex.join(holder.get('argv') or ['?'])}); nothing was "
                       "started", hint=f"stop what holds port {server.port}, then relaunch by hand")
    if outcome != "started":
        tail = "\n    ".join(result.get("log_tail") or ["(no log)"])
        raise KitError(f"the relaunched server on {host.name} did not come up ({outcome}); "
                       f"the end of its log:\n    {tail}", hint=hint)
    if result.get("stopped") == "killed":
        result["note"] = (f"pid {server.pid} had not exited {stop_timeout:g} s after SIGTERM and was killed"
                          + (f" (its log: {result['draining'].split('] ', 1)[-1]})" if result.get("draining") else ""))
    return result


def _lab_of(host, server):
    if server.kind != "lab":
        return None
    from .lab import Lab

    return Lab(host, directory=server.labels.get("lab_dir"))


def _ceiling(host, server, accept: float | None) -> float | None:
    from .doctor import from_server, roofline_of

    evidence = from_server(host, server)
    if accept:
        evidence.bench = {"tok_s": None, "accept_length": accept, "source": "the last run"}
    return roofline_of(evidence).ceiling_tok_s
