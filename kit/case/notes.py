"""What people add to a case after it was captured: notes, the resolution, and a summary to read.

    from kit.case.notes import note, resolve, show
    note("cases/slow-tuesday", "decode at 38 tok/s from 14:02", finding="decode-cuda-graph-off")
    resolve("cases/slow-tuesday", cause="the prefill graph was off under EAGLE",
            fix="--enforce-piecewise-cuda-graph", run="runs/after.jsonl")
    print(show("cases/slow-tuesday"))

All of it goes in ``case.yaml`` (kit.case.layout): ``notes`` (a list, each dated and signed) and
``resolution`` (the cause, the fix, who and when, and the comparison run that shows it, copied into the
case so the case stays self-contained); resolving again keeps the earlier resolution under
``resolution_history``. Text is stored after the report's redactor (kit.report.redaction), so a note
never carries a secret; what was masked is counted, never kept.
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from kit.errors import CaseError, UsageError

from .layout import FINDINGS_FILE, CaseDir, now, open_case, who

__all__ = ["SHOWN_FINDINGS", "note", "resolve", "show", "summary"]

SHOWN_FINDINGS = 5  # the findings at capture time that show() lists


def note(case_dir: str | os.PathLike, text: str, *, finding: str | None = None, by: str | None = None) -> dict:
    """Append a note to the case's ``notes``: ``{at, by, text, finding?}``, the text with secrets masked.
    ``finding`` ties it to one of the findings at capture time (an id of findings.json). Returns the note as
    stored, with ``masked`` (how many secret values were masked) when any was."""
    if not (text or "").strip():
        raise UsageError("a note needs text: it was empty",
                         hint='sgl-kit case note DIR "what you saw" [--finding ID]')
    case = _writable(case_dir)
    if finding is not None:
        _check_finding(case, finding)
    stored, counts = _masked(text)
    entry: dict[str, Any] = {"at": now(), "by": by or who(), "text": stored}
    if finding is not None:
        entry["finding"] = finding
    if not isinstance(case.meta.get("notes"), list):
        case.meta["notes"] = []
    case.meta["notes"].append(entry)
    case.save()
    return _with_masked(dict(entry), counts)


def resolve(case_dir: str | os.PathLike, *, cause: str, fix: str, run: str | os.PathLike | None = None,
            by: str | None = None) -> dict:
    """Set the case's ``resolution``: ``{cause, fix, at, by, run?}``. ``run`` is a saved run file
    (``sgl-kit bench --out FILE``, or ``sgl-kit bench compare A B --json`` saved): kept where it is when it
    is inside the case, else copied in as ``run.json`` (``run.jsonl`` for JSON lines), so the case stays
    self-contained. A case resolved before keeps its earlier resolution under ``resolution_history``.
    Returns the resolution as stored, with ``masked`` when secret values were masked."""
    for name, value in (("cause", cause), ("fix", fix)):
        if not (value or "").strip():
            raise UsageError(f"a resolution needs a {name}: it was empty",
                             hint='sgl-kit case resolve DIR --cause "what it was" --fix "what changed it"')
    case = _writable(case_dir)
    counts: Counter = Counter()
    cause_text, more = _masked(cause)
    counts += more
    fix_text, more = _masked(fix)
    counts += more
    resolution: dict[str, Any] = {"cause": cause_text, "fix": fix_text, "at": now(), "by": by or who()}
    if run is not None:
        resolution["run"], more = _run_file(case, Path(run).expanduser())
        counts += more
    earlier = case.meta.get("resolution")
    if earlier:
        history = case.meta.get("resolution_history")
        case.meta["resolution_history"] = [*(history if isinstance(history, list) else []), earlier]
    case.meta["resolution"] = resolution
    case.save()
    return _with_masked(dict(resolution), counts)


# --------------------------------------------------------------------------- reading


def summary(case_dir: str | os.PathLike) -> dict:
    """The case as data: what show() prints, every finding at capture time (id and title)."""
    case = open_case(case_dir)
    meta = case.meta
    findings = _finding_rows(case)
    history = meta.get("resolution_history")
    return {
        "id": case.id, "path": str(case.path), "kind": meta.get("kind"), "format": meta.get("format"),
        "captured_case": case.captured,
        "captured": meta.get("captured") or {}, "sglang": meta.get("sglang") or {},
        "files": [{"name": name, "what": what, "bytes": (case.path / name).stat().st_size}
                  for name, what in case.files.items()],
        "listed_but_absent": sorted(set(meta.get("files") or {}) - set(case.files)),
        "missing": case.missing, "notes": case.notes, "resolution": case.resolution,
        "resolution_history": history if isinstance(history, list) else [],
        "findings": findings,
    }


def show(case_dir: str | os.PathLike) -> str:
    """The case for a person: id, when and from where it was captured, sglang, its files (name, what, size),
    what is missing, the notes (dated), the resolution, and the findings at capture time (the first five)."""
    s = summary(case_dir)
    cap, sg = s["captured"], s["sglang"]
    lines = [f"case {s['id']}" + (f" ({s['kind']})" if s["kind"] else ""), f"  directory: {s['path']}"]
    if cap:
        took = f", {cap['seconds']} s" if cap.get("seconds") else ""
        lines.append(f"  captured: {cap.get('at', 'not stated')} from {cap.get('target', 'not stated')}{took}"
                     + (f" (kit {cap['kit']})" if cap.get("kit") else ""))
    else:
        lines.append("  captured: not stated (no `captured` in case.yaml)")
    if sg:
        sha = sg.get("record_sha256")
        lines.append(f"  sglang: {sg.get('version') or 'not known'}" + (f" (RECORD sha256 {sha[:12]})" if sha else ""))
    else:
        lines.append("  sglang: not stated")
    lines.append(f"files ({len(s['files'])}):")
    width = max((len(f["name"]) for f in s["files"]), default=0)
    lines += [f"  {f['name']:<{width}}  {_size(f['bytes']):>8}  {f['what']}" for f in s["files"]]
    lines += [f"  {name}: listed in case.yaml, not in the directory" for name in s["listed_but_absent"]]
    if s["missing"]:
        lines.append(f"missing ({len(s['missing'])}):")
        lines += [f"  {piece}: {why}" for piece, why in s["missing"].items()]
    found = s["findings"]
    if found is None:
        lines.append(f"findings at capture time: not known (no {FINDINGS_FILE})")
    elif not found:
        lines.append("findings at capture time: none")
    else:
        first = found[:SHOWN_FINDINGS]
        lines.append(f"findings at capture time ({len(found)}"
                     + (f", the first {SHOWN_FINDINGS}" if len(found) > SHOWN_FINDINGS else "") + "):")
        width = max(len(f["id"]) for f in first)
        lines += [f"  {f['id']:<{width}}  {f['title']}" for f in first]
    how = s["captured_case"]  # only a captured case is annotated with `sgl-kit case`
    lines.append(f"notes ({len(s['notes'])}):" if s["notes"] else
                 "notes: none" + (f" (sgl-kit case note {s['path']} \"...\")" if how else ""))
    for n in s["notes"]:
        on = f" on {n['finding']}" if n.get("finding") else ""
        body = str(n.get("text", "")).splitlines() or [""]
        lines.append(f"  {n.get('at', '?')}  {n.get('by', '?')}{on}: {body[0]}")
        lines += [f"    {line}" for line in body[1:]]
    r = s["resolution"]
    if r:
        lines += ["resolution:", f"  cause: {r.get('cause', '')}", f"  fix: {r.get('fix', '')}",
                  f"  by {r.get('by', '?')} at {r.get('at', '?')}"]
        if r.get("run"):
            lines.append(f"  run: {r['run']}")
        if s["resolution_history"]:
            n = len(s["resolution_history"])
            lines.append(f"  ({n} earlier resolution{'s' if n != 1 else ''} kept in case.yaml's resolution_history)")
    else:
        lines.append("resolution: none yet"
                     + (f" (sgl-kit case resolve {s['path']} --cause ... --fix ...)" if how else ""))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- helpers


def _writable(case_dir: str | os.PathLike) -> CaseDir:
    """A case of ``sgl-kit capture`` (case.yaml with ``format``): a corpus case written by hand keeps its
    comments and layout, which writing case.yaml back would lose."""
    case = open_case(case_dir)
    if not case.captured:
        raise CaseError(f"{case.path} is not a captured case (its case.yaml has no `format`): notes and "
                        "resolutions are written to the case directories `sgl-kit capture` makes",
                        hint="capture the server (`sgl-kit capture TARGET -o DIR`) and annotate that directory; "
                             "a corpus case is edited by hand")
    return case


def _finding_rows(case: CaseDir) -> list[dict] | None:
    """(id, title) of each finding of findings.json; None when the case has none."""
    data = case.findings
    if data is None:
        return None
    if not isinstance(data, dict):
        return []
    rows = [*(data.get("findings") or []), *(data.get("not_applicable") or [])]  # a note may name either
    return [{"id": str(f.get("id")), "title": str(f.get("title", ""))} for f in rows if isinstance(f, dict)]


def _check_finding(case: CaseDir, finding: str) -> None:
    rows = _finding_rows(case)
    listing = f"`sgl-kit case show {case.path}` lists them"
    if rows is None:
        raise CaseError(f"{case.path} has no {FINDINGS_FILE}: there is no finding {finding!r} to attach the note to",
                        hint="leave out --finding (finding= in Python)")
    ids = [r["id"] for r in rows]
    if finding in ids:
        return
    if not ids:
        raise CaseError(f"no finding {finding!r} in {case.path / FINDINGS_FILE}: the doctor found nothing at capture "
                        "time", hint="leave out --finding (finding= in Python)")
    close = difflib.get_close_matches(finding, ids, n=1, cutoff=0.6)
    raise CaseError(f"no finding {finding!r} in {case.path / FINDINGS_FILE}; the findings there are: {', '.join(ids)}",
                    hint=(f"did you mean {close[0]}? " if close else "") + listing)


def _masked(text: str) -> tuple[str, Counter]:
    from kit.report.redaction import redact

    return redact(text)


def _with_masked(out: dict, counts: Counter) -> dict:
    from kit.report.redaction import HOST_KINDS, secret_count

    n = secret_count(counts)
    if n:
        out["masked"] = n
        out["masked_kinds"] = sorted(k for k in counts if k not in HOST_KINDS)
    return out


def _json_kind(path: Path, text: str) -> str:
    """"json" (one document) or "jsonl" (one per line, as `sgl-kit bench` writes runs); else a CaseError."""
    try:
        json.loads(text)
        return "json"
    except ValueError:
        pass
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        for line in lines:
            json.loads(line)
    except ValueError:
        lines = []
    if lines:
        return "jsonl"
    raise CaseError(f"{path} is not a run file: it is neither JSON nor JSON lines",
                    hint="give the .jsonl `sgl-kit bench TARGET --out FILE` wrote, or the output of "
                         "`sgl-kit bench compare A B --json` saved to a file")


def _run_file(case: CaseDir, src: Path) -> tuple[str, Counter]:
    """The run's path as the resolution stores it (relative to the case), copied in when outside it."""
    if not src.is_file():
        raise CaseError(f"no run file at {src}" + (" (a directory)" if src.is_dir() else ""),
                        hint="give the .jsonl `sgl-kit bench TARGET --out FILE` wrote, or a saved "
                             "`sgl-kit bench compare A B --json`")
    try:
        text = src.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CaseError(f"{src} cannot be read as a run file ({getattr(err, 'strerror', None) or err})",
                        hint="give the .jsonl `sgl-kit bench TARGET --out FILE` wrote") from None
    kind = _json_kind(src, text)
    root = case.path.resolve()
    try:
        return src.resolve().relative_to(root).as_posix(), Counter()
    except ValueError:
        pass
    stored, counts = _masked(text)
    stem, suffix = "run", "." + kind
    dest, n = root / (stem + suffix), 1
    while dest.exists() and dest.read_text(encoding="utf-8", errors="replace") != stored:
        n += 1
        dest = root / f"{stem}-{n}{suffix}"
    if not dest.exists():
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_text(stored, encoding="utf-8")
        tmp.replace(dest)
    files = case.meta.get("files")
    if not isinstance(files, dict):
        files = case.meta["files"] = {}
    files[dest.name] = f"the run the resolution cites, copied from {src.name}"
    return dest.name, counts


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"
