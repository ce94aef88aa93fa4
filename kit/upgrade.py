"""What changes when you upgrade sglang: one launch, resolved by two or more versions, side by side.

``upgrade_diff(flags, versions=["0.5.11", "0.5.23"], model=..., gpu="h100", tp=2)`` runs the
launch through each version's own argument resolution (the dry-run, ``kit.dryrun``: sglang's
``ServerArgs.__post_init__`` on CPU) and returns an :class:`UpgradeDiff`:

- ``rows``: every effective setting that differs, with the code site in each version that set it
  (the dry-run's ``changes``), or ``asked`` / ``default``. A renamed flag is one row, paired through
  its lineage (``kit.server_args.lineage``, ``kit/data/lineage.yaml``).
- ``unparsed``: asked flags a version no longer accepts, with the new name when the lineage (or both
  sources) show a rename; the launch is resolved with the new name, or without the flag.
- ``added`` / ``removed``: fields only some versions have; ``hidden``: volatile ones (``random_seed``);
  ``missing``: versions whose dry-run environment is not built, with the command that builds it.
- ``method``: ``dry-run`` or ``static`` per version. A version before 0.5.6 is read statically (its
  flags over its source's defaults, not resolved), and then so is every version.

JSON (``UpgradeDiff.to_dict()``, ``sgl-kit upgrade-diff --json``)::

    {"versions": ["0.5.12", "0.5.18"],           # the first is the version upgraded from
     "method": {"0.5.12": "dry-run", ...},        # or "static"
     "rows": [{"setting": "prefill (piecewise) CUDA graph",
               "kind": "changed" | "renamed" | "renamed-changed",
               "fields": {"0.5.12": "disable_piecewise_cuda_graph", "0.5.18": "cuda_graph_config.prefill.backend"},
               "values": {"0.5.12": true, "0.5.18": "breakable"},
               "sites": {"0.5.12": {"origin": "sglang", "where": "srt/server_args.py:1230",
                                    "function": "ServerArgs._handle_piecewise_cuda_graph", "text": "..."},
                         "0.5.18": {"origin": "default", "where": null, "function": null, "text": "default"}},
               "lineage": "how the fields were paired, or null"}],
     "unparsed": [{"version", "flag", "values", "error", "new_flag", "how", "action", "launch"}],
     "deprecated": [{"version", "flag", "new_flag", "note"}], "hidden": ["random_seed"],
     "added": [{"field", "versions", "values", "lineage"}],     # not in the first version; "removed": the
     "removed": [...], "missing": [{"version", "reason", "setup"}],  # first has it, a later one does not
     "errors": {"0.5.23": "sglang would refuse to start: ..."}, "notes": [...], "launches": {version: [flags]},
     "flags", "model", "gpu", "tp", "seconds"}     # site origins: default, asked, sglang, asked, then sglang
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ._text import clip, plain, wrap
from .errors import DryRunError, EnvironmentMissing, KitError, ParseError, UsageError
from .upgrade_parts import fast_paths, paths_text, version_list, with_tp

__all__ = ["OnlyIn", "Site", "Unparsed", "UpgradeDiff", "UpgradeRow", "upgrade_diff"]

VOLATILE = ("random_seed",)  # differs between any two starts
STATIC_NOTE = ("values are not resolved: each is the launch's explicit flag over that version's default, read "
               "from its source; no __post_init__ ran, so what sglang decides at startup is not shown")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)$", re.M)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Site:
    """Who set a value in one version: ``default``, ``asked``, ``sglang`` or ``asked, then sglang``; ``note``
    stands for the code site when the dry-run saw no assignment of the final value (a nested attribute)."""

    origin: str
    where: str | None = None
    function: str | None = None
    static: bool = False
    note: str = ""

    @property
    def text(self) -> str:
        if self.origin in ("default", "asked"):
            return self.origin + (" (not resolved)" if self.static and self.origin == "default" else "")
        code = self.note or " ".join(p for p in (self.where, self.function) if p) or (
            "changed in place (no assignment seen)")
        return f"asked, then {code}" if self.origin.startswith("asked") else code

    def to_dict(self) -> dict:
        return {"origin": self.origin, "where": self.where, "function": self.function, "text": self.text}


@dataclass
class UpgradeRow:
    """One setting whose effective value differs between the versions (or that was renamed)."""

    setting: str
    kind: str  # changed, renamed, renamed-changed
    fields: dict[str, str]
    values: dict[str, Any]
    sites: dict[str, Site]
    lineage: str | None = None
    states: dict[str, str] = field(default_factory=dict, repr=False)  # "off"/"on" where the lineage knows

    def cell(self, version: str) -> str:
        value = _show(self.values[version])
        if self.kind == "changed":
            return value
        name = self.fields[version]
        state = self.states.get(version)
        return f"{state} ({name}={value})" if state else f"{name}={value}"

    def to_dict(self) -> dict:
        return {"setting": self.setting, "kind": self.kind, "fields": dict(self.fields),
                "values": {v: plain(x, _show) for v, x in self.values.items()},
                "sites": {v: s.to_dict() for v, s in self.sites.items()}, "lineage": self.lineage}


@dataclass
class Unparsed:
    """An asked flag that one version does not accept, and what was done about it."""

    version: str
    flag: str
    values: list[str]
    error: str | None = None  # sglang's own argparse message, when its dry-run ran the flag
    new_flag: str | None = None
    how: str = ""  # where the new name comes from
    action: str = ""  # what the launch was resolved with instead
    launch: list[str] = field(default_factory=list, repr=False)

    @property
    def text(self) -> str:
        asked = shlex.join([self.flag, *self.values])
        said = f' (sglang: "{clip(self.error, 140)}")' if self.error else ""
        new = f"; its new name is {self.new_flag} ({self.how})" if self.new_flag else f"; {self.how}"
        return f"sglang {self.version} does not accept {asked}{said}{new}; {self.action}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class OnlyIn:
    """A field that only some versions have (added or removed by the upgrade)."""

    field: str
    versions: list[str]
    values: dict[str, Any]
    lineage: str

    def to_dict(self) -> dict:
        return {"field": self.field, "versions": list(self.versions),
                "values": {v: plain(x, _show) for v, x in self.values.items()}, "lineage": self.lineage}


@dataclass
class UpgradeDiff:
    """One launch under several sglang versions; see the module docstring."""

    versions: list[str]
    method: dict[str, str] = field(default_factory=dict)
    rows: list[UpgradeRow] = field(default_factory=list)
    unparsed: list[Unparsed] = field(default_factory=list)
    deprecated: list[dict] = field(default_factory=list)
    added: list[OnlyIn] = field(default_factory=list)
    removed: list[OnlyIn] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    launches: dict[str, list[str]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    model: str | None = None
    gpu: str | None = None
    tp: int | None = None
    seconds: float = 0.0
    paths: dict[str, dict] = field(default_factory=dict)  # version -> fast path -> its gate chain, summed up
    known: Any = None  # kit.doctor.known_report.Report of the first version, upgraded to the last

    @property
    def compared(self) -> list[str]:
        """The versions that were read (those not missing)."""
        gone = {m["version"] for m in self.missing}
        return [v for v in self.versions if v not in gone]

    @property
    def refused(self) -> bool:
        """A version does not take the launch as given: a flag no longer parses, or sglang would stop."""
        return bool(self.unparsed or self.errors)

    @property
    def headline(self) -> str:
        arrow = " -> ".join(self.versions)
        methods = sorted(set(self.method.values()))
        how = "resolved by each version's own code (dry-run)" if methods == ["dry-run"] else (
            "read statically (not resolved)" if methods == ["static"] else "dry-run and static")
        if len(self.compared) < 2:
            what = "; ".join(f"sglang {m['version']} is not set up here (`{m['setup']}`)" for m in self.missing)
            return f"sglang {arrow}: cannot compare: {what or 'fewer than two versions could be read'}"
        on = f"; {f'tp {self.tp}, ' if self.tp else ''}GPU {self.gpu}" if "dry-run" in methods else ""
        renamed = sum(r.kind == "renamed" for r in self.rows)
        return (f"sglang {arrow}: {len(self.rows) - renamed} setting(s) changed, {renamed} renamed with the same "
                f"value, {len(self.unparsed)} asked flag(s) no longer parse; {how}{on}")

    def __repr__(self) -> str:
        return f"<UpgradeDiff {self.headline}>"

    def save_summary(self, path: str | os.PathLike) -> Path:
        """Add this diff's headline to a run's JSON summary (``upgrade``), keeping what is there."""
        out = Path(path)
        data = json.loads(out.read_text()) if out.is_file() and out.stat().st_size else {}
        data["upgrade"] = {"headline": self.headline, "versions": self.versions, "compared": self.compared,
                           "missing": self.missing, "changed": len(self.rows), "refused": self.refused}
        out.write_text(json.dumps(data, indent=2, default=str) + "\n")
        return out

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in ("rows", "unparsed", "added", "removed"):
            out[key] = [item.to_dict() for item in out[key]]
        out["known"] = self.known.to_dict().get("upgrade") if self.known is not None else None
        return json.loads(json.dumps({**out, "seconds": round(self.seconds, 3)}, default=str))

    def to_frame(self):
        """The differing settings, one row each: value, field and site per version."""
        import pandas as pd

        vs = self.compared
        columns = ["setting", "kind", *vs, *(f"site {v}" for v in vs), *(f"field {v}" for v in vs), "lineage"]
        data = [[r.setting, r.kind, *(r.cell(v) for v in vs), *(r.sites[v].text for v in vs),
                 *(r.fields[v] for v in vs), r.lineage or ""] for r in self.rows]
        return pd.DataFrame(data, columns=columns)

    def to_text(self, width: int = 110) -> str:
        out = [self.headline]
        out += [f"  launch: {shlex.join(self.flags)}"] if self.flags else []
        for m in self.missing:
            out.append(f"  NOT SET UP: sglang {m['version']}: {m['reason']}; build it with `{m['setup']}`")
        out += [f"  note: {n}" for n in self.notes]
        for version, error in self.errors.items():
            out.append(f"  sglang {version} would not start with this launch: {error}")
        if len(self.compared) < 2:
            return "\n".join(out)
        changed = [r for r in self.rows if r.kind != "renamed"]
        renamed = [r for r in self.rows if r.kind == "renamed"]
        out += ["", f"CHANGED BY THE UPGRADE ({len(changed)})"]
        out += [line for r in changed for line in self._row_lines(r)] or ["  (none)"]
        out += ["", f"ASKED FLAGS THAT NO LONGER PARSE ({len(self.unparsed)})"]
        out += [wrap(u.text, width, "  ", "      ") for u in self.unparsed] or ["  (none)"]
        if self.deprecated:
            out += ["", f"ASKED FLAGS DEPRECATED ({len(self.deprecated)})"]
            out += [wrap(f"sglang {d['version']}: {d['flag']}: {d['note']}", width, "  ", "      ")
                    for d in self.deprecated]
        if renamed:
            out += ["", f"RENAMED, SAME VALUE ({len(renamed)})"]
            out += [line for r in renamed for line in self._row_lines(r)]
        for title, items in (("FIELDS ADDED", self.added), ("FIELDS REMOVED", self.removed)):
            out += ["", f"{title} ({len(items)})"]
            known = [i for i in items if i.lineage != "(no lineage known)"]
            out += [_only_line(i, width) for i in known]
            rest = [i for i in items if i.lineage == "(no lineage known)"]
            if rest:
                listed = ", ".join(f"{i.field}={clip(_show(next(iter(i.values.values()))), 30)}" for i in rest)
                out.append(wrap(f"no lineage known ({len(rest)}): {listed}", width, "  ", "      "))
            if not items:
                out.append("  (none)")
        if self.hidden:
            out += ["", f"hidden (they differ on every start): {', '.join(self.hidden)}"]
        known = self.known.upgrade_lines(width) if self.known is not None else []
        return "\n".join(out + paths_text(self.paths, self.compared, width) + known)

    def _row_lines(self, r: UpgradeRow) -> list[str]:
        tag = {"renamed": "  [renamed]", "renamed-changed": "  [renamed]"}.get(r.kind, "")
        head = f"  {r.setting}: {' -> '.join(clip(r.cell(v), 70) for v in self.compared)}{tag}"
        if all(r.sites[v].origin == "default" for v in self.compared):
            return [head + "  (default in each)"]
        pad = max(len(v) for v in self.compared)
        return [head, *(f"      {v:<{pad}}  {r.sites[v].text}" for v in self.compared)]

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [f"<p><b>{e(self.headline)}</b></p>"]
        for m in self.missing:
            parts.append(f"<p style='color:#a00'>sglang {e(m['version'])} is not set up here: {e(m['reason'])}; "
                         f"build it with <code>{e(m['setup'])}</code></p>")
        parts += [f"<p><i>{e(n)}</i></p>" for n in self.notes]
        parts += [f"<p style='color:#a00'>sglang {e(v)} would not start: {e(t)}</p>" for v, t in self.errors.items()]
        if len(self.compared) < 2:
            return "<div>" + "".join(parts) + "</div>"
        parts.append(self.to_frame().to_html(index=False) if self.rows else "<p>no setting differs</p>")
        lists = (("Asked flags that no longer parse", [u.text for u in self.unparsed]),
                 ("Asked flags deprecated", [f"sglang {d['version']}: {d['flag']}: {d['note']}" for d in self.deprecated]),
                 ("Fields added", [_only_line(i, 1000).strip() for i in self.added]),
                 ("Fields removed", [_only_line(i, 1000).strip() for i in self.removed]))
        for title, items in lists:
            lines = "".join(f"<li>{e(i)}</li>" for i in items)
            parts.append(f"<details{' open' if 'flags' in title else ''}><summary><b>{title} ({len(items)})</b>"
                         f"</summary><ul>{lines}</ul></details>")
        if self.known is not None:  # the known issues, as the table `sgl-kit known-issues --upgrade-to` prints
            parts.append(self.known.hardware_html())
            for title, which in (("Known issues fixed by the upgrade", "fixes"),
                                 ("Known issues the upgrade brings", "brings")):
                frame = self.known.to_frame(which)
                parts.append(f"<details open><summary><b>{title} ({len(frame)})</b></summary>"
                             + (frame.to_html(index=False) if len(frame) else "<p>none</p>") + "</details>")
        return "<div>" + "".join(parts) + "</div>"


# --------------------------------------------------------------------------- the comparison


@dataclass
class _Side:
    """One version's reading of the launch."""

    version: str
    method: str
    tree: Any = None
    table: Any = None
    launch: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # flattened: cuda_graph_config.prefill.backend
    explicit: set[str] = field(default_factory=set)
    changes: list = field(default_factory=list)


