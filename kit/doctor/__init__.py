"""Rules over the evidence: the throughput a server leaves on the table, with evidence and the fix.

    import kit.doctor
    d = kit.doctor.doctor("lab", baseline="old.cmd")        # a live target
    d = kit.doctor.doctor(log="server.log", nvidia_smi="smi.txt", topo="topo.txt",
                          model_config="config.json")       # files a colleague sent
    d.findings[0].fix, d.roofline.ceiling_tok_s, d.to_dict()

- ``evidence.py``: gathering (a live server, or files); ``case.py``: the questions rules ask;
- ``rulebase.py``: what a rule is; ``rules.py``, ``rules_hw.py``: the rules, each a small declarative object;
- ``roofline.py``: the single-stream decode ceiling from config.json and the GPUs' bandwidth;
- ``result.py``: Finding and Diagnosis (text, HTML, JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kit._verbs import make_callable
from kit.errors import KitError, UsageError

from . import (  # noqa: F401  (they register their rules)
    rules,
    rules_capacity,
    rules_hw,
    rules_known,
    rules_metrics,
    rules_resolved,
    rules_runtime,
    rules_workload,
)
from .answer import answer_of, load_seen
from .case import Case
from .evidence import Evidence, from_files, from_server, lab_stand_in, launch_word
from .facts import FACTS, UndeclaredFact, missing, strict
from .reconcile import reconcile
from .result import Change, Diagnosis, Finding, Impact
from .roofline import ModelSize, Roofline, model_size, roofline
from .rulebase import GAPS, RULES, Rule, in_group, ordered, version_in
from .rules_metrics import add_runtime, add_runtime_page, add_runtime_pages
from .rules_trace import add_trace  # registers its rules; a trace summary as evidence

__all__ = ["Case", "Change", "Diagnosis", "Evidence", "Finding", "Impact", "ModelSize", "RULES", "Roofline", "Rule",
           "EVIDENCE_FILES", "add_runtime", "add_runtime_page", "add_runtime_pages", "add_trace", "lab_stand_in", "diagnose", "doctor", "gather", "runtime_diagnosis", "from_files", "from_server", "model_size", "roofline", "roofline_of"]


def doctor(target: str | None = None, *, host=None, server=None, pid: int | None = None, port: int | None = None,
           baseline: str | None = None, bench: str | None = None, trace=None,
           progress: Callable[[str], None] | None = None, prometheus=None, since: str | float = "1h",
           selector: str | None = None, prometheus_timeout: float = 10.0, **files) -> Diagnosis:
    """Diagnose a live target (``lab``, ``local``, an SSH target; ``host`` reuses a connection already
    open to it, ``server`` a server already found there), or the files given as keywords (log,
    server_info, command, nvidia_smi, topo, model_config, environ, paste, sglang, package_dir, gpu).

    ``prometheus`` (a URL; credentials from the environment) adds what the server did over ``since``;
    a live server with ``--enable-metrics`` is read from its own ``/metrics`` without one
    (kit.doctor.rules_metrics). ``trace`` (paths of torch-profiler traces, ``sgl-kit profile``) adds
    their summary. ``kit.doctor(...)`` is this function. The CLI's ``sgl-kit doctor`` calls it."""
    return diagnose(gather(target, host=host, server=server, pid=pid, port=port, baseline=baseline, bench=bench,
                           trace=trace, progress=progress, prometheus=prometheus, since=since, selector=selector,
                           prometheus_timeout=prometheus_timeout, **files))


