"""The guided notebooks' first and last steps: ``start`` (the lab, the connection, the server) and ``share``.

    import kit
    nb = kit.notebook.start(target, lab_launch="new", ssh_config=ssh_config)   # first cell
    nb.host, nb.server, nb.case                  # the server's case, captured to out/case once
    ...
    kit.notebook.share(share_to)                                               # last cell

    subject = kit.notebook.open_target(target, case_dir)   # a case (offline) when case_dir is set, else live
    subject.diagnosis(), subject.comparison(), subject.notes(), subject.excerpts()

``start`` keeps the server's evidence as a case (kit.case: ``sgl-kit capture``) in ``out/case`` of the
notebook's working directory, once per server: a teammate can replay it the next morning
(``sgl-kit doctor --case out/case --compare``) without the server. ``open_target`` gives a notebook the
same calls for a case and for a live target, so one notebook reads either.

``share`` knows which notebook it runs in, as Jupyter tells its kernel (``JPY_SESSION_NAME``,
set by Jupyter Server for the notebook a kernel was started for, or VS Code's
``__vsc_ipynb_file__``); :func:`execute` runs a notebook with papermill and tells its kernel the
same about the notebook being written, so no notebook names its own file.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ReportError

__all__ = ["CAPTURE_INTERVAL", "Start", "Subject", "current_notebook", "execute", "keep_case", "open_target", "share", "start"]

SESSION_VARIABLE = "JPY_SESSION_NAME"  # Jupyter Server sets it to the notebook's path in its kernel's environment
CAPTURE_INTERVAL = 2.0  # seconds between a notebook's capture's two /metrics pages (sgl-kit capture's: 5)


@dataclass
class Start:
    """What :func:`start` did: the lab's state (target ``lab`` only), the connection and the server."""

    target: str
    host: Any
    server: Any = None
    lab: Any = None  # kit.lab.LabStatus when the target is the lab
    case: Path | None = None  # the server's case directory, captured now or kept from before
    case_note: str = ""  # what happened to it, one line ("case: captured to out/case (11 files)")

    def to_text(self) -> str:
        lines = [f"lab: {self.lab.note or self.lab.to_text()}"] if self.lab is not None else []
        lines.append(f"connected: {self.host!r}")
        if self.server is not None:
            lines.append(f"server: {self.server!r}")
        if self.case_note:
            lines.append(self.case_note)
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
        if self.case_note:
            label, _, rest = self.case_note.partition(": ")
            parts.append(f"<b>{html.escape(label)}</b>: {html.escape(rest)}")
        return "<div>" + "<br>".join(p for p in parts if p) + "</div>"


def start(target: str = "lab", *, lab_launch: str | None = None, lab_scenario: str | None = None,
          ssh_config: str | None = None, trust_new_host: bool = False, server_port: int | None = None,
          find_server: bool = True, capture: str | os.PathLike | None = "out/case") -> Start:
    """A notebook's first step: for target ``lab``, start the lab unless it runs the launch ``lab_launch``
    (``new``, ``old``, ``fixed``; ``""`` or None keeps what runs) in ``lab_scenario``; then connect
    (``ssh_config``: the ssh config to read aliases and keys from; ``trust_new_host``: accept a host key
    seen for the first time) and, with ``find_server``, find the SGLang server (``server_port`` when the
    box runs several; 0 or None: the lab's, or the only one). The kit never starts or stops a real server.

    With a server found, its evidence is kept as a case in ``capture`` (relative to the working
    directory; ``""`` or None: not kept): captured there unless that directory already holds this
    server's case (the same target and pid in its case.yaml); a case of another server there is
    captured over. A capture that fails is said in one line (``Start.case_note``) and the notebook
    goes on."""
    from kit.lab import ensure_running
    from kit.target import connect, resolve_server

    lab = ensure_running(target, launch=lab_launch or None, scenario=lab_scenario or None)
    options = {"trust_new_host": trust_new_host}
    if ssh_config:
        options["config_file"] = ssh_config
    host = connect(target, **options)
    server = resolve_server(host, target, port=server_port or None) if find_server else None
    started = Start(target=target, host=host, server=server, lab=lab)
    if capture and server is not None:
        started.case, started.case_note = keep_case(Path(capture).expanduser(), target, host, server)
    return started