def upgrade_diff(
    flags: str | Sequence[str],
    versions: str | Sequence[str],
    *,
    model: str | os.PathLike | Mapping | None = None,
    gpu: str | None = None,
    tp: int | None = None,
    env: Mapping[str, str] | None = None,
    method: str = "auto",
    rename: bool = True,
    setup: bool = False,
    progress: Callable[[str], None] | None = None,
    missing: str = "report",
    warm: bool | None = None,
    timeout: float = 300.0,
) -> UpgradeDiff:
    """Resolve one launch under each of ``versions`` (the first is the one upgraded from) and compare.

    ``flags``: sglang's flags, or a whole launch command. ``versions``: a list, or a string of versions
    separated by commas or spaces. ``model``: the model's directory, its config.json, or the config as
    a dict (the dry-run reads only config.json). ``gpu``: the target's GPU (the dry-run needs it). ``method``:
    ``auto`` (the dry-run when every version can have one, else static for all), ``dry-run`` or ``static``.
    ``rename``: resolve a flag a version no longer accepts under its new name, when known (else without it).
    ``setup``: build missing dry-run environments first (1-2 minutes and about 1.3 GB each; ``progress`` gets
    each step). ``missing``: ``report`` (the result lists them) or ``raise`` (EnvironmentMissing).
    """
    started = time.monotonic()
    from .server_args import flag_table, server_flags

    names = version_list(versions)
    tokens = with_tp(server_flags(flags), tp)
    out = UpgradeDiff(versions=names, flags=list(tokens), gpu=None if gpu is None else str(gpu), tp=tp,
                      model=None if model is None or isinstance(model, Mapping) else str(model))
    sides = _sides(out, _methods(names, method, out.notes), setup, progress, missing)
    live = out.compared
    if len(live) < 2:
        out.notes.append("nothing to compare: fewer than two versions could be read")
        out.seconds = time.monotonic() - started
        return out
    for side in sides.values():
        side.table = flag_table(side.tree)
    for side in sides.values():
        side.launch = _translate(tokens, side, sides, rename, out)
    with tempfile.TemporaryDirectory(prefix="sgl-kit-model-") as scratch:
        if isinstance(model, Mapping):  # a config.json as a dict: the dry-run reads a file
            Path(scratch, "config.json").write_text(json.dumps(dict(model)))
        _resolve_all(sides, tokens, out, scratch if isinstance(model, Mapping) else model, gpu, env, warm, timeout)
    for side in sides.values():
        if side.method == "static":
            _read_static(side)
        out.method[side.version] = side.method
        out.launches[side.version] = list(side.launch)
    if any(s.method == "static" for s in sides.values()):
        out.notes.append(f"static ({', '.join(v for v in live if sides[v].method == 'static')}): {STATIC_NOTE}")
    _deprecations(sides, out)
    _compare(sides, live, out)
    out.paths = fast_paths(sides, live, model)
    from .doctor.known_report import for_launch

    first = sides[live[0]]
    out.known = for_launch(first.version, {k: v for k, v in first.values.items() if "." not in k},
                           f"the launch as sglang {first.version} resolved it ({first.method})", upgrade_to=live[-1],
                           gpu=gpu, model=None if isinstance(model, Mapping) else model, tp=tp, tree=first.tree)
    out.seconds = time.monotonic() - started
    return out


