"""A launch as that sglang release resolves it: which fields its ``ServerArgs`` changes, where, and why.

``resolve(ev)`` takes :class:`kit.doctor.evidence.Evidence` with a source tree and a launch
(``ev.explicit``, and ``ev.args``: the launch's flags over the release's defaults, or the values
a server_args line or ``/server_info`` showed) and returns a :class:`Resolution`:

- **dry-run**, when the release's dry-run environment is already built (``kit.dryrun.built_versions``;
  never built here: that takes minutes): sglang's own ``prepare_server_args`` on CPU, every change with
  its ``file:line``;
- **static** otherwise: the writes to each field in ``server_args``/``arg_groups`` (kit.provenance), in
  the order they run, each applied when its guards hold for the values so far and its value is a
  literal or something the safe evaluator computes from other fields (``self.dp_size = self.tp_size``),
  repeated until nothing changes (at most :data:`MAX_PASSES`). A write whose guard the evidence cannot
  decide (GPU memory with no GPU named, a probe, a file on the server) leaves the field as it was and is
  recorded as undecided, with the input it needs.

Values the server reported (a server_args line, ``/server_info``) are final: they are kept, the
resolution only fills fields the evidence does not tell and says where it disagrees with them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit._text import plain, short_path
from kit.errors import KitError

__all__ = ["MAX_PASSES", "Change", "Resolution", "resolve", "static_resolution"]

MAX_PASSES = 4
_RESOLUTION_FILES = ("server_args", "arg_groups")
# Functions of those files that run before the dataclass exists (argparse to fields), not its resolution.
_NOT_RESOLUTION = ("from_cli_args", "add_cli_args")


@dataclass
class Change:
    """One field the release's resolution sets for this launch (or may set: ``decided`` False)."""

    field: str
    asked: Any  # the launch's value, or None when the launch does not set it (see ``was_asked``)
    default: Any
    resolved: Any  # the value after the write (for an undecided write: the value it would write)
    site: str  # "srt/server_args.py:243" of that release
    rule: str = ""  # the rule's label or comment in the source
    function: str = ""
    guard: str = ""  # the conditions that held (or are undecided), as written
    how: str = "static"  # static | dry-run
    decided: bool = True
    needs: str = ""  # undecided: what input would decide it
    was_asked: bool = False
    message: str = ""  # what sglang logs there (dry-run)

    def line(self) -> str:
        state = "" if self.decided else " (undecided)"
        rule = f" [{self.rule}]" if self.rule else ""
        text = f"{self.field} = {self.resolved!r}{state} at {self.site}{rule}"
        return text + (f"; needs: {self.needs}" if self.needs else "")

    def to_dict(self) -> dict:
        return {k: plain(v) for k, v in asdict(self).items()}


@dataclass
class Resolution:
    version: str | None
    how: str  # "static", "dry-run", or "read" (the server's own values, nothing to resolve)
    changes: list[Change] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # every decided field after the resolution
    kept: list[str] = field(default_factory=list)  # fields read from the server, not re-resolved
    filled: list[str] = field(default_factory=list)  # fields the evidence did not tell, filled here
    disagree: list[str] = field(default_factory=list)  # the resolution against the values read
    notes: list[str] = field(default_factory=list)
    passes: int = 0
    walked: list[str] = field(default_factory=list)  # static: the fields whose writes were followed (the rest kept)

    @property
    def decided(self) -> list[Change]:
        return [c for c in self.changes if c.decided]

    @property
    def undecided(self) -> list[Change]:
        return [c for c in self.changes if not c.decided]

    def change(self, name: str) -> Change | None:
        """The last decided change of a field, else its last undecided one."""
        found = [c for c in self.changes if c.field == name]
        return next((c for c in reversed(found) if c.decided), found[-1] if found else None)

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes]

    def to_dict(self) -> dict:
        return {"version": self.version, "how": self.how, "changes": [c.to_dict() for c in self.changes],
                "kept": self.kept, "filled": self.filled, "disagree": self.disagree, "notes": self.notes,
                "passes": self.passes}


# --------------------------------------------------------------------------- entry point


