"""``sgl-kit capture TARGET -o DIR``: everything the doctor reads from a live server, once, read-only, kept.

Each piece is asked with its own timeout and a progress line; a piece that fails is named in case.yaml's
``missing`` with its error, and the rest is still collected. Secrets are masked before anything is written
(kit._secrets for names, kit.report.redaction for text); ``raw=True`` keeps them, and says so. Nothing on the
server is changed: GET requests, file reads, ``nvidia-smi`` and ``python -m sglang.check_env``.

The doctor's answer at capture time (``findings.json``) is computed from what was written, the way replay
reads it (kit.case.replay), so replaying a case with the same kit gives the same answer.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kit._secrets import mask_argv, redact_env
from kit._text import plain, short_path
from kit._version import __version__ as KIT_VERSION
from kit.errors import CaseError, KitError

from .layout import (
    CASE_FILE,
    FILES,
    FINDINGS_FILE,
    FORMAT,
    SOURCES_DIR,
    Excerpt,
    cited_lines,
    cited_sites,
    now,
    sha256_text,
    write_meta,
)

__all__ = ["CaptureResult", "capture", "ENDPOINTS"]

# The read-only endpoints a capture asks, in order; each only where the server's release serves it.
ENDPOINTS = ("/health", "/health_generate", "/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/loads", "/metrics")
LOG_HEAD = 3000  # the lines the doctor reads from a log's start (notices, graph capture) ...
LOG_TAIL = 4000  # ... and from its end (Decode batch lines)
EXCERPT_CONTEXT = 4  # lines kept each side of a cited line
ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "SGL_", "TORCH_", "PYTORCH_")
HOST_MASK = "<redacted host>"
# What a capture writes: with --force, only these are replaced; a directory holding anything else is refused.
_OURS = {*FILES, CASE_FILE, CASE_FILE + ".tmp", SOURCES_DIR}


@dataclass
class CaptureResult:
    """What a capture wrote: the case directory, its files with their sizes, what is missing, how long."""

    path: Path
    files: dict[str, int] = field(default_factory=dict)  # name -> bytes
    missing: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    findings: int = 0
    raw: bool = False
    what: dict[str, str] = field(default_factory=dict)  # name -> what it is

    def to_dict(self) -> dict:
        return {"path": str(self.path), "files": dict(self.files), "missing": dict(self.missing),
                "seconds": round(self.seconds, 1), "findings": self.findings, "raw": self.raw}

    def to_text(self) -> str:
        total = sum(self.files.values())
        lines = [f"captured {self.path} in {self.seconds:.1f} s: {len(self.files)} files, {_size(total)}; "
                 f"{self.findings} finding{'s' if self.findings != 1 else ''} in findings.json"]
        width = max((len(name) for name in self.files), default=10)
        for name, n in sorted(self.files.items()):
            lines.append(f"  {name:<{width}}  {_size(n):>8}  {self.what.get(name) or FILES.get(name, ('',))[0]}")
        for piece, why in self.missing.items():
            lines.append(f"  not collected: {piece}: {why}")
        if self.raw:
            lines.append("  WARNING: written raw (--raw): secrets were NOT removed; do not share this directory")
        return "\n".join(lines)

    __str__ = to_text

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


class _Writer:
    """Writes the case's files, masked, and keeps the case.yaml entries about them."""

    def __init__(self, path: Path, *, raw: bool, hosts: bool) -> None:
        self.path, self.raw, self.hosts = path, raw, hosts
        self.files: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.redacted: list[dict] = []

    def text(self, name: str, text: str, what: str | None = None, *, names: list[str] | None = None) -> None:
        counts: Counter = Counter()
        if not self.raw:
            from kit.report.redaction import redact

            text, counts = redact(text, hosts=self.hosts)
        kinds = sorted({*(k for k in counts if not k.startswith("host")), *(names or [])})
        n = sum(v for k, v in counts.items() if not k.startswith("host")) + len(names or [])
        if n:
            self.redacted.append({"file": name, "names": kinds, "count": n})
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.files[name] = what or FILES.get(name, ("",))[0]
        self.sizes[name] = target.stat().st_size

    def json(self, name: str, data, what: str | None = None, *, names: list[str] | None = None) -> None:
        self.text(name, json.dumps(data, indent=1, sort_keys=True, default=str) + "\n", what, names=names)


