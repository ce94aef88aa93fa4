"""The kit's remote helper: started once per connection, serves many requests.

It runs on the investigated host under whatever ``python3`` is there, so it
uses the standard library only and stays compatible with Python 3.6.
The kit sends this file's text over the connection; nothing is installed.

Why it exists: a new SSH session per command makes sshd start the user's
login shell, and GPU boxes often run conda or pyenv init in it, which costs
100-500 ms per command. One helper process answers in about a millisecond.

Wire format (both directions are binary frames):

* kit -> helper: ``>I`` length, then a JSON object ``{"id": n, "op": ...}``.
* helper -> kit: ``>IIB`` (payload length, request id, kind), then payload.

Output of commands is flow-controlled per request: the helper stops reading a
command's pipes when ``WINDOW`` bytes are unacknowledged, so a command that
prints 100 MB blocks on its own pipe instead of filling the kit's memory.
"""

import base64
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import time

MAGIC = b"SGLKIT-HELPER-1\n"
K_HELLO, K_STDOUT, K_STDERR, K_DATA, K_DONE, K_ERROR = 0, 1, 2, 3, 4, 5
CHUNK = 65536
WINDOW = 4 * 1024 * 1024
EXIT_GRACE = 1.0  # a daemonised grandchild may hold our pipe open forever
KILL_GRACE = 1.0

HEADER = struct.Struct(">IIB")
LENGTH = struct.Struct(">I")


def send(rid, kind, payload=b""):
    data = HEADER.pack(len(payload), rid, kind) + payload
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


def send_json(rid, kind, obj):
    send(rid, kind, json.dumps(obj).encode("utf-8"))


def os_error(exc, path=None):
    return {
        "type": type(exc).__name__,
        "errno": getattr(exc, "errno", None),
        "message": exc.strerror or str(exc),
        "path": path,
    }


