"""Step 04 of the guided investigation, as calls: relaunch with the doctor's fixes one at a time, measure
each against the launch before it (a bootstrap CI on decode tok/s and time to first token), measure the
changes the doctor predicts to change nothing (checks), and say what the runs show and nothing more.
``kit.investigation`` gives these names to the notebooks with the other steps'.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._paths import runs_dir, write_json
from .display import pre
from .errors import HostError

__all__ = ["FixStep", "StepResult", "Validation", "describe_plan", "fix_front", "fix_plan", "measure",
           "prediction_holds", "relaunch", "validate", "where_it_pays"]


def measure(host, server, *, requests: int = 8, max_tokens: int = 128, concurrency: int = 1,
            progress: Any = "auto", out: str | None = None, label: str | None = None, warmup: int = 1,
            seed: int = 0):
    """A benchmark of ``server`` (kit.bench.bench through its host: a forward when remote)."""
    from .bench import bench

    if not out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = str(runs_dir() / f"{label or 'run'}-{stamp}-{os.getpid()}-{server.port}.jsonl")
    return bench(host, port=server.port, requests=requests, max_tokens=max_tokens, concurrency=concurrency,
                 warmup=warmup, progress=progress, out=out, seed=seed)





@dataclass
class FixStep:
    title: str  # the finding it fixes
    finding: str  # its id
    changes: list  # kit.doctor.Change
    flags: list[str]  # the server's flags with this step and every earlier one applied
    sites: list[str] = field(default_factory=list)  # the sglang file:line behind the finding
    machine: list[str] = field(default_factory=list)  # machine changes so far (the lab stands in for them)
    predicted: str = ""  # a check, not a fix: the source says it changes nothing here, and why

    @property
    def command(self) -> str:
        return "python -m sglang.launch_server " + shlex.join(self.flags)

    @property
    def label(self) -> str:
        """What the step changes: its flags, or the machine (which the lab stands in for)."""
        return _step_label(self)


def fix_plan(diagnosis, server, *, checks: bool = True) -> list[FixStep]:
    """One step per finding whose fix is a change of flags, in the doctor's order (largest first),
    each with the flags of every earlier step: the launch to try at that step. With ``checks``, then one
    step per change the doctor predicts to change nothing (a finding's ``checks``, read from the source):
    measured to confirm the prediction, on top of every fix."""
    from .server_args import server_flags

    flags = server_flags(server.argv)
    machine_fixes = _lab_machine_fixes(server)
    steps, machine = [], []
    for finding in diagnosis.findings:
        changes = [c for c in finding.changes if c.option]
        if not changes and finding.id in machine_fixes and finding.advice:
            # A change to the machine (BIOS, driver), not to the flags: the lab's scenario stands in for it.
            machine.append(finding.id)
            steps.append(FixStep(finding.title, finding.id, [], list(flags), list(finding.sites), list(machine)))
            continue
        if not changes:
            continue
        for change in changes:
            flags = change.apply(flags)
        steps.append(FixStep(finding.title, finding.id, changes, list(flags), list(finding.sites), list(machine)))
    for finding in diagnosis.findings if checks else []:
        for change, why in getattr(finding, "checks", []) or []:
            flags = change.apply(flags)
            steps.append(FixStep(finding.title, finding.id, [change], list(flags), list(finding.sites),
                                 list(machine), predicted=f"no change: {why}"))
    return steps


def _idle(diagnosis) -> list[str]:
    """The doctor's findings that do not apply on this server or workload, each with why (its list apart,
    and any finding whose estimate says so)."""
    out = []
    for f in getattr(diagnosis, "findings", []) or []:
        if str(getattr(getattr(f, "estimate", None), "reason", "")).startswith("does not apply"):
            out.append(f"{f.title} ({f.id}): {f.estimate.reason}")
    for f in getattr(diagnosis, "not_applicable", []) or []:
        reason = str(getattr(getattr(f, "estimate", None), "reason", ""))
        out.append(f"{f.title} ({f.id}): " + (reason if reason.startswith("does not apply")
                                             else f"does not apply: {f.not_here}"))
    return out


def describe_plan(plan: list[FixStep], diagnosis=None) -> str:
    """The plan, one line per step; with no step, why: the doctor's findings that do not apply here."""
    if plan:
        return "\n".join(f"step {n}: {step.title}: {step.label}" + (f" (a check: predicted {step.predicted})"
                                                                   if step.predicted else "")
                         for n, step in enumerate(plan, 1))
    lines = ["no step: the doctor found no change of flags to try on this server"]
    lines += [f"  {x}" for x in _idle(diagnosis)]
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
    blocks: Any = None  # kit.bench.Interleaved: the blocks behind both comparisons (interleaved validation)


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
    unfixable: list[str] = field(default_factory=list)  # found, estimated, and nothing to change on this machine

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
                    f"Before: {_rate(self.before)}.")
        first = self.results[0]
        lines = [f"Before: {_rate(self.before)} per request, time to first token {_ms(first.ttft_ms)} "
                 f"(means of {first.run.totals['ok']} requests)."]
        blocks = [r.blocks for r in self.results if r.blocks is not None]
        if blocks:
            lines.append(f"Each step was measured against the launch before it in interleaved blocks (A, then AB BA "
                         f"...; {sum(len(b.blocks) for b in blocks)} blocks, "
                         f"{sum(b.relaunches for b in blocks)} relaunches, {sum(b.seconds for b in blocks):.0f} s): "
                         "the intervals are over the pairs of blocks, and a difference within the noise floor of "
                         "the launch against itself is no change.")
        for r in self.results[1:]:
            lines.append(f"+ {r.step.title} ({_step_label(r.step)}): {_effect(r)}.")
            if r.step.predicted:
                lines.append(f"  predicted {r.step.predicted.split(':', 1)[0]} ({r.step.predicted.split(': ', 1)[-1]}): "
                             + ("the measurement agrees, a validated negative: do not ship this change here."
                                if prediction_holds(r) else "the measurement disagrees: look again at the gate "
                                "chain (sgl-kit gates) and at what else changed"))
        if self.ceiling_tok_s and self.after is not None:
            lines.append(f"After: {self.after:.1f} tok/s, {self.after / self.ceiling_tok_s:.0%} of the single-stream "
                         f"ceiling ({self.ceiling_tok_s:.1f} tok/s at this accept length).")
        if self.symptom_gone is not None:
            lines.append(f"The symptom is {'gone' if self.symptom_gone else 'still there'}: {self.after:.1f} tok/s "
                         f"against the baseline's {self.baseline_tok_s:g} "
                         f"({'at least' if self.symptom_gone else 'below'} 90% of it).")
        if self.symptom_gone is False:
            lines.append(f"The rest of the gap, {self.baseline_tok_s - self.after:.1f} tok/s, is unexplained: no fix "
                         "measured here closes it. What else to check, and what would decide it:")
            from .doctor.result import brief_questions

            lines += [f"  - {q}" for q in brief_questions(self.open_questions) or [
                "nothing the doctor could name: compare the baseline's launch and version by hand"]]
        return "\n".join(lines + self.notes)

    def _nothing_to_fix(self) -> str:
        first = self.results[0]
        lines = ["Nothing to fix: the doctor found no change of flags for this server, so no step was planned, "
                 "nothing was relaunched, and no improvement is claimed."]
        if self.not_applicable:
            lines.append("Its findings that do not apply here:")
            lines += [f"  - {x}" for x in self.not_applicable]
        if self.unfixable:
            lines.append("Its findings with nothing to change on this machine (what each costs, and why no fix):")
            lines += [f"  - {x}" for x in self.unfixable]
        lines.append(f"Measured as found: {_rate(self.before)} per request, time to first token "
                     f"{_ms(first.ttft_ms)} (means of {first.run.totals['ok']} requests, "
                     f"{first.run.totals.get('output_tokens', 0)} output tokens counted by the server).")
        if self.baseline_tok_s and self.before is not None:
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
                          "predicted": r.step.predicted if r.step else "",
                          "prediction_holds": prediction_holds(r) if r.step and r.step.predicted else None,
                          "run": str(r.run.path) if r.run is not None and getattr(r.run, "path", None) else None,
                          "vs_previous": c.to_dict() if c is not None else None,
                          "ttft_vs_previous": t.to_dict() if t is not None else None,
                          "blocks": r.blocks.to_dict() if r.blocks is not None else None,
                          "effect": _effect(r) if c is not None else None})
        return {"target": self.target, "applied": self.applied, "before_tok_s": self.before,
                "after_tok_s": self.after, "baseline_tok_s": self.baseline_tok_s, "ceiling_tok_s": self.ceiling_tok_s,
                "symptom_gone": self.symptom_gone, "unexplained_tok_s": (self.baseline_tok_s - self.after)
                if self.symptom_gone is False else None, "open_questions": list(self.open_questions),
                "planned": self.planned, "not_applicable": list(self.not_applicable),
                "unfixable": list(self.unfixable),
                "steps": steps, "conclusion": self.conclusion()}

    def save(self, path: str | os.PathLike) -> Path:
        return write_json(path, self.to_dict())

    def plot(self):
        from .display import steps_chart

        return steps_chart(self)

    def __repr__(self) -> str:
        return f"<Validation {self.target}: {self.before} -> {self.after} tok/s>"

    def _repr_html_(self) -> str:
        return pre(self.conclusion())