def _methods(names: list[str], method: str, notes: list[str]) -> dict[str, str]:
    from .dryrun import load_rules

    if method not in ("auto", "dry-run", "static"):
        raise UsageError(f"method must be auto, dry-run or static, not {method!r}")
    rules = load_rules()
    out = [v for v in names if not rules.covers(v)]
    why = f"the dry-run cannot reach sglang {', '.join(out)} (it covers {rules.first} <= version < {rules.below})"
    if method == "dry-run" and out:
        raise DryRunError(why, hint="use method='static' (--static), or versions in that range")
    if method == "auto" and out:
        notes.append(f"{why}, so every version is read statically")
    return dict.fromkeys(names, "static" if method == "static" or out else "dry-run")


def _sides(out: UpgradeDiff, how: dict, setup: bool, progress, missing: str) -> dict[str, _Side]:
    """The versions that can be read, each with its source; the others go to ``out.missing``."""
    from .dryrun import environment
    from .dryrun import setup as build

    if missing not in ("report", "raise"):
        raise UsageError(f"missing must be 'report' or 'raise', not {missing!r}")
    sides = {}
    for version, method in how.items():
        env = environment(version) if method == "dry-run" else None
        if method == "dry-run" and not env.ready and setup:
            say = progress or (lambda text: None)
            say(f"building the dry-run environment of sglang {version} (1-2 minutes, about 1.3 GB)")
            env = build(version, progress=say).env
        if method == "dry-run" and not env.ready:
            out.missing.append({"version": version, "reason": f"its dry-run environment is not built ({env.path})",
                                "setup": f"sgl-kit dryrun setup --sglang {version}"})
            continue
        try:  # the source the dry-run runs, or the release's wheel (downloaded once)
            sides[version] = _Side(version, method, _source(str(env.sglang_dir) if env else None, version))
        except KitError as exc:
            if missing == "raise":
                raise
            out.missing.append({"version": version, "reason": f"its source could not be read: {exc.message}",
                                "setup": f"pip download --no-deps sglang=={version}"})
    if out.missing and missing == "raise":
        names = ", ".join(m["version"] for m in out.missing)
        commands = "; ".join(f"`{m['setup']}`" for m in out.missing)
        raise EnvironmentMissing(
            f"the dry-run environment of sglang {names} is not set up here",
            hint=f"build it once: {commands} (1-2 minutes and about 1.3 GB each), or pass setup=True",
            cli_hint=f"build it once: {commands} (1-2 minutes and about 1.3 GB each), or add --setup to build it now")
    return sides


