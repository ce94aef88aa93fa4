"""The guided investigation's steps, as calls: what notebooks 01-04 run (they hold prose and calls, no logic).

- 01 ``symptom``: bench the server, and set the rate against a baseline and the roofline;
- 02 ``baseline_launch``, ``compare_launch``, ``differences_that_matter``: what runs, against what ran;
- 03 ``rule_source``, ``dryrun_crosscheck``, ``way_out``: why SGLang switched it off, and the way out;
- 04 ``fix_plan``, ``validate``: relaunch with the fixes one at a time, re-bench, compare with a CI.

Every number a notebook's conclusion states comes from these objects, computed from the runs.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._paths import runs_dir
from ._text import short_path, wrap
from .display import pre
from .errors import EnvironmentMissing, KitError, LabError, NotGiven, UsageError
from .validation import (
    FixStep,
    StepResult,
    Validation,
    describe_plan,
    fix_front,
    fix_plan,
    measure,
    prediction_holds,
    relaunch,
    validate,
    where_it_pays,
)

__all__ = ["FixStep", "StepResult", "Symptom", "Validation", "WhatDiffers", "baseline_launch", "compare_launch",
           "describe_plan", "differences_that_matter", "dryrun_crosscheck", "evidence_lines", "fix_front", "fix_plan",
           "measure",
           "prediction_holds",
           "relaunch", "rule_source", "symptom", "validate", "way_out", "what_differs", "where_it_pays",
           "why_it_fired"]

_RESOLVED = Path(__file__).resolve().parent / "data" / "resolved"


# --------------------------------------------------------------------------- 01 the symptom


@dataclass
class Symptom:
    target: str
    rate: float | None  # median per-request decode tok/s
    ttft_ms: float | None
    accept_length: float | None
    requests: int
    baseline_tok_s: float | None
    roofline: Any  # kit.doctor.Roofline
    # The server's own number: the median `gen throughput` of its Decode batch lines of one request.
    log_rate: float | None = None
    log_accept: float | None = None
    log_lines: int = 0
    log_interval: int | None = None  # decode_log_interval: decode passes per line

    @property
    def gap(self) -> float | None:
        return self.baseline_tok_s - self.rate if self.baseline_tok_s and self.rate else None

    @property
    def slow(self) -> bool | None:
        """Below 90% of the baseline: the symptom is there."""
        return self.rate < 0.9 * self.baseline_tok_s if self.baseline_tok_s and self.rate else None

    def to_text(self) -> str:
        rate = f"{self.rate:.1f} tok/s per request (median of {self.requests})" if self.rate is not None else (
            f"no decode rate: none of its {self.requests} requests streamed its decode tokens over time (the run "
            "names each; a server that sends a whole answer at once has no per-token timing to read)")
        ttft = f", time to first token {self.ttft_ms:.0f} ms" if self.ttft_ms is not None else ""
        lines = [f"{self.target}, this benchmark: {rate}{ttft}"
                 + (f", accept length {self.accept_length:.2f}" if self.accept_length else "")]
        if self.rate is None:
            return "\n".join(lines + ([self._log_line()] if self.log_rate else []))
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
        if self.log_rate:
            lines.append(self._log_line())
        return "\n".join(lines)

    def _log_line(self) -> str:
        """The server's own rate beside the benchmark's, and why the two differ."""
        accept = f", accept length {self.log_accept:.2f}" if self.log_accept else ""
        every = f"{self.log_interval} " if self.log_interval else ""
        diff = self.log_rate - self.rate if self.rate else None
        versus = f", {diff:+.1f} tok/s ({diff / self.rate:+.0%}) from this benchmark's" if diff is not None else ""
        # sglang's scheduler: last_gen_throughput = num_generated_tokens / gap_latency, gap_latency the wall
        # time since the previous line (0.5.11: srt/observability/scheduler_metrics_mixin.py:506-508; the
        # same expression in 0.5.9 .. 0.5.23).
        return wrap(
            f"the server's own Decode batch lines say {self.log_rate:.1f} tok/s (median gen throughput of "
            f"{self.log_lines} line(s) with one request running{accept}){versus}. A reading of the log alone "
            "(runtime_diagnosis, doctor without a benchmark) uses that number. sglang divides the tokens of "
            f"every {every}decode passes by the wall time since its previous line, so a prefill or a pause "
            "between requests inside that span counts against it; this benchmark times each request from "
            "its first chunk to its last.", 96, "", "  ")

    def to_dict(self) -> dict:
        return {"target": self.target, "rate_tok_s": self.rate, "ttft_ms": self.ttft_ms,
                "accept_length": self.accept_length, "requests": self.requests, "baseline_tok_s": self.baseline_tok_s,
                "gap_tok_s": self.gap, "ceiling_tok_s": getattr(self.roofline, "ceiling_tok_s", None),
                "log_rate_tok_s": self.log_rate, "log_accept_length": self.log_accept, "log_lines": self.log_lines}

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return pre(self.to_text())


def symptom(host, server, run, *, baseline_tok_s: float | None = None, target: str | None = None) -> Symptom:
    """The measured rate, set against the baseline and the roofline of this server's model and GPUs."""
    from .doctor import from_server, roofline_of

    summary = run.summary()
    evidence = from_server(host, server)
    evidence.bench = bench_numbers(run)
    rate = _median(summary, "decode_tok_s")
    log = evidence.decode or {}
    one_request = bool(log.get("single_stream"))  # a rate of a batch is not one user's
    interval = (evidence.args or {}).get("decode_log_interval")
    return Symptom(target or host.name, rate, _median(summary, "ttft_ms"), run.totals.get("accept_length"),
                   run.totals["ok"], baseline_tok_s, roofline_of(evidence),
                   log_rate=log.get("gen_throughput") if one_request else None,
                   log_accept=log.get("accept_len") if one_request else None,
                   log_lines=int(log.get("lines") or 0) if one_request else 0,
                   log_interval=int(interval) if isinstance(interval, int) else None)


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
    from .launch_file import LaunchOptions, read_launch

    if spec == "defaults":
        if server is None:
            raise UsageError("the baseline 'defaults' needs the server (its model, host and port)",
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
            raise LabError(f"no record of the lab's {spec[4:]!r} launch for sglang {tree.version}",
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
            why = (f"sglang set it: {short_path(fired[0].where)} {fired[0].rule or fired[0].function}"
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
        raise NotGiven(f"no site assigning {explanation.flag} fired in sglang {explanation.version}",
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
    """The source lines a site's evidence cites (``sglang/srt/configs/model_config.py:1384``), as snippets,
    each marked with the whole claim it backs (the reference itself left out: the snippet names the file)."""
    import re

    cite = re.compile(r"\bsglang/([\w/.]+\.py):(\d+)\b")
    out = []
    for text in site.evidence:
        claim = re.sub(r"\s*\(\s*sglang/[\w/.]+\.py:\d+\s*\)", "", text).strip() or text
        for path, line in cite.findall(text):
            n = int(line)
            snippet = tree.read(path, max(1, n - around), n + around)
            snippet.mark(n, claim)
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
        return pre(self.to_text())


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
    static = [short_path(s.where) for s in explanation.fired
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
            sites = [f"{short_path(w['file'])}:{w['line']}" for w in data["writes"] if w["field"] == flag]
            return CrossCheck("committed snapshot", f"{record.relative_to(record.parents[2])}, made by "
                              f"{data['made_by'][:80]}", sites, static)
    raise EnvironmentMissing(f"no dry-run environment for sglang {version} here, and no committed snapshot of this launch",
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
        out = [f"{head} at {short_path(s.where)}: `{guard}` holds for this server."]
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
    chain: Any = None  # kit.provenance.gates.GateChain of the graph turned back on (does it replay?)

    def to_text(self) -> str:
        out = []
        if self.no_gpu:
            out.append(f"This server has no GPU ({self.no_gpu}): there is no CUDA graph to keep, so nothing to "
                       "change." + (f" ({self.escape.option} skips every rule at {self.escape.where}.)"
                                    if self.escape is not None else ""))
        elif self.escape is not None:
            out.append(f"In {self.version} the way out is {self.escape.option} (the early return "
                       f"`if {self.escape.condition}` at {self.escape.where}), which skips every rule after it, "
                       "those that protect correctness included.")
            block = self.chain.blocking if self.chain is not None else None
            if block is not None:
                out.append(f"But turned back on, the graph would not run for this launch: {block.function} refuses "
                           f"{self.chain.batch} at {block.where} (`{block.text}`). The flag would capture a graph "
                           "that never replays: it buys nothing here (04_fix_and_validate measures it).")
            elif self.chain is not None and self.chain.read:
                out.append("Turned back on, no check of its gate refuses this launch's text requests: "
                           + self.chain.sentence() + ".")
        else:
            out.append(f"sglang {self.version} has no flag that skips the rule that fired.")
        for r in self.refused:
            out.append(f"--language-only is not it: sglang {self.version} refuses it at startup ({r.where}: "
                       f"\"{r.message}\").")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return pre(self.to_text())


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
    chain = None
    if found and not no_gpu:
        from .doctor.fast_paths import RESTORE
        from .provenance.gates import gate_chain

        values = dict(getattr(snapshot, "fields", snapshot) or {})
        field_, on = next(((f, v) for f, v in RESTORE["prefill-graph"] if f in values), (None, None))
        if field_ is not None:
            values[field_] = on
            try:
                chain = gate_chain(tree, "prefill-graph", values, model_config, probes=_CUDA)
            except KitError:
                chain = None
    return WayOut(found[0] if found else None, refused, tree.version, no_gpu, chain)


_CUDA = {"is_cuda": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_xpu": False}