def _rate(value: float | None) -> str:
    return f"{value:.1f} tok/s" if value is not None else "no decode rate (no request streamed its tokens over time)"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "not measured"


def prediction_holds(r: StepResult) -> bool:
    """A "no change" prediction holds when neither decode nor time to first token changed significantly."""
    return all(c is None or c.verdict not in ("improved", "regressed") for c in (r.vs_previous, r.ttft_vs_previous))


def _effect(r: StepResult) -> str:
    """One step's measured effect, decode and time to first token, each with its interval."""
    c, t = r.vs_previous, r.ttft_vs_previous
    if r.rate is None or c is None:
        out = f"decode: {_rate(r.rate)}"
    else:
        out = (f"decode {r.rate:.1f} tok/s, {c.diff:+.1f} tok/s ({c.rel_diff:+.0%}), {c.confidence:.0%} CI "
               f"[{c.ci_low:+.1f}, {c.ci_high:+.1f}]: {_word(c.verdict, 'faster', 'slower')}")
    if t is not None:
        out += (f"; time to first token {r.ttft_ms:.0f} ms, {t.diff:+.0f} ms ({t.rel_diff:+.0%}), CI "
                f"[{t.ci_low:+.0f}, {t.ci_high:+.0f}]: {_word(t.verdict, 'lower', 'higher')}")
    return out