def resolve(ev, *, dryrun: bool = True) -> Resolution | None:
    """The launch of ``ev`` as its release resolves it (see the module docstring); None without a
    source tree or a launch. ``dryrun=False`` never uses a dry-run environment."""
    if ev.tree is None or (ev.explicit is None and not ev.args):
        return None
    read = _read_from_server(ev)
    if read and ev.explicit is None:
        return Resolution(ev.version, "read", kept=sorted(ev.args),
                          notes=["the values are the server's own (" + ev.sources.get("args", "read") + "); "
                                 "with no launch command there is nothing to resolve"])
    found = _by_dry_run(ev) if dryrun and not read else None
    if found is None:
        try:
            found = _stored_static(ev)
        except KitError as err:
            ev.problem("resolving the launch with sglang's own code", err)
            return None
    if read:
        _keep_read(ev, found)
    return found


def apply(ev, res: Resolution) -> None:
    """Decided changes into ``ev.args`` (``ev.explicit`` stays what was asked); fields read from the
    server are never overwritten."""
    kept = set(res.kept)
    for c in res.decided:
        if c.field not in kept:
            ev.args[c.field] = c.resolved
            ev.unknown.pop(c.field, None) if c.field in ev.unknown and c.field not in ev.asked_unknown else None
    # A field whose last write this reading could not decide is not known to hold its earlier value: a rule
    # must not read the default as what the server runs with (it asks instead). What the launch asked stays.
    last = {c.field: c for c in res.changes}
    for name, c in last.items():
        if not c.decided and name not in kept and name not in (ev.explicit or {}):
            ev.unknown.setdefault(name, f"sglang {res.version} may set it at {c.site}"
                                        f"{' [' + c.rule + ']' if c.rule else ''}: "
                                        f"{c.needs or 'a guard this reading cannot decide'}")


def _read_from_server(ev) -> bool:
    where = ev.sources.get("args", "")
    return bool(ev.args) and not where.startswith("the flags of")


def _keep_read(ev, res: Resolution) -> None:
    """The server's values win: changes to fields it reported are checked against them, not applied."""
    res.kept = sorted(n for n in ev.args if n not in ev.unknown)
    for c in res.changes:
        if c.field in ev.unknown and c.decided:
            res.filled.append(c.field)
        elif c.field in ev.args and c.decided and not _same(ev.args[c.field], c.resolved):
            res.disagree.append(f"{c.field}: {c.site} sets {c.resolved!r}, the server reports {ev.args[c.field]!r}")


# --------------------------------------------------------------------------- dry-run


def _by_dry_run(ev) -> Resolution | None:
    """sglang's own resolution, when that release's environment is already built (never builds one)."""
    try:
        from kit.dryrun import built_versions, dry_run

        if ev.version not in built_versions() or not ev.command:
            return None
        gpu = getattr(ev.hardware, "gpu_name", None)
        result = dry_run(_flags(ev.command), sglang=ev.version, gpu=gpu or None,
                         tp=int(ev.args.get("tp_size") or 1), env=ev.environ or None, timeout=120)
    except (KitError, OSError, ValueError):
        return None
    if not getattr(result, "ok", False):
        return None
    return from_dry_run(result, ev.explicit or {}, ev.version)


def _flags(command: list[str]) -> list[str]:
    first = next((i for i, w in enumerate(command) if w.startswith("--")), len(command))
    return list(command[first:])


def from_dry_run(result, explicit: dict, version: str | None) -> Resolution:
    """A Resolution from a kit.dryrun.DryRunResult (or its saved JSON as a dict)."""
    data = result if isinstance(result, dict) else result.to_dict()
    initial = data.get("initial") or {}
    res = Resolution(version or data.get("sglang"), "dry-run", values=dict(data.get("final") or {}))
    for c in data.get("changes") or []:
        if not c.get("changed", True):
            continue
        name = c["field"]
        msgs = c.get("messages") or []
        res.changes.append(Change(
            name, explicit.get(name), initial.get(name, c.get("before")), c.get("after"),
            c.get("where") or f"{short_path(str(c.get('file', '')))}:{c.get('line')}",
            function=c.get("function", ""), how="dry-run", was_asked=name in explicit,
            message=(msgs[0].get("message", "") if msgs and isinstance(msgs[0], dict) else "")))
    return res


# --------------------------------------------------------------------------- static


