"""``sgl-kit bench TARGET_OR_URL`` and ``sgl-kit bench compare A B``: tok/s, measured and compared."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from kit.bench.config import API_PATHS, DEFAULT_PORT
from kit.errors import BenchError

from .bench_sweep import SLO_HELP, cmd_sweep, concurrency_list, goodput_of, one_concurrency, slo_of
from .common import common_options, emit_json, host_for, server_for, ssh_options

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="measure tok/s with streaming load, or compare two runs",
        usage="sgl-kit bench TARGET_OR_URL [--api native|openai|completions] [--concurrency N] [--requests M] "
              "[--max-tokens K] [--slo SLO] [--out FILE] [--json]\n"
              "       sgl-kit bench sweep TARGET_OR_URL --concurrency 1,2,4,8 [--slo ttft=500ms,itl=50ms] "
              "[--slo-fraction 0.9] [--out DIR] [--json]\n       sgl-kit bench compare A.jsonl B.jsonl [--json]\n"
              "       sgl-kit bench compare URL_A URL_B [--block-requests N] [--max-pairs N] [--budget S] [--out DIR]",
        description="Stream requests to an SGLang server and measure per-request decode tok/s, time to first "
                    "token, latency between tokens (per token and per chunk) and speculative accept length, "
                    "with token counts from the server. TARGET_OR_URL is http://host:port, `lab` (the lab's server, "
                    "wherever it runs), `local`, or an SSH target (the server port, --port, is forwarded). Each "
                    "finished request is appended to the run file (default runs/bench-*.jsonl), so Ctrl-C keeps "
                    "what finished. A request whose decode tokens all arrived at once has no decode rate and is "
                    "named, not averaged in. `bench compare A B` of two live servers (URLs or targets) measures "
                    "them in interleaved blocks (A, then AB BA ...) and gives B - A in decode tok/s and time to "
                    "first token with Student's t interval over the pairs and a noise floor from A against itself; "
                    "of two run files, B - A with a bootstrap 95% interval over their requests (which cannot tell "
                    "a change in the machine from one in the server). `bench sweep` runs once per "
                    "concurrency (one run file each and a manifest, sweep.json, in --out DIR) and prints per-request "
                    "and total tok/s and time to first token at each; `bench compare` of two sweep directories says "
                    "where one dominates the other.")
    p.add_argument("target", metavar="TARGET_OR_URL")
    p.add_argument("runs", nargs="*", help="with `compare`: the two run files (or sweep directories) A and B; "
                                           "with `sweep`: TARGET_OR_URL")
    p.add_argument("--api", default="native", choices=sorted(API_PATHS), help="native is /generate (default)")
    p.add_argument("--concurrency", "-c", type=concurrency_list, default=None, metavar="N[,N...]",
                   help="requests in flight (default 1); with sweep, a comma list run in order (default 1,2,4,8)")
    p.add_argument("--requests", "-n", type=int, default=None,
                   help="measured requests (default 16; with sweep, per point, default max(8, 2 x concurrency))")
    p.add_argument("--rate", type=float, default=None, help="Poisson arrivals per second instead of fixed concurrency")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop early (outputs no longer have a fixed length)")
    p.add_argument("--input-len", type=int, default=128, help="prompt length in words (default 128)")
    p.add_argument("--input-len-min", type=int, default=None, help="random prompt lengths from this to --input-len")
    p.add_argument("--prompts", metavar="FILE", help="JSONL of prompts instead of random words")
    p.add_argument("--model", help="OpenAI model name (default: first of /v1/models)")
    p.add_argument("--port", type=int, default=None,
                   help=f"server port on the target (default {DEFAULT_PORT}; for the target lab, the port it runs on)")
    p.add_argument("--stall-timeout", type=float, default=60.0, help="seconds without data that end a request")
    p.add_argument("--label", help="a name for this run (shown in comparisons)")
    p.add_argument("--server-metrics-interval", type=float, default=2.0, metavar="S",
                   help="read the server's own /metrics before, every S seconds during and after the run, and keep "
                        "the pages in the run file (default 2; 0: not at all; needs the server's --enable-metrics)")
    p.add_argument("--out", metavar="FILE", help="run file (default runs/bench-<time>-<api>-c<N>.jsonl); with sweep, "
                                                 "the directory of its runs and sweep.json (default runs/sweep-<time>/)")
    p.add_argument("--slo", metavar="SLO", help=SLO_HELP)
    p.add_argument("--slo-fraction", type=float, default=0.9, metavar="F",
                   help="with sweep and --slo: the share of requests that must meet the SLO for a concurrency to "
                        "count as within it; the sweep names the highest such concurrency (default 0.9)")
    p.add_argument("--confidence", type=float, default=0.95, help="with compare: CI level (default 0.95)")
    p.add_argument("--block-requests", type=int, default=4, metavar="N",
                   help="with compare of two live servers: measured requests per block (default 4)")
    p.add_argument("--max-pairs", type=int, default=10, metavar="N",
                   help="with compare of two live servers: at most N pairs of blocks (default 10; 3 at least)")
    p.add_argument("--budget", type=float, default=600.0, metavar="S",
                   help="with compare of two live servers: plan no more pairs than fit in S seconds (default 600)")
    p.add_argument("--order", choices=("abba", "random"), default="abba",
                   help="with compare of two live servers: the pairs' order, AB BA AB ... or random (default abba)")
    p.set_defaults(func=cmd_bench)
    common_options(p)


def cmd_bench(args) -> int:
    from kit.bench import BenchConfig, run_path

    if args.target == "sweep":
        return cmd_sweep(args)
    if args.target == "compare":
        return cmd_compare(args)
    if args.runs:
        raise BenchError(f"unexpected arguments: {' '.join(args.runs)}",
                         hint="sgl-kit bench TARGET_OR_URL [options], or sgl-kit bench compare A.jsonl B.jsonl")
    slo = slo_of(args)
    cfg = BenchConfig(api=args.api, concurrency=one_concurrency(args.concurrency),
                      requests=16 if args.requests is None else args.requests, rate=args.rate,
                      warmup=args.warmup, max_tokens=args.max_tokens, ignore_eos=args.ignore_eos,
                      input_len=args.input_len, input_len_min=args.input_len_min, prompts_file=args.prompts,
                      model=args.model, stall_timeout=args.stall_timeout, label=args.label,
                      server_metrics_interval=args.server_metrics_interval)
    out = Path(args.out) if args.out else run_path(cfg)
    started = time.time()
    try:
        run = _measure(args, cfg, out)
    except KeyboardInterrupt:
        sys.stderr.write(f"sgl-kit: {_kept(out, started, cfg.requests)}\n")
        return 130  # as the shell reports a Ctrl-C
    met = goodput_of(run, slo)
    if args.json:
        emit_json({"path": run.path, "url": run.url, "totals": run.totals, "summary": _frame_dict(run.summary()),
                   **({"goodput": met.to_dict()} if met else {})})
    else:
        sys.stdout.write(run.to_text() + (f"\n{met.to_text()}" if met else "")
                         + f"\nmeasured at {run.url}; written to {run.path}\n")
    return 0 if run.totals["ok"] else 1


def _measure(args, cfg, out: Path):
    """kit.bench.bench at the target: a URL as it is; the lab's server through the one target resolver
    (kit.target.resolve_server, which also says which launch the lab runs); else --port on the target."""
    from kit.bench import bench
    from kit.target import parse_target

    if args.target.startswith(("http://", "https://")):
        return bench(args.target, out=out, config=cfg)
    if parse_target(args.target)["kind"] == "lab":
        with host_for(args) as host:
            return bench(args.target, server=server_for(host, args, required=True), out=out, config=cfg)
    return bench(args.target, port=DEFAULT_PORT if args.port is None else args.port, out=out, config=cfg,
                 ssh_options=ssh_options(args))


def _kept(path: Path, started: float, requests: int) -> str:
    """What an interrupted run left: how many requests finished, and where they are (or that nothing was kept)."""
    from kit.bench import BenchRun

    try:
        fresh = path.stat().st_mtime >= started - 1
        run = BenchRun.load(path) if fresh else None
    except (OSError, BenchError):
        run = None
    if run is None:
        return "interrupted before any measured request finished; no run file was written"
    if not run.results:
        path.unlink(missing_ok=True)
        return "interrupted before any measured request finished; the empty run file was removed"
    ok = sum(r.ok for r in run.results)
    return (f"interrupted: {len(run.results)} of {requests} requests had finished ({ok} ok); they are in {path}, "
            f"marked unfinished (`sgl-kit bench compare` reads it)")


def cmd_compare(args) -> int:
    from kit.bench import compare

    if len(args.runs) != 2:
        raise BenchError(f"compare takes two run files or two servers, got {len(args.runs)}",
                         hint="sgl-kit bench compare A.jsonl B.jsonl, or sgl-kit bench compare URL_A URL_B")
    files = [Path(x).exists() for x in args.runs]
    if all(files):
        from .bench_sweep import cmd_compare_sweeps, is_sweep

        if all(is_sweep(x) for x in args.runs):
            return cmd_compare_sweeps(args.runs[0], args.runs[1], args)
    elif not any(files) and all(_live(x) for x in args.runs):
        return _compare_live(args)
    else:
        missing = [x for x, there in zip(args.runs, files, strict=True) if not there]
        raise BenchError(f"no run file at {', '.join(missing)}",
                         hint="compare two run files (sgl-kit bench ... --out FILE), or two live servers "
                              "(http://host:port, lab, an SSH target)")
    result = compare(args.runs[0], args.runs[1], confidence=args.confidence)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _live(text: str) -> bool:
    """A server to measure rather than a file: a URL, or a target the resolver knows (lab, local, ssh)."""
    from kit.target import parse_target

    if text.startswith(("http://", "https://")):
        return True
    if text.endswith((".jsonl", ".json")) or "/" in text and not text.startswith("ssh://"):
        return False
    try:
        return parse_target(text)["kind"] in ("lab", "local", "ssh")
    except Exception:  # noqa: BLE001 - anything the resolver cannot read is not a server
        return False


def _compare_live(args) -> int:
    """Two live servers, measured in interleaved blocks (kit.bench.compare_live), with progress on stderr."""
    from kit.bench import compare_live

    if args.max_pairs < 3:
        raise BenchError(f"--max-pairs {args.max_pairs}: at least 3 (the first three pairs are the pilot whose noise "
                         "plans the rest)", hint="leave it out (10), or give 3 or more")
    if args.block_requests < 1:
        raise BenchError(f"--block-requests {args.block_requests}: at least 1", hint="leave it out (4)")

    def say(text: str) -> None:
        if not args.json:
            sys.stderr.write(f"  {text}\n")

    result = compare_live(args.runs[0], args.runs[1], requests=args.block_requests, max_tokens=args.max_tokens,
                          concurrency=one_concurrency(args.concurrency),
                          out_dir=args.out, confidence=args.confidence, max_pairs=args.max_pairs,
                          budget_s=args.budget, order=args.order, say=say)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text() + "\n")
    return 0


def _frame_dict(frame) -> dict:
    return {name: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for name, row in frame.to_dict(orient="index").items()}