def _word(verdict: str, better: str, worse: str) -> str:
    return {"improved": better, "regressed": worse}.get(verdict, verdict or "no significant change")


def validate(host, target: str, server, plan: list[FixStep], *, requests: int = 8, max_tokens: int = 128,
             apply_fix: bool = False, baseline_tok_s: float | None = None, progress: Any = "auto",
             say: Callable[[str], None] = print, diagnosis=None, interleave: bool = True, pairs: int = 3,
             max_pairs: int = 6, budget_s: float | None = None) -> Validation:
    """Measure each step of the plan against the launch before it, on decode tok/s and time to first token.

    With ``interleave`` (the default), each step is compared in interleaved blocks
    (kit.bench.interleaved): the launch before it and the step's launch take turns, relaunched between
    blocks (AB BA AB ...), ``pairs`` pairs at least and ``max_pairs`` at most (as the first pairs'
    noise asks, within ``budget_s`` seconds per step), each block a third of ``requests``; the interval
    is over the pairs, with an A/A noise floor. Without it: one run per launch, one after the other,
    and a bootstrap over their requests. The lab is relaunched with `Lab.restart`; a real server only
    when ``apply_fix`` is True (otherwise each step's command is printed and nothing is run).
    ``diagnosis`` (the doctor's) gives what else to check when the fixes leave a gap to the baseline."""
    from .bench import compare
    from .target import resolve_server

    questions = list(getattr(diagnosis, "open_questions", []) or [])
    idle = _idle(diagnosis)
    unfixable = [f"{f.title} ({f.id}): {f.estimate.text()}; {'; '.join(f.avoid) or 'no fix named'}"
                 for f in getattr(diagnosis, "findings", []) or []
                 if not f.changes and not f.advice and f.avoid
                 and not str(f.estimate.reason).startswith("does not apply")]
    if not plan:  # nothing to relaunch: the launch as found, measured, is the whole result
        run = measure(host, server, requests=requests, max_tokens=max_tokens, progress=progress, label="as-found")
        say("the doctor planned no step: nothing to relaunch")
        return Validation(target, [StepResult(None, run, _mean(run.summary(), "decode_tok_s"),
                                              ttft_ms=_mean(run.summary(), "ttft_ms"))], baseline_tok_s,
                          None, False, open_questions=questions, planned=0, not_applicable=idle,
                          unfixable=unfixable)
    lab = _lab_of(host, server)
    notes = []
    if interleave and (lab is not None or apply_fix):
        for step in plan:
            say(f"{step.title}:\n  {_prefix(server)}{shlex.join(step.flags)}")
        results, notes, server = _interleaved_steps(host, target, server, lab, plan, requests=requests,
                                                    max_tokens=max_tokens, pairs=pairs, max_pairs=max_pairs,
                                                    budget_s=budget_s, say=say)
        accept = next((r.run.totals.get("accept_length") for r in reversed(results)
                       if r.run.totals.get("accept_length")), None)
        return Validation(target, results, baseline_tok_s, _ceiling(host, server, accept), True,
                          list(dict.fromkeys(notes)), open_questions=questions, planned=len(plan),
                          not_applicable=idle)
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


