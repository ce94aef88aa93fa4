"""A case directory: what ``sgl-kit capture`` writes, what replay, notes, the report and practice read.

The layout is the incident corpus' (``data/incidents/<id>/``: a ``case.yaml`` and the evidence files
beside it), with more in ``case.yaml`` (``format: 1``)::

    DIR/
      case.yaml           when, from where, the sglang version and its hashes, the kit's version, what each
                          file is, what could not be collected and why, the source excerpts' index,
                          notes and the resolution
      findings.json       the doctor's answer at capture time (kit.doctor.Diagnosis.to_dict())
      server_info.json    GET /server_info (secret-named keys masked)
      model_info.json     GET /model_info (/get_model_info before it existed)
      loads.json          GET /v1/loads?include=all, where the version serves it
      health.txt          GET /health and GET /health_generate: status and body
      metrics-1.prom      two GET /metrics pages some seconds apart (rates, not totals)
      metrics-2.prom
      server.log          the log's first and last lines (a marker line between them)
      launch.sh           the server's argv, one flag per line, secret-named values masked
      environ.txt         the server's NCCL_/CUDA_/SGLANG_/SGL_/TORCH_/PYTORCH_ environment, masked
      nvidia-smi.txt      `nvidia-smi`, and `topo.txt`, `topo-p2p.txt` (`nvidia-smi topo -m`, `-p2p r`)
      check_env.txt       `python -m sglang.check_env`
      config.json         the model's config.json
      request.json        one replayable request: a /generate body with its sampling settings
      prometheus.json     the series the rules read (with --prometheus URL --since 2h)
      sources/            the source lines every finding cites, one file per source file

Secrets are masked before a file is written (kit._secrets, the one policy); ``case.yaml`` lists what
was masked, by file and name, never the value.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import CaseError

__all__ = ["CASE_FILE", "FINDINGS_FILE", "FORMAT", "FILES", "CaseDir", "Excerpt", "cited_lines", "cited_sites", "now", "open_case",
           "who", "sha256_text"]

FORMAT = 1
CASE_FILE = "case.yaml"
FINDINGS_FILE = "findings.json"
SOURCES_DIR = "sources"

# Each file a capture may write: what it is (said in case.yaml's `files`), and the doctor's option that
# reads it on replay (None: read by the case itself, or kept for people only).
FILES: dict[str, tuple[str, str | None]] = {
    "server_info.json": ("GET /server_info, secret-named keys masked", "server_info"),
    "model_info.json": ("GET /model_info (/get_model_info in older releases)", None),
    "loads.json": ("GET /v1/loads?include=all", None),
    "health.txt": ("GET /health and GET /health_generate: status and body", None),
    "metrics-1.prom": ("GET /metrics, the first page", None),
    "metrics-2.prom": ("GET /metrics, the second page (the interval is in case.yaml)", None),
    "server.log": ("the server log's first and last lines", "log"),
    "launch.sh": ("the server's command line, secret-named values masked", "command"),
    "environ.txt": ("the server's NCCL_/CUDA_/SGLANG_/SGL_/TORCH_/PYTORCH_ environment, masked", "environ"),
    "nvidia-smi.txt": ("nvidia-smi", "nvidia_smi"),
    "topo.txt": ("nvidia-smi topo -m", "topo"),
    "topo-p2p.txt": ("nvidia-smi topo -p2p r", "topo"),
    "check_env.txt": ("python -m sglang.check_env", None),
    "config.json": ("the model's config.json", "model_config"),
    "request.json": ("one replayable request: a /generate body with its sampling settings", None),
    "prometheus.json": ("the Prometheus series the doctor's runtime rules read", None),
    FINDINGS_FILE: ("the doctor's answer at capture time", None),
}


def now() -> str:
    """The time, UTC, to the second, as case.yaml writes it."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def who() -> str:
    """Who writes a note: $SGL_KIT_USER, else the login name."""
    name = os.environ.get("SGL_KIT_USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def cited_sites(diagnosis) -> dict[str, set[int]]:
    """The source lines a kit.doctor.Diagnosis cites (its findings' and context's sites, and the sites they
    looked at and left out): path -> line numbers."""
    wanted: dict[str, set[int]] = {}
    for f in [*diagnosis.findings, *getattr(diagnosis, "context", [])]:
        for site in [*f.sites, *(d.split(": ", 1)[0] for d in f.dropped)]:
            path, _, line = site.rpartition(":")
            if path and line.isdigit():
                wanted.setdefault(path, set()).add(int(line))
    return wanted


def cited_lines(rows: list[str], lines, context: int = 4) -> list[str]:
    """The lines ``lines`` of a file's ``rows`` (1-based) with ``context`` lines each side, numbered, the cited
    ones marked ``>``, ``...`` between runs: how a case keeps and shows the source a finding cites."""
    lines = set(lines)
    keep = sorted({n for line in lines for n in range(max(1, line - context), min(len(rows), line + context) + 1)})
    body, last = [], 0
    for n in keep:
        if last and n != last + 1:
            body.append("...")
        body.append(f"{n:>6}{'>' if n in lines else ' '} {rows[n - 1]}")
        last = n
    return body


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Excerpt:
    """The lines of one sglang source file the findings cite: ``file`` as the kit shows it
    (``srt/server_args.py``), the whole file's hash, the excerpt's own hash, the cited line numbers,
    and where its text is in the case."""

    file: str
    sha256: str  # of the whole source file at capture time
    text_sha256: str  # of the excerpt file as written
    path: str  # relative to the case directory
    lines: list[int] = field(default_factory=list)  # the cited lines

    def to_dict(self) -> dict:
        return {"file": self.file, "sha256": self.sha256, "text_sha256": self.text_sha256, "path": self.path,
                "lines": list(self.lines)}


class CaseDir:
    """One case directory, read. ``meta`` is case.yaml as data; ``save()`` writes it back."""

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = path
        self.meta = meta

    # ---- what it holds
    @property
    def id(self) -> str:
        return str(self.meta.get("id") or self.path.name)

    @property
    def version(self) -> str | None:
        sg = self.meta.get("sglang") or {}
        return str(sg["version"]) if isinstance(sg, dict) and sg.get("version") else None

    @property
    def captured(self) -> bool:
        """Written by ``sgl-kit capture`` (a corpus case written by hand has no ``format``)."""
        return "format" in self.meta

    @property
    def files(self) -> dict[str, str]:
        """file name -> what it is, for the files present."""
        listed = self.meta.get("files") or {}
        return {name: str(what) for name, what in listed.items() if (self.path / name).is_file()}

    @property
    def missing(self) -> dict[str, str]:
        """piece -> why it could not be collected."""
        return {str(k): str(v) for k, v in (self.meta.get("missing") or {}).items()}

    @property
    def notes(self) -> list[dict]:
        return list(self.meta.get("notes") or [])

    @property
    def resolution(self) -> dict | None:
        return self.meta.get("resolution") or None

    @property
    def findings(self) -> dict | None:
        """findings.json as data (the doctor's answer at capture time), or None."""
        import json

        path = self.path / FINDINGS_FILE
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CaseError(f"{path} is not the doctor's JSON: {err}",
                            hint="capture the case again, or restore the file from where the case was shared") from None

    @property
    def excerpts(self) -> list[Excerpt]:
        out = []
        for item in self.meta.get("excerpts") or []:
            try:
                out.append(Excerpt(str(item["file"]), str(item["sha256"]), str(item["text_sha256"]),
                                   str(item["path"]), [int(n) for n in item.get("lines") or []]))
            except (KeyError, TypeError, ValueError):
                raise CaseError(f"{self.path / CASE_FILE}: an excerpt entry lacks file, sha256, text_sha256 or path: "
                                f"{item!r}", hint="capture the case again") from None
        return out

    def file(self, name: str) -> Path | None:
        p = self.path / name
        return p if p.is_file() else None

    def excerpt_text(self, excerpt: Excerpt) -> str:
        """The excerpt's text, checked against the hash it was written with."""
        p = self.path / excerpt.path
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as err:
            raise CaseError(f"{p}: the excerpt of {excerpt.file} cannot be read ({err.strerror or err})",
                            hint="capture the case again, or restore the file from where the case was shared") from None
        if sha256_text(text) != excerpt.text_sha256:
            raise CaseError(f"{p}: the excerpt of {excerpt.file} was changed after capture (its hash no longer "
                            "matches case.yaml)",
                            hint="restore it from where the case was shared; notes go in case.yaml "
                                 "(sgl-kit case note), not in the excerpts")
        return text

    # ---- writing
    def save(self) -> None:
        write_meta(self.path, self.meta)


def write_meta(path: Path, meta: dict) -> None:
    """case.yaml, keys in the order given, block style, readable in a diff."""
    import yaml

    text = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    tmp = path / (CASE_FILE + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path / CASE_FILE)


def open_case(path: str | os.PathLike) -> CaseDir:
    """Read a case directory: ``sgl-kit capture``'s, or a corpus case of ``data/incidents/``."""
    import yaml

    p = Path(path).expanduser()
    if not p.exists():
        raise CaseError(f"no case at {p}: the directory does not exist",
                        hint="give the directory `sgl-kit capture TARGET -o DIR` wrote")
    if not p.is_dir():
        raise CaseError(f"{p} is a file, not a case directory",
                        hint="give the directory that holds case.yaml (`sgl-kit capture TARGET -o DIR` writes one)")
    meta_path = p / CASE_FILE
    if not meta_path.is_file():
        raise CaseError(f"{p} is not a case: it has no {CASE_FILE}",
                        hint="give the directory `sgl-kit capture TARGET -o DIR` wrote")
    try:
        meta: Any = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise CaseError(f"{meta_path} is not readable YAML: {str(err).splitlines()[0]}",
                        hint="fix the file (notes are plain text in it), or capture the case again") from None
    if not isinstance(meta, dict):
        raise CaseError(f"{meta_path} is not a case: it holds no mapping of keys",
                        hint="give the directory `sgl-kit capture TARGET -o DIR` wrote")
    fmt = meta.get("format")
    if fmt is not None:
        try:
            fmt = int(fmt)
        except (TypeError, ValueError):
            raise CaseError(f"{meta_path}: format {meta.get('format')!r} is not a number",
                            hint=f"this kit reads case format {FORMAT}") from None
        if fmt > FORMAT:
            raise CaseError(f"{p} is a case of format {fmt}, newer than this kit reads ({FORMAT})",
                            hint="upgrade the kit (git pull; make) to read it")
    return CaseDir(p, meta)
