"""The guided notebooks' first and last steps: ``start`` (the lab, the connection, the server) and ``share``.

    import kit
    nb = kit.notebook.start(target, lab_launch="new", ssh_config=ssh_config)   # first cell
    nb.host, nb.server
    ...
    kit.notebook.share(share_to)                                               # last cell

``share`` knows which notebook it runs in, as Jupyter tells its kernel (``JPY_SESSION_NAME``,
set by Jupyter Server for the notebook a kernel was started for, or VS Code's
``__vsc_ipynb_file__``); :func:`execute` runs a notebook with papermill and tells its kernel the
same about the notebook being written, so no notebook names its own file.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ReportError

__all__ = ["Start", "current_notebook", "execute", "share", "start"]

SESSION_VARIABLE = "JPY_SESSION_NAME"  # Jupyter Server sets it to the notebook's path in its kernel's environment


@dataclass
class Start:
    """What :func:`start` did: the lab's state (target ``lab`` only), the connection and the server."""

    target: str
    host: Any
    server: Any = None
    lab: Any = None  # kit.lab.LabStatus when the target is the lab

    def to_text(self) -> str:
        lines = [f"lab: {self.lab.note or self.lab.to_text()}"] if self.lab is not None else []
        lines.append(f"connected: {self.host!r}")
        if self.server is not None:
            lines.append(f"server: {self.server!r}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        parts = [f"<b>lab</b>: {html.escape(self.lab.note)}" if self.lab is not None and self.lab.note else
                 self.lab._repr_html_() if self.lab is not None else ""]
        host = self.host._repr_html_() if hasattr(self.host, "_repr_html_") else html.escape(repr(self.host))
        parts.append(f"<b>connected</b>: {host}")
        if self.server is not None:
            server = (self.server._repr_html_() if hasattr(self.server, "_repr_html_")
                      else html.escape(repr(self.server)))
            parts.append(f"<b>server</b>: {server}")
        return "<div>" + "<br>".join(p for p in parts if p) + "</div>"


def start(target: str = "lab", *, lab_launch: str | None = None, lab_scenario: str | None = None,
          ssh_config: str | None = None, trust_new_host: bool = False, server_port: int | None = None,
          find_server: bool = True) -> Start:
    """A notebook's first step: for target ``lab``, start the lab unless it runs the launch ``lab_launch``
    (``new``, ``old``, ``fixed``; ``""`` or None keeps what runs) in ``lab_scenario``; then connect
    (``ssh_config``: the ssh config to read aliases and keys from; ``trust_new_host``: accept a host key
    seen for the first time) and, with ``find_server``, find the SGLang server (``server_port`` when the
    box runs several; 0 or None: the lab's, or the only one). The kit never starts or stops a real server."""
    from kit.lab import ensure_running
    from kit.target import connect, resolve_server

    lab = ensure_running(target, launch=lab_launch or None, scenario=lab_scenario or None)
    options = {"trust_new_host": trust_new_host}
    if ssh_config:
        options["config_file"] = ssh_config
    host = connect(target, **options)
    server = resolve_server(host, target, port=server_port or None) if find_server else None
    return Start(target=target, host=host, server=server, lab=lab)


def current_notebook() -> Path:
    """The notebook this kernel runs, as Jupyter (or VS Code, or :func:`execute`) told it."""
    tried = []
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    names = dict(getattr(shell, "user_ns", None) or {})
    for where, value in (("VS Code's __vsc_ipynb_file__", names.get("__vsc_ipynb_file__")),
                         (f"${SESSION_VARIABLE}", os.environ.get(SESSION_VARIABLE))):
        if not value:
            tried.append(f"{where}: not set")
            continue
        path = Path(value).expanduser()
        if path.suffix == ".ipynb" and path.is_file():
            return path.resolve()
        tried.append(f"{where}: {value} (not a saved .ipynb file)")
    raise ReportError("this notebook's file is not known, so it cannot be shared: " + "; ".join(tried),
                      hint="save the notebook and call kit.notebook.share(to, notebook=\"NAME.ipynb\"), or run "
                           "`sgl-kit report NAME.ipynb -o FILE` from a terminal")


def share(to: str | os.PathLike | None, *, notebook: str | os.PathLike | None = None, **options):
    """Write this notebook (as last saved) to ``to`` as one self-contained page, secrets removed
    (kit.report.build_report; ``.md``: a Markdown summary). ``to`` empty or None: nothing (None)."""
    if not to:
        return None
    from kit.report import build_report

    path = Path(notebook) if notebook else current_notebook()
    options.setdefault("markdown", str(to).endswith(".md"))
    return build_report([path], to, **options)


def execute(source: str | os.PathLike, out: str | os.PathLike, parameters: dict | None = None, *,
            cwd: str | os.PathLike | None = None, timeout: float = 600, kernel: str = "python3"):
    """Run the notebook ``source`` with papermill into ``out`` (each cell with ``timeout`` seconds), its
    kernel told that it runs ``out`` (so ``share`` finds it)."""
    import papermill

    out = Path(out).resolve()
    before = os.environ.get(SESSION_VARIABLE)
    os.environ[SESSION_VARIABLE] = str(out)  # the kernel inherits this process's environment
    try:
        return papermill.execute_notebook(str(source), str(out), parameters=parameters or {}, kernel_name=kernel,
                                          progress_bar=False, cwd=str(cwd) if cwd else None,
                                          execution_timeout=timeout)
    finally:
        if before is None:
            os.environ.pop(SESSION_VARIABLE, None)
        else:
            os.environ[SESSION_VARIABLE] = before
