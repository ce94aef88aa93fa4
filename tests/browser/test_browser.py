"""The real-browser check: 01_symptom in JupyterLab in headless Chromium, then its report from file://.

What no kernel-only test can see: that the plotly figures and the ipywidgets progress bar
actually render in JupyterLab (no lab build, no internet), that no cell shows an error, and
that the shared report draws its chart with the network blocked.

One test, with its own parts, all stopped in ``finally`` blocks:

- the lab (``sgl-kit lab up --port P``) in its own ``SGL_KIT_LAB_DIR`` with
  ``SGL_KIT_LAB_DRYRUN=0``; the notebook's default ``target="lab"`` finds it because the
  JupyterLab server, and so its kernel, carries that environment;
- a fresh JupyterLab on 127.0.0.1 with a token and its own config, data, runtime and IPython
  directories (kernels outlive a browser, so a server is never shared between tests), serving
  a temporary copy of notebooks/ (JupyterLab saves the copy, never the committed files);
- headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright; no
  ``playwright install``.

Screenshots go to out/browser/ (git-ignored). Without /usr/bin/chromium or playwright the test
skips and says why; in CI (``CI=true``) it fails instead, since ``make browser-test`` installs
chromium when run as root.
"""

from __future__ import annotations

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

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SCREENSHOTS = ROOT / "out" / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "01_symptom.ipynb"
# Short but real: a warm-up request and 3 measured ones instead of 8 (the default takes ~20 s).
PARAMETERS = {"requests": 3, "max_tokens": 48}
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
REPORT_FIGURE = ".js-plotly-plot"
# 01's figures, in order: the rate distribution (one box trace, one point per request) and the
# timeline (scatter traces: a line per request).
BOX = "svg.main-svg g.trace.boxes path.box"
POINT = "svg.main-svg g.trace.boxes path.point"
LINE = "svg.main-svg g.trace.scatter path.js-line"
# The benchmark's ProgressWidget: an HBox of an IntProgress and a Label.
PROGRESS_BAR = ".jp-OutputArea .jupyter-widgets.widget-hprogress .progress-bar"
PROGRESS_LABEL = ".jp-OutputArea .widget-hbox div.jupyter-widgets.widget-label"
WIDGET = ".jp-OutputArea .jupyter-widgets"  # a widget that failed shows "Error displaying widget" here
# JupyterLab 4.6 renders an exception (an `error` output) as stderr too: a traceback in stderr is
# the error; the vnd.jupyter.error form is kept in case a version renders it under its own type.
ERRORS = ('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
          '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')
TRACEBACK = r"Traceback|\w+(Error|Exception)\b"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _require_browser() -> None:
    """Skip (or fail, in CI) without Chromium or Playwright: a skip in CI would hide a broken install step."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (Debian package chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package")
    if not missing:
        return
    reason = (f"the browser check needs {' and '.join(missing)}. `make browser-test` installs chromium when run "
              "as root (otherwise `sudo apt-get install chromium`); playwright comes with `make venv` (the dev "
              "extra). No `playwright install`: the test drives the system chromium.")
    if _in_ci():
        pytest.fail(reason + " CI must run the browser check.", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    """A free loopback port below 55536 (sglang also claims port + 10000)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port < 55536:
            return port
    raise RuntimeError("no free port below 55536 on 127.0.0.1")


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"({path} unreadable)"


# -- the parts: the lab, JupyterLab, the notebook copy ------------------------------------------------


@dataclass
class Jupyter:
    url: str
    token: str
    root: Path  # what JupyterLab serves: the copy of notebooks/
    log: Path

    def lab_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}&reset"


def _sgl_kit() -> str:
    exe = Path(sys.executable).parent / "sgl-kit"
    return str(exe) if exe.is_file() else (shutil.which("sgl-kit") or "sgl-kit")


