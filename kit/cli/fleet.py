"""``sgl-kit fleet list|args|doctor|collect|bench|balance``: many replicas at once.

The replicas are targets and URLs on the command line, the workers of ``--router URL`` (sglang's model
gateway: ``GET /workers``), or the pods of ``--k8s namespace/label=value`` (the official Kubernetes client
and the kubeconfig). Each is read in parallel (``--concurrency``), each within ``--replica-timeout``;
what fails is named and the rest is printed.
"""

from __future__ import annotations

import sys

from .common import check_since, common_options, emit_json, prometheus_options

__all__ = ["register"]

ACTIONS = ("list", "args", "doctor", "collect", "bench", "balance")


def register(sub) -> None:
    p = sub.add_parser("fleet", help="many replicas at once: behind sglang's router, a list, or Kubernetes",
                       description="Ask every replica of a fleet the same question in parallel: what it runs and "
                                   "where it differs from the others (args), what the doctor finds on every "
                                   "replica or on some (doctor), its evidence kept (collect), the same load on "
                                   "each (bench), and how the load is spread (balance).")
    inner = p.add_subparsers(dest="fleet_command", metavar="ACTION")
    inner.required = True
    helps = {
        "list": "the replicas as listed and how each will be read",
        "args": "what every replica runs (version, launch as resolved, environment, GPU, driver, model); the "
                "replicas that differ from the majority first",
        "doctor": "the doctor on every replica; findings on some replicas (which) before those on all",
        "collect": "each replica's evidence in OUT/<replica>/ (sgl-kit capture, read-only)",
        "bench": "the same load on every replica at once, one run file each",
        "balance": "how the load is spread across the workers over time, from Prometheus or their /metrics",
    }
    for action in ACTIONS:
        q = inner.add_parser(action, help=helps[action], description=helps[action] + ".")
        _members_options(q)
        if action == "collect":
            q.add_argument("-o", "--output", metavar="DIR", required=True, help="the directory of the cases")
        if action == "bench":
            q.add_argument("-n", "--requests", type=int, default=16, help="requests per replica (default: 16)")
            q.add_argument("-c", "--concurrency-per-replica", type=int, default=1, dest="bench_concurrency",
                           help="concurrency on each replica (default: 1)")
            q.add_argument("--max-tokens", type=int, default=128, help="tokens per request (default: 128)")
            q.add_argument("-o", "--output", metavar="DIR", default=None, help="run files (default: runs/fleet/)")
        if action == "balance":
            prometheus_options(q, since="10m", what=" (all the workers)")
            q.add_argument("--window", type=float, default=30.0, metavar="SEC",
                           help="without --prometheus: read each worker's /metrics for this long (default: 30)")
            q.add_argument("--interval", type=float, default=2.0, metavar="SEC",
                           help="without --prometheus: seconds between reads (default: 2)")
            q.add_argument("--step", default="5s", help="with --prometheus: the step of the series (default: 5s)")
            q.add_argument("--plot", metavar="HTML", help="write the plot (one panel per quantity, a line per worker)")
        common_options(q)
        q.set_defaults(func=cmd_fleet, fleet_action=action)


def _members_options(q) -> None:
    q.add_argument("replicas", nargs="*", metavar="REPLICA",
                   help="http://host:port, host:port, or a target (an SSH alias, user@host, ssh://..., local)")
    q.add_argument("--router", metavar="URL", help="sglang's router (smg / sglang-router): its workers, GET /workers")
    q.add_argument("--router-log", metavar="FILE",
                   help="the router's log or launch command, to read its policy when it runs elsewhere (on this "
                        "machine its process or log is read)")
    q.add_argument("--k8s", metavar="NAMESPACE/SELECTOR",
                   help="the pods of a label selector, e.g. inference/app=sglang (the official client, ~/.kube/config)")
    q.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
    q.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    q.add_argument("--ssh", metavar="TEMPLATE",
                   help="how to reach a worker's machine, e.g. 'root@{host}' or 'ssh://ops@{host}:2222' (default: "
                        "a loopback worker is read on this machine, others over HTTP only)")
    q.add_argument("--port", type=int, help="the server's port on each target given as a host (default: the only one)")
    q.add_argument("--http-only", action="store_true",
                   help="read every replica over HTTP only (/server_info, /metrics), never its process")
    q.add_argument("--concurrency", type=int, default=8, metavar="N", help="replicas read at once (default: 8)")
    q.add_argument("--replica-timeout", type=float, default=None, metavar="SEC",
                   help="each replica's time limit (default: 60 for args, 180 for doctor, 300 collect, 600 bench)")