def keep_case(path: Path, target: str, host, server) -> tuple[Path | None, str]:
    """The server's case in ``path``: kept when it is there (same target, same pid), else captured
    (kit.case.capture, over a case of another server). Returns the directory (None when no case is
    there) and one line saying what happened."""
    from kit.case import capture, open_case
    from kit.case.layout import FILES
    from kit.errors import KitError

    shown = str(path)
    replacing = ""
    if (path / "case.yaml").is_file():
        try:
            case = open_case(path)
        except KitError as err:
            return None, f"case: not captured to {shown}: {err.message}"
        captured = case.meta.get("captured") if isinstance(case.meta.get("captured"), dict) else {}
        was = captured.get("server") if isinstance(captured.get("server"), dict) else {}
        if not case.captured:
            return None, f"case: not captured to {shown}: it holds a case written by hand (no format in case.yaml)"
        if captured.get("target") == target and was.get("pid") == server.pid:
            return path, f"case: {shown} already holds this server's (captured at {captured.get('at', '?')})"
        replacing = (f", replacing the case of pid {was.get('pid', '?')} on {captured.get('target', '?')} "
                     f"captured at {captured.get('at', '?')}")
    elif path.is_dir() and any(path.iterdir()) and all(p.name in FILES or p.name in ("sources", "case.yaml.tmp")
                                                       for p in path.iterdir()):
        replacing = ", over a capture that did not finish"  # only a capture's own files, and no case.yaml
    try:
        result = capture(target, path, host=host, server=server, interval=CAPTURE_INTERVAL, force=bool(replacing))
    except KitError as err:
        return None, f"case: not captured to {shown}: {err.message}"
    except Exception as err:  # a capture never stops the notebook: what failed is said, the cells go on
        return None, f"case: not captured to {shown}: {type(err).__name__}: {err}"
    return path, f"case: captured to {shown} ({len(result.files)} files){replacing}"


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


# --------------------------------------------------------------------------- a case, or the live target