def gather(target: str | None = None, *, host=None, server=None, pid: int | None = None, port: int | None = None,
           baseline: str | None = None, bench: str | None = None, trace=None,
           progress: Callable[[str], None] | None = None, prometheus=None, since: str | float = "1h",
           selector: str | None = None, prometheus_timeout: float = 10.0, **files) -> Evidence:
    """The evidence :func:`doctor` reads: the server at ``target`` (its arguments, command, environment,
    log, GPUs, its own sglang source) and what it did, or the files given; with ``trace``, its steps."""
    runtime = {"prometheus": prometheus, "since": since, "selector": selector, "timeout": prometheus_timeout}
    note = progress or (lambda text: None)
    if target is None:
        if host is not None or server is not None or pid or port:
            raise UsageError("a host, server, pid or port goes with a target: without one the doctor reads files",
                             hint="give the target too (e.g. doctor(\"lab\", port=30000)), or only files")
        if not any(files.get(name) for name in EVIDENCE_FILES) and not prometheus and not trace and not bench:
            raise UsageError("nothing to examine: no target and no evidence files",
                             hint="give a target (\"lab\", \"local\", an SSH target) or files: "
                                  f"{', '.join(EVIDENCE_FILES)}, or a bench run")
        evidence = from_files(baseline=baseline, bench=bench, progress=progress, **files)
        if not any(files.get(name) for name in EVIDENCE_FILES) and not prometheus and not trace \
                and evidence.bench is None:
            said = next((p for p in evidence.problems if str(bench) in p), f"--bench {bench}: not read")
            raise UsageError(f"nothing to examine: the bench run was the only evidence, and it could not be read "
                             f"({said})", hint="give a run file `sgl-kit bench ... -o RUN` wrote, or other evidence")
        if prometheus:
            note("reading what the server did (Prometheus)")
            add_runtime(evidence, **runtime)
        runtime_from_bench(evidence)
    else:
        if any(value for value in files.values()):
            raise UsageError(f"evidence files go without a target: with {target!r} the kit reads the server itself "
                             f"(given: {', '.join(sorted(k for k, v in files.items() if v))})",
                             hint="leave out the target to read the files, or leave out the files")
        from kit.target import connect, resolve_server

        opened = connect(target) if host is None else None
        try:
            on = host or opened
            if server is None:  # log head/tail, /server_info: one trip
                server = resolve_server(on, target, pid=pid, port=port, prefetch=True)
            evidence = from_server(on, server, baseline=baseline, bench=bench, progress=progress)
            evidence.target = target if target == on.name else f"{target} (pid {server.pid} on {on.name})"
            note("reading what the server did (Prometheus or its /metrics)")
            add_runtime(evidence, server=server, **runtime)
            runtime_from_bench(evidence)
        finally:
            if opened is not None:
                opened.close()
    if trace:
        note("summarizing the traces")
        add_trace(evidence, [trace] if isinstance(trace, (str, bytes)) or hasattr(trace, "__fspath__") else trace)
    return evidence


def runtime_from_bench(evidence: Evidence) -> None:
    """What the server did while the benchmark (``--bench``) ran, from the ``/metrics`` pages the run kept:
    it replaces one live scrape (counters since the process started), never a Prometheus span the user
    asked for. A run that could not read the server's page says why, as a problem."""
    bench = evidence.bench or {}
    pages, kind = bench.get("pages") or [], ((evidence.runtime or {}).get("span") or {}).get("kind")
    if len(pages) >= 2 and kind in (None, "page"):
        add_runtime_pages(evidence, pages, source=f"{(bench.get('url') or 'the server').rstrip('/')}/metrics "
                                                   f"kept by the bench run {bench['source']}")
    elif bench.get("pages_problem") and evidence.runtime is None:
        evidence.problems.append(f"the bench run {bench['source']} has no server metrics: {bench['pages_problem']}")


# The keywords of doctor() and gather() that name evidence files (the CLI's --log, --server-info, ...).
EVIDENCE_FILES = ("log", "server_info", "command", "nvidia_smi", "topo", "model_config", "environ", "paste")