@pytest.fixture
def lab_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The lab up in its own directory on a free port; yields the environment that finds it."""
    env = dict(os.environ, SGL_KIT_LAB_DIR=str(tmp_path / "lab"), SGL_KIT_LAB_DRYRUN="0")
    log = tmp_path / "lab-up.log"
    try:
        with log.open("w") as out:
            proc = subprocess.run([_sgl_kit(), "lab", "up", "--port", str(_free_port())], env=env,
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=LAB_TIMEOUT)
        assert proc.returncode == 0, f"`sgl-kit lab up` failed:\n{_tail(log)}"
        yield env
    finally:
        down = subprocess.run([_sgl_kit(), "lab", "down"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        if down.returncode != 0:
            print(f"`sgl-kit lab down` failed: {down.stdout}{down.stderr}")


def _short_parameters(text: str, where: str) -> str:
    for name, value in PARAMETERS.items():
        text, n = re.subn(rf"^({name}: int = )\d+", rf"\g<1>{value}", text, flags=re.M)
        assert n == 1, f"{where}: no `{name}: int = ...` line in the parameters cell"
    return text


def _copy_notebooks(dest: Path) -> Path:
    """A copy of notebooks/ (no executed outputs), with the short parameters written into the copies of
    the notebooks that benchmark (01 and 04).

    The .ipynb is paired with a .py (jupytext, as `make lab` serves them): both get the same
    edit, the .py last, since jupytext refuses a notebook newer than its text file.
    """
    shutil.copytree(NOTEBOOKS, dest, ignore=shutil.ignore_patterns("_executed", ".ipynb_checkpoints"))
    for name in (NOTEBOOK, "04_fix_and_validate.ipynb"):
        _shorten(dest / name)
    return dest


def _shorten(path: Path) -> Path:
    nb = json.loads(path.read_text())
    [cell] = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    cell["source"] = _short_parameters("".join(cell["source"]), str(path)).splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    paired = path.with_suffix(".py")
    if paired.is_file():
        paired.write_text(_short_parameters(paired.read_text(), str(paired)))
        stamp = time.time() + 2  # newer than the notebook by more than jupytext's 1 s margin
        os.utime(paired, (stamp, stamp))
    return path


def _user_settings(config_dir: Path) -> None:
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
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"JupyterLab did not answer /api/status within {SERVER_START_TIMEOUT} s:\n{_tail(log)}")


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


@pytest.fixture
def jupyter(tmp_path: Path, lab_env: dict[str, str]) -> Iterator[Jupyter]:
    """A fresh JupyterLab serving a copy of notebooks/, isolated from the user's Jupyter files."""
    base = tmp_path / "jupyter"
    dirs = {"JUPYTER_CONFIG_DIR": base / "config", "JUPYTER_DATA_DIR": base / "data",
            "JUPYTER_RUNTIME_DIR": base / "runtime", "IPYTHONDIR": base / "ipython", "TMPDIR": base / "tmp"}
    for d in dirs.values():
        d.mkdir(parents=True)
    _user_settings(dirs["JUPYTER_CONFIG_DIR"])
    root = tmp_path / "notebooks"
    _copy_notebooks(root)
    env = dict(lab_env, **{k: str(v) for k, v in dirs.items()}, JUPYTER_PLATFORM_DIRS="1")
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    token, port = secrets.token_hex(16), _free_port()
    url = f"http://{LOOPBACK}:{port}"
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ip={LOOPBACK}", f"--port={port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    log = tmp_path / "jupyterlab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_status(url, token, proc, log)
        yield Jupyter(url=url, token=token, root=root, log=log)
    finally:
        _stop_jupyter(proc, url, token, dirs["JUPYTER_RUNTIME_DIR"])


@pytest.fixture
def browser():
    """Headless Debian Chromium under Playwright."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield chromium
        finally:
            chromium.close()


# -- the check ----------------------------------------------------------------------------------------


def _code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _wait_for_kernel(page) -> None:
    """The kernel's name shown AND the indicator idle: the indicator alone says idle while it starts."""
    page.wait_for_function(
        """([name, indicator]) => {
            const n = document.querySelector(name), i = document.querySelector(indicator);
            const text = n ? n.textContent.trim() : '';
            return text && !/^(No Kernel|Kernel|Starting)/i.test(text) && i && i.dataset.status === 'idle';
        }""", arg=[KERNEL_NAME, INDICATOR], timeout=KERNEL_TIMEOUT_MS)


def _run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def _wait_until_executed(page, cells: int) -> None:
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
        }""", arg=[CODE_CELL, PROMPT, INDICATOR, cells, ", ".join(ERRORS), TRACEBACK], timeout=RUN_ALL_TIMEOUT_MS,
        polling=250)


def _prompts(page) -> list[str]:
    return [t.strip() for t in page.locator(f"{CODE_CELL} {PROMPT}").all_inner_texts()]


def _errors_shown(page) -> list[str]:
    """Error outputs, and stderr that carries a traceback or an exception."""
    texts = []
    for selector in ERRORS:
        for text in page.locator(selector).all_inner_texts():
            if "vnd.jupyter.error" in selector or re.search(TRACEBACK, text):
                texts.append(text[-2000:])
    return texts


def _check_figures(page, figure: str) -> str:
    """01's figures drawn: a box with one point per request, the timeline's lines, and the history over time."""
    from playwright.sync_api import expect

    figures = page.locator(figure)
    figures.first.wait_for(timeout=RENDER_TIMEOUT_MS)
    expect(figures).to_have_count(3, timeout=RENDER_TIMEOUT_MS)  # rates, the request timeline, the history
    rates, timeline = figures.nth(0), figures.nth(1)
    expect(rates.locator(BOX)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(rates.locator(POINT)).to_have_count(PARAMETERS["requests"], timeout=RENDER_TIMEOUT_MS)
    timeline.locator(LINE).first.wait_for(state="attached", timeout=RENDER_TIMEOUT_MS)
    return f"3 figures ({rates.locator(POINT).count()} points in the box, {timeline.locator(LINE).count()} lines)"


def _check_progress(page) -> str:
    """The benchmark's progress bar drawn by ipywidgets, and finished: n/n requests, none failed."""
    from playwright.sync_api import expect

    requests = PARAMETERS["requests"]
    expect(page.locator(PROGRESS_BAR)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    expect(page.locator(PROGRESS_BAR)).to_have_class(re.compile(r"\bprogress-bar-success\b"))
    expect(page.locator(PROGRESS_LABEL)).to_have_text(re.compile(rf"^{requests}/{requests}, 0 failed"))
    text = " ".join(page.locator(WIDGET).all_inner_texts())
    assert "Error displaying widget" not in text and "Loading widget" not in text, text
    return page.locator(PROGRESS_LABEL).inner_text()


def _save(page, path: Path, cells: int) -> None:
    """Ctrl+S, then wait until the file on disk holds every cell's execution count."""
    page.locator(".jp-NotebookPanel-toolbar").first.click(position={"x": 2, "y": 2})  # focus the notebook
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + SAVE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            code = _code_cells(path)
            if len(code) == cells and all(c.get("execution_count") for c in code):
                return
        except (OSError, ValueError):
            pass
        page.wait_for_timeout(250)  # not time.sleep: the route handlers run only while Playwright is called
    raise TimeoutError(f"{path} did not hold the executed cells {SAVE_TIMEOUT} s after Ctrl+S")


def _full_screenshot(page, path: Path) -> None:
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


def _local_only(route, refused: list[str], server: str | None = None) -> None:
    """Let file:, data: (and the given server) through; abort anything else and remember it."""
    url = route.request.url
    if url.startswith(("file:", "data:")) or (server and (url == server or url.startswith(server + "/"))):
        route.continue_()
    else:
        refused.append(url)
        route.abort()


def _on_failure(page, name: str, jupyter: Jupyter | None, console: list[str]) -> None:
    """Leave what a failure needs next to the screenshots: the page, its HTML, the browser's errors."""
    try:
        page.screenshot(path=str(SCREENSHOTS / f"{name}_failure.png"))
        (SCREENSHOTS / f"{name}_failure.html").write_text(page.content())
    except Exception as exc:  # noqa: BLE001 - the page may be gone; the original error matters
        print(f"no failure screenshot: {exc}")
    print("browser console errors:\n" + "\n".join(console[-30:]))
    if jupyter is not None:
        print(f"JupyterLab log:\n{_tail(jupyter.log)}")


def test_01_symptom_renders_in_jupyterlab_and_its_report_offline(browser, jupyter: Jupyter, tmp_path: Path, capsys):
    from kit.report import build_report

    started = time.monotonic()
    laps: list[str] = []

    def lap(name: str) -> None:
        laps.append(f"{name} {time.monotonic() - started:.1f} s")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob("01_symptom_*"):  # a previous run's pictures (or failure pages) are not this one's
        stale.unlink()
    notebook = jupyter.root / NOTEBOOK
    cells = len(_code_cells(notebook))

    # -- JupyterLab: open, wait for the kernel, Run All, look, save -----------------------------------------
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    outside: list[str] = []  # JupyterLab too must need nothing but its own server
    context.route("**/*", lambda route: _local_only(route, outside, jupyter.url))
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        page.goto(jupyter.lab_url(NOTEBOOK), wait_until="domcontentloaded", timeout=60_000)
        _wait_for_kernel(page)
        lap("kernel ready")
        _run_all(page)
        _wait_until_executed(page, cells)
        lap("run all")
        errors = _errors_shown(page)
        assert not errors, "a cell shows an error:\n" + "\n---\n".join(errors)
        assert all(re.fullmatch(r"\[\d+\]:", p) for p in _prompts(page)), f"cells not run: {_prompts(page)}"
        lab_figures = _check_figures(page, LAB_FIGURE)
        progress = _check_progress(page)
        _full_screenshot(page, SCREENSHOTS / "01_symptom_jupyterlab.png")
        _save(page, notebook, cells)
        assert not outside, f"JupyterLab asked for more than its server: {sorted(set(outside))}"
        lap("checked and saved")
    except BaseException:
        _on_failure(page, "01_symptom_jupyterlab", jupyter, console)
        raise
    finally:
        context.close()

    # -- the report of the saved notebook, opened from file:// with the network blocked ---------------------
    result = build_report([notebook], tmp_path / "01_symptom.html")
    assert result.plots == 3 and result.widgets >= 1, result.to_dict()
    lap("report built")
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, service_workers="block")
    context.set_default_timeout(30_000)
    left: list[str] = []  # every request that was not file: or data:, whether the route saw it or not
    context.route("**/*", lambda route: _local_only(route, left))
    page = context.new_page()
    problems: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else left.append(r.url))
    page.on("websocket", lambda ws: left.append(ws.url))
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    try:
        page.goto(result.path.resolve().as_uri(), wait_until="load", timeout=60_000)
        report_figures = _check_figures(page, REPORT_FIGURE)
        page.wait_for_timeout(300)
        page.screenshot(path=str(SCREENSHOTS / "01_symptom_report.png"), full_page=True)
        assert not problems, f"the report raised in the page: {problems}"
        assert not left, f"the report tried the network: {sorted(set(left))}"
    except BaseException:
        _on_failure(page, "01_symptom_report", None, problems)
        raise
    finally:
        context.close()
    lap("report checked")

    with capsys.disabled():
        print(f"\nbrowser check: {', '.join(laps)}\n  JupyterLab: {lab_figures}, progress bar {progress!r}"
              f"\n  report ({result.bytes / 1e6:.1f} MB, offline): {report_figures}"
              f"\n  screenshots: {SCREENSHOTS.relative_to(ROOT)}/01_symptom_jupyterlab.png, 01_symptom_report.png")