_TIMEOUTS = {"list": 10.0, "args": 60.0, "doctor": 180.0, "collect": 300.0, "bench": 600.0, "balance": 10.0}


def _ssh_options(args) -> dict:
    from kit.hosts.kept import persist_seconds

    return {"trust_new_host": args.trust_new_host, "key_filename": args.identity, "known_hosts": args.known_hosts,
            "config_file": args.ssh_config, "default_timeout": args.timeout, "persist": persist_seconds()}


def cmd_fleet(args) -> int:
    from kit.errors import UsageError
    from kit.fleet import fleet_args, fleet_bench, fleet_collect, fleet_doctor, members

    action = args.fleet_action
    if args.concurrency < 1:
        raise UsageError(f"--concurrency {args.concurrency}: at least 1", hint="e.g. --concurrency 8")
    if action == "balance":
        check_since(args)
    timeout = args.replica_timeout or _TIMEOUTS[action]
    fleet = members(args.replicas, router=args.router, k8s=args.k8s, port=args.port, ssh=args.ssh,
                    kubeconfig=args.kubeconfig, context=args.context, timeout=min(timeout, 30.0),
                    router_log=args.router_log)
    if args.http_only:
        for m in fleet.members:
            if m.url:
                m.target = None
    if not fleet.members:
        raise UsageError("the fleet has no replica to read: " + ("; ".join(fleet.problems) or "none listed"),
                         hint="check the router's worker list, or the Kubernetes selector")
    ssh = _ssh_options(args)
    say = sys.stderr.write
    say(f"{len(fleet)} replica(s); {action} on up to {args.concurrency} at a time, {timeout:g} s each\n")
    if action == "list":
        return _out(args, fleet.to_dict(), fleet.to_text())
    if action == "args":
        res = fleet_args(fleet, concurrency=args.concurrency, timeout=timeout, ssh_options=ssh)
        return _out(args, res.to_dict(cli=True), res.to_text(cli=True), failed=not res.run.results)
    if action == "doctor":
        res = fleet_doctor(fleet, concurrency=args.concurrency, timeout=timeout, ssh_options=ssh)
        return _out(args, res.to_dict(cli=True), res.to_text(cli=True), failed=not res.run.results)
    if action == "collect":
        run = fleet_collect(fleet, args.output, concurrency=args.concurrency, timeout=timeout, ssh_options=ssh)
        text = run.summary(cli=True) + "".join(f"\n  {name}: {path}" for name, path in run.results.items())
        return _out(args, {"cases": run.results, "failures": run.failure_text(True)}, text, failed=not run.results)
    if action == "bench":
        from kit.bench import BenchConfig

        config = BenchConfig(requests=args.requests, concurrency=args.bench_concurrency, max_tokens=args.max_tokens)
        run = fleet_bench(fleet, concurrency=args.concurrency, timeout=timeout, out=args.output, ssh_options=ssh,
                          config=config)
        rows = []
        for name, r in run.results.items():
            s = r.summary()
            tok = s.loc["decode_tok_s", "mean"] if "decode_tok_s" in s.index else float("nan")
            ttft = s.loc["ttft_ms", "mean"] if "ttft_ms" in s.index else float("nan")
            rows.append(f"  {name:<24} decode {tok:7.1f} tok/s   ttft {ttft:8.1f} ms   {r.path}")
        data = {"runs": {k: v.path for k, v in run.results.items()}, "failures": run.failure_text(True)}
        return _out(args, data, run.summary(cli=True) + "\n" + "\n".join(rows), failed=not run.results)
    from kit.fleet.balance import balance

    res = balance(fleet, prometheus=args.prometheus, since=args.since, window=args.window, interval=args.interval,
                  timeout=args.prometheus_timeout, step=args.step, selector=args.selector)
    if args.plot:
        say(f"plot: {res.save_html(args.plot)}\n")
    return _out(args, res.to_dict(), res.to_text())


def _out(args, data: dict, text: str, failed: bool = False) -> int:
    if args.json:
        emit_json(data)
    else:
        print(text)
    return 1 if failed else 0