@lru_cache(maxsize=16)
def _source(package_dir: str | None, version: str):
    """One SourceTree per source, so its parsed modules and flag table are read once per process."""
    from .launch_file import source_tree

    return source_tree(package_dir) if package_dir else source_tree(sglang=version)


# --------------------------------------------------------------------------- flags a version does not take


def _unknown_options(tokens: list[str], table) -> list[tuple[int, int, str, list[str]]]:
    """(start, end, option, values) for each option token the flag table does not know."""
    out = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-") or len(tok) == 1 or re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", tok):
            i += 1
            continue
        try:
            hit = table.match(tok)
        except ParseError:
            hit = None  # an ambiguous abbreviation: argparse refuses it too
        if hit is not None:
            i += 1
            continue
        name, eq, value = tok.partition("=")
        j = i + 1
        if not eq:
            while j < len(tokens) and not tokens[j].startswith("--"):
                j += 1
        out.append((i, j, name, [value] if eq else tokens[i + 1:j]))
        i = j
    return out


def _translate(tokens: list[str], side: _Side, sides: dict, rename: bool, out: UpgradeDiff) -> list[str]:
    """The launch as this version takes it: each unknown flag under its new name (when known) or left out."""
    unknown = _unknown_options(tokens, side.table)
    if not unknown:
        return list(tokens)
    launch, last = [], 0
    for start, end, option, values in unknown:
        launch += tokens[last:start]
        last = end
        new, how = _new_name(option, values, side, sides)
        entry = Unparsed(side.version, option, values, new_flag=new[0] if new else None, how=how)
        if new and rename:
            launch += new
            entry.action = f"resolved with {shlex.join(new)} instead"
        else:
            entry.action = "resolved without it"
        out.unparsed.append(entry)
    launch += tokens[last:]
    for entry in out.unparsed:
        if entry.version == side.version:
            entry.launch = list(launch)
    return launch