# -- the story after `make demo`: 01, 03 and 04 in JupyterLab, the lab found on the fixed launch ------------

STORY = ("01_symptom.ipynb", "03_auto_disable.ipynb", "04_fix_and_validate.ipynb")


def _run_in_lab(context, jupyter: Jupyter, name: str, console: list[str]) -> str:
    """Open one notebook, Run All, check no cell failed, screenshot it; the text of its outputs."""
    page = context.new_page()
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    stem = name.removesuffix(".ipynb")
    try:
        page.goto(jupyter.lab_url(name), wait_until="domcontentloaded", timeout=60_000)
        _wait_for_kernel(page)
        _run_all(page)
        _wait_until_executed(page, len(_code_cells(jupyter.root / name)))
        errors = _errors_shown(page)
        assert not errors, f"{name}: a cell shows an error:\n" + "\n---\n".join(errors)
        assert all(re.fullmatch(r"\[\d+\]:", p) for p in _prompts(page)), f"{name}: cells not run: {_prompts(page)}"
        page.wait_for_timeout(500)
        _full_screenshot(page, SCREENSHOTS / f"story_{stem}.png")
        text = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        # Shut this notebook's kernel down before the next one starts: two cores.
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Shut Down Kernel$")).click()
        return text
    except BaseException:
        _on_failure(page, f"story_{stem}", jupyter, console)
        raise
    finally:
        page.close()


