"""``sgl-kit timeline [TARGET] --prometheus URL``, ``sgl-kit metrics TARGET|URL``: what the server did.

Prometheus credentials come from the environment only ($SGL_KIT_PROMETHEUS_TOKEN, or
$SGL_KIT_PROMETHEUS_USER and $SGL_KIT_PROMETHEUS_PASSWORD), never from the command line.
"""

from __future__ import annotations

import argparse
import sys
import time

from kit.errors import MetricsError, UsageError

from .common import (
    check_since,
    common_options,
    emit_json,
    host_for,
    local_file,
    plain,
    prometheus_options,
    server_options,
)

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "timeline", help="when did throughput drop, and what changed then (Prometheus and the log)",
        usage="sgl-kit timeline [TARGET] [--prometheus URL] [--since 24h] [--step 15s] [--selector '{...}'] "
              "[--log FILE] [--sglang VER] [--json]",
        description="Throughput, accept length, queue, running requests and token usage over time, from a "
                    "Prometheus server that scrapes the SGLang server and/or its log's Decode batch lines, "
                    "with each restart marked (process start, up=0, gaps, counters that went down, startup "
                    "lines) and the launch or version that changed there when the log shows it. "
                    "Credentials: $SGL_KIT_PROMETHEUS_TOKEN (bearer) or $SGL_KIT_PROMETHEUS_USER and "
                    "$SGL_KIT_PROMETHEUS_PASSWORD (basic auth).",
        epilog="examples:\n  sgl-kit timeline lab --prometheus http://127.0.0.1:9090 --since 2h\n"
               "  sgl-kit timeline gpu-box --port 30000 --prometheus http://prom:9090 --since 24h --json\n"
               "  sgl-kit timeline --log server.log --since 7d",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias: the "
                                             "server whose log, version and port to use (leave out: files only)")
    prometheus_options(p, since="24h")
    p.add_argument("--end", type=float, metavar="EPOCH", help="end of the span, epoch seconds (default: now)")
    p.add_argument("--step", help="resolution (default: the span / 5760, at least 1s: 15s for 24h)")
    p.add_argument("--log", metavar="FILE", help="the server's log on this machine (several runs may be joined)")
    p.add_argument("--sglang", metavar="VER", help="release whose declared metric names to check against "
                                                   "(default: the server's or the log's)")
    p.add_argument("--tz", default="UTC", help="the zone of the log's times (default: UTC)")
    server_options(p)
    p.set_defaults(func=cmd_timeline)
    common_options(p)

    m = sub.add_parser(
        "metrics", help="a server's /metrics page: what its release declares, what it reports, what is missing",
        usage="sgl-kit metrics TARGET|URL [--sglang VER] [--json]",
        description="Read one /metrics page (prometheus_client's parser) and compare it with the metric "
                    "families its sglang release declares in its source.")
    m.add_argument("target", help="http://host:port[/metrics], or lab/local/an SSH target (its server's URL)")
    m.add_argument("--sglang", metavar="VER", help="release whose declarations to compare with")
    server_options(m)
    m.set_defaults(func=cmd_metrics)
    common_options(m)

    t = sub.add_parser(
        "profile", help="profile a server (/start_profile under load), or summarize torch-profiler traces",
        usage="sgl-kit profile TARGET [--steps N] [--out DIR] | --trace FILE [FILE...] [--json]",
        description="Online (TARGET): POST the server's /start_profile with the parameters its sglang version "
                    "declares (read from its io_struct.py), drive load with the kit's bench while it records, "
                    "copy the traces from its host (over SSH for a remote target) and summarize each rank. "
                    "Offline (--trace): the same summary of trace files on this machine. Per rank: steps by "
                    "mode and batch size, CUDA graph launches against eager kernel launches, GPU kernel time "
                    "by class, the GPU idle while the CPU was busy in a step; across ranks: NCCL and custom "
                    "all-reduce kernels as logical collectives, arrival skew apart from transfer. Each file is "
                    "streamed; a file cut off gives what was read before the cut.",
        epilog="examples:\n  sgl-kit profile lab --steps 8\n  sgl-kit profile gpu-box --port 30000 --steps 20 "
               "--out runs/prof\n  sgl-kit profile --trace runs/prof/*.trace.json.gz",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("target", nargs="?", help="lab, local, ssh://user@host:port or an ~/.ssh/config alias: the "
                                             "server to profile (leave out with --trace)")
    t.add_argument("--trace", metavar="FILE", nargs="+", help="trace files on this machine (offline)")
    t.add_argument("--steps", type=int, default=8, metavar="N", help="forward steps to record (default: 8)")
    t.add_argument("--out", metavar="DIR", help="where to copy the traces (default: runs/profile-<time>)")
    t.add_argument("--requests", type=int, default=4, help="requests of load while recording (default: 4)")
    t.add_argument("--concurrency", type=int, default=2, help="requests at a time (default: 2)")
    t.add_argument("--max-tokens", type=int, default=16, help="tokens per request (default: 16)")
    t.add_argument("--wait", type=float, default=180.0, metavar="SEC",
                   help="how long the traces may take to appear once the load is done (default: 180)")
    t.add_argument("--top", type=int, default=10, help="how many CPU ops to list (default: 10)")
    server_options(t)
    t.set_defaults(func=cmd_profile)
    common_options(t)


def _server(args, required: bool = False):
    from .common import server_for

    if not args.target:
        return None
    return server_for(host_for(args), args, required=required)


def cmd_timeline(args) -> int:
    from kit.metrics import server_timeline

    if not (args.prometheus or args.log or args.target):
        raise UsageError("nothing to read: give --prometheus URL, --log FILE or a TARGET",
                         hint="e.g. sgl-kit timeline lab --prometheus http://127.0.0.1:9090")
    check_since(args)
    server = _server(args)
    log_text = None
    if args.log:
        with open(local_file(args.log), encoding="utf-8", errors="replace") as fh:
            log_text = fh.read()
    tl = server_timeline(server, args.prometheus, since=args.since, end=args.end, step=args.step,
                         selector=args.selector, log_text=log_text, version=args.sglang, log_tz=args.tz,
                         timeout=args.prometheus_timeout)
    if not len(tl.frame) and not tl.restarts and tl.problems:
        raise MetricsError(f"no series to show: {tl.problems[0]}",
                           hint="check --prometheus (and its credentials in the environment) or give --log FILE")
    if args.json:
        emit_json(tl.to_dict())
    else:
        sys.stdout.write(tl.to_text())
    return 0


def cmd_metrics(args) -> int:
    from kit.metrics import metric_names, scrape

    url, version = args.target, args.sglang
    if "://" not in url:
        server = _server(args, required=True)
        if not server.url:
            raise MetricsError(f"the server pid {server.pid} has no URL the kit can reach",
                               hint="give its /metrics URL instead")
        url, version = server.url, version or server.sglang_version
    started = time.perf_counter()
    page = scrape(url, timeout=args.timeout)
    reported = set(page["family"])
    rows, names = [], None
    if version:
        names = metric_names(version)
        for decl in names.decls.values():
            family = decl.name[:-len("_total")] if decl.kind == "counter" and decl.name.endswith("_total") else decl.name
            rows.append({"name": decl.name, "kind": decl.kind, "site": decl.site,
                         "reported": family in reported or decl.name in reported})
    undeclared = sorted(f for f in reported if names is not None and f.startswith("sglang:")
                        and not names.find(f) and not names.find(f + "_total"))
    if args.json:
        emit_json({"url": url, "version": version, "samples": len(page), "families": sorted(reported),
                   "declared": rows, "reported_but_not_declared": undeclared,
                   "seconds": round(time.perf_counter() - started, 3),
                   "values": [{k: plain(v) for k, v in r.items()} for r in page.to_dict("records")]})
        return 0
    out = [f"{url}: {len(page)} samples in {len(reported)} families"]
    if version:
        seen = sum(r["reported"] for r in rows)
        out.append(f"sglang {version} declares {len(rows)} families; this page reports {seen} of them")
        out.append("reported: " + ", ".join(r["name"] for r in rows if r["reported"]))
        out.append("declared but not reported (a feature that is off, or a labelled counter never incremented; "
                   "not zeros): " + ", ".join(r["name"] for r in rows if not r["reported"]))
        if undeclared:
            out.append(f"reported but not declared by {version}: " + ", ".join(undeclared))
    else:
        out.append("families: " + ", ".join(sorted(reported)))
        out.append("(give --sglang VER to compare with what that release declares)")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def cmd_profile(args) -> int:
    from kit.errors import TraceError
    from kit.metrics.collectives import group_collectives
    from kit.metrics.trace import summarize_trace

    if bool(args.target) == bool(args.trace):
        raise UsageError("give a TARGET to profile, or --trace FILE... to summarize, not both" if args.target
                         else "nothing to profile: give a TARGET or --trace FILE...",
                         hint="e.g. sgl-kit profile lab --steps 8, or sgl-kit profile --trace run/*.trace.json.gz")
    if args.target:
        return _profile_online(args)
    summaries, failed = [], []
    for path in args.trace:
        try:
            summaries.append(summarize_trace(local_file(path), top=args.top))
        except TraceError as err:
            failed.append((path, err))
    if not summaries and failed:
        raise failed[0][1]
    coll = group_collectives(summaries)
    if args.json:
        emit_json({"traces": [s.to_dict() for s in summaries], "collectives": coll.to_dict(),
                   "failed": [{"path": p, "error": e.message, "hint": e.hint} for p, e in failed]})
    else:
        sys.stdout.write("\n".join(s.to_text() for s in summaries))
        if coll.kernels:
            sys.stdout.write("\n" + coll.to_text())
        for path, err in failed:
            sys.stdout.write(f"\n{path}: not summarized: {err.message}\n  -> {err.hint}\n")
    return 0 if not failed else 2


def _profile_online(args) -> int:
    from kit.metrics.profile import profile_server

    if args.steps < 1:
        raise UsageError(f"--steps must be 1 or more, not {args.steps}", hint="e.g. --steps 8")
    server = _server(args, required=True)
    if server.kind == "lab":  # the stand-in answers sglang's API but runs no model: nothing to record
        raise MetricsError(f"the lab's stand-in (pid {server.pid}) has no profiler: it models the incident's speed and "
                           "runs no model, so there is no torch-profiler trace to record",
                           hint="profile the real engine: `sgl-kit lab down`, `sgl-kit lab up --engine sglang`, then "
                                "`sgl-kit profile lab`; or summarize traces you have with `sgl-kit profile --trace FILE...`")
    out = args.out or time.strftime("runs/profile-%Y%m%dT%H%M%S")
    progress = None if args.json else (lambda text: sys.stderr.write(f"sgl-kit: {text}\n"))
    run = profile_server(server, steps=args.steps, local_dir=out, timeout=args.timeout, wait=args.wait,
                         top=args.top, progress=progress,
                         load={"requests": args.requests, "concurrency": args.concurrency,
                               "max_tokens": args.max_tokens})
    if args.json:
        emit_json(run.to_dict())
    else:
        sys.stdout.write(run.to_text())
    return 0 if not run.failed else 2