def _new_name(option: str, values: list[str], side: _Side, sides: dict) -> tuple[list[str] | None, str]:
    """(replacement tokens, where that comes from), or (None, why not)."""
    from .server_args import lineage, lineage_data

    name = option.lstrip("-").replace("-", "_")
    known = [(s, s.table.match(option)[0]) for s in sides.values() if s is not side and _matches(s.table, option)]
    if not known:
        return None, f"no version compared here accepts {option}"
    old = known[0][1]
    takes_values = bool(values)
    here = lineage(side.tree, old.field or name)
    if here.status in ("removed", "not yet") and here.field and "." not in here.field:
        spec = side.table.get(here.field)
        if spec is not None and _fits(old, spec):
            return [spec.name, *values], f"lineage: {clip(here.note, 160)}"
    for entry in here.instead if not takes_values else []:
        if not entry.startswith("leaving out"):
            return entry.split(), f"lineage: {clip(here.note, 160)}"
    names = lineage_data()["settings"].get(here.setting, {}).get("names", {}) if here.setting else {}
    why = f"no lineage known; sglang {known[0][0].version} accepts it"
    for span in reversed(names.get(old.field, {}).get("history", [])):  # it was an alias of: the data says
        option_, _, value = str(span.get("of", "")).partition("=")
        if option_ and not takes_values and _matches(side.table, option_):
            why = f"lineage: {option} was a deprecated alias of {span['of']} in sglang {span['versions']}"
            choices = side.table.match(option_)[0].choices
            if not value or not choices or value in choices:
                return [option_, value] if value else [option_], why
            why += f", but sglang {side.version} takes only {', '.join(map(str, choices))} there"
            break
    for other, spec in known:  # another version's tree: a deprecated alias that names the new flag
        if spec.field != name and spec.field and side.table.get(spec.field) is not None:
            new = side.table.get(spec.field)
            if not new.deprecated and _fits(spec, new):
                return [new.name, *values], (f"lineage: in sglang {other.version} {option} is "
                                             f"{'a deprecated alias' if spec.deprecated else 'an alias'} "
                                             f"of {new.name} (its flag table)")
    guess = _rename_guess(old, side, known[0][0])
    if guess is not None:
        return [guess[0].name, *values], guess[1]
    return None, why


