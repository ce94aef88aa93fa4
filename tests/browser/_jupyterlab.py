"""JupyterLab in headless Chromium: the parts the browser check and the screenshot script share.

- ``lab_up``: the built-in lab (``sgl-kit lab up --port P``) in its own ``SGL_KIT_LAB_DIR`` with
  ``SGL_KIT_LAB_DRYRUN=0``; the notebooks' default ``target="lab"`` finds it because the JupyterLab
  server, and so its kernels, carry that environment;
- ``jupyterlab``: a fresh JupyterLab on 127.0.0.1 with a token and its own config, data, runtime and
  IPython directories (kernels outlive a browser, so a server is never shared), serving the working
  copy `make lab` serves (``kit.demo.workspace``: the .ipynb files only), made in a temporary directory;
- ``chromium``: Debian's ``/usr/bin/chromium`` driven by Playwright; no ``playwright install``;
- the steps in the page: wait for the kernel, Run All, wait until every cell ran, read errors, screenshot.

Everything started here is stopped in ``finally`` blocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOOPBACK = "127.0.0.1"

SERVER_START_TIMEOUT = 60  # s, JupyterLab's /api/status answering
LAB_TIMEOUT = 300  # s, `sgl-kit lab up`: a second when warm; a cold cache first downloads the sglang wheel
KERNEL_TIMEOUT_MS = 60_000  # the kernel started and idle
RUN_ALL_TIMEOUT_MS = 180_000  # every code cell executed
RENDER_TIMEOUT_MS = 30_000  # a figure or widget drawn once its output arrived
SAVE_TIMEOUT = 30  # s, Ctrl+S reaching the file

# What worked against JupyterLab 4.6, ipywidgets 8 and plotly 7 (found by trying).
KERNEL_NAME = ".jp-KernelName"  # "Python 3" once the kernel is known
INDICATOR = ".jp-Notebook-ExecutionIndicator"  # data-status: idle / busy
CODE_CELL = ".jp-Notebook .jp-CodeCell"
PROMPT = ".jp-InputArea-prompt"  # "[3]:" when run, "[*]:" while running, "[ ]:" before
LAB_FIGURE = ".jp-OutputArea .jp-RenderedPlotly.js-plotly-plot"
# JupyterLab 4.6 renders an exception (an `error` output) as stderr too: a traceback in stderr is
# the error; the vnd.jupyter.error form is kept in case a version renders it under its own type.
ERRORS = ('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
          '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')
TRACEBACK = r"Traceback|\w+(Error|Exception)\b"


class Missing(RuntimeError):
    """Chromium or Playwright is not installed: the message says what to install."""


def require_browser() -> None:
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (Debian package chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package")
    if missing:
        raise Missing(f"this needs {' and '.join(missing)}. `make browser-test` and `make screenshots` install "
                      "chromium when run as root (otherwise `sudo apt-get install chromium`); playwright comes "
                      "with `make venv` (the dev extra). No `playwright install`: the system chromium is driven.")


def free_port() -> int:
    """A free loopback port below 55536 (sglang also claims port + 10000)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port < 55536:
            return port
    raise RuntimeError("no free port below 55536 on 127.0.0.1")


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"({path} unreadable)"


def sgl_kit() -> str:
    exe = Path(sys.executable).parent / "sgl-kit"
    return str(exe) if exe.is_file() else (shutil.which("sgl-kit") or "sgl-kit")


# -- the parts: the lab, JupyterLab, the browser -------------------------------------------------------


@contextlib.contextmanager
def lab_up(base: Path) -> Iterator[dict[str, str]]:
    """The lab up in ``base/lab`` on a free port; yields the environment that finds it."""
    env = dict(os.environ, SGL_KIT_LAB_DIR=str(base / "lab"), SGL_KIT_LAB_DRYRUN="0")
    log = base / "lab-up.log"
    try:
        with log.open("w") as out:
            proc = subprocess.run([sgl_kit(), "lab", "up", "--port", str(free_port())], env=env,
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=LAB_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"`sgl-kit lab up` failed:\n{tail(log)}")
        yield env
    finally:
        down = subprocess.run([sgl_kit(), "lab", "down"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        if down.returncode != 0:
            print(f"`sgl-kit lab down` failed: {down.stdout}{down.stderr}")


@dataclass
class Jupyter:
    url: str
    token: str
    root: Path  # what JupyterLab serves: the working copy of notebooks/
    log: Path

    def lab_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}&reset"


def working_copy(dest: Path, settings: Path) -> Path:
    """What `make lab` serves: kit.demo.workspace's copy of notebooks/ (settings written to ``settings``)."""
    from kit.demo import workspace

    return workspace(dest, settings=settings)


def user_settings(config_dir: Path) -> None:
    """No news toast, and every cell kept in the DOM (windowing off) so every output can be checked."""
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab"
    for rel, value in {"apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                               "checkForUpdates": False},
                       "notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"}}.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))


def _wait_for_status(url: str, token: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"JupyterLab did not answer /api/status within {SERVER_START_TIMEOUT} s:\n{tail(log)}")


