"""A case diagnosed again, offline: ``sgl-kit doctor --case DIR [--compare]``.

The case's files are read the way the doctor reads files a colleague sent (kit.doctor.from_files), with
what only a capture keeps put back: the lab's stand-in GPUs, the host's probes, and the ``/metrics`` page
(or the Prometheus series) the runtime rules read. The sglang source is the release's own from this
machine's cache; nothing is downloaded (``download=True`` allows it). Without it, the rules that read the
source say less, and the case's excerpts still show the lines its findings cited.

``compare`` sets today's answer against ``findings.json``: the findings that are new, gone or changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import CaseError, KitError

from .layout import FILES, FINDINGS_FILE, CaseDir, open_case, sha256_text

__all__ = ["Comparison", "compare", "evidence", "replay", "runtime_from_page"]


def evidence(case_dir, *, download: bool = False, progress: Callable[[str], None] | None = None):
    """The kit.doctor.Evidence of a case directory (captured, or a corpus case of data/incidents/)."""
    from kit.doctor import from_files

    case = case_dir if isinstance(case_dir, CaseDir) else open_case(case_dir)
    for excerpt in case.excerpts:  # an excerpt changed after capture is refused before anything is read
        case.excerpt_text(excerpt)
    if not case.captured:
        paths = [str(p) for p in sorted(case.path.iterdir()) if p.is_file() and p.name not in _NOT_EVIDENCE]
        if not paths:
            raise CaseError(f"{case.path} holds no evidence file beside its case.yaml",
                            hint="a case keeps the evidence as posted (logs, launch, nvidia-smi) beside case.yaml")
        ev = from_files(paste=paths, sglang=case.meta.get("reader_version"), download=download, progress=progress)
        ev.target = f"the case {case.id}"
        return ev
    options: dict = {}
    for name, (_, option) in FILES.items():
        path = case.file(name)
        if option is None or path is None:
            continue
        if option == "topo":
            options.setdefault("topo", []).append(str(path))
        else:
            options[option] = str(path)
    # With the server's own /server_info the live doctor reads its values as they are: so does the replay.
    ev = from_files(sglang=case.version, download=download, progress=progress,
                    resolve_launch="server_info" not in options, **options)
    captured = case.meta.get("captured") or {}
    ev.target = f"the case {case.id} (captured from {captured.get('target', '?')} at {captured.get('at', '?')})"
    sg = case.meta.get("sglang") or {}
    if sg.get("basis") and ev.version == case.version:  # how the capture knew the version, not "given" here
        ev.version_basis = ev.sources["version_basis"] = sg["basis"]
        if sg.get("told_by"):
            ev.sources["version"] = sg["told_by"]
        else:
            ev.sources.pop("version", None)
    if ev.tree is None and case.version:
        ev.problems.append(f"the sglang {case.version} source is not in this machine's cache: the rules that read "
                           "it said less; the case's sources/ keep the lines its findings cited at capture "
                           "(run once with network, or `sgl-kit doctor --case DIR --download`, for the whole source)")
        ev.problems = [p for p in ev.problems if not p.startswith(f"sglang {case.version} source:")]
    elif ev.tree is not None:
        _check_source(case, ev)
    if case.meta.get("stand_in") and (ev.hardware is None or not getattr(ev.hardware, "gpus", None)):
        from kit.doctor import lab_stand_in

        ev.hardware = lab_stand_in(ev, _environ(case))
    if case.meta.get("no_gpu") and ev.hardware is None:  # nvidia-smi found no GPU there: that is a fact
        from kit.hardware import Hardware

        ev.hardware = Hardware(str(captured.get("target", "?")), note=str(case.meta["no_gpu"]))
        ev.sources["hardware"] = f"the capture: {case.meta['no_gpu']}"
    if case.meta.get("probes"):
        ev.probes = dict(case.meta["probes"])
    prom = case.file("prometheus.json")
    page = case.file("metrics-2.prom") or case.file("metrics-1.prom")
    server = captured.get("server") or {}
    if prom is not None:
        try:
            ev.runtime = json.loads(prom.read_text(encoding="utf-8"))
            ev.sources["runtime"] = f"the Prometheus series kept in {prom.name}"
        except (OSError, ValueError) as err:
            ev.problem(f"{prom.name}", CaseError(f"not JSON: {err}"))
    elif page is not None:
        runtime_from_page(ev, out_page=page, at=captured.get("scraped_at"), started=server.get("started_at"),
                          pid=server.get("pid"))
    ev.notices = list(dict.fromkeys(ev.notices))
    return ev


_NOT_EVIDENCE = {"case.yaml", "source.md", "evidence.sha256", "SOURCES.md", FINDINGS_FILE, "report.html"}


def runtime_from_page(ev, *, out_page: Path, at: float | None, started: float | None, pid: int | None) -> None:
    """What a kept ``/metrics`` page says, as the live doctor reads a scrape (kit.doctor.add_runtime_page)."""
    from kit.doctor import add_runtime_page
    from kit.metrics import parse_metrics_text

    try:
        page = parse_metrics_text(Path(out_page).read_text(encoding="utf-8"), source=str(out_page))
    except (OSError, KitError) as err:
        ev.problem(f"the kept /metrics page {Path(out_page).name}", err)
        return
    add_runtime_page(ev, page, source=f"/metrics (kept as {Path(out_page).name})", at=at, started=started, pid=pid)


def _environ(case: CaseDir) -> dict:
    path = case.file("environ.txt")
    if path is None:
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value
    return out


def _check_source(case: CaseDir, ev) -> None:
    """The cached release's files against the hashes the capture saw: a server running a changed install."""
    for excerpt in case.excerpts:
        try:
            text = ev.tree.read_text(excerpt.file)
        except KitError:
            continue
        if sha256_text(text) != excerpt.sha256:
            ev.problems.append(f"{excerpt.file} of the cached sglang {case.version} differs from the server's "
                               f"(sha256 {sha256_text(text)[:12]} here, {excerpt.sha256[:12]} there): the server "
                               f"ran a changed install; {excerpt.path} keeps the lines it cited")