def _matches(table, option: str) -> bool:
    try:
        return table.match(option) is not None
    except ParseError:
        return False


def _fits(old, new) -> bool:
    """The new flag takes what the old one was given: both switches, or both take values."""
    switch = {"store_true", "store_false", "store_const", "ignore"}
    return (old.kind in switch) == (new.kind in switch)


def _rename_guess(old, side: _Side, other: _Side):
    """(spec, how) for the one flag here that looks like ``old`` renamed: a field new here, with the old flag's
    help text (non-empty), kind and default, and choices that include the old ones."""
    fields_before = {s.field for s in other.table}
    found = []
    for spec in side.table:
        if spec.field in fields_before or spec.deprecated or spec.kind != old.kind:
            continue
        if not old.help or spec.help.strip() != old.help.strip():
            continue
        if old.default_known and spec.default_known and spec.default_value != old.default_value:
            continue
        if old.choices and not set(old.choices) <= set(spec.choices or ()):
            continue
        found.append(spec)
    if len(found) != 1:
        return None
    spec = found[0]
    return spec, (f"inferred from the two sources: {spec.name} is new in sglang {side.version} with the same help "
                  f"text, kind, default and choices as {old.name} of sglang {other.version}; "
                  "kit/data/lineage.yaml has no entry for it")


def _deprecations(sides: dict, out: UpgradeDiff) -> None:
    for side in sides.values():
        for tok in side.launch:
            if not tok.startswith("--") or not _matches(side.table, tok):
                continue
            spec = side.table.match(tok)[0]
            if spec.kind == "ignore":
                note = f"accepted and does nothing ({clip(spec.help, 100)})"
            elif spec.deprecated:
                note = f"deprecated; sglang says use {spec.new_flag}" if spec.new_flag else (
                    f"deprecated; it stores into {spec.field}")
            else:
                continue
            entry = {"version": side.version, "flag": tok.partition("=")[0], "new_flag": spec.new_flag, "note": note}
            if entry not in out.deprecated:
                out.deprecated.append(entry)


# --------------------------------------------------------------------------- resolving


def _resolve_all(sides: dict, tokens: list[str], out: UpgradeDiff, model, gpu, env, warm, timeout) -> None:
    live = [s for s in sides.values() if s.method == "dry-run"]
    if not live:
        return
    with ThreadPoolExecutor(max_workers=len(live)) as pool:
        done = dict(zip([s.version for s in live],
                        pool.map(lambda s: _dry_run(s, tokens, out, model, gpu, env, warm, timeout), live),
                        strict=True))
    for side in live:
        result = done[side.version]
        if result.error is not None:
            out.errors[side.version] = result.error.headline
            continue
        from .server_args.compare import flatten

        side.values = flatten(result.snapshot.fields)
        side.explicit = set(result.explicit)
        side.changes = list(result.changes)
        if result.notes:
            out.notes += [f"sglang {side.version}: {n}" for n in result.notes]
    if out.errors:  # one version has no resolved values: compare what every version's source says alike
        out.notes.append(f"sglang {', '.join(out.errors)} would not start, so every version is read statically")
        for side in sides.values():
            side.method = "static"


