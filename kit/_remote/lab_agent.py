"""The lab's agent on the host that runs the lab: prepare the directory, start, stop, report.

The kit sends this file's text and runs it as ``python3 -c <text> OP JSON`` on the lab's
host, locally or over SSH, so it uses the standard library only and stays compatible with
old Python 3 versions. It prints one line, ``KIT-RESULT <json>``. Nothing here knows about SGLang flags:
the kit decides what to launch; the agent makes the box look like the incident's
(``ml-env`` with the real sglang source, ``models/``, ``logs/server.log``) and keeps
track of the one server it started. ``relaunch`` restarts a server process it is pointed at
with a new argv (the guided validation, when a person asks for it).
"""

import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

LAB_ENV = "SGL_KIT_LAB_DIR"
LAUNCHER = "kit.lab.launch_server"
HEALTH_TIMEOUT = 10.0  # one GET /health while a server starts (sglang's own takes a second or more)
MARKER = "KIT-RESULT "


def out(obj):
    sys.stdout.write(MARKER + json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------- files


def op_info(args):
    libc = platform.libc_ver()
    return {
        "python": platform.python_version(),
        "version_info": list(sys.version_info[:2]),
        "executable": os.path.realpath(sys.executable),
        "machine": platform.machine(),
        "libc": [libc[0], libc[1]],
        "home": os.path.expanduser("~"),
        "lab_dir": os.path.abspath(os.path.expanduser(args.get("lab_dir") or "~/.cache/sglang-investigation-kit/lab")),
    }


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def op_have(args):
    found = {}
    for path in args["paths"]:
        found[path] = sha256_of(path) if os.path.isfile(path) else None
    return {"have": found}


def op_put(args):
    path = args["path"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "wb") as fh:
        shutil.copyfileobj(sys.stdin.buffer, fh)
    os.replace(tmp, path)
    return {"path": path, "sha256": sha256_of(path)}


# ---------------------------------------------------------------------------- prepare


def op_prepare(args):
    lab = args["lab_dir"]
    for sub in ("models", "logs", "run", "wheels"):
        os.makedirs(os.path.join(lab, sub), exist_ok=True)
    site = make_env(lab, args["python"], args["pyver"])
    installed = [install_wheel(site, w) for w in args.get("wheels", [])]
    if args.get("pth"):
        with open(os.path.join(site, "sgl_kit_lab.pth"), "w") as fh:
            fh.write(args["pth"])
    for rel, text in (args.get("files") or {}).items():
        path = os.path.join(lab, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    return {"lab_dir": lab, "site": site, "python": os.path.join(lab, "ml-env", "bin", "python"),
            "installed": installed}


def make_env(lab, python, pyver):
    """A virtual environment by hand: a symlinked interpreter and pyvenv.cfg (PEP 405).

    No `venv` module is needed, which Debian's python3 lacks without python3-venv.
    """
    env = os.path.join(lab, "ml-env")
    bindir = os.path.join(env, "bin")
    site = os.path.join(env, "lib", "python" + pyver, "site-packages")
    os.makedirs(bindir, exist_ok=True)
    os.makedirs(site, exist_ok=True)
    for name in ("python", "python3", "python" + pyver):
        link = os.path.join(bindir, name)
        if os.path.islink(link) and os.readlink(link) == python:
            continue
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(python, link)
    with open(os.path.join(env, "pyvenv.cfg"), "w") as fh:
        fh.write(f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\nversion = {pyver}\n")
    return site


def install_wheel(site, wheel):
    """Unzip a wheel into site-packages, replacing what an older copy of it installed."""
    digest = sha256_of(wheel)
    name = os.path.basename(wheel)
    dist = name.split("-")[0].lower()
    marker = os.path.join(site, f".sgl-kit-{dist}.installed")
    if os.path.isfile(marker) and open(marker).read().strip() == digest:
        return {"wheel": name, "changed": False}
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        tops = set(n.split("/")[0] for n in names)
        for bad in names:
            if bad.startswith("/") or ".." in bad.split("/"):
                raise ValueError(f"unsafe member {bad!r} in {name}")
        remove_old(site, dist, tops)
        zf.extractall(site)
    with open(marker, "w") as fh:
        fh.write(digest + "\n")
    return {"wheel": name, "changed": True}


def remove_old(site, dist, tops):
    for entry in os.listdir(site):
        low = entry.lower()
        is_old_meta = low.endswith(".dist-info") and low.split("-")[0].replace(".", "_") == dist
        if entry in tops or is_old_meta:
            path = os.path.join(site, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


# ---------------------------------------------------------------------------- processes


def proc_start_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def proc_argv(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def proc_env(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            pairs = fh.read().split(b"\0")
    except OSError:
        return None
    env = {}
    for pair in pairs:
        key, _, value = pair.decode("utf-8", "replace").partition("=")
        if key:
            env[key] = value
    return env


def read_state(lab):
    try:
        with open(os.path.join(lab, "run", "server.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def is_ours(lab, state):
    """The recorded PID still runs the lab server of this directory (not a reused PID)."""
    if not state:
        return False
    pid = int(state.get("pid", 0))
    if pid <= 0 or proc_start_ticks(pid) != state.get("start_ticks"):
        return False
    if not any((state.get("launcher") or LAUNCHER) in a for a in proc_argv(pid)):
        return False
    env = proc_env(pid)
    return env is None or env.get(LAB_ENV) == lab


def probe_host(host):
    return "127.0.0.1" if host in ("0.0.0.0", "", "::", "localhost") else host


def healthy(host, port, timeout=2.0):
    try:
        with urllib.request.urlopen(f"http://{probe_host(host)}:{port}/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


def port_taken(host, port):
    try:
        with socket.create_connection((probe_host(host), port), timeout=1.0):
            return True
    except OSError:
        return False


def log_tail(lab, lines=30):
    return file_tail(os.path.join(lab, "logs", "server.log"), lines)


def status(lab):
    state = read_state(lab)
    ours = is_ours(lab, state)
    result = {"lab_dir": lab, "running": ours, "state": state, "log": os.path.join(lab, "logs", "server.log")}
    if ours:
        result["healthy"] = healthy(state["host"], state["port"])
    return result


def op_status(args):
    return status(args["lab_dir"])


def op_pick_port(args):
    """The first port from ``port`` on (at most ``tries`` of them) where nothing listens, and who holds
    ``port`` when that one is taken."""
    host, port = args["host"], int(args["port"])
    if not port_taken(host, port):
        return {"port": port}
    for candidate in range(port + 1, min(port + 1 + int(args.get("tries", 200)), 65536)):
        if not port_taken(host, candidate) and can_bind(host, candidate):
            return {"port": candidate, "holder": port_holder(port)}
    raise RuntimeError(f"no free port from {port} to {port + int(args.get('tries', 200))} on {host}")


def can_bind(host, port):
    """A server could listen there (servers set SO_REUSEADDR, so a closing connection does not count)."""
    address = host or "0.0.0.0"
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
        return True
    except OSError:
        return False


def op_start(args):
    lab = args["lab_dir"]
    current = status(lab)
    if current["running"]:
        current["outcome"] = "already-running"
        return current
    host, port = args["host"], int(args["port"])
    if port_taken(host, port):
        return {"outcome": "port-in-use", "lab_dir": lab, "host": host, "port": port,
                "holder": port_holder(port)}
    proc = launch(lab, args["argv"], args.get("env") or {})
    state = {"pid": proc.pid, "start_ticks": proc_start_ticks(proc.pid), "argv": args["argv"], "host": host,
             "port": port, "started_at": time.time(), "label": args.get("label"),
             "scenario": (args.get("env") or {}).get("SGL_KIT_LAB_SCENARIO")}
    for key in ("launcher", "engine", "model"):  # a lab engine other than the stand-in says what it runs
        if args.get(key):
            state[key] = args[key]
    with open(os.path.join(lab, "run", "server.json"), "w") as fh:
        json.dump(state, fh)
    with open(os.path.join(lab, "run", "server.pid"), "w") as fh:
        fh.write(f"{proc.pid}\n")
    return wait_healthy(lab, proc, state, float(args.get("timeout", 60)))


ROTATED = 5  # earlier logs kept as server.log.1 (the last run) .. server.log.5, as logrotate names them


def rotate(path, keep=ROTATED):
    """Move the last run's log to path.1 (and .1 to .2, ...), so a restart shows in the timeline."""
    for n in range(keep - 1, 0, -1):
        if os.path.exists(f"{path}.{n}"):
            os.replace(f"{path}.{n}", f"{path}.{n + 1}")
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        os.replace(path, f"{path}.1")


def op_port(args):
    """Whether a server could listen on the port: asked before minutes of preparing a real engine."""
    host, port = args["host"], int(args["port"])
    if port_taken(host, port):
        return {"outcome": "port-in-use", "host": host, "port": port, "holder": port_holder(port)}
    return {"outcome": "free", "host": host, "port": port}


def launch(lab, argv, extra_env):
    env = dict(os.environ)
    env.update(extra_env)
    env[LAB_ENV] = lab
    nohup = shutil.which("nohup")
    rotate(os.path.join(lab, "logs", "server.log"))
    log = open(os.path.join(lab, "logs", "server.log"), "wb")
    try:
        return subprocess.Popen(([nohup] if nohup else []) + list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=lab, env=env, start_new_session=True)
    finally:
        log.close()


def wait_healthy(lab, proc, state, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if state.get("launcher"):
                stop_group(proc.pid, 10.0)
            clear_state(lab)
            return {"outcome": "exited", "exit_code": code, "lab_dir": lab, "log_tail": log_tail(lab)}
        # sglang's /health generates one token and sleeps a second before it answers
        # (srt/entrypoints/http_server.py:505-556 in 0.5.11): a 1 s timeout misses it on busy cores
        if healthy(state["host"], state["port"], timeout=HEALTH_TIMEOUT):
            result = status(lab)
            result["outcome"] = "started"
            return result
        time.sleep(0.1)
    stop_pid(proc.pid, 5.0)
    if state.get("launcher"):
        stop_group(proc.pid, 10.0)
    clear_state(lab)
    return {"outcome": "timeout", "lab_dir": lab, "timeout": timeout, "log_tail": log_tail(lab)}


def port_holder(port):
    """PID and argv of the process listening on the port, when /proc lets us see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except (OSError, StopIteration):
            continue
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return {"pid": pid, "argv": proc_argv(pid)}
    return None


# ---------------------------------------------------------------------------- stop


def stop_pid(pid, timeout):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return False


def stop_group(pgid, timeout):
    """What is left of the server's own session (its workers), once the main process is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return False


def alive(pid):
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child (same session as the agent)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def clear_state(lab):
    for name in ("server.json", "server.pid"):
        try:
            os.unlink(os.path.join(lab, "run", name))
        except OSError:
            pass


def op_stop(args):
    lab = args["lab_dir"]
    state = read_state(lab)
    if not state:
        return {"outcome": "not-running", "lab_dir": lab}
    if not is_ours(lab, state):
        clear_state(lab)
        return {"outcome": "stale", "lab_dir": lab, "pid": state.get("pid")}
    graceful = stop_pid(int(state["pid"]), float(args.get("timeout", 15)))
    if state.get("launcher"):
        graceful = stop_group(int(state["pid"]), 10.0) and graceful
    clear_state(lab)
    return {"outcome": "stopped" if graceful else "killed", "lab_dir": lab, "pid": state["pid"]}


def op_relaunch(args):
    """Restart one server process with a new argv, the way it ran, and wait for /health.

    ``{"pid", "argv", "cwd", "env", "log", "host", "port", "stop_timeout", "timeout"}``: SIGTERM
    the pid, SIGKILL it after stop_timeout (sglang drains the requests it holds before it exits,
    and one it never finishes keeps it waiting for ever), then whatever is left of the processes
    it had started; wait for the port to be free, start argv with nohup in a new session in cwd,
    with this environment plus ``env``, appending to ``log``; then poll /health. ``stopped`` in
    the answer says how the old process ended: "stopped" (by SIGTERM) or "killed". For a server
    the kit did not start, run only when a person asked for it.
    """
    host, port = args.get("host") or "127.0.0.1", int(args["port"])
    pid = int(args["pid"])
    log = args.get("log")
    lab = (args.get("env") or {}).get(LAB_ENV)
    state = read_state(lab) if lab else None
    recorded = bool(state) and int(state.get("pid", 0)) == pid and is_ours(lab, state)
    workers = descendants(pid)
    stop_timeout = float(args.get("stop_timeout", 60))
    stopped = "stopped" if stop_pid(pid, stop_timeout) else "killed"
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        return {"outcome": "not-stopped", "pid": pid, "stop_timeout": stop_timeout, "log_tail": file_tail(log),
                "stat": proc_state(pid)}
    before = file_tail(log, 200) if stopped == "killed" else []
    stop_each(workers, 10.0)
    deadline = time.monotonic() + 30
    while port_taken(host, port) and time.monotonic() < deadline:
        time.sleep(0.2)
    if port_taken(host, port):
        return {"outcome": "port-in-use", "pid": pid, "stopped": stopped, "host": host, "port": port,
                "holder": port_holder(port)}
    env = dict(os.environ)
    env.update(args.get("env") or {})
    nohup = shutil.which("nohup")
    sink = open(log, "ab") if log else open(os.devnull, "wb")
    try:
        proc = subprocess.Popen(([nohup] if nohup else []) + list(args["argv"]), stdin=subprocess.DEVNULL,
                                stdout=sink, stderr=subprocess.STDOUT, cwd=args.get("cwd") or None, env=env,
                                start_new_session=True)
    finally:
        sink.close()
    deadline = time.monotonic() + float(args.get("timeout", 900))
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            return {"outcome": "exited", "pid": proc.pid, "exit_code": code, "stopped": stopped,
                    "log_tail": file_tail(log)}
        if healthy(host, port, timeout=HEALTH_TIMEOUT):
            if recorded:
                follow(lab, state, proc, list(args["argv"]))
            answer = {"outcome": "started", "pid": proc.pid, "stopped": stopped, "previous": pid}
            if recorded:
                answer["lab_dir"] = lab
            if stopped == "killed":  # sglang logs what it waited for
                answer["draining"] = ([x for x in before if "Gracefully exiting" in x] or [None])[-1]
            return answer
        time.sleep(0.5)
    return {"outcome": "timeout", "pid": proc.pid, "stopped": stopped, "log_tail": file_tail(log)}


def descendants(pid):
    """[(pid, start ticks)] of every process below pid, read from /proc before it is stopped."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def stop_each(procs, timeout):
    """SIGTERM, then SIGKILL after timeout, each (pid, start ticks) still running (not a reused pid)."""
    mine = [p for p, ticks in procs if proc_start_ticks(p) == ticks and alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in mine:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(p) for p in mine):
            time.sleep(0.1)
        mine = [p for p in mine if alive(p)]
        if not mine:
            return


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def follow(lab, state, proc, argv):
    """A lab's own server was relaunched: its record names the new process, so `lab status`, `down`
    and `restart` act on the server that runs now."""
    new = dict(state, pid=proc.pid, start_ticks=proc_start_ticks(proc.pid), argv=argv, started_at=time.time(),
               label=None, relaunched_from=state.get("pid"))
    with open(os.path.join(lab, "run", "server.json"), "w") as fh:
        json.dump(new, fh)
    with open(os.path.join(lab, "run", "server.pid"), "w") as fh:
        fh.write(f"{proc.pid}\n")


def file_tail(path, lines=30):
    if not path:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 65536))
            return fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []


OPS = {"info": op_info, "have": op_have, "put": op_put, "prepare": op_prepare, "start": op_start,
       "stop": op_stop, "status": op_status, "relaunch": op_relaunch, "pick_port": op_pick_port, "port": op_port}


def main():
    op = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    try:
        out(OPS[op](args))
    except Exception as exc:  # reported as data: the kit turns it into a KitError with context
        out({"error": f"{type(exc).__name__}: {exc}", "op": op})


if __name__ == "__main__":
    main()