def _stored_static(ev) -> Resolution:
    """static_resolution, kept in the tree's persistent index (kit._index) under a digest of every input
    it reads: the same launch read again costs a lookup."""
    import hashlib
    import json

    from kit._pysource import MISSING, index_of, modules_for

    probes, calls = _hardware_answers(ev)
    inputs = {"explicit": ev.explicit, "args": ev.args if _read_from_server(ev) else None,
              "unknown": sorted(ev.unknown), "asked_unknown": ev.asked_unknown, "config": ev.model_config,
              "environ": ev.environ, "probes": probes, "calls": calls, "version": ev.version,
              "code": _own_stamp()}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=repr).encode()).hexdigest()[:24]
    index = index_of(modules_for(ev.tree))
    stored = index.get("doctor.resolve", key) if index is not None else MISSING
    if isinstance(stored, dict) and isinstance(stored.get("changes"), list):
        try:
            res = Resolution(stored.get("version"), "static", [Change(**c) for c in stored["changes"]],
                             notes=list(stored.get("notes") or []), passes=int(stored.get("passes") or 0),
                             walked=list(stored.get("walked") or []))
            res.values = {**(ev.args or {}), **{c.field: c.resolved for c in res.decided}}
            return res
        except TypeError:
            pass
    res = static_resolution(ev)
    if index is not None:
        index.put("doctor.resolve", key, {"version": res.version, "changes": [c.to_dict() for c in res.changes],
                                          "notes": res.notes, "passes": res.passes,
                                          "walked": res.walked})
    return res


def _own_stamp() -> str:
    """This module's size and time: a stored resolution made by other code is not read."""
    import os

    st = os.stat(__file__)
    return f"{st.st_size}:{st.st_mtime_ns}"


def static_resolution(ev) -> Resolution:
    """The static resolution of ``ev``'s launch (see the module docstring)."""
    from kit._pysource import Environment, Evaluator, has_unknown, unknown
    from kit.provenance.guards import explain_write
    from kit.provenance.sites import index_for
    from kit.server_args import cli_defaults, defaults

    tree = ev.tree
    cache = index_for(tree)
    declared = dict(defaults(tree))
    launch_defaults = {n: fd.value for n, fd in cli_defaults(tree).items() if fd.known}
    explicit = dict(ev.explicit or {})
    launch = {**launch_defaults, **explicit}
    state = {**launch, **({k: v for k, v in ev.args.items()} if _read_from_server(ev) else {})}
    for name in list(ev.unknown) + list(ev.asked_unknown):
        state.pop(name, None)
    writes = _wanted(_resolution_writes(cache, declared), tree)
    probes, calls = _hardware_answers(ev)
    environ = Environment(dict(ev.environ), where="the launch's environment") if ev.environ else None
    res = Resolution(ev.version or getattr(tree, "version", None), "static")
    config = ev.model_config
    final: dict[str, list[Change]] = {}
    reacher = _Callers(tree, state, config, ev, probes)
    moved_names: set[str] | None = None  # None: the first pass walks every field
    for res.passes in range(1, MAX_PASSES + 1):
        moved = set()
        for name, found in writes.items():
            if name in ev.asked_unknown or (moved_names is not None and not _reads_any(found, moved_names)):
                continue
            start = (launch[name], "its value at launch") if name in launch else None
            ev_ = Evaluator(cache.modules, state, config, {name}, defaults=declared, environ=environ,
                            initial={name: start} if start else {}, probes=probes, calls=calls)
            changes, value, known = _walk_field(name, found, ev_, cache, start, explicit, launch_defaults,
                                                explain_write, has_unknown, unknown, reacher)
            final[name] = changes
            if known and (name not in state or not _same(state[name], value)):
                state[name] = value
                moved.add(name)
        if not moved:
            break
        moved_names = moved
    res.changes = sorted((c for cs in final.values() for c in cs), key=lambda c: _site_key(c.site))
    res.walked = sorted(writes)
    res.values = state
    if ev.model_config is None:
        res.notes.append("no config.json: guards that read the model (is_multimodal, its architecture) stay undecided")
    return res


def _rule_fields() -> set[str]:
    """The fields the doctor's rules read (``case.value("...")`` in kit/doctor), from their own text."""
    here = Path(__file__).parent
    found: set[str] = set()
    for path in here.glob("*.py"):
        found |= {m.split(".")[0] for m in re.findall(r"\.value\(\s*[\"']([a-z_][a-z0-9_.]*)[\"']", path.read_text())}
    return found