def _dry_run(side: _Side, tokens, out: UpgradeDiff, model, gpu, env, warm, timeout):
    """The dry-run of the launch as given and, when this version does not take it, as translated."""
    from .dryrun import dry_run_many

    mine = [u for u in out.unparsed if u.version == side.version]
    launches = [list(tokens)] + ([side.launch] if side.launch != list(tokens) else [])
    results = dry_run_many(launches, model=model, gpu=gpu, sglang=side.version, env=env, warm=warm, timeout=timeout)
    first, result = results[0], results[-1]
    said = _argparse_error(first)
    for entry in mine:
        entry.error = said or (first.error.headline if first.error else None)
    if first.ok and len(results) > 1:  # the flag table missed a flag sglang takes after all: its answer wins
        out.unparsed[:] = [u for u in out.unparsed if u.version != side.version]
        side.launch = list(tokens)
        return first
    refused = _argparse_error(result)
    found = _UNRECOGNIZED.search(refused or "")
    if found:  # sglang refuses flags its table (as the kit reads it) lists: resolve without them
        gone = {t.partition("=")[0] for t in shlex.split(found.group(1)) if t.startswith("-")}
        spans = _unknown_options(side.launch, type(side.table)([s for s in side.table
                                                                if not set(s.option_strings) & gone]))
        for _, _, option, values in spans:
            out.unparsed.append(Unparsed(side.version, option, values, refused, how="sglang's own parser refuses "
                                         "it, though its flag table as the kit reads it lists it",
                                         action="resolved without it"))
        side.launch = [t for i, t in enumerate(side.launch) if not any(a <= i < b for a, b, *_ in spans)]
        if spans:
            result = dry_run_many([side.launch], model=model, gpu=gpu, sglang=side.version, env=env, warm=warm,
                                  timeout=timeout)[0]
    return result


def _argparse_error(result) -> str | None:
    return result.error.message if result.error is not None and result.error.kind == "arguments" else None


def _read_static(side: _Side) -> None:
    from .server_args import cli_defaults, parse_command
    from .server_args.compare import flatten

    values = {name: fd.value if fd.known else f"<not known statically: {fd.text or fd.kind}>"
              for name, fd in cli_defaults(side.tree).items()}
    asked = parse_command(side.launch, side.table, strict=False)
    values.update(asked)
    side.values = flatten(values)
    side.explicit = set(asked)
    side.changes = []


# --------------------------------------------------------------------------- pairing and rows


@dataclass
class _Group:
    fields: dict[str, str | None]
    label: str = ""
    lineage: str | None = None
    setting: dict | None = None  # the lineage.yaml setting, when the group is one

    def present(self) -> set[str]:
        return {v for v, f in self.fields.items() if f}


def _compare(sides: dict, live: list[str], out: UpgradeDiff) -> None:
    names = {}
    for v in live:
        out.hidden += [f for f in VOLATILE if f in sides[v].values and f not in out.hidden]
        names[v] = [f for f in sides[v].values if f not in VOLATILE]
    groups = _setting_groups(sides, live, names)
    used = {v: {g.fields[v] for g in groups if g.fields.get(v)} for v in live}
    plain: dict[str, _Group] = {}
    for v in live:
        for name in names[v]:
            if name not in used[v]:
                plain.setdefault(name, _Group(dict.fromkeys(live), label=name)).fields[v] = name
    notes = _merge_renames(list(plain.values()), sides, live, out)
    groups += [g for g in plain.values() if g.present()]
    first = live[0]
    for g in groups:
        if g.present() == set(live):
            row = _row(g, sides, live)
            if row is not None:
                out.rows.append(row)
            continue
        name = next(f for f in g.fields.values() if f)
        where = [v for v in live if g.fields[v]]
        values = {v: sides[v].values[g.fields[v]] for v in where}
        absent = [v for v in live if not g.fields[v]]
        note = notes.get((absent[0], name)) or "(no lineage known)"
        (out.removed if g.fields[first] else out.added).append(OnlyIn(name, where, values, note))


def _setting_groups(sides: dict, live: list[str], names: dict) -> list[_Group]:
    """The settings of kit/data/lineage.yaml whose field has another name in some version."""
    from .server_args import lineage_data
    from .server_args.lineage import era_in

    out = []
    for key, body in lineage_data()["settings"].items():
        eras = {v: era_in(body.get("eras", []), v) for v in live}
        present = {v: e["field"] for v, e in eras.items() if e and e.get("field") and e["field"] in names[v]}
        if len(present) != len(live) or len(set(present.values())) < 2:
            continue
        if any(f in names[w] for v, f in present.items() for w in live if present[w] != f):
            continue  # one version still has the other's field: compare those directly
        what = body.get("what", key)
        out.append(_Group(dict(present), label=what[4:] if what.startswith("the ") else what,
                          lineage=f"kit/data/lineage.yaml, setting {key}: "
                          + "; ".join(f"{v}: {present[v]}" for v in live), setting={"key": key, "eras": eras}))
    return out