class _Pieces:
    """One piece at a time: a progress line, its time, and its error kept as `missing`."""

    def __init__(self, progress: Callable[[str], None] | None, total: int) -> None:
        self.say = progress or (lambda text: None)
        self.total, self.n = total, 0
        self.missing: dict[str, str] = {}

    def run(self, name: str, fn, *args, **kwargs):
        self.n += 1
        self.say(f"[{self.n}/{self.total}] {name}")
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except (KitError, OSError, ValueError) as err:
            why = getattr(err, "message", None) or str(err) or type(err).__name__
            self.missing[name] = f"{why} ({time.monotonic() - started:.1f} s)"
            return None

    def skip(self, name: str, why: str) -> None:
        self.missing[name] = why


def capture(target: str, out: str | Path, *, pid: int | None = None, port: int | None = None, host=None,
            server=None, interval: float = 5.0, timeout: float = 20.0, raw: bool = False,
            redact_host: bool = False, prometheus: str | None = None, since: str | float = "2h",
            selector: str | None = None, force: bool = False,
            progress: Callable[[str], None] | None = None) -> CaptureResult:
    """Collect, once and read-only, what the doctor reads from the server at ``target`` into ``out``.

    ``interval``: seconds between the two ``/metrics`` pages; ``timeout``: per piece (HTTP and commands);
    ``raw``: keep secrets (the caller warns); ``redact_host``: the target, URLs and host names become
    placeholders; ``prometheus`` (a URL) with ``since`` stores the series the runtime rules read;
    ``force``: write into a directory that already holds a case (its files are replaced)."""
    from kit.target import connect, resolve_server

    started = time.monotonic()
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise CaseError(f"{out} is a file: a case is a directory", hint="give a new directory with -o DIR")
    if (out / CASE_FILE).exists() and not force:
        raise CaseError(f"{out} already holds a case ({CASE_FILE})",
                        hint="give a new directory, or --force to capture over it")
    others = sorted(p.name for p in out.iterdir() if p.name not in _OURS) if out.is_dir() else []
    if others and not (out / CASE_FILE).exists():
        raise CaseError(f"{out} holds files that are not a case's ({', '.join(others[:3])}"
                        f"{', ...' if len(others) > 3 else ''})", hint="give a new or empty directory")
    if out.is_dir() and any(out.iterdir()) and not (out / CASE_FILE).exists() and not force:
        raise CaseError(f"{out} holds a capture that did not finish (no {CASE_FILE})",
                        hint="give a new directory, or --force to capture over it")
    say = progress or (lambda text: None)
    say(f"finding the server at {target}")
    opened = connect(target) if host is None else None
    on = host or opened
    try:
        if server is None:
            server = resolve_server(on, target, pid=pid, port=port, prefetch=True)
        out.mkdir(parents=True, exist_ok=True)
        for old in list(out.iterdir()) if force else []:  # the earlier capture's files and excerpts, only them
            if old.name == SOURCES_DIR and old.is_dir() and not old.is_symlink():
                import shutil

                shutil.rmtree(old)
            elif old.name in _OURS and (old.is_file() or old.is_symlink()):
                old.unlink()
        w = _Writer(out, raw=raw, hosts=redact_host)
        pieces = _Pieces(progress, total=13)
        meta = _collect(on, server, target, w, pieces, interval=interval, timeout=timeout, prometheus=prometheus,
                        since=since, selector=selector)
    finally:
        if opened is not None:
            opened.close()
    meta["captured"]["seconds"] = round(time.monotonic() - started, 1)
    meta["raw"] = bool(raw)
    found = meta.pop("_findings", [])
    write_meta(out, meta)
    say(f"captured {out} in {meta['captured']['seconds']:.1f} s")
    return CaptureResult(out, dict(w.sizes) | {CASE_FILE: (out / CASE_FILE).stat().st_size}, dict(pieces.missing),
                         meta["captured"]["seconds"], len(found), raw,
                         dict(w.files) | {CASE_FILE: "what, when, from where; notes and the resolution"})