class Shown:
    """A result shown in plain text as its ``str()`` (a dataclass's repr lists its fields), in HTML as its own
    ``_repr_html_``; everything else is the result's own."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def __repr__(self) -> str:
        return str(self.result)

    def _repr_html_(self) -> str:
        return self.result._repr_html_()



@dataclass
class Subject:
    """What a notebook reads (:func:`open_target`): a case directory, offline, or the live target. Each
    method answers for both, so the same cells read either: ``diagnosis()``, ``comparison()``, ``about()``,
    ``notes()``, ``excerpts()``, ``share(to)``."""

    target: str
    case: Any = None  # kit.case.CaseDir, or None: the live target
    live: Start | None = None  # the connection and the server, live only
    _diagnosis: Any = field(default=None, init=False, repr=False)
    _comparison: Any = field(default=None, init=False, repr=False)

    @property
    def source(self) -> str:
        """Where the answers come from: ``live: lab (...)`` or ``the case DIR captured at ...``."""
        if self.case is None:
            server = self.live.server if self.live is not None else None
            if server is None:
                return f"live: {self.target}"
            return (f"live: {self.target} (the server pid {server.pid}, sglang {server.sglang_version or '?'}, "
                    f"{server.url or f'port {server.port}'})")
        captured = self._captured()
        return (f"the case {self.case.path} captured at {captured.get('at', '(not stated)')} from "
                f"{captured.get('target', '(not stated)')}")

    def _captured(self) -> dict:
        captured = self.case.meta.get("captured") if self.case is not None else None
        return captured if isinstance(captured, dict) else {}

    def diagnosis(self):
        """The doctor's answer: today's, from the live server (kit.doctor), or from the case's files,
        offline (kit.case.replay). Computed once."""
        if self._diagnosis is None:
            if self.case is None:
                from kit.doctor import doctor

                self._diagnosis = doctor(self.target, host=self.live.host, server=self.live.server)
            elif self.case.findings is not None:
                from kit.case import compare_case

                self._diagnosis, self._comparison = compare_case(self.case)
            else:
                from kit.case import replay

                self._diagnosis = replay(self.case)
        return self._diagnosis

    def comparison(self):
        """The replayed answer against the one the case recorded at capture (findings.json): a
        kit.case.Comparison; for a live target, or a case without findings.json, what stands instead."""
        from kit.display import Text

        if self.case is None:
            return Text(f"{self.source}: the answer above is today's, and nothing recorded one to compare it "
                        f"with. A case keeps it: `sgl-kit capture {self.target} -o DIR` (kit.capture), then run "
                        "this notebook again with case_dir = DIR, today or in a month.")
        self.diagnosis()
        if self._comparison is None:
            return Text(f"the case {self.case.id} has no findings.json (the doctor's answer at capture time): "
                        "there is nothing to compare the replay with.")
        return Shown(self._comparison)

    def about(self):
        """What this is: for a case, when and from where it was captured, the sglang it ran, each file
        collected, and what could not be collected and why; for a live target, the server."""
        from kit.display import Text

        if self.case is None:
            return Text(self._about_live())
        case, captured = self.case, self._captured()
        server = captured.get("server") if isinstance(captured.get("server"), dict) else {}
        sg = case.meta.get("sglang") if isinstance(case.meta.get("sglang"), dict) else {}
        took = f" in {captured['seconds']} s" if captured.get("seconds") else ""
        lines = [self.source, f"  id {case.id}, captured{took} by the kit {captured.get('kit', '?')}"]
        if server:
            lines.append(f"  server: pid {server.get('pid', '?')}, port {server.get('port', '?')}"
                         + (f", {server['url']}" if server.get("url") else ""))
        if sg:
            hashes = [f"{name} sha256 {sg[key][:12]}" for key, name in (("record_sha256", "RECORD"),
                                                                        ("wheel_sha256", "wheel")) if sg.get(key)]
            told = f", told by {sg['told_by']}" if sg.get("told_by") else ""
            lines.append(f"  sglang: {sg.get('version') or 'not known'}{told}"
                         + (f" ({', '.join(hashes)})" if hashes else ""))
        if case.meta.get("stand_in"):
            lines.append(f"  GPUs: {case.meta['stand_in']}")
        files = case.files
        lines.append(f"collected ({len(files)} files):")
        width = max((len(name) for name in files), default=0)
        lines += [f"  {name:<{width}}  {what}" for name, what in files.items()]
        missing = case.missing
        lines.append(f"not collected ({len(missing)}):" if missing else "not collected: nothing (every piece was read)")
        lines += [f"  {piece}: {why}" for piece, why in missing.items()]
        for item in case.meta.get("redacted") or []:
            if isinstance(item, dict):
                lines.append(f"  masked in {item.get('file', '?')}: {', '.join(map(str, item.get('names') or []))} "
                             f"({item.get('count', '?')} value{'s' if item.get('count') != 1 else ''}, not kept)")
        if case.meta.get("raw"):
            lines.append("  WARNING: captured raw: secrets were NOT removed; do not share this directory")
        return Text("\n".join(lines))

    def _about_live(self) -> str:
        server = self.live.server if self.live is not None else None
        lines = [self.source]
        if server is not None:
            lines.append(f"  log: {server.log_path or server.log_note or 'not written to a file'}")
        lines += ["nothing of it is kept: each cell below reads the server now, and what it shows changes with "
                  "the server (a restart, a new launch, a log rotated away).",
                  f"To keep it: `sgl-kit capture {self.target} -o DIR` (kit.capture), then case_dir = DIR here."]
        return "\n".join(lines)

    def notes(self):
        """The case's notes (dated, signed, each on a finding or on the whole case) and its resolution."""
        from kit.display import Text

        if self.case is None:
            return Text(f"{self.source}: notes and the resolution are written on a case, not on a live server "
                        "(`sgl-kit case note DIR \"...\"`, `sgl-kit case resolve DIR --cause ... --fix ...`).")
        where = self.case.path
        notes = [n for n in self.case.notes if isinstance(n, dict)]
        lines = [f"notes ({len(notes)}):" if notes else f"notes: none yet (`sgl-kit case note {where} \"...\" "
                                                            "[--finding ID]`)"]
        for n in notes:
            on = f" on {n['finding']}" if n.get("finding") else ""
            body = str(n.get("text", "")).splitlines() or [""]
            lines.append(f"  {n.get('at', '?')}  {n.get('by', '?')}{on}: {body[0]}")
            lines += [f"    {line}" for line in body[1:]]
        r = self.case.resolution
        if isinstance(r, dict):
            lines += ["resolution:", f"  cause: {r.get('cause', '')}", f"  fix: {r.get('fix', '')}",
                      f"  by {r.get('by', '?')} at {r.get('at', '?')}"]
            if r.get("run"):
                lines.append(f"  the run that shows it: {r['run']}")
        else:
            lines.append(f"resolution: none yet (`sgl-kit case resolve {where} --cause ... --fix ...`)")
        return Text("\n".join(lines))

    def excerpts(self, context: int = 4):
        """The sglang source lines the findings cite: for a case, the excerpts it kept (each checked against
        the hash it was written with); live, read now from the server's own sglang (``context`` lines each
        side). A cited line is marked ``>``."""
        from kit.display import Text

        if self.case is not None:
            shown = [f"{e.file}, lines {', '.join(map(str, e.lines))}, kept in {e.path} as captured:\n"
                     f"{self.case.excerpt_text(e).rstrip()}" for e in self.case.excerpts]
            return Text("\n\n".join(shown) if shown else
                        f"the case {self.case.id} keeps no source lines: no finding cited a line of sglang.")
        return Text(self._live_excerpts(context))

    def _live_excerpts(self, context: int) -> str:
        from kit.case.layout import cited_lines, cited_sites
        from kit.errors import KitError
        from kit.source import source_for_server

        wanted = cited_sites(self.diagnosis())  # the lines a capture keeps
        if not wanted:
            return f"{self.source}: no finding cites a line of sglang."
        try:
            tree = source_for_server(self.live.server)
        except KitError as err:
            return f"the server's sglang source cannot be read ({err.message}); the findings cite: " + \
                ", ".join(f"{p}:{n}" for p, ns in sorted(wanted.items()) for n in sorted(ns))
        shown = []
        for path, lines in sorted(wanted.items()):
            try:
                rows = tree.read_text(path).splitlines()
            except KitError as err:
                shown.append(f"{path}: not readable ({err.message})")
                continue
            body = cited_lines(rows, lines, context)
            shown.append(f"{path} (lines {', '.join(map(str, sorted(lines)))}), read now from the server's sglang:\n"
                         + "\n".join(body))
        return "\n\n".join(shown)

    def share(self, to: str | os.PathLike | None = None):
        """A case: with ``to``, its page (kit.report.case_page: `sgl-kit report --case DIR -o FILE`), else how
        to share it. Live: with ``to``, this notebook as a page (:func:`share`), else how to keep a case."""
        from kit.display import Text

        if self.case is None:
            if to:
                return share(to)
            return Text(f"{self.source}: a live server cannot be sent; its case can. `sgl-kit capture {self.target} "
                        "-o DIR` keeps it, and `sgl-kit report --case DIR` writes it as one page to attach.")
        if to:
            from kit.report.case_page import case_report

            return Shown(case_report(self.case.path, to))
        where = self.case.path
        return Text(f"`sgl-kit report --case {where}` writes {where / 'report.html'}: one self-contained page (the "
                    "case, the resolution, the findings with their notes, the source lines, every file), secrets "
                    f"removed; set share_to to write it from here. Or send the directory itself: the one who gets "
                    f"it runs `sgl-kit doctor --case DIR --compare`, with no server and no network.")

    def to_text(self) -> str:
        return self.about()

    def __repr__(self) -> str:
        return str(self.about())

    def _repr_html_(self) -> str:
        return self.about()._repr_html_()


def open_target(target: str = "lab", case_dir: str | os.PathLike | None = "", *, ssh_config: str | None = None,
                trust_new_host: bool = False, server_port: int | None = None) -> Subject:
    """What a notebook reads: the case in ``case_dir`` when it is given (offline: nothing is connected,
    ``target`` is not used), else the live ``target`` (connected as :func:`start` does, keeping the lab's
    launch, capturing nothing)."""
    if case_dir:
        from kit.case import open_case

        return Subject(target, case=open_case(case_dir))
    live = start(target, ssh_config=ssh_config, trust_new_host=trust_new_host, server_port=server_port, capture=None)
    return Subject(target, live=live)
