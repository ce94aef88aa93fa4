"""``sgl-kit doctor [TARGET] [evidence files] [--baseline FILE]``: the throughput left on the table."""

from __future__ import annotations

import sys

from kit.errors import SourceError, UsageError

from .common import (
    check_since,
    common_options,
    console,
    emit_json,
    local_file,
    prometheus_options,
    server_options,
)

__all__ = ["register"]



def register(sub) -> None:
    p = sub.add_parser(
        "doctor", help="find the throughput a server leaves on the table, with evidence and the fix",
        usage="sgl-kit doctor [TARGET] [--log FILE] [--server-info FILE] [--command FILE] [--nvidia-smi FILE] "
              "[--topo FILE] [--model-config FILE] [--environ FILE] [--paste FILE] [--sglang VER] [--baseline FILE] [--bench FILE] [--prometheus URL [--since 1h]] [--json]\n"
              "       sgl-kit doctor --case DIR [--compare] [--download] [--json]",
        description="Run the doctor's rules over a server. With a TARGET (lab, local, an SSH target) it finds "
                    "the SGLang server there and reads its arguments (/server_info or log), launch command, "
                    "environment, log, GPUs (nvidia-smi, topo -m, topo -p2p) and the sglang source of its "
                    "own version. Without one it reads the files given. Each finding has evidence, the "
                    "source lines behind it, the fix in this version's flags and what not to do; then come "
                    "the hardware and the single-stream decode roofline. Findings are ordered by their "
                    "estimated share of single-stream decode throughput. With --case DIR (a case `sgl-kit capture` "
                    "wrote) it diagnoses the case again, offline, and --compare sets that answer against the "
                    "one recorded at capture (findings.json): the findings new, gone or changed.",
        epilog="examples:\n  sgl-kit doctor lab --baseline old.cmd\n"
               "  sgl-kit doctor --log server.log --nvidia-smi smi.txt --topo topo.txt --model-config config.json\n"
               "  sgl-kit doctor --paste issue.md --model-config config.json\n"
               "  sgl-kit doctor --command launch.sh          # no --sglang: the release is inferred, and said\n"
               "  sgl-kit doctor gpu-box --json | jq '.findings[].id'\n"
               "  sgl-kit doctor --case out/case --compare   # a captured case, offline, against its findings.json",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias; "
                                             "leave out to read only the files given")
    _evidence_options(p)
    p.add_argument("--baseline", metavar="FILE", help="a known-good launch: log, /server_info JSON or command")
    p.add_argument("--bench", metavar="FILE", help="a saved `sgl-kit bench` run: the measured rate and accept length, the "
                        "workload (prompt lengths, shared prefixes), and the server's /metrics pages it kept")
    cased = p.add_argument_group("a captured case (sgl-kit capture)")
    cased.add_argument("--case", metavar="DIR", help="diagnose a case directory offline: its files, the sglang "
                                                     "source from this machine's cache (else the case's excerpts)")
    cased.add_argument("--compare", action="store_true",
                       help="with --case: set today's answer against the case's findings.json (new, gone, changed)")
    cased.add_argument("--download", action="store_true",
                       help="with --case: download the case's sglang release when it is not cached (default: "
                            "nothing is fetched)")
    p.add_argument("--trace", metavar="FILE", nargs="+", help="torch-profiler traces of the server (`sgl-kit profile`): "
                                                           "the rules over its steps read their summary")
    p.add_argument("--capacity", action="store_true", help="add sglang's capacity arithmetic for this launch (graph "
                                                           "ceiling, KV pool, state pool, chunked prefill), each with "
                                                           "its formula's file:line")
    prometheus_options(p, since="1h", what=": the rules over what the server did read its series over --since "
                                            "(without it, a live server's own /metrics when it has --enable-metrics)")
    server_options(p)
    p.set_defaults(func=cmd_doctor, verb="doctor")
    common_options(p)

    from kit.provenance.gate_chain import FAST_PATHS

    g = sub.add_parser(
        "gates", help="whether a fast path (prefill graph, decode graph, custom all-reduce, torch.compile) runs, "
                      "check by check, from the server's own sglang source",
        usage="sgl-kit gates FAST_PATH [TARGET] [--restored] [--log FILE] [--command FILE] [--model-config FILE] "
              "[--topo FILE] [--sglang VER] [--json]",
        description="Read every check that decides whether a fast path of sglang runs: the returns of the "
                    "function that builds it at startup and of the method asked for every batch (can_run), in "
                    "the order they run, each with its file:line in the server's own release, and evaluate "
                    "each against the launch: refuses (holds for every request), passes, depends (on the "
                    "request: input embeddings, logprobs, a prompt longer than the captured sizes) or unknown "
                    "(what would tell). --restored asks the same of the launch with the path turned back on "
                    "(is a fix worth anything?). The evidence is the doctor's: a TARGET, or files.",
        epilog="examples:\n  sgl-kit gates prefill-graph lab --restored\n"
               "  sgl-kit gates custom-all-reduce --log server.log --topo topo.txt --topo p2p.txt\n"
               "  sgl-kit gates prefill-graph --command launch.sh --sglang 0.5.11 --model-config config.json --json",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    g.add_argument("fast_path", choices=sorted(FAST_PATHS), metavar="FAST_PATH",
                   help=f"one of: {', '.join(sorted(FAST_PATHS))}")
    g.add_argument("target", nargs="?", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias; "
                                             "leave out to read only the files given")
    g.add_argument("--restored", action="store_true",
                   help="ask about the launch with the path turned back on (the switch a fix would flip)")
    g.add_argument("--all", action="store_true", help="list the checks that pass too (default: folded)")
    _evidence_options(g)
    server_options(g)
    g.set_defaults(func=cmd_gates, verb="gates")
    common_options(g)


def cmd_gates(args) -> int:
    from kit.doctor import Case
    from kit.doctor.fast_paths import chain

    ev = gather(args, lambda text: None)
    if ev.tree is None:
        raise SourceError(f"no sglang source to read the {args.fast_path} checks from",
                          hint="give a TARGET where sglang is installed, or --sglang VERSION (downloaded once) with files")
    found = chain(Case(ev), args.fast_path, restored=args.restored)
    if found is None:
        raise SourceError(f"the {args.fast_path} checks could not be read in sglang {ev.version}")
    if args.json:
        emit_json({**found.to_dict(), "restored": args.restored, "problems": list(ev.problems)})
    else:
        sys.stdout.write(found.to_text(width=_width(), every=args.all, restored=args.restored))
    return 0


def cmd_doctor(args) -> int:
    from kit.doctor import diagnose

    if args.case or args.compare or args.download:
        return _doctor_case(args)
    check_since(args)
    err = console(stderr=True)
    quiet = args.json or not sys.stderr.isatty()
    status = err.status("sgl-kit doctor: gathering evidence") if not quiet else None

    def progress(text: str) -> None:
        if status is not None:
            status.update(f"sgl-kit doctor: {text}")

    if status is not None:
        status.start()
    try:
        evidence = gather(args, progress, runtime=True)
        result = diagnose(evidence)
        capacity = None
        if args.capacity:
            from kit.doctor.capacity import report

            capacity = report(evidence)
    finally:
        if status is not None:
            status.stop()
    if args.json:
        emit_json({**result.to_dict(), **({"capacity": capacity.to_dict()} if capacity is not None else {})})
    else:
        sys.stdout.write(result.to_text(width=_width()))
        if capacity is not None:
            sys.stdout.write("\n" + capacity.text() + "\n")
    return 0


def _doctor_case(args) -> int:
    """``doctor --case DIR [--compare]``: a captured case diagnosed again, offline."""
    from kit.case import compare_case, replay
    from kit.doctor import EVIDENCE_FILES

    if not args.case:
        raise UsageError("--compare and --download go with --case DIR", hint="sgl-kit doctor --case DIR --compare")
    others = [f"--{n.replace('_', '-')}" for n in (*EVIDENCE_FILES, "sglang", "gpu", "baseline", "bench", "trace",
                                                   "prometheus") if getattr(args, n, None)]
    if args.target or others:
        raise UsageError(f"--case reads the case's own files: leave out {', '.join(([args.target] if args.target else []) + others)}",
                         hint="sgl-kit doctor --case DIR, or sgl-kit doctor TARGET for a live server")
    err = console(stderr=True)
    quiet = args.json or not sys.stderr.isatty()
    status = err.status("sgl-kit doctor: reading the case") if not quiet else None
    if status is not None:
        status.start()
    try:
        def progress(text: str) -> None:
            if status is not None:
                status.update(f"sgl-kit doctor: {text}")

        if args.compare:
            result, diff = compare_case(args.case, download=args.download, progress=progress)
        else:
            result, diff = replay(args.case, download=args.download, progress=progress), None
    finally:
        if status is not None:
            status.stop()
    from kit.case import open_case

    at_capture = sum(int(r.get("count") or 0) for r in open_case(args.case).meta.get("redacted") or [])
    if args.json:
        data = result.to_dict()
        if at_capture and not data.get("masked"):
            data["masked"] = {"at capture (case.yaml: redacted)": at_capture}
        emit_json({**data, **({"comparison": diff.to_dict()} if diff is not None else {})})
    else:
        sys.stdout.write(result.to_text(width=_width()))
        if diff is not None:
            sys.stdout.write("\n" + diff.to_text() + "\n")
        if at_capture:
            sys.stdout.write(f"the case's files: masked {at_capture} secret value{'s' if at_capture != 1 else ''} "
                             "at capture (case.yaml lists where, never the values)\n")
    return 0


def _width() -> int:
    import shutil

    return max(60, min(110, shutil.get_terminal_size((100, 24)).columns))


def _evidence_options(p) -> None:
    files = p.add_argument_group("evidence from files (on this machine)")
    files.add_argument("--log", metavar="FILE", help="server log with its server_args line (and Decode batch lines)")
    files.add_argument("--server-info", metavar="FILE", help="a saved GET /server_info")
    files.add_argument("--command", metavar="FILE", help="the launch command")
    files.add_argument("--nvidia-smi", metavar="FILE", help="`nvidia-smi` (the table) or `--query-gpu ... --format=csv`")
    files.add_argument("--topo", metavar="FILE", action="append",
                       help="`nvidia-smi topo -m`, or `nvidia-smi topo -p2p r`; give it twice for both")
    files.add_argument("--model-config", metavar="FILE", help="the model's config.json")
    files.add_argument("--environ", metavar="FILE", help="the server's environment: `env` output (KEY=VALUE lines) "
                                                         "or a copy of /proc/PID/environ")
    files.add_argument("--paste", metavar="FILE", action="append",
                       help="a whole issue body, chat message or runbook dump: split into its pieces (server_args "
                            "line, launch commands, Decode/Prefill batch lines, sglang's notices, nvidia-smi, topo, "
                            "check_env, env dumps, config.json, bench_serving results); Markdown is stripped "
                            "first, and a shell prompt line (`$ nvidia-smi`) is read as the start of its output. "
                            "Any other file option that holds several pieces is read the same way")
    files.add_argument("--sglang", metavar="VER", help="sglang release whose source to read (downloaded once "
                                                       "with pip download --no-deps); default: the one the log or "
                                                       "/server_info reports, else the one the text states "
                                                       "(check_env's `sglang: X`, sglang==X, an image tag "
                                                       "lmsysorg/sglang:vX, `sglang X` in prose), else one inferred "
                                                       "from the flags, server_args fields and dates against every "
                                                       "release since 0.3 (kit/data/releases.json; else the newest), "
                                                       "said in the report as assumed")
    files.add_argument("--gpu", metavar="NAME", help="the GPU model when no nvidia-smi output is at hand "
                                                     "(a key of kit/data/gpus.yaml, e.g. a6000; another name runs "
                                                     "without bandwidth and roofline, and says so)")


def gather(args, progress, runtime: bool = False):
    """kit.doctor.gather for the command line: the files given are checked first, the TARGET's server is
    found once (its notice on stderr), and errors speak of options, not keywords."""
    from kit.doctor import EVIDENCE_FILES
    from kit.doctor import gather as gather_evidence

    given = {name: getattr(args, name) for name in EVIDENCE_FILES if getattr(args, name)}
    for path in [*[p for v in given.values() for p in (v if isinstance(v, list) else [v])],
                 getattr(args, "baseline", None), getattr(args, "bench", None), *(getattr(args, "trace", None) or [])]:
        if path:
            local_file(path)
    options = {"baseline": getattr(args, "baseline", None), "bench": getattr(args, "bench", None),
               "trace": getattr(args, "trace", None), "progress": progress}
    if runtime:
        options.update(prometheus=args.prometheus, since=args.since, selector=args.selector,
                       prometheus_timeout=args.prometheus_timeout)
    if args.target:
        if given or args.sglang or args.gpu:
            raise UsageError("evidence files go without a TARGET: with one, the kit reads the server itself",
                             hint="drop TARGET to read files, or drop the file options")
        from .common import host_for, server_for

        with host_for(args) as host:
            server = server_for(host, args, required=True, prefetch=True)  # log, /server_info: one trip
            ev = gather_evidence(args.target, host=host, server=server, **options)
            ev.target = args.target
        return ev
    if not given and not options.get("prometheus") and not options["trace"] and not options["bench"]:
        raise UsageError("nothing to examine: no TARGET and no evidence files",
                         hint=f"`sgl-kit {args.verb} lab`, `sgl-kit {args.verb} gpu-box`, or give --log/--command "
                              f"and friends (sgl-kit {args.verb} --help)")
    return gather_evidence(sglang=args.sglang, package_dir=args.package_dir, gpu=args.gpu, **options, **given)