def runtime_diagnosis(host, server, *, prometheus=None, since: str | float = "1h", selector: str | None = None,
                      progress: Callable[[str], None] | None = None) -> Diagnosis:
    """Only the rules over what the server did (kit.doctor.rules_metrics): from ``prometheus`` (a URL,
    credentials from the environment) over ``since``, else the server's own ``/metrics``."""
    evidence = from_server(host, server, progress=progress)
    add_runtime(evidence, server=server, prometheus=prometheus, since=since, selector=selector)
    if evidence.runtime is None and not prometheus:
        evidence.problems.append("nothing was read of what the server did: no Prometheus URL was given, and the "
                                 "server runs without --enable-metrics (sglang serves /metrics only with it)")
    return diagnose(evidence, only=in_group("metrics"))


def diagnose(evidence: Evidence, only: list[Rule] | None = None, *, context_tokens: int = 1024) -> Diagnosis:
    """Run every rule (or ``only`` these) over the evidence, in the order their ``after`` declares
    (kit.doctor.rulebase.ordered). A rule whose needed facts (``Rule.reads``) are missing is not run:
    it is listed as not checked, with how to get them. A rule that fails leaves a problem naming it and
    the others run (with ``SGL_KIT_STRICT_RULES=1`` it raises, as it does when a rule reads a fact it did
    not declare). Findings are ordered measured, modelled, then not estimated, then by priority and id."""

    case = Case(evidence)
    case.roofline = _roofline(case, context_tokens)
    findings, skipped, checked = [], [], []
    problems = list(evidence.problems)
    if evidence.version is None and not (evidence.launch is not None and evidence.explicit is None):
        problems.append("the sglang version is not known: every rule ran, version ranges unchecked "
                        "(give --sglang VERSION)")
    chosen = ordered(list(only or RULES))
    ran, lacking, context, not_applicable = [], [], [], []
    watch = strict()
    for r in chosen:
        if evidence.version is not None and not version_in(evidence.version, r.versions):
            runs = "is assumed to run" if evidence.version_basis in ("inferred", "assumed") else "runs"
            skipped.append((r.id, f"written for sglang {r.versions}; this server {runs} {evidence.version}"))
            continue
        needs = missing(evidence, r.reads)
        if needs:
            skipped.append((r.id, "not checked: needs " + "; and ".join(
                " or ".join(f"{f.what} ({f.how})" for f in alts) for alts in needs)))
            lacking.append((r, {f.name for alts in needs for f in alts}))
            continue
        ran.append(r)
        done, expanded = _guarded(r, r.id, lambda r=r: r.expand(case) if r.expand is not None else [r], case, problems,
                                  watch)
        if not done:
            continue
        if r.expand is not None:
            checked.append(r.id)
        for one in expanded:
            case.refused = []
            done, found = _guarded(r, one.id, lambda one=one: _run(one, case), case, problems, watch)
            if not done:
                continue
            if r.expand is None:
                checked.append(r.id)
            if found is None:
                continue
            lines, estimate, changes, advice, avoid, covers, checks, sites, dropped, risk, not_here = found
            kept_checks = checks
            if one.gpu_only and case.no_gpu:
                estimate, changes, advice, avoid = _does_not_apply(case, estimate)
                kept_checks, risk = [], ""
                not_here = f"{case.no_gpu}: the rule is about GPUs"
            finding = Finding(one.id, one.title, estimate, lines, sites, changes, advice, avoid, one.versions,
                              one.affects, dropped, kept_checks, risk, not_here or "")
            (context if one.context else not_applicable if not_here else findings).append(finding)
            # the fields its changes set, those it names, and those of the changes it predicts buy nothing: a
            # known issue about one of them is said next to this finding, its workaround not offered again (also
            # when the finding does not apply here: a GPU setting's workaround is no fix on a CPU server)
            case.covered |= _fields_of(case, changes) | set(covers) | _fields_of(case, [c for c, _ in kept_checks])
            if not not_here:
                case.found.append(one.id)
    _within_the_room(case, findings)
    priority = {r.id: r.priority for r in chosen}
    # at the same estimate, what the case's own evidence shows before a known issue matched from the database
    findings.sort(key=lambda f: (f.estimate.rank, f.id == "known-issue", -priority.get(f.id, 0), f.id))
    findings, set_aside = reconcile(findings, case)
    diagnosis = Diagnosis(evidence.target, evidence.version, findings, evidence.hardware, case.roofline, problems,
                          skipped, checked, dict(evidence.sources), evidence.command,
                          _open_questions(case, findings) + case.questions,
                          unanswered=_unanswered(case, ran, lacking))
    diagnosis.set_aside = set_aside
    diagnosis.context = context
    diagnosis.not_applicable = not_applicable
    diagnosis.load_seen = load_seen(case)
    diagnosis.answer = answer_of(case, diagnosis.findings, not_applicable, checked,
                                 diagnosis.own_questions + diagnosis.unanswered,
                                 tuple(note.split(" ", 1)[0] for note in set_aside))
    from .fixcheck import check_fixed_launch

    diagnosis.fix_check = check_fixed_launch(case, diagnosis.findings, diagnosis.fixed_command)
    return diagnosis