class Job:
    """A running command and the state of its two pipes."""

    def __init__(self, rid, proc, timeout):
        self.rid = rid
        self.proc = proc
        self.start = time.monotonic()
        self.deadline = self.start + timeout if timeout else None
        self.kill_at = None
        self.timed_out = False
        self.exited_at = None
        self.open = {}  # fd -> kind
        self.paused = set()  # fds not registered because the window is full
        self.unacked = 0
        self.stdin_left = None

    def kill(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass


class Helper:
    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.jobs = {}
        self.inbuf = b""
        self.running = True

    # -- requests -------------------------------------------------------
    def handle(self, req):
        rid = req.get("id", 0)
        op = req.get("op")
        try:
            if op == "run":
                self.op_run(rid, req)
            elif op == "read":
                self.op_read(rid, req)
            elif op == "stat":
                self.op_stat(rid, req)
            elif op == "ack":
                self.op_ack(req)
            elif op == "cancel":
                self.op_cancel(req)
            elif op == "ping":
                send_json(rid, K_DONE, {"pid": os.getpid()})
            elif op == "exit":
                self.running = False
            else:
                send_json(rid, K_ERROR, {"type": "BadRequest", "message": f"unknown op {op!r}"})
        except OSError as exc:
            send_json(rid, K_ERROR, os_error(exc, req.get("path") or req.get("cwd")))
        except Exception as exc:  # the helper must survive any single bad request
            send_json(rid, K_ERROR, {"type": type(exc).__name__, "message": str(exc)})

    def op_run(self, rid, req):
        env = None
        if req.get("env"):
            env = dict(os.environ)
            env.update(req["env"])
        argv = req["argv"] if req.get("argv") else ["/bin/sh", "-c", req["cmd"]]
        stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
        proc = subprocess.Popen(
            argv,
            cwd=req.get("cwd") or None,
            env=env,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        job = Job(rid, proc, req.get("timeout"))
        if stdin_data is not None:
            self.start_stdin(job, stdin_data)
        for pipe, kind in ((proc.stdout, K_STDOUT), (proc.stderr, K_STDERR)):
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            job.open[fd] = kind
            self.sel.register(fd, selectors.EVENT_READ, ("job", job))
        self.jobs[rid] = job

    def start_stdin(self, job, data):
        # Fed from the main loop as the pipe accepts it: a blocking write of a
        # big input would deadlock against a command that fills its stdout.
        fd = job.proc.stdin.fileno()
        os.set_blocking(fd, False)
        job.stdin_left = memoryview(data)
        self.sel.register(fd, selectors.EVENT_WRITE, ("stdin-of", job))
        self.on_stdin_writable(fd, job)

    def on_stdin_writable(self, fd, job):
        try:
            while job.stdin_left:
                n = os.write(fd, job.stdin_left[:CHUNK])
                job.stdin_left = job.stdin_left[n:]
        except BlockingIOError:
            return
        except (BrokenPipeError, OSError):
            pass  # the command did not want (all of) its input
        self.sel.unregister(fd)
        job.proc.stdin.close()

    def op_read(self, rid, req):
        path = req["path"]
        start, end = req.get("start"), req.get("end")
        with open(path, "rb") as fh:
            if start is None:
                size = 0
                while True:
                    block = fh.read(CHUNK)
                    if not block:
                        break
                    size += len(block)
                    send(rid, K_DATA, block)
                send_json(rid, K_DONE, {"size": size})
                return
            self.send_lines(rid, fh, start, end)

    @staticmethod
    def send_lines(rid, fh, start, end):
        total = 0
        picked = []
        for total, line in enumerate(fh, 1):
            if total >= start and (end is None or total <= end):
                picked.append(line)
        if picked:
            send(rid, K_DATA, b"".join(picked))
        send_json(rid, K_DONE, {"total_lines": total, "count": len(picked)})

    def op_stat(self, rid, req):
        import stat as st

        s = os.stat(req["path"])
        send_json(
            rid,
            K_DONE,
            {
                "size": s.st_size,
                "mtime": s.st_mtime,
                "mode": s.st_mode,
                "is_dir": st.S_ISDIR(s.st_mode),
                "is_file": st.S_ISREG(s.st_mode),
            },
        )

    def op_ack(self, req):
        job = self.jobs.get(req.get("target"))
        if job is None:
            return
        job.unacked = max(0, job.unacked - int(req.get("n", 0)))
        if job.unacked < WINDOW:
            for fd in list(job.paused):
                job.paused.discard(fd)
                self.sel.register(fd, selectors.EVENT_READ, ("job", job))

    def op_cancel(self, req):
        job = self.jobs.get(req.get("target"))
        if job is not None and job.kill_at is None:
            job.kill(signal.SIGTERM)
            job.kill_at = time.monotonic() + KILL_GRACE

    # -- job output -----------------------------------------------------
    def on_output(self, fd, job):
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if not data:
            self.close_fd(fd, job)
            return
        send(job.rid, job.open[fd], data)
        job.unacked += len(data)
        if job.unacked >= WINDOW:
            for ofd in list(job.open):
                if ofd not in job.paused:
                    self.sel.unregister(ofd)
                    job.paused.add(ofd)

    def close_fd(self, fd, job):
        if fd not in job.paused:
            self.sel.unregister(fd)
        job.paused.discard(fd)
        del job.open[fd]
        os.close(fd)

    def tick(self):
        now = time.monotonic()
        for job in list(self.jobs.values()):
            self.tick_job(job, now)

    def tick_job(self, job, now):
        if job.deadline is not None and now > job.deadline and not job.timed_out:
            job.timed_out = True
            job.kill(signal.SIGTERM)
            job.kill_at = now + KILL_GRACE
        if job.kill_at is not None and now > job.kill_at:
            job.kill(signal.SIGKILL)
            job.kill_at = now + 3600
        if job.exited_at is None and job.proc.poll() is not None:
            job.exited_at = now
        if job.open and job.exited_at is not None and now - job.exited_at > EXIT_GRACE:
            if not job.paused:
                for fd in list(job.open):
                    self.close_fd(fd, job)
        if not job.open:
            self.finish(job)

    def finish(self, job):
        code = job.proc.wait()
        del self.jobs[job.rid]
        send_json(
            job.rid,
            K_DONE,
            {"exited": code, "timed_out": job.timed_out, "duration": time.monotonic() - job.start},
        )

    # -- main loop ------------------------------------------------------
    def on_stdin(self):
        data = os.read(0, CHUNK)
        if not data:
            self.running = False
            return
        self.inbuf += data
        while len(self.inbuf) >= 4:
            (n,) = LENGTH.unpack_from(self.inbuf)
            if len(self.inbuf) < 4 + n:
                break
            body, self.inbuf = self.inbuf[4 : 4 + n], self.inbuf[4 + n :]
            self.handle(json.loads(body.decode("utf-8")))

    def loop(self):
        self.sel.register(0, selectors.EVENT_READ, ("stdin", None))
        while self.running:
            timeout = 0.05 if self.jobs else None
            for key, _ in self.sel.select(timeout):
                what, job = key.data
                if what == "stdin":
                    self.on_stdin()
                elif what == "stdin-of":
                    self.on_stdin_writable(key.fd, job)
                else:
                    self.on_output(key.fd, job)
            if self.jobs:
                self.tick()
        for job in self.jobs.values():
            job.kill(signal.SIGKILL)


def main():
    # Anything a login shell left on fd 2 is noise; our requests never use it.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.write(1, MAGIC)
    send_json(
        0,
        K_HELLO,
        {
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "uid": os.getuid(),
            "cwd": os.getcwd(),
        },
    )
    Helper().loop()


if __name__ == "__main__" or __name__ == "sglkit_helper":
    main()