def _wanted(writes: dict[str, list], tree) -> dict[str, list]:
    """The writes of the fields that matter here: the performance-relevant ones (kit/data/perf_fields.yaml),
    those the rules read, and, transitively, the fields the functions holding their writes read (a guard
    on another field is decided by that field's resolved value). The rest of ServerArgs is not walked:
    it does not change what the doctor says, and walking it costs most of a cold resolution."""
    from kit._data import DATA, load_yaml
    from kit.server_args import lineage

    wanted = set((load_yaml(DATA / "perf_fields.yaml") or {}).get("fields") or {})
    for name in list(wanted):  # a field renamed in this release (kit/data/lineage.yaml) is wanted by its new name
        try:
            found = lineage(tree, name)
        except KitError:
            continue
        if found is not None and getattr(found, "field", None):
            wanted.add(str(found.field))
    wanted = {w.split(".")[0] for w in wanted | _rule_fields()}
    todo = [n for n in writes if n in wanted]
    from kit.provenance.sites import index_for

    parents = index_for(tree).parents
    keep: set[str] = set()
    names = set(writes)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        for module, write in writes[name]:
            text = _guards_text(module, write, parents(module))
            todo += [n for n in re.findall(r"\b(?:self|server_args|args)\.(\w+)", text) if n in names and n not in keep]
    return {n: w for n, w in writes.items() if n in keep}


def _guards_text(module, write, parents) -> str:
    """The write's statement and the tests of the ``if``/``while``/``elif`` around it, up to its function,
    and the tests of the early returns before it in that function: what decides whether it runs and what it writes."""
    stmt = write.stmt
    out = [ast.unparse(stmt)]
    node = stmt
    while True:
        parent = parents.get(id(node))
        if parent is None or isinstance(parent, ast.Module):
            break
        if isinstance(parent, ast.If | ast.While):
            out.append(ast.unparse(parent.test))
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            for early in ast.walk(parent):
                if isinstance(early, ast.If) and early.lineno < stmt.lineno and any(
                        isinstance(b, ast.Return) for b in early.body):
                    out.append(ast.unparse(early.test))
            break
        node = parent
    return "\n".join(out)


class _Callers:
    """Whether the function holding a write is reached from other modules for this launch (0.5.19 and later
    run their hooks from ``pipeline.py`` and ``spec_info.py``, some under conditions): a site that fired in
    its own module but whose callers do not run is not a change (kit.provenance.Reacher, built once)."""

    def __init__(self, tree, state, config, ev, probes) -> None:
        self._args = (tree, dict(state), config, ev, probes)
        self._reacher = None

    def status(self, site) -> tuple[str, str]:
        if site.status == "not fired" or "arg_groups" not in site.file:
            return site.status, site.status_reason
        if self._reacher is None:
            from kit.provenance import Reacher

            tree, state, config, ev, probes = self._args
            self._reacher = Reacher(tree, state, config, command=ev.command or None,
                                    environ=dict(ev.environ) if ev.environ else None, probes=probes)
        try:
            found = self._reacher.reach(site.where, site=site)
        except (KitError, RecursionError, ValueError, TypeError, AttributeError):
            return site.status, site.status_reason
        if found.status == "not fired":
            return "not fired", found.why_not()
        if found.status == "unknown" and site.status == "fired":
            return "unknown", f"its caller's condition is not decided ({found.reason})"
        return site.status, site.status_reason