def _run(r: Rule, case: Case):
    """One rule over the case: None when it does not fire, else what its finding is made of."""
    lines = r.when(case)
    if not lines:
        return None
    estimate = r.impact(case)
    changes, advice, avoid = r.fix(case)
    covers = r.covers(case)
    checks = r.checks(case)
    sites, _ = _cited(case, r.sites(case), covers)
    return (lines, estimate, changes, advice, avoid, covers, checks, sites, list(dict.fromkeys(case.refused)),
            r.risk(case), r.applies(case))


def _guarded(r: Rule, name: str, call, case: Case, problems: list[str], watch: bool):
    """``call()`` for rule ``r`` (reported as ``name``): its reads checked against ``r``'s declarations in strict
    mode, and any error a problem line, never the end of the diagnosis (strict mode re-raises). (done, value)."""
    try:
        with case.watching() if watch else _nothing() as seen:
            value = call()
        if seen is not None:
            _check_declared(r, seen)
    except KitError as err:
        problems.append(f"rule {name} could not finish: {err.message}")
        return False, None
    except Exception as err:  # noqa: BLE001  (one rule's bug never aborts the diagnosis)
        if watch:
            raise
        problems.append(f"rule {name} failed: {type(err).__name__}: {err}; the other rules ran")
        return False, None
    return True, value


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _check_declared(r: Rule, seen: set[str]) -> None:
    undeclared = sorted(f for f in seen - r.declared if f in FACTS)
    if undeclared:
        raise UndeclaredFact(f"rule {r.id} read {', '.join(undeclared)} without declaring it (Rule.reads: needed, "
                             "Rule.uses: read when present)")


def _unanswered(case: Case, ran: list[Rule], lacking: list[tuple[Rule, set[str]]]) -> list[str]:
    """The questions the rules could not ask, generated from their declarations: for each missing fact,
    the rules not checked without it and those that ran saying less, and how to get it; then the
    questions about evidence present in part (kit.doctor.rulebase.GAPS)."""
    out = []
    for fact in FACTS.values():
        if not fact.ask or fact.present(case.ev) or (fact.given_by and not FACTS[fact.given_by].present(case.ev)):
            continue
        needing = [r.id for r, absent in lacking if fact.name in absent]
        using = [r.id for r in ran if fact.name in r.declared]
        if not needing and not using:
            continue
        said = [f"not checked without it: {_ids(needing)}"] if needing else []
        said += [f"read when present by {_ids(using)}"] if using else []
        out.append(f"{fact.what}: not in the evidence; {'; '.join(said)}; {fact.how}")
    for ask in GAPS:
        out += ask(case)
    return out


def _ids(ids: list[str]) -> str:
    return ", ".join(ids)


def _cited(case: Case, sites: list[str], fields) -> tuple[list[str], list[str]]:
    """The sites a finding may cite as the cause, and those dropped with why (kit.doctor.case.Case.cited):
    a line none of whose paths runs for this launch, or one that writes another value, is not the cause."""
    kept, dropped = [], []
    for where in dict.fromkeys(sites):
        ok, why = case.cited(where, tuple(sorted(fields)))
        if ok:
            kept.append(where)
        else:
            dropped.append(f"{where}: {why}")
    return kept, dropped