def test_after_make_demo_the_notebooks_in_jupyterlab_show_the_symptom_and_its_causes(browser, jupyter: Jupyter,
                                                                                     lab_env, capsys):
    """`make demo` and notebook 04 end on the fixed launch; `make lab` must still teach the incident."""
    restart = subprocess.run([_sgl_kit(), "lab", "restart", "--variant", "fixed"], env=lab_env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LAB_TIMEOUT)
    assert restart.returncode == 0, restart.stderr
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SCREENSHOTS.glob("story_*"):
        stale.unlink()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    outside: list[str] = []
    context.route("**/*", lambda route: _local_only(route, outside, jupyter.url))
    console: list[str] = []
    try:
        symptom, auto_disable, fix = (_run_in_lab(context, jupyter, name, console) for name in STORY)
    finally:
        context.close()
    # 01 says what it found and what it did, then measures the incident's symptom.
    assert "the lab was running variant fixed" in symptom and "restarted it with the incident's new launch" in symptom
    share = re.search(r"\((\d+)% of it\)", symptom)
    assert share and int(share[1]) < 70, symptom[-3000:]
    # 03: the multimodal rule fired, and the dry-run (or its committed record) agrees.
    assert "srt/server_args.py:1230" in auto_disable and "DISAGREE" not in auto_disable
    assert "-> agree" in auto_disable
    # 04: a plan of two fixes, each measured.
    assert "--speculative-num-steps 3" in fix and "--enforce-piecewise-cuda-graph" in fix
    assert not outside, f"JupyterLab asked for more than its server: {sorted(set(outside))}"
    with capsys.disabled():
        print("\nthe story in JupyterLab: screenshots "
              + ", ".join(f"{SCREENSHOTS.relative_to(ROOT)}/story_{n.removesuffix('.ipynb')}.png" for n in STORY))