def _merge_renames(groups: list[_Group], sides: dict, live: list[str], out: UpgradeDiff) -> dict:
    """Pair fields that only some versions have when the lineage (or an inferred rename) links them.

    Returns {(version, field): lineage note} for the fields left unpaired.
    """
    from .server_args import lineage

    by_field = {(v, g.fields[v]): g for g in groups for v in live if g.fields[v]}
    inferred = {(u.version, _field_of(sides.values(), u.flag)): (_field_of([sides[u.version]], u.new_flag), u.how)
                for u in out.unparsed if u.new_flag}
    notes: dict[tuple[str, str], str] = {}
    for g in groups:
        have = g.present()
        if not have or have == set(live):
            continue
        name = g.fields[next(v for v in live if g.fields[v])]
        for w in [v for v in live if not g.fields[v]]:
            target, note = inferred.get((w, name), (None, None))
            if target is None:
                found = lineage(sides[w].tree, name)
                if found.status != "unknown":
                    note = found.note
                    # The tree says the name stores into another field: a rename. (What held a setting in
                    # another era is paired by _setting_groups, only where both values are read.)
                    target = found.field if found.status == "alias" else None
            notes[(w, name)] = note or "(no lineage known)"
            other = by_field.get((w, target)) if target else None
            if other is None or other is g or other.present() & g.present():
                continue
            for v in other.present():
                g.fields[v] = other.fields[v]
                by_field[(v, other.fields[v])] = g
                other.fields[v] = None
            g.lineage = note
            g.label = name
    return notes


def _field_of(sides, option: str) -> str | None:
    return next((s.table.match(option)[0].field for s in sides if _matches(s.table, option)), None)


def _row(g: _Group, sides: dict, live: list[str]) -> UpgradeRow | None:
    from .server_args.values import same_value

    values = {v: sides[v].values[g.fields[v]] for v in live}
    renamed = len({g.fields[v] for v in live}) > 1
    states: dict[str, str] = {}
    if g.setting is not None:
        for v in live:
            era = g.setting["eras"][v] or {}
            off, value = era.get("off_value"), values[v]
            if isinstance(value, bool) or isinstance(off, bool):
                states[v] = "off" if same_value(value, off) else "on"
            else:
                states[v] = "off" if same_value(value, off) else str(value)
        same = len(set(states.values())) == 1
    else:
        same = all(same_value(values[live[0]], values[v]) for v in live[1:])
    if same and not renamed:
        return None
    kind = "changed" if not renamed else "renamed" if same else "renamed-changed"
    sites = {v: _site(sides[v], g.fields[v]) for v in live}
    return UpgradeRow(g.label, kind, {v: g.fields[v] for v in live}, values, sites, g.lineage, states)


def _site(side: _Side, name: str) -> Site:
    from .server_args.values import parse_value, same_value

    top, _, rest = name.partition(".")
    asked = top in side.explicit
    if side.method == "static":
        return Site("asked" if asked else "default", static=True)
    origin = "asked, then sglang" if asked else "sglang"
    writes = [c for c in side.changes if c.field == top]
    if rest and writes:
        left = _at(parse_value(writes[-1].after_text)[0], rest)
        if not same_value(left, side.values.get(name)):
            last = writes[-1]
            return Site(origin, note=f"in place, after {last.where} {last.function} left it {_show(left)} (the "
                        "dry-run does not trace writes to a nested attribute)")
    hits = [c for c in writes if not rest or _moved(c, rest)]
    if not hits:
        return Site("asked" if asked else "default")
    change = hits[-1]
    return Site(origin, change.where if change.line else None, change.function or None)


def _moved(change, path: str) -> bool:
    """Whether a write to a nested config changed the value at ``path`` (prefill.backend)."""
    from .server_args.values import parse_value, same_value

    before, after = (_at(parse_value(t)[0], path) for t in (change.before_text, change.after_text))
    return not same_value(before, after)


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        if hasattr(value, "kwargs") and getattr(value, "kwargs", None):
            value = value.kwargs.get(key)
        elif isinstance(value, Mapping):
            value = value.get(key)
        else:
            return None
    return value


# --------------------------------------------------------------------------- text


def _show(value: Any) -> str:
    text = getattr(value, "text", None)
    if isinstance(text, str) and type(value).__name__ == "NonLiteral":
        return text
    return repr(value)


def _only_line(item: OnlyIn, width: int) -> str:
    values = ", ".join(f"{v}: {clip(_show(x), 40)}" for v, x in item.values.items())
    return wrap(f"{item.field} ({values}): {clip(item.lineage, 150)}", width, "  ", "      ")