def _walk_field(name, found, ev, cache, start, explicit, launch_defaults, explain_write, has_unknown, unknown,
                reacher=None):
    """The writes to one field in the order they run: (changes, final value, whether it is known)."""
    running, how, known = (start[0], start[1], True) if start else (None, "not known at launch", False)
    changes: list[Change] = []
    for module, write in found:
        ev.initial[name] = (running if known else unknown(name, how), how)
        computed: dict = {}
        try:
            sites = explain_write(module, write, cache.parents(module), ev, cache.calls, computed)
        except (KitError, RecursionError, ValueError, TypeError, AttributeError):
            continue
        compute = computed.get(id(write))
        for site in sites:
            status, status_reason = reacher.status(site) if reacher is not None else (site.status, site.status_reason)
            if status == "not fired" or site.function.endswith(_NOT_RESOLUTION):
                continue
            value, _notes = compute() if compute is not None else (unknown(name, "not evaluated"), [])
            open_value = value is None and write.value is None or has_unknown(value)
            where = short_path(site.where)
            guard = " and ".join(g.condition for g in site.guards if g.kind != "caller" or g.passes is not True)
            base = dict(field=name, asked=explicit.get(name), default=launch_defaults.get(name),
                        site=where, rule=site.rule, function=site.function, guard=guard, was_asked=name in explicit)
            if status == "fired" and not open_value:
                if not (known and _same(running, value)):
                    changes.append(Change(resolved=value, **base))
                running, how, known = value, f"set by {where}", True
            elif status == "fired":
                reason = getattr(value, "reason", "") or "its value is not computed statically"
                changes.append(Change(resolved=site.value_text, decided=False, needs=_needs(reason, site.value_text), **base))
                how, known = f"{where} sets it to {site.value_text}, not computed: {reason}", False
            else:
                if not open_value and known and _same(running, value):
                    continue
                shown = value if not open_value else site.value_text
                changes.append(Change(resolved=shown, decided=False, needs=_needs(status_reason, guard), **base))
                if open_value or not known or not _same(running, value):
                    how = f"{running!r} unless {where} sets it to {site.value_text} ({status_reason})"
                    known = known and not _reads_itself(write, name)
            break
    if changes and not known:
        return changes, None, False
    return changes, running, known


def _reads_any(found, names: set[str]) -> bool:
    """Whether the functions holding these writes read any of ``names`` (then a later pass walks them again)."""
    for module, write in found:
        text = _function_text(module, write)
        if any(n in text for n in names):
            return True
    return False


def _function_text(module, write) -> str:
    lines = module.text.splitlines() if isinstance(getattr(module, "text", None), str) else []
    stmt = write.stmt
    # the enclosing function is not at hand cheaply: the 80 lines above the write stand in for it
    return "\n".join(lines[max(0, stmt.lineno - 80): getattr(stmt, "end_lineno", stmt.lineno)])


def _reads_itself(write, name: str) -> bool:
    return write.value is not None and any(isinstance(n, ast.Attribute) and n.attr == name
                                           for n in ast.walk(write.value))


_NEEDS = [
    (re.compile(r"gpu_mem|memory_capacity|get_device_memory|cuda\.is_available|torch\.cuda"),
     "the GPU and its memory (--nvidia-smi FILE or --gpu NAME)"),
    (re.compile(r"hardware probe|is_cuda|is_hip|is_sm\d+|platform"), "the GPU, a hardware probe the evidence does not answer (--nvidia-smi FILE or --gpu NAME answers the CUDA ones)"),
    (re.compile(r"model_config|config\.json|hf_config|is_multimodal|architectures"),
     "the model's config.json (--model-config FILE)"),
    (re.compile(r"environment variable|envs\.|getenv"), "the server's environment (--environ FILE)"),
    (re.compile(r"files on the server"), "files on the server (not readable offline)"),
]


def _needs(reason: str, source: str = "") -> str:
    for rx, what in _NEEDS:
        if rx.search(source) or rx.search(reason):
            return f"{what}: {reason}"
    return reason


def _hardware_answers(ev) -> tuple[dict | None, dict | None]:
    """sglang's hardware probes and its GPU-memory reads answered from the evidence's GPUs."""
    from kit.provenance import CUDA_PROBES

    probes = dict(ev.probes or {})
    calls = {}
    gpus = getattr(ev.hardware, "gpus", None) or []
    if gpus and all("NVIDIA" in (g.name or "").upper() or _known_nvidia(g.name) for g in gpus):
        probes.update(CUDA_PROBES)
        probes["torch.cuda.is_available"] = True
        probes["get_device"] = "cuda"
        mem = min((g.memory_total_mib for g in gpus if g.memory_total_mib), default=None)
        if mem:
            how = f"{gpus[0].name}, {mem} MiB ({ev.sources.get('hardware', 'the GPUs named')})"
            for fn in ("get_nvgpu_memory_capacity", "get_device_memory_capacity"):
                calls[fn] = (mem, how)
        answers = _gpu_answers(gpus[0].name)
        if answers:
            how = f"{gpus[0].name}, SM{answers['get_device_sm']} (the kit's GPU table)"
            probes.update({k: v for k, v in answers.items() if k.startswith("is_")})
            for fn in ("get_device_sm", "get_device_capability", "get_device_name"):
                calls[fn] = (answers[fn], how)
            platform = _platform(ev.tree, {**CUDA_PROBES, **answers, "cpu_has_amx_support": False})
            if platform:
                probes["get_platform"] = platform
    return probes or None, calls or None