def _collect(host, server, target: str, w: _Writer, pieces: _Pieces, *, interval: float, timeout: float,
             prometheus, since, selector) -> dict:
    from kit.doctor import diagnose, gather

    url = server.url
    tree = pieces.run("the server's sglang source", _source, server)
    routes = _routes(tree) if tree is not None else {}
    endpoints = {}
    for path in ENDPOINTS:
        endpoints[path] = routes.get(path) or (f"not served by sglang {server.sglang_version or '?'} (no route in "
                                               "its srt/entrypoints)" if tree is not None else "not checked: no source")
    health = []
    for path in ("/health", "/health_generate"):
        if path in routes or tree is None:
            got = pieces.run(f"GET {path}", _get, url, path, timeout)
            if got is not None:
                health.append(f"GET {path}: HTTP {got[0]} in {got[2]:.2f} s\n{got[1].strip()}\n")
    if health:
        w.text("health.txt", "\n".join(health))
    model_path = "/model_info" if "/model_info" in routes or tree is None else "/get_model_info"
    got = pieces.run(f"GET {model_path}", _get, url, model_path, timeout)
    if got is not None:
        w.text("model_info.json", got[1], FILES["model_info.json"][0] + f" (asked: {model_path})")
    if "/v1/loads" in routes:
        got = pieces.run("GET /v1/loads?include=all", _get, url, "/v1/loads?include=all", timeout)
        if got is not None:
            w.text("loads.json", got[1])
    else:
        pieces.skip("GET /v1/loads", endpoints["/v1/loads"])
    scrapes = []
    if _metrics_on(server, url, timeout):
        for n in (1, 2):
            if n == 2:
                time.sleep(max(0.0, float(interval)))
            got = pieces.run(f"GET /metrics ({n} of 2)", _get, url, "/metrics", timeout)
            if got is not None:
                w.text(f"metrics-{n}.prom", got[1])
                scrapes.append(time.time())
    else:
        pieces.skip("GET /metrics", "the server runs without --enable-metrics (sglang serves /metrics only with it)")
    masked = [_flag_of(server.argv, i) for i, (a, b) in enumerate(zip(server.argv, mask_argv(server.argv), strict=True))
              if a != b]
    w.text("launch.sh", _launch_text(mask_argv(server.argv) if not w.raw else server.argv), names=masked)
    if server.env_readable:
        env = {k: v for k, v in sorted(server.env.items()) if k.startswith(ENV_PREFIXES)}
        shown = env if w.raw else redact_env(env)
        w.text("environ.txt", "".join(f"{k}={v}\n" for k, v in shown.items()),
               names=[k for k in env if shown[k] != env[k]])
    else:
        pieces.skip("the environment", f"/proc/{server.pid}/environ is not readable by this user")
    smi = pieces.run("nvidia-smi", _gpus, host, timeout)
    for name, text in (smi or {}).items():
        w.text(name, text)
    check = pieces.run("python -m sglang.check_env", _check_env, host, server, max(timeout, 60.0))
    if check:
        w.text("check_env.txt", check)
    w.json("request.json", _request(), FILES["request.json"][0] + " (written by the kit, not a request the "
                                                                  "server saw)")
    record = pieces.run("sglang's RECORD (the installed files' hashes)", _record_sha, host, server)
    # /server_info and the log last, right before the doctor, which reads the very same text (prefetched): what
    # the capture's own requests wrote in the log is in both
    info = pieces.run("GET /server_info", server.server_info, timeout=timeout)
    if info is not None:
        w.json("server_info.json", info, names=_masked_names(info))
        server.prefetched["server_info"] = base64.b64encode(json.dumps(info).encode()).decode()
    if server.log_path:
        got = pieces.run("the log's first and last lines", _log, server)
        if got is not None:
            w.text("server.log", got)
    else:
        pieces.skip("the server log", server.log_note or "the server does not write its log to a file")
    # The doctor's answer, from what the live server shows, with the /metrics page the case keeps.
    pieces.n += 1
    pieces.say(f"[{pieces.n}/{pieces.total}] the doctor")
    evidence = gather(target, host=host, server=server, prometheus=prometheus, since=since, selector=selector)
    if evidence.model_config:
        w.json("config.json", evidence.model_config)
    if prometheus and evidence.runtime is not None:
        w.json("prometheus.json", evidence.runtime)
    elif scrapes:
        from .replay import runtime_from_page

        evidence.runtime = None
        evidence.problems = [p for p in evidence.problems if "/metrics" not in p]
        runtime_from_page(evidence, out_page=w.path / "metrics-2.prom", at=scrapes[-1],
                          started=server.started_at, pid=server.pid)
    diagnosis = diagnose(evidence)
    data = diagnosis.to_dict()
    w.json(FINDINGS_FILE, data)
    excerpts = _excerpts(evidence.tree, diagnosis, w) if evidence.tree is not None else []
    stand_in = None
    if server.kind == "lab" and evidence.hardware is not None and "stand-in" in (evidence.hardware.note or "")\
            + evidence.sources.get("hardware", ""):
        stand_in = "the lab's stand-in GPUs: its scenario (SGL_KIT_LAB_SCENARIO in environ.txt); no GPU was read"
    shown_target = HOST_MASK if w.hosts else target
    shown_url = re.sub(r"//[^/:]+", "//" + HOST_MASK, url or "") if w.hosts else url
    meta = {
        "format": FORMAT,
        "id": w.path.name,
        "kind": "captured",
        "captured": {"at": now(), "seconds": 0.0, "kit": KIT_VERSION, "target": shown_target,
                     "server": {"pid": server.pid, "port": server.port, "url": shown_url, "kind": server.kind,
                                "started_at": server.started_at},
                     "log": server.log_path if not w.hosts else None,
                     "interval": round(scrapes[-1] - scrapes[0], 2) if len(scrapes) == 2 else None,
                     "scraped_at": scrapes[-1] if scrapes else None},
        "sglang": {"version": evidence.version or server.sglang_version, "basis": evidence.version_basis,
                   "told_by": evidence.sources.get("version"),
                   "record_sha256": record,
                   "wheel_sha256": _wheel_sha(evidence.version or server.sglang_version)},
        "files": {},
        "missing": dict(pieces.missing),
        "endpoints": endpoints,
        "stand_in": stand_in,
        "no_gpu": (evidence.hardware.note or "no GPU visible") if evidence.hardware is not None
        and not evidence.hardware.gpus and not stand_in else None,
        "probes": plain(evidence.probes) if evidence.probes else None,
        "redacted": w.redacted,
        "excerpts": [e.to_dict() for e in excerpts],
        "notes": [],
    }
    meta["missing"] = dict(pieces.missing)
    meta["files"] = {name: w.files[name] for name in sorted(w.files)}
    meta["_findings"] = data.get("findings") or []
    return meta


