"""The server processes on this host, read from /proc: argv, environment, log, interpreter, package.

Run as ``python -c <this file> JSON`` where JSON holds ``launchers`` (how to recognise a
server by its argv; see kit/data/launchers.json), ``keep`` (prefixes of environment
variables worth reporting), ``secret_pattern`` (the regular expression of kit/_secrets.py
that marks a variable's value as secret)
and ``locate`` (the text of the locate script, run with each server's own interpreter
to find the package it imports). Standard library only; compatible with Python 3.6.

With ``prefetch`` (``{"head": N, "tail": N, "server_info": SECONDS, "probes": true}``), each
server also carries what a diagnosis reads next, so it costs no further round trip: the
output of ``head -n N`` and ``tail -n N`` of its log, the body of ``GET /server_info`` (asked
on the host, at the address the server listens on), and for the hardware probes ``uname -m``
and the text of its torch's ``cpu/__init__.py`` (None when it cannot be read). Bytes travel as base64; whatever fails is
left out, and the kit then asks for it the usual way.
"""

import base64
import json
import os
import re
import subprocess
import sys

MARKER = "KIT-RESULT "


def read(path, mode="rb"):
    try:
        with open(path, mode) as fh:
            return fh.read()
    except OSError:
        return None


def match(launcher, argv, i):
    """Index of the first server flag when argv[i] starts this launcher, else None."""
    arg, nxt = argv[i], argv[i + 1:i + 3]
    sub = launcher.get("subcommand")
    if "module" in launcher and arg == "-m" and nxt[:1] == [launcher["module"]]:
        if sub is None:
            return i + 2
        if nxt[1:2] == [sub]:
            return i + 3
    if "module_suffix" in launcher and arg == "-m" and nxt[:1] and nxt[0].endswith(launcher["module_suffix"]):
        return i + 2
    if "program" in launcher and os.path.basename(arg) == launcher["program"] and nxt[:1] == [sub]:
        return i + 2
    if "script" in launcher and os.path.basename(arg) == launcher["script"] and i <= 1:
        return i + 1
    return None


def kind_of(argv, launchers):
    for i in range(len(argv)):
        for launcher in launchers:
            at = match(launcher, argv, i)
            if at is not None:
                return launcher, at
    return None, 0


def option(flags, name, default):
    value = default
    for i, tok in enumerate(flags):
        if tok == name and i + 1 < len(flags):
            value = flags[i + 1]
        elif tok.startswith(name + "="):
            value = tok.split("=", 1)[1]
    return value


def interpreter(pid, argv, env, cwd):
    first = argv[0] if argv else ""
    if first.startswith("/"):
        return first
    if "/" in first and cwd:
        return os.path.normpath(os.path.join(cwd, first))
    for d in (env or {}).get("PATH", "").split(":"):
        if d and first and os.access(os.path.join(d, first), os.X_OK):
            return os.path.join(d, first)
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None


def package_of(python, env, cwd, locate_text, package):
    """(package dir, version) as the server's own interpreter sees them, via the locate script."""
    if not python or not locate_text:
        return None, None
    run_env = {k: v for k, v in (env or {}).items() if k in ("PATH", "PYTHONPATH", "HOME", "VIRTUAL_ENV")}
    try:
        res = subprocess.run([python, "-c", locate_text, package], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=20, env=run_env or None,
                             cwd=cwd if cwd and os.path.isdir(cwd) else None)
    except (OSError, subprocess.SubprocessError):
        return None, None
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                info = json.loads(line[len(MARKER):])
            except ValueError:
                return None, None
            return (info.get("package_dir"), info.get("version")) if info.get("found") else (None, None)
    return None, None


def log_of(pid):
    notes = []
    for fd in (1, 2):
        try:
            target = os.readlink("/proc/%d/fd/%d" % (pid, fd))
        except OSError:
            notes.append("fd %d unreadable" % fd)
            continue
        deleted = target.endswith(" (deleted)")
        if target.startswith("/") and not target.startswith(("/dev/pts", "/dev/tty", "/dev/null")):
            return (target[:-10] if deleted else target), ("deleted since" if deleted else "")
        notes.append("fd %d is %s" % (fd, target.split(":")[0]))
    return None, "; ".join(notes)


