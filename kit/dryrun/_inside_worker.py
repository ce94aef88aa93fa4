"""The warm dry-run worker: sglang imported once, resolve requests answered on a Unix socket.

It runs inside the dry-run virtualenv, started by ``python _inside.py --serve ...`` (which
loads this file by path, like ``_inside.py`` itself: standard library only). One JSON line
in, one JSON line out per connection: ``{"op": "ping"}``, ``{"op": "stop"}``, or a resolve
request exactly as ``_inside.py --resolve`` reads it. Each launch runs in its own fork of
the worker as it was right after the import, so no request sees another's state; the
worker itself never runs sglang's argument code, and a launch past its timeout is killed.
It exits after ``idle`` seconds without a request, on ``{"op": "stop"}`` or on SIGTERM.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import traceback

_READ_TIMEOUT = 30.0  # a client that connects and sends nothing must not hold the worker


def serve(inside, path: str, idle: float, stubs, state_file: str) -> int:
    digest = os.environ.pop("SGL_KIT_INSIDE_DIGEST", "")  # the kit's, not the server's: gone before the import
    loaded = inside.load_sglang(None, stubs)
    info = loaded[0]
    if os.path.exists(path):
        os.unlink(path)  # the kit starts a worker only when no live one answers here
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o077)
    try:
        server.bind(path)
    finally:
        os.umask(old_mask)
    server.listen(16)
    stop: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    state = {"pid": os.getpid(), "socket": path, "started": time.time(), "idle_timeout": idle,
             "import_seconds": info["import_seconds"], "versions": info["versions"],
             "stand_ins": info["stand_ins"], "inside": digest}
    _write_json(state_file, state)
    _say(f"ready on {path} after {info['import_seconds']:.1f}s import; exits after {idle:g}s idle")
    served, last = 0, time.monotonic()
    try:
        while not stop:
            left = idle - (time.monotonic() - last)
            if left <= 0:
                _say(f"idle for {idle:g}s, exiting")
                break
            try:
                ready = select.select([server], [], [], min(left, 1.0))[0]
            except InterruptedError:
                continue
            if not ready:
                continue
            conn, _ = server.accept()
            now = dict(state, served=served, idle_seconds=round(time.monotonic() - last, 1))
            with conn:
                op = _answer(inside, conn, loaded, now)
            served += op == "resolve"
            last = time.monotonic()
            if op == "stop":
                _say("stopped on request")
                break
    finally:
        server.close()
        if _read_json(state_file).get("pid") == os.getpid():  # not a successor's files
            for leftover in (path, state_file):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass
    return 0


def _answer(inside, conn, loaded, state: dict) -> str:
    op = "?"
    conn.settimeout(_READ_TIMEOUT)
    try:
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                return op
            data += chunk
        request = json.loads(data)
        op = request.get("op", "resolve")
        if op in ("ping", "stop"):
            reply = {"protocol": inside.PROTOCOL, "ok": True, "op": op, **state}
        else:
            op = "resolve"
            try:
                reply = inside.run_request(request, loaded)
            except Exception as exc:
                reply = {"protocol": inside.PROTOCOL, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc()[-8000:]}
        conn.sendall(json.dumps(reply).encode() + b"\n")
    except (OSError, ValueError) as exc:
        _say(f"a request failed: {type(exc).__name__}: {exc}")
    return op


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] dry-run worker {os.getpid()}: {text}", file=sys.stderr, flush=True)


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}
