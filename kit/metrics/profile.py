"""Profile a running sglang server: ``/start_profile`` with that version's parameters, load, the traces.

:func:`profile_api` reads, from the server's own sglang source (``kit.source``), the request model
of ``/start_profile`` and its fields, with ``file:line``: the handler in
``srt/entrypoints/http_server.py`` names its body type (0.5.11: ``ProfileReqInput``,
http_server.py:948-950; 0.5.23: ``ProfileReq``, http_server.py:1221-1223), and that class in
``srt/managers/io_struct.py`` declares the fields (0.5.11: io_struct.py:1673; 0.5.23: 2374).
Only fields the version declares are sent.

:func:`profile_server` then, each call with a timeout:

1. POSTs ``/start_profile`` with ``output_dir`` (a new directory on the server's host), ``start_step``
   1, ``num_steps`` and ``activities`` (``["CPU"]`` on a CPU server, else ``["CPU", "GPU"]``).
   ``start_step`` 1 starts at the next forward step (``max(start_step, forward_ct + 1)``, 0.5.11
   srt/managers/scheduler_profiler_mixin.py:117-118), and only with it (or ``profile_by_stage``) does
   the scheduler return ``init_profile``'s answer, so that a profile already running is refused
   (scheduler_profiler_mixin.py:381-382; 0.5.23 srt/managers/scheduler_components/profiler_manager.py:
   460-462). Without it the answer is dropped and a second profiler starts over the first
   (0.5.11 scheduler_profiler_mixin.py:393-407);
2. drives load with :func:`kit.bench.bench` while the profiler records;
3. waits for the ``*.trace.json.gz`` files (sglang stops by itself after ``num_steps`` forward
   steps: ``profiler_target_forward_ct``, 0.5.11 srt/managers/scheduler_profiler_mixin.py:118-130),
   and POSTs ``/stop_profile`` when the load ended before that;
4. copies each file from the server's host over ``kit.hosts`` (``cat`` streamed, so it works over
   SSH) and summarizes each rank (:func:`kit.metrics.trace.summarize_trace`), then groups the
   collectives across ranks (:func:`kit.metrics.collectives.group_collectives`).

What a refusal looks like, read from the source: the tokenizer raises ``RuntimeError(message)`` when
the scheduler answers ``success=False`` (0.5.11 srt/managers/tokenizer_control_mixin.py:366-369),
which FastAPI turns into HTTP 500 with no message; the message ("Profiling is already in progress.
Call /stop_profile first.", scheduler_profiler_mixin.py:96-99) is in the server's log.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import textwrap
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kit._text import short_path
from kit.errors import KitError, MetricsError, TraceError

__all__ = ["ProfileApi", "ProfileRun", "profile_api", "profile_server"]

HANDLER = "srt/entrypoints/http_server.py"
IO_STRUCT = "srt/managers/io_struct.py"
_BODY = re.compile(r"Optional\[(\w+)\]")
_TRACE = re.compile(r"\.trace\.json(\.gz)?$")


@dataclass
class ProfileApi:
    """What ``/start_profile`` accepts in one sglang version, each fact with its site."""

    version: str | None
    request_class: str = ""
    fields: dict = field(default_factory=dict)  # name -> (annotation, default) as written in the source
    class_site: str = ""
    handler_site: str = ""
    stop_site: str = ""

    def body(self, **wanted) -> tuple[dict, list[str]]:
        """The JSON body with the ``wanted`` fields this version declares, and the ones it does not."""
        body = {k: v for k, v in wanted.items() if k in self.fields and v is not None}
        return body, sorted(k for k, v in wanted.items() if k not in self.fields and v is not None)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ProfileRun:
    url: str
    api: ProfileApi
    body: dict
    remote_dir: str
    local_dir: str
    files: list = field(default_factory=list)  # local paths of the copied traces
    summaries: list = field(default_factory=list)  # kit.metrics.trace.TraceSummary
    failed: list = field(default_factory=list)  # (path, TraceError)
    collectives: object = None  # kit.metrics.collectives.Collectives
    load: dict = field(default_factory=dict)  # the bench's numbers, or its error
    stopped_by: str = ""  # "num_steps" (sglang stopped itself) or "/stop_profile"
    problems: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"url": self.url, "api": self.api.to_dict(), "body": self.body, "remote_dir": self.remote_dir,
                "local_dir": self.local_dir, "files": self.files, "stopped_by": self.stopped_by,
                "load": self.load, "problems": self.problems,
                "traces": [s.to_dict() for s in self.summaries],
                "collectives": self.collectives.to_dict() if self.collectives else None,
                "failed": [{"path": p, "error": e.message, "hint": e.hint} for p, e in self.failed]}

    def to_text(self) -> str:
        a = self.api
        lines = [f"{self.url}: sglang {a.version or '?'}; POST /start_profile takes {a.request_class} "
                 f"({a.class_site}, handler {a.handler_site})",
                 f"  sent {json.dumps(self.body)}; stopped by {self.stopped_by or '?'}",
                 f"  load: {self.load.get('text') or self.load.get('error', '-')}",
                 f"  traces: {len(self.files)} file(s) from {self.remote_dir}, copied to {self.local_dir}"]
        lines += [f"  problem: {p}" for p in self.problems]
        out = "\n".join(lines) + "\n\n" + "\n".join(s.to_text() for s in self.summaries)
        if self.collectives is not None:
            out += "\n" + self.collectives.to_text()
        for path, err in self.failed:
            out += f"\n{path}: not summarized: {err.message}\n  -> {err.hint}\n"
        return out


def profile_api(tree) -> ProfileApi:
    """The request model of ``/start_profile`` in ``tree`` (a kit.source.SourceTree), read from its source."""
    api = ProfileApi(getattr(tree, "version", None))
    found = [m for m in tree.grep('"/start_profile"', glob="http_server.py", fixed=True, max_matches=20)
             if m.path.endswith(HANDLER)]
    if not found:
        raise MetricsError(f"sglang {api.version} has no /start_profile route in {HANDLER}",
                           hint="this release cannot be profiled over HTTP; use its own profiler CLI")
    route = found[0]
    handler = tree.read(route.path, route.line, route.line + 4)
    api.handler_site = f"{short_path(route.path)}:{route.line}"
    for n in range(handler.start, handler.end + 1):
        m = _BODY.search(handler.line(n)) if "def " in handler.line(n) else None
        if m:
            api.request_class, api.handler_site = m.group(1), f"{short_path(route.path)}:{route.line}-{n}"
            break
    if not api.request_class:
        raise MetricsError(f"cannot tell the body type of /start_profile at {api.handler_site} in sglang "
                           f"{api.version}", hint="read the handler there and send the fields it takes")
    stop = [m for m in tree.grep('"/stop_profile"', glob="http_server.py", fixed=True, max_matches=20)
            if m.path.endswith(HANDLER)]
    api.stop_site = f"{short_path(stop[0].path)}:{stop[0].line}" if stop else ""
    snippet = tree.function(api.request_class, path=_in_tree(tree, IO_STRUCT))
    line = next((n for n in range(snippet.start, snippet.end + 1) if snippet.line(n).lstrip().startswith("class ")),
                snippet.start)
    api.class_site = f"{short_path(snippet.path)}:{line}"
    node = ast.parse(textwrap.dedent("\n".join(snippet.lines))).body[0]
    for stmt in getattr(node, "body", []):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            api.fields[stmt.target.id] = (ast.unparse(stmt.annotation),
                                          ast.unparse(stmt.value) if stmt.value is not None else None)
    return api


def _in_tree(tree, rel: str) -> str:
    hits = [p for p in tree.files(f"**/{posixpath.basename(rel)}") if p.endswith(rel)]
    return hits[0] if hits else rel


def _post(url: str, path: str, body: dict | None, timeout: float) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url + path, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as err:
        raise MetricsError(f"POST {url}{path} failed: {getattr(err, 'reason', err)}", url=url + path,
                           hint="is the server up? check `sgl-kit lab status` or its /health") from None


def _refused(url: str, path: str, status: int, text: str, log_tail: list[str]) -> MetricsError:
    said = [line.strip() for line in log_tail if "in progress" in line] or \
        [line.strip() for line in log_tail if "rofil" in line and "Error" in line]
    if status in (404, 405, 501):
        return MetricsError(f"POST {url}{path}: HTTP {status}: no such endpoint (not an sglang server, or a "
                            "release without HTTP profiling)", url=url + path,
                            hint="point it at the sglang server itself (--port N when the box runs several; "
                                 "`sgl-kit lab up --engine sglang` for a real one on this machine), or summarize "
                                 "traces you have with --trace FILE")
    if status in (401, 403):
        return MetricsError(f"POST {url}{path}: HTTP {status}: the server wants its admin API key",
                            url=url + path, hint="sglang's /start_profile is admin-only when --admin-api-key or "
                                                 "--api-key is set; profile from a shell that has the key")
    if status == 422 or status == 400:
        return MetricsError(f"POST {url}{path}: HTTP {status}: the server rejected the body: {text[:200]}",
                            url=url + path, hint="the fields differ in this release; see `sgl-kit source` of "
                                                 "io_struct.py")
    why = f" (the server's log: {said[-1][-160:]})" if said else ""
    return MetricsError(f"POST {url}{path}: HTTP {status}: sglang refused to profile{why}", url=url + path,
                        hint="another profile may be running (sglang answers 500 and logs \"Profiling is already in "
                             "progress\"): wait for it, or POST /stop_profile, then try again")


def _list(host, remote_dir: str, timeout: float) -> dict[str, int]:
    res = host.run(["find", remote_dir, "-maxdepth", "1", "-type", "f", "-printf", "%s %p\n"], timeout=timeout)
    out = {}
    for line in res.stdout.splitlines():
        size, _, path = line.partition(" ")
        if _TRACE.search(path) and size.isdigit():
            out[path] = int(size)
    return out


def _copy(host, remote: str, local: Path, timeout: float) -> None:
    with open(local, "wb") as fh, host.stream(["cat", remote], timeout=timeout) as stream:
        for name, data in stream:
            if name == "stdout":
                fh.write(data)


def _is_cpu(server) -> bool:
    argv = list(getattr(server, "argv", None) or [])
    env = getattr(server, "env", None) or {}
    if env.get("SGLANG_USE_CPU_ENGINE") == "1":
        return True
    return any(a == "--device" and i + 1 < len(argv) and argv[i + 1] == "cpu" for i, a in enumerate(argv)) or \
        "--device=cpu" in argv


def profile_server(server, *, steps: int = 8, local_dir: str | os.PathLike, tree=None, activities=None,
                   load: dict | None = None, timeout: float = 30.0, wait: float = 180.0, top: int = 10,
                   progress=None) -> ProfileRun:
    """Profile a discovered server (kit.target.ServerProcess) for ``steps`` forward steps under load.

    ``load``: the :class:`kit.bench.BenchConfig` fields (default: 2 streams of 16 tokens, 4 requests);
    ``timeout``: each HTTP call and each command on the host; ``wait``: how long the traces may take
    to appear once the load is done. Traces that cannot be summarized are in ``failed``; the rest count.
    """
    from .collectives import group_collectives
    from .trace import summarize_trace

    say = progress or (lambda text: None)
    if not getattr(server, "url", None):
        raise MetricsError(f"the server pid {server.pid} has no URL the kit can reach",
                           hint="start it with --host 127.0.0.1 or reach it over SSH")
    url, host = server.url.rstrip("/"), server.host
    notes: list[str] = []
    tree = tree or _tree_of(server, url, timeout, notes)
    api = profile_api(tree)
    say(f"sglang {api.version}: /start_profile takes {api.request_class} ({api.class_site})")
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    remote_dir = posixpath.join("/tmp", f"sgl-kit-profile-{stamp}")
    host.run(["mkdir", "-p", remote_dir], timeout=timeout, check=True)
    local = Path(local_dir)  # made once the server has agreed to profile: a refusal leaves no empty directory
    acts = activities or (["CPU"] if _is_cpu(server) else ["CPU", "GPU"])
    body, unknown = api.body(output_dir=remote_dir, start_step=1, num_steps=steps, activities=acts)
    run = ProfileRun(url, api, body, remote_dir, str(local))
    run.problems += notes
    if unknown:
        run.problems.append(f"sglang {api.version}'s {api.request_class} has no {', '.join(unknown)}: not sent")
    status, text = _post(url, "/start_profile", body, timeout)
    if status != 200:
        host.run(["rmdir", remote_dir], timeout=timeout)  # empty: nothing was written there
        tail = _tail(server)
        if status == 500 and not any("in progress" in line for line in tail):
            time.sleep(1.0)  # the scheduler's message may reach the log just after the HTTP reply
            tail = _tail(server)
        raise _refused(url, "/start_profile", status, text, tail)
    say(f"profiling started: {text.strip()}")
    local.mkdir(parents=True, exist_ok=True)

    done = threading.Event()
    result: dict = {}

    def drive() -> None:
        from kit.bench import bench

        try:
            cfg = {"concurrency": 2, "requests": 4, "max_tokens": 16, "input_len": 32, "warmup": 0,
                   "request_timeout": max(timeout * 4, 60.0)}
            cfg.update(load or {})
            r = bench(url, out=local / "load.jsonl", progress=None, **cfg)
            result["text"] = (f"{len(r.results)} requests, {cfg['concurrency']} at a time, "
                              f"{cfg['max_tokens']} tokens each")
        except KitError as err:
            result["error"] = err.message
        finally:
            done.set()

    worker = threading.Thread(target=drive, name="kit-profile-load", daemon=True)
    worker.start()
    files: dict[str, int] = {}
    while not done.is_set():
        files = _list(host, remote_dir, timeout)
        done.wait(1.0)
    worker.join(timeout=timeout)
    run.load = result
    files = _settled(host, remote_dir, timeout, min(wait, 10.0))
    run.stopped_by = "num_steps" if files else ""
    if not files:
        status, text = _post(url, "/stop_profile", None, max(timeout, wait))
        if status != 200:
            run.problems.append(f"/stop_profile answered HTTP {status} ({text.strip()[:80]}); "
                                "sglang may have stopped by itself")
        run.stopped_by = "/stop_profile"
        files = _settled(host, remote_dir, timeout, wait)
    if not files:
        raise MetricsError(f"no trace appeared in {remote_dir} on {server.host_name} within {wait:.0f} s",
                           url=url, hint="check the server's log for 'Profiling done'; the directory must be "
                                         "writable by the server's user")
    for remote in sorted(files):
        dest = local / posixpath.basename(remote)
        say(f"copying {remote} ({files[remote]} bytes)")
        _copy(host, remote, dest, max(timeout, 600.0))
        run.files.append(str(dest))
        try:
            run.summaries.append(summarize_trace(dest, top=top))
        except TraceError as err:
            run.failed.append((str(dest), err))
    run.collectives = group_collectives(run.summaries)
    return run


def _tree_of(server, url: str, timeout: float, notes: list[str]):
    """The server's own sglang source; when its install cannot be located (the locate script timed out,
    the interpreter is gone), the source of the release it reports, from that release's wheel."""
    from kit.errors import PackageNotFound
    from kit.source import SourceTree

    try:
        return SourceTree.of_server(server)
    except PackageNotFound as err:
        version = server.sglang_version or _reported_version(url, timeout)
        if not version:
            raise MetricsError(f"cannot read the sglang source of pid {server.pid}: {err.message}, and "
                               f"{url}/server_info reports no version", url=url,
                               hint="is it an sglang server? give --package-dir DIR of its sglang") from None
        from kit._paths import tree_dir
        from kit._wheels import install_package_source
        from kit.hosts import LocalHost

        notes.append(f"the server's own sglang install was not located ({err.message}); read the source of the "
                     f"sglang {version} wheel it reports instead")
        return SourceTree.at(LocalHost(), install_package_source("sglang", version,
                                                                 prefix=str(tree_dir("sglang", version))))


def _reported_version(url: str, timeout: float) -> str | None:
    from kit.errors import HostError
    from kit.target import get_server_info

    try:
        return get_server_info(url, timeout=timeout).get("version")
    except HostError:
        return None


def _settled(host, remote_dir: str, timeout: float, wait: float) -> dict[str, int]:
    """The trace files once their sizes stop changing (two listings a second apart), or {} after ``wait``."""
    deadline = time.monotonic() + wait
    last: dict[str, int] = {}
    while True:
        now = _list(host, remote_dir, timeout)
        if now and now == last:
            return now
        last = now
        if time.monotonic() > deadline:
            return now
        time.sleep(1.0)


def _tail(server) -> list[str]:
    try:
        return server.log_tail(40)
    except Exception:  # noqa: BLE001 - the log only adds detail to the refusal
        return []