def _source(server):
    from kit.source import source_for_server

    return source_for_server(server)


def _routes(tree) -> dict[str, str]:
    """path -> "served (file:line)" for each of ENDPOINTS that the release's HTTP server declares."""
    found: dict[str, str] = {}
    try:
        hits = list(tree.grep(r"@(app|router)\.(get|post|put|api_route)\(|add_prometheus_middleware\(app"))
    except KitError:
        return found
    hits.sort(key=lambda h: (not h.path.endswith("entrypoints/http_server.py"), h.path, h.line))
    for hit in hits:  # sglang's HTTP server: srt/entrypoints/ (not the encoder's or multimodal_gen's servers)
        if not short_path(hit.path).startswith("srt/entrypoints/"):
            continue
        m = re.search(r"""\(\s*["']([^"']+)["']""", hit.text)
        where = f"{short_path(hit.path)}:{hit.line}"
        if "add_prometheus_middleware(app" in hit.text:
            found.setdefault("/metrics", f"served with --enable-metrics ({where})")
        elif m and m.group(1) in ENDPOINTS:
            found.setdefault(m.group(1), f"served ({where})")
    return found


def _get(url: str | None, path: str, timeout: float) -> tuple[int, str, float]:
    if not url:
        raise CaseError("the server has no URL the kit can reach", hint="give --port")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url.rstrip("/") + path, timeout=timeout) as resp:  # noqa: S310
            return resp.status, resp.read(4_000_000).decode("utf-8", errors="replace"), time.monotonic() - started
    except urllib.error.HTTPError as err:
        body = err.read(2000).decode("utf-8", errors="replace") if err.fp else ""
        where = "; the server's log holds its traceback" if err.code >= 500 else ""
        raise CaseError(f"GET {path} answered HTTP {err.code}: {body.strip()[:200]}{where}") from None
    except (urllib.error.URLError, OSError) as err:
        raise CaseError(f"GET {path}: {getattr(err, 'reason', err)} (timeout {timeout:g} s)") from None


def _metrics_on(server, url, timeout: float) -> bool:
    """Whether the server serves /metrics: its --enable-metrics (argv), else its /server_info says."""
    if "--enable-metrics" in server.argv:
        return True
    try:
        info = server.server_info(timeout=timeout)
    except KitError:
        return False
    return bool((info.get("server_args") or info).get("enable_metrics"))


def _log(server) -> str:
    head = server.log_head(LOG_HEAD)
    tail = server.log_tail(LOG_TAIL)
    # the doctor reads the same lines (kit.target.ServerProcess.prefetched): the answer is the case's
    server.prefetched["head"] = (LOG_HEAD, base64.b64encode("\n".join(head).encode()).decode())
    server.prefetched["tail"] = (LOG_TAIL, base64.b64encode("\n".join(tail).encode()).decode())
    if len(head) < LOG_HEAD:  # the whole log is shorter than the head: it is all there
        return "\n".join(head) + "\n"
    return "\n".join(head) + f"\n[... lines between the first {LOG_HEAD} and the last {LOG_TAIL} not captured ...]\n" \
        + "\n".join(tail) + "\n"