def _does_not_apply(case: Case, estimate: Impact):
    """A GPU-only rule (``Rule.gpu_only``) on a server with no GPU: what it saw stays, nothing is prescribed."""
    reason = (f"does not apply: {case.no_gpu}, so there are no CUDA graphs or GPU attention kernels to "
              "turn on; this is how sglang runs on a CPU")
    return (Impact(None, "not estimated", reason, estimate.metric), [],
            [f"nothing to change: the rule is about GPUs and {case.no_gpu}"], [])


def _open_questions(case: Case, findings: list[Finding]) -> list[str]:
    """What else to check about the gap in decode tok/s, each with the evidence that would decide it:
    findings whose fix is not a flag and that slow a part of serving seen in decode tok/s (a cap on
    queued requests does not bear on one stream), and evidence this case lacks that a rule would read."""
    from .result import PARTS

    ev, out = case.ev, []
    for f in findings:
        bears = any(PARTS.get(part) == "decode tok/s" for part in f.affects)
        applies = not (case.no_gpu and any(r.gpu_only for r in RULES if r.id == f.id))
        if bears and applies and f.advice and not any(c.option for c in f.changes) \
                and f.id != "differs-from-baseline":
            out.append(f"{f.title} ({f.id}): {f.advice[0]}")
    hw = ev.hardware
    from kit.hardware_caps import link_note

    model = link_note(hw) if case.tp > 1 and (getattr(hw, "p2p", None) is None
                                             or getattr(hw, "topology", None) is None) else None
    if case.tp > 1 and getattr(hw, "p2p", None) is None:
        out.append("peer-to-peer access between the tensor-parallel GPUs was not read: `nvidia-smi topo -p2p r` on "
                   "the box (or --topo FILE) decides whether sglang's custom all-reduce runs (without P2P it turns "
                   "itself off at startup, and its log says so) or NCCL all-reduces over PCIe"
                   + (f"; what the GPU model says: {model}" if model else ""))
    p2p = getattr(hw, "p2p", None)
    if case.unknown("tp_size") and p2p is not None and len(p2p.gpus) > 1 \
            and not any(p2p.supported(a, b) for a in p2p.gpus for b in p2p.gpus if a != b):
        out.append(f"the tensor-parallel size is not known ({case.unknown('tp_size')}): if the server splits the model "
                   f"over these GPUs (tp > 1), they have no peer access ({p2p.basis}), so sglang's custom all-reduce "
                   "cannot run and every layer's all-reduce goes through host memory; the whole server_args line or "
                   "the launch command tells tp_size")
    if case.tp > 1 and getattr(hw, "topology", None) is None:
        out.append("the GPUs' links were not read: `nvidia-smi topo -m` shows whether the TP ranks cross the CPU "
                   "(PHB/NODE/SYS)" + (f"; what the GPU model says: {model}" if model and getattr(hw, "p2p", None)
                                       is not None else ""))
    if ev.baseline is not None:
        out.append(f"the baseline's sglang version: `sgl-kit upgrade-diff --from {ev.version or 'THIS'} --to "
                   "BASELINE_VERSION -- <flags>` resolves this launch with both releases and lists every setting "
                   "that differs, with the site that set it")
    roof = case.roofline
    if roof is not None and roof.disagree:
        out.append("the roofline's inputs disagree: " + roof.disagree)
    if case.speculative and case.accept_length[0] is None:
        out.append("the accept length: the server log's `Decode batch` lines (`accept len`) or a benchmark "
                   "(sgl-kit bench) tell it; the speculative rules and the roofline need it")
    return out