def boot_time():
    for line in (read("/proc/stat", "r") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def servers(request):
    launchers = request.get("launchers", [])
    keep = tuple(request.get("keep", ()))
    secret_name = re.compile(request["secret_pattern"], re.S)
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    boot = boot_time()
    found, pids, parents = [], {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        raw = read("/proc/%s/cmdline" % name)
        if not raw:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        parents[int(name)] = argv
        launcher, at = kind_of(argv, launchers)
        if launcher:
            pids[int(name)] = (launcher, at, argv)
    for pid, (launcher, at, argv) in sorted(pids.items()):
        stat = (read("/proc/%d/stat" % pid, "r") or ") 0 0").rsplit(")", 1)[1].split()
        if int(stat[1]) in pids:
            continue  # a forked child of a server we already list
        raw_env = read("/proc/%d/environ" % pid)
        env = None
        if raw_env is not None:
            env = dict(p.decode("utf-8", "replace").partition("=")[::2] for p in raw_env.split(b"\0") if p)
        try:
            cwd = os.readlink("/proc/%d/cwd" % pid)
        except OSError:
            cwd = None
        python = interpreter(pid, argv, env, cwd)
        root, version = package_of(python, env, cwd, request.get("locate"), request.get("package", "sglang"))
        log, note = log_of(pid)
        shown = {}
        for k, v in sorted((env or {}).items()):
            if k.startswith(keep):
                shown[k] = "<redacted>" if secret_name.match(k) and v else v
        flags = argv[at:]
        labels = {label: (env or {}).get(var) for label, var in sorted(launcher.get("labels", {}).items())}
        found.append({
            "pid": pid, "kind": launcher["kind"], "argv": argv, "cwd": cwd, "env": shown,
            "env_readable": env is not None, "log_path": log, "log_note": note, "python": python,
            "sglang_dir": root, "sglang_version": version, "bind_host": option(flags, "--host", "127.0.0.1"),
            "port": int(option(flags, "--port", "30000")), "labels": labels,
            "started_at": boot + int(stat[19]) / ticks if len(stat) > 19 else None,
            "children": children_of(pid, parents),
        })
    return found


def b64(data):
    return base64.b64encode(data).decode("ascii")


def command_output(argv):
    """stdout of a command as base64 (whatever its exit status, as the kit reads it), or None."""
    try:
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return b64(res.stdout)


def http_body(url, timeout):
    """The body of a 200 answer to GET url, as base64, or None."""
    try:
        from urllib.request import urlopen

        resp = urlopen(url, timeout=timeout)
        try:
            return b64(resp.read()) if resp.getcode() == 200 else None
        finally:
            resp.close()
    except Exception:  # noqa: BLE001 - any failure: the kit asks again through its own URL
        return None


def prefetched(server, want):
    """What the kit reads next about one server, fetched in this same round trip."""
    out = {}
    log = server["log_path"]
    for name in ("head", "tail"):
        lines = want.get(name)
        if log and isinstance(lines, int) and lines > 0:
            found = command_output([name, "-n", str(lines), log])
            if found is not None:
                out[name] = [lines, found]
    timeout = want.get("server_info")
    if timeout:
        bind = server["bind_host"]
        address = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        address = "[%s]" % address if ":" in address else address
        body = http_body("http://%s:%d/server_info" % (address, server["port"]), float(timeout))
        if body is not None:
            out["server_info"] = body
    if want.get("probes") and server["sglang_dir"]:
        path = os.path.join(os.path.dirname(server["sglang_dir"].rstrip("/")), "torch", "cpu", "__init__.py")
        text = read(path)  # None: not readable here either, so the kit does not ask again
        out["torch_cpu"] = [path, b64(text) if text is not None else None]
    return out


def children_of(pid, processes):
    """The direct children of pid (sglang's scheduler and detokenizer rename themselves, with no arguments)."""
    out = []
    for child, argv in sorted(processes.items()):
        stat = (read("/proc/%d/stat" % child, "r") or ") 0 0").rsplit(")", 1)[1].split()
        if len(stat) > 1 and int(stat[1]) == pid:
            out.append({"pid": child, "name": argv[0] if argv else "", "argv": argv})
    return out


def main():
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    found = servers(request)
    answer = {"servers": found}
    want = request.get("prefetch")
    if isinstance(want, dict):
        for server in found:
            server["prefetched"] = prefetched(server, want)
        if want.get("probes"):
            try:
                answer["machine"] = os.uname()[4]
            except (AttributeError, OSError):
                pass
    print(MARKER + json.dumps(answer))


if __name__ == "__main__":
    main()