def _flag_of(argv: list[str], i: int) -> str:
    """The flag whose value ``argv[i]`` is (``--api-key KEY`` or ``--api-key=KEY``), as a field name."""
    word = argv[i] if argv[i].startswith("-") and "=" in argv[i] else argv[i - 1] if i else "argv"
    return word.split("=", 1)[0].lstrip("-").replace("-", "_") if word.startswith("-") else "a URL's password"


def _launch_text(argv: list[str]) -> str:
    """The argv as a script: the program, then one flag (and its value) per line."""
    if not argv:
        return ""
    lines, i = [shlex.join(argv[:1])], 1
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("-"):
            j += 1
        lines.append("  " + shlex.join(argv[i:j]))
        i = j
    return " \\\n".join(lines) + "\n"


def _gpus(host, timeout: float) -> dict[str, str]:
    from kit.hardware import QUERY

    if not host.run(["sh", "-c", "command -v nvidia-smi"], timeout=timeout).ok:
        raise CaseError(f"nvidia-smi is not found on {host.name} (no NVIDIA GPU visible)")
    out = {}
    for name, argv in (("nvidia-smi.txt", ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv"]),
                       ("topo.txt", ["nvidia-smi", "topo", "-m"]), ("topo-p2p.txt", ["nvidia-smi", "topo", "-p2p", "r"])):
        res = host.run(argv, timeout=timeout)
        if res.ok and res.stdout.strip():
            out[name] = res.stdout
    return out


def _check_env(host, server, timeout: float) -> str:
    if not server.python:
        raise CaseError("the server's python is not known")
    res = host.run([server.python, "-m", "sglang.check_env"], timeout=timeout)
    if not res.ok:
        said = (res.stderr or res.stdout).strip().splitlines()
        raise CaseError(f"exit {res.exited}: {said[-1] if said else 'no output'}")
    return res.stdout


def _request() -> dict:
    return {"text": "The capital of France is",
            "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "top_p": 1.0},
            "stream": False, "curl": "curl -s -X POST $URL/generate -H 'Content-Type: application/json' -d @request.json"}


def _masked_names(data) -> list[str]:
    from kit._secrets import MASK

    out: list[str] = []

    def walk(v, name=""):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, str(k))
        elif isinstance(v, list):
            for x in v:
                walk(x, name)
        elif v == MASK:
            out.append(name)

    walk(data)
    return sorted(set(out))


def _record_sha(host, server) -> str | None:
    import hashlib
    import posixpath

    if not server.sglang_dir or not server.sglang_version:
        raise CaseError("the server's sglang directory is not known")
    site = posixpath.dirname(server.sglang_dir.rstrip("/"))
    res = host.run(["sh", "-c", 'cat "$1"/sglang-"$2".dist-info/RECORD', "sh", site, server.sglang_version],
                   timeout=30)
    if not res.ok:
        raise CaseError(f"no sglang-{server.sglang_version}.dist-info/RECORD in {site}")
    return hashlib.sha256(res.stdout.encode()).hexdigest()


def _wheel_sha(version: str | None) -> str | None:
    import hashlib

    from kit._paths import cache_dir
    from kit._wheels import cached_wheel

    if not version:
        return None
    found = cached_wheel(cache_dir() / "wheels", "sglang", version)
    return hashlib.sha256(found.read_bytes()).hexdigest() if found else None


def _excerpts(tree, diagnosis, w: _Writer) -> list[Excerpt]:
    """The lines every finding cites (its ``sites``), with the whole file's hash, one file per source file."""
    wanted = cited_sites(diagnosis)
    out = []
    for path, lines in sorted(wanted.items()):
        try:
            text = tree.read_text(path)
        except KitError:
            continue
        body = cited_lines(text.splitlines(), lines, EXCERPT_CONTEXT)
        name = f"{SOURCES_DIR}/{short_path(path).replace('/', '__')}.txt"
        excerpt_text = f"# {short_path(path)} (sha256 {sha256_text(text)})\n" + "\n".join(body) + "\n"
        w.text(name, excerpt_text, f"the lines of {short_path(path)} the findings cite")
        written = (w.path / name).read_text(encoding="utf-8")
        out.append(Excerpt(short_path(path), sha256_text(text), sha256_text(written), name, sorted(lines)))
    return out