def _within_the_room(case: Case, findings: list[Finding]) -> None:
    """Estimates of decode tok/s never sum above what the roofline and the measured rate leave: the
    room is 1 - measured / ceiling. Estimates bounded by this launch's ceiling are scaled to fit it;
    findings not estimated are told the room, the most that is left to find."""
    roof = case.roofline
    measured, where = case.measured_tok_s
    if roof is None or not roof.ceiling_tok_s or not measured:
        return
    room = max(0.0, 1 - measured / roof.ceiling_tok_s)
    told = (f"the room under the roofline is {room:.0%} (measured {measured:.1f} tok/s from {where}, against a "
            f"ceiling of {roof.ceiling_tok_s:.1f})")
    bounded = [f for f in findings if f.estimate.metric == "decode tok/s" and f.estimate.bounded
               and f.estimate.share]
    total = sum(f.estimate.share for f in bounded)
    for f in bounded:
        if total > room:
            e = f.estimate
            f.estimate = replace(e, share=e.share * room / total,
                                 reason=e.reason + f"; scaled by {room / total:.2f} so the estimates fit {told}")
    for f in findings:
        if f.estimate.share is None and f.estimate.metric == "decode tok/s":
            f.estimate = replace(f.estimate, reason=f.estimate.reason + f"; at most: {told}")


def roofline_of(evidence: Evidence, context_tokens: int = 1024) -> Roofline:
    """The decode roofline for this evidence: its model, GPUs, tp and (when measured) accept length."""
    return _roofline(Case(evidence), context_tokens)


def _roofline(case: Case, context_tokens: int):
    ev = case.ev
    profile = case.gpu_profile()
    gpu = profile if profile is not None else getattr(ev.hardware, "gpu_name", None)
    accept, accept_where = case.accept_length
    measured, _ = case.measured_tok_s
    notes = []
    speculative = case.speculative
    if not case.has("speculative_algorithm") and accept is not None and ev.decode and ev.decode.get("accept_len"):
        # No arguments say; sglang prints `accept len` only with speculative decoding on
        # (0.5.11 srt/observability/scheduler_metrics_mixin.py:524-547).
        speculative = True
        notes.append(f"speculative decoding runs: the Decode batch lines carry `accept len` ({accept_where}), which "
                     "sglang prints only then")
    steps = int(case.value("speculative_num_steps") or 0) if speculative else 0
    if speculative and not steps:
        steps = _launch_int(ev, "--speculative-num-steps")
        if notes:
            notes[-1] += (f"; its steps, {steps}, from the launch command's --speculative-num-steps, read without "
                          "sglang's flag table" if steps else "; nor do they tell its steps, counted as 1")
        steps = steps or 1  # not known: at least one draft per round
    if case.unknown("speculative_algorithm") and not speculative:
        steps = None  # not known whether it runs: never "no speculative decoding"
    tp = None if case.unknown("tp_size") and not case.value("tp_size") else case.tp
    if not case.has("tp_size") and not case.unknown("tp_size"):  # no arguments at all: never 1 by default
        tp = _launch_int(ev, "--tp", "--tp-size", "--tensor-parallel-size")
        if tp is not None:
            notes.append(f"tp {tp} from the launch command's --tp/--tp-size, read without sglang's flag table")
    roof = roofline(ev.model_config, gpu, tp=tp, accept_length=accept if steps else 1.0,
                    context_tokens=context_tokens, measured_tok_s=measured, speculative_steps=steps,
                    accept_source=accept_where)
    roof.assumptions[:0] = notes
    return roof


def _launch_int(ev: Evidence, *options: str) -> int | None:
    """A positive integer flag of the launch command, read by its shape (no flag table at hand)."""
    word = launch_word(ev, *options)
    return int(word) if word and word.isdigit() and int(word) > 0 else None


def _fields_of(case: Case, changes: list[Change]) -> set[str]:
    flags = case.flags
    out = set()
    for c in changes:
        spec = next((s for s in flags if s.name == c.option), None) if flags is not None and c.option else None
        if spec is not None:
            out.add(spec.field)
    return out


make_callable(__name__, "doctor")  # kit.doctor(...) is doctor(...)