def _pids_naming(text: str) -> list[int]:
    """Processes whose command line names `text` (our runtime directory: the kernels we started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _stop_jupyter(proc: subprocess.Popen, url: str, token: str, runtime: Path) -> None:
    """Shut down the server (and its kernels) politely, then by its process group; then any kernel left."""
    try:
        request = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(request, timeout=5).close()
        proc.wait(timeout=15)
    except Exception:  # noqa: BLE001 - any failure falls through to signals
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)  # its own session (start_new_session): the server and its children
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    # Kernels run in sessions of their own; they are found by the connection file in our runtime dir.
    for pid in _pids_naming(str(runtime)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextlib.contextmanager
def jupyterlab(base: Path, env: dict[str, str], root: Path) -> Iterator[Jupyter]:
    """A fresh JupyterLab serving ``root``, isolated from the user's Jupyter files (all of them under ``base``)."""
    dirs = {"JUPYTER_CONFIG_DIR": base / "config", "JUPYTER_DATA_DIR": base / "data",
            "JUPYTER_RUNTIME_DIR": base / "runtime", "IPYTHONDIR": base / "ipython", "TMPDIR": base / "tmp"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    user_settings(dirs["JUPYTER_CONFIG_DIR"])
    env = dict(env, **{k: str(v) for k, v in dirs.items()}, JUPYTER_PLATFORM_DIRS="1")
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    token, port = secrets.token_hex(16), free_port()
    url = f"http://{LOOPBACK}:{port}"
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ip={LOOPBACK}", f"--port={port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    log = base / "jupyterlab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_status(url, token, proc, log)
        yield Jupyter(url=url, token=token, root=root, log=log)
    finally:
        _stop_jupyter(proc, url, token, dirs["JUPYTER_RUNTIME_DIR"])


@contextlib.contextmanager
def chromium() -> Iterator:
    """Headless Debian Chromium under Playwright."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


# -- in the page -------------------------------------------------------------------------------------


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def wait_for_kernel(page) -> None:
    """The kernel's name shown AND the indicator idle: the indicator alone says idle while it starts."""
    page.wait_for_function(
        """([name, indicator]) => {
            const n = document.querySelector(name), i = document.querySelector(indicator);
            const text = n ? n.textContent.trim() : '';
            return text && !/^(No Kernel|Kernel|Starting)/i.test(text) && i && i.dataset.status === 'idle';
        }""", arg=[KERNEL_NAME, INDICATOR], timeout=KERNEL_TIMEOUT_MS)


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def shut_down_kernel(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Shut Down Kernel$")).click()


def wait_until_executed(page, cells: int, timeout_ms: int = RUN_ALL_TIMEOUT_MS) -> None:
    """Every code cell shows an execution count and the kernel is idle again.

    An error output ends the wait early (Run All stops at a failing cell), so the caller can
    say which error instead of timing out.
    """
    page.wait_for_function(
        """([cell, prompt, indicator, n, errors, traceback]) => {
            const i = document.querySelector(indicator);
            if (!i || i.dataset.status !== 'idle') return false;
            const prompts = [...document.querySelectorAll(cell + ' ' + prompt)];
            const failed = [...document.querySelectorAll(errors)].some(
                e => e.dataset.mimeType.endsWith('.error') || new RegExp(traceback).test(e.textContent));
            return failed || (prompts.length === n && prompts.every(p => /^\\[\\d+\\]:$/.test(p.textContent.trim())));
        }""", arg=[CODE_CELL, PROMPT, INDICATOR, cells, ", ".join(ERRORS), TRACEBACK], timeout=timeout_ms,
        polling=250)


def prompts(page) -> list[str]:
    return [t.strip() for t in page.locator(f"{CODE_CELL} {PROMPT}").all_inner_texts()]


def errors_shown(page) -> list[str]:
    """Error outputs, and stderr that carries a traceback or an exception."""
    texts = []
    for selector in ERRORS:
        for text in page.locator(selector).all_inner_texts():
            if "vnd.jupyter.error" in selector or re.search(TRACEBACK, text):
                texts.append(text[-2000:])
    return texts


def full_screenshot(page, path: Path) -> None:
    """The whole notebook, not just the viewport: the window grows to the notebook's height first."""
    height = page.evaluate("""() => {
        const panel = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');
        return panel ? panel.scrollHeight : 0;
    }""")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(max(1000, height + 250), 12000)})
    page.evaluate("() => { const p = document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer');"
                  " if (p) p.scrollTop = 0; }")  # Run All left it scrolled to the last cell
    page.wait_for_timeout(500)  # the figures lay themselves out again at the new size
    page.screenshot(path=str(path))


def local_only(route, refused: list[str], server: str | None = None) -> None:
    """Let file:, data: (and the given server) through; abort anything else and remember it."""
    url = route.request.url
    if url.startswith(("file:", "data:")) or (server and (url == server or url.startswith(server + "/"))):
        route.continue_()
    else:
        refused.append(url)
        route.abort()