def _gpu_answers(name: str | None) -> dict | None:
    """sglang's CUDA probes for a GPU of the kit's table, answered the way the dry-run answers them."""
    try:
        from kit.dryrun import gpu_profile, probe_answers

        profile = gpu_profile(name)
    except (KitError, ValueError, TypeError):
        return None
    return probe_answers(profile.probe_request()) if profile.sm is not None else None


def _platform(tree, answers: dict) -> dict | None:
    """``get_platform()`` of 0.5.2x as a mapping of its facts: sglang's own table of which probe answers each
    fact (``_PLATFORM_PROBES`` and ``_PLATFORM_VALUES`` of srt/runtime_context.py), read from this release."""
    from kit._pysource import modules_for

    try:
        module = modules_for(tree).get("srt/runtime_context.py")  # parsed once per tree, kept with it
    except (KitError, OSError, AttributeError, SyntaxError):
        return None
    if module is None:
        return None
    facts: dict = {}
    for node in module.tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id in ("_PLATFORM_PROBES", "_PLATFORM_VALUES"):
            try:
                facts.update(ast.literal_eval(node.value))
            except ValueError:
                continue
    return {fact: answers[probe] for fact, probe in facts.items() if probe in answers} or None


def _known_nvidia(name: str | None) -> bool:
    return bool(name) and bool(re.search(r"(?i)\b(rtx|a\d{2,3}|h\d{3}|b\d{3}|l\d{1,2}|v100|t4|gb\d{3})", name))


def _resolution_writes(cache, declared: dict) -> dict[str, list]:
    """{field: [(module, write)] in the order they run} for the fields the resolution files write."""
    from kit.provenance.guards import call_orders
    from kit.provenance.sites import write_lines, writes_in

    memo = cache.modules.scratch.setdefault("doctor.resolve.writes", {})
    if memo:
        return memo
    modules = cache.modules
    paths = [p for p in modules.files("srt/**/*.py") if any(w in p for w in _RESOLUTION_FILES)
             and "/test" not in p]
    named: set[str] = set()
    # `self.x = ...`, `setattr(self, "x", ...)`, and from 0.5.19 `declare_resolution(server_args, "...", x=...)`
    # and a pass's `return {"x": ...}`: any `x=` or `"x":` of those files is a candidate, kept when x is a field
    rx = re.compile(r"\b(?:self|server_args|args)\.(\w+)\s*(?:=(?!=)|[-+*/]{1,2}=)|setattr\(\s*self,\s*[\"'](\w+)"
                    r"|\b(\w+)=(?!=)|[\"'](\w+)[\"']\s*:")
    for path in paths:
        for groups in rx.findall(modules.text(path)):
            named.add(next(g for g in groups if g))
    out: dict[str, list] = {}
    for name in [n for n in declared if n in named]:
        found = []
        for path in cache.candidates([name]):
            if path not in paths:
                continue
            module = modules.get(path)
            lines = write_lines(module, [name]) if module is not None else set()
            for write in writes_in(module, [name], cache.setters(module), lines) if lines else []:
                if write.target != name:
                    continue
                orders = call_orders(module, write, cache.parents(module), cache.calls)
                found.append(((path, orders[0][1]), module, write))
        if found:
            out[name] = [(m, w) for _, m, w in sorted(found, key=lambda t: t[0])]
    memo.update(out)
    return memo


def _site_key(site: str):
    path, _, line = site.rpartition(":")
    return (path, int(line) if line.isdigit() else 0)


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) < 1e-9
    try:
        return a == b or (str(a) == str(b) and type(a) is type(b))
    except Exception:  # noqa: BLE001
        return False