def _interleaved_steps(host, target: str, server, lab, plan: list[FixStep], *, requests: int, max_tokens: int,
                       pairs: int, max_pairs: int, budget_s: float | None, say: Callable[[str], None]):
    """Each step against the launch before it, in interleaved blocks; the launch is changed only when the
    next block's arm differs from the one running. Returns (results, notes, the server as left)."""
    from .bench import Arm, interleaved
    from .server_args import server_flags
    from .target import resolve_server

    block = max(2, requests // 3)
    notes: list[str] = []
    state = {"server": server, "launch": (tuple(server_flags(server.argv)), ()), "fresh": True}

    def prepare(flags: list[str], machine: list[str]) -> Callable[[], None]:
        def go() -> None:
            if state["launch"] == (tuple(flags), tuple(machine)):
                return
            if lab is not None:
                lab.restart(flags=list(flags), machine=tuple(machine))
            else:
                notes.extend(n for n in [relaunch(host, state["server"], list(flags)).get("note")] if n)
            state["server"] = resolve_server(host, target, port=state["server"].port)
            state["launch"], state["fresh"] = (tuple(flags), tuple(machine)), True
        return go

    def measured(runs: dict, label: str):
        # Every block sends the same prompts to an emptied prefix cache: the same prompt lengths (so the same
        # prefill shapes) in both arms, and no block finds its prompts in a cache an earlier one warmed.
        if state["fresh"]:
            # A server's first requests of a prompt length pay for it (allocation, compilation): after a
            # (re)launch the block's own prompts run once, unmeasured, before the block measures them.
            notes.extend(_flush_cache(state["server"]))
            measure(host, state["server"], requests=block, max_tokens=max_tokens, progress=None,
                    label=f"{label}-warm", warmup=0)
            state["fresh"] = False
        notes.extend(_flush_cache(state["server"]))
        run = measure(host, state["server"], requests=block, max_tokens=max_tokens, progress=None, label=label,
                      warmup=0)
        runs[label] = run
        return run

    results: list[StepResult] = []
    before_flags, before_machine = list(server_flags(server.argv)), []
    for step in plan:
        say(f"{_step_label(step)}: against the launch before it, in interleaved blocks of {block} requests")
        runs: dict = {}
        tag = step.finding
        arm_a = Arm("the launch before", lambda label, r=runs, t=tag: measured(r, f"{t}-{label}"),
                    prepare(before_flags, before_machine))
        arm_b = Arm(_step_label(step), lambda label, r=runs, t=tag: measured(r, f"{t}-{label}"),
                    prepare(step.flags, step.machine))
        got = interleaved(arm_a, arm_b, pilot=pairs, max_pairs=max(pairs, max_pairs), budget_s=budget_s,
                          say=lambda text: say(f"  {text}"))
        side = {s: _merged([runs[k] for k in runs if k.split("-")[-1].startswith(s)]) for s in "AB"}
        if not results:
            results.append(StepResult(None, side["A"], got.decode.mean_a if got.decode else None,
                                      ttft_ms=got.ttft.mean_a if got.ttft else None))
        results.append(StepResult(step, side["B"], got.decode.mean_b if got.decode else None, got.decode,
                                  got.ttft.mean_b if got.ttft else None, got.ttft, blocks=got))
        notes.append(f"{_step_label(step)}: {len(got.blocks)} blocks, {got.relaunches} relaunch(es), "
                     f"{got.seconds:.0f} s; the machine: {got.machine()}")
        before_flags, before_machine = list(step.flags), list(step.machine)
    return results, notes, state["server"]


def _merged(runs: list):
    """One arm's blocks as one run (their requests together), for the per-request plots and totals."""
    from .bench import BenchRun

    first = runs[0]
    return BenchRun(first.config, first.url, [r for run in runs for r in run.results], first.started_at,
                    sum(run.duration_s or 0.0 for run in runs), path=first.path)


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
    Raises HostError, with the end of the log, when the old one cannot be stopped or the new one does not come up."""
    from ._remote import run_json

    args = {"pid": server.pid, "argv": [*_head(server), *flags], "cwd": server.cwd, "env": dict(server.env or {}),
            "log": server.log_path, "host": server.bind_host or "127.0.0.1", "port": server.port,
            "stop_timeout": stop_timeout, "timeout": timeout}
    result = run_json(host, "lab_agent", "relaunch", json.dumps(args), timeout=timeout + stop_timeout + 120,
                      what=f"relaunch pid {server.pid}")
    outcome, hint = result.get("outcome"), "fix what it names and relaunch by hand with the printed command"
    if outcome == "not-stopped":
        raise HostError(f"pid {server.pid} on {host.name} was still there {stop_timeout:g} s after SIGTERM and 10 s "
                        f"after SIGKILL (state {result.get('stat')}); nothing was started", host=host.name, hint="a process in state "
                        f"D waits on the kernel (a driver, a disk): `ps -o pid,stat,wchan -p {server.pid}` there")
    if outcome == "port-in-use":
        holder = result.get("holder") or {}
        raise HostError(f"port {server.port} on {host.name} is still taken after pid {server.pid} stopped "
                        f"(pid {holder.get('pid', '?')}: {shlex.join(holder.get('argv') or ['?'])}); nothing was "
                        "started", host=host.name, hint=f"stop what holds port {server.port}, then relaunch by hand")
    if outcome != "started":
        tail = "\n    ".join(result.get("log_tail") or ["(no log)"])
        raise HostError(f"the relaunched server on {host.name} did not come up ({outcome}); "
                        f"the end of its log:\n    {tail}", host=host.name, hint=hint)
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


def where_it_pays(host, target: str, server, *, launch: str = "nospec", requests: int = 8, max_tokens: int = 128,
                  progress: Any = "auto", say: Callable[[str], None] = print, max_pairs: int = 6) -> Validation | None:
    """The lab only: the doctor and the same plan on another of its launches (``launch``, e.g. the
    incident's without speculative decoding), where sglang's gate may let a refused fix pay. The doctor
    there predicts it from the source; the run measures it. None on a real server (said, not done)."""
    from .doctor import doctor

    lab = _lab_of(host, server)
    if lab is None:
        say(f"{target} is not the lab: run this comparison on a launch of yours where `sgl-kit gates prefill-graph "
            "TARGET --restored` finds no refusal, with sgl-kit bench before and after")
        return None
    from .lab.control import variants

    scenario = lab.status().scenario
    if launch not in variants(scenario=scenario or None):
        say(f"the lab's scenario {scenario or 'incident'!r} has no {launch!r} launch: nothing to compare")
        return None
    say(f"restarting the lab on its {launch!r} launch")
    lab.restart(variant=launch)
    server = _resolve(host, target, server.port)
    diagnosis = doctor(target, host=host, port=server.port)
    plan = fix_plan(diagnosis, server)
    say(describe_plan(plan, diagnosis))
    return validate(host, target, server, plan, requests=requests, max_tokens=max_tokens, progress=progress,
                    say=say, diagnosis=diagnosis, max_pairs=max_pairs)


def fix_front(host, target: str, server, plan: list[FixStep], *, concurrencies=(1, 4, 8), requests: int | None = None,
              max_tokens: int = 64, out_dir: str | os.PathLike | None = None, say: Callable[[str], None] = print):
    """The lab only: the launch as found and the launch with every fix of ``plan`` (not its checks), each swept
    across ``concurrencies`` (kit.bench.sweep), and the two fronts compared (kit.bench.compare_sweeps: per-request
    against total tok/s, time to first token against concurrency). The lab is left on the launch as found.
    None, said, on a real server or when the plan has no fix."""
    from .bench import compare_sweeps, sweep
    from .server_args import server_flags

    lab = _lab_of(host, server)
    fixes = [step for step in plan if not step.predicted]
    if lab is None or not fixes:
        say("no front drawn: " + ("the plan has no fix" if lab is not None else f"{target} is not the lab; sweep your "
            "launch before and after with `sgl-kit bench sweep URL --concurrency 1,4,8`"))
        return None
    found, fixed = list(server_flags(server.argv)), fixes[-1]
    folder = Path(out_dir) if out_dir else runs_dir() / f"front-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    sweeps = {}
    for name, flags, machine in (("with the fixes", fixed.flags, fixed.machine), ("as found", found, ())):
        say(f"sweeping the launch {name} across concurrency {', '.join(map(str, concurrencies))}")
        lab.restart(flags=list(flags), machine=tuple(machine))
        server = _resolve(host, target, server.port)
        sweeps[name] = sweep(host, concurrencies, port=server.port, out_dir=folder / name.replace(" ", "-"),
                             requests=requests, max_tokens=max_tokens, progress=None, label=name.replace(" ", "-"),
                             server_metrics_interval=0)
    return compare_sweeps(sweeps["as found"], sweeps["with the fixes"])


def _resolve(host, target: str, port):
    from .target import resolve_server

    return resolve_server(host, target, port=port)