def replay(case_dir, *, download: bool = False, progress: Callable[[str], None] | None = None):
    """The doctor's answer for a case, today: kit.doctor.Diagnosis."""
    from kit.doctor import diagnose

    return diagnose(evidence(case_dir, download=download, progress=progress))


# --------------------------------------------------------------------------- compare


@dataclass
class Comparison:
    """Today's answer against the one a case recorded: findings new, gone, changed (what changed), the same."""

    case: str
    new: list[dict] = field(default_factory=list)
    gone: list[dict] = field(default_factory=list)
    changed: list[dict] = field(default_factory=list)  # {"id", "title", "what": {field: [before, now]}}
    same: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.new or self.gone or self.changed)

    def to_dict(self) -> dict:
        return {"case": self.case, "new": self.new, "gone": self.gone, "changed": self.changed, "same": self.same,
                "differs": self.differs}

    def to_text(self) -> str:
        if not self.differs:
            return (f"compared with findings.json of {self.case}: the same answer "
                    f"({len(self.same)} finding{'s' if len(self.same) != 1 else ''}, none new, gone or changed)")
        lines = [f"compared with findings.json of {self.case}: {len(self.new)} new, {len(self.gone)} gone, "
                 f"{len(self.changed)} changed, {len(self.same)} the same"]
        lines += [f"  new      {f['id']}: {f['title']}" for f in self.new]
        lines += [f"  gone     {f['id']}: {f['title']}" for f in self.gone]
        for f in self.changed:
            lines.append(f"  changed  {f['id']}: {f['title']}")
            for what, (before, now) in f["what"].items():
                lines.append(f"             {what}: {_short(before)} -> {_short(now)}")
        return "\n".join(lines)

    __str__ = to_text

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"


_COMPARED = ("title", "impact", "impact_basis", "impact_reason", "fix", "evidence")


def _short(value) -> str:
    from kit._text import clip

    return clip(json.dumps(value, sort_keys=True) if not isinstance(value, str) else value, 90)


def _key(f: dict) -> str:
    return f"{f.get('id')}|{f.get('title')}" if f.get("id") == "known-issue" else str(f.get("id"))


def _same_places(data, places: dict[str, str]):
    """The findings with each file's place written as the case names it (the log the capture read and its copy
    in the case are one file, ``server.log``)."""
    text = json.dumps(data)
    for where, name in sorted(places.items(), key=lambda kv: -len(kv[0])):
        if where:
            text = text.replace(json.dumps(where)[1:-1], name)
    return json.loads(text)


def compare(before: dict, now, *, case: str = "the case", places: dict[str, str] | None = None) -> Comparison:
    """``before``: findings.json as data; ``now``: a Diagnosis (or its to_dict()). ``places`` maps the paths a
    capture read (the server's log) and the case's own copies to one name each, so a moved file is not a
    change."""
    now = now.to_dict() if hasattr(now, "to_dict") else now
    if places:
        before, now = _same_places(before, places), _same_places(now, places)
    old = {_key(f): f for f in before.get("findings") or []}
    new = {_key(f): f for f in now.get("findings") or []}
    out = Comparison(case)
    for key, f in new.items():
        if key not in old:
            out.new.append({"id": f.get("id"), "title": f.get("title")})
            continue
        what = {k: [old[key].get(k), f.get(k)] for k in _COMPARED if old[key].get(k) != f.get(k)}
        if what:
            out.changed.append({"id": f.get("id"), "title": f.get("title"), "what": what})
        else:
            out.same.append(str(f.get("id")))
    out.gone = [{"id": f.get("id"), "title": f.get("title")} for key, f in old.items() if key not in new]
    return out


def compare_case(case_dir, *, download: bool = False, progress=None) -> tuple[object, Comparison]:
    """Replay a case and compare with its findings.json: (Diagnosis, Comparison)."""
    case = case_dir if isinstance(case_dir, CaseDir) else open_case(case_dir)
    before = case.findings
    if before is None:
        raise CaseError(f"{case.path} has no {FINDINGS_FILE} to compare with",
                        hint="a case captured by `sgl-kit capture` has one; leave out --compare to only replay")
    diagnosis = replay(case, download=download, progress=progress)
    places = {str(case.path / name): name for name in case.files}
    log = (case.meta.get("captured") or {}).get("log")
    if log:
        places[f"the log {log}"] = "server.log"
        places[str(log)] = "server.log"
    return diagnosis, compare(before, diagnosis, case=case.id, places=places)
