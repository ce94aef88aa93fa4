"""A nested config field along sglang's resolution, so the guards that read it are decided.

From 0.5.14 the prefill CUDA graph lives in ``cuda_graph_config.prefill.backend``: an object
that ``_parse_cuda_graph_config`` builds from its defaults and the flags, and that later rules
test (``if self.cuda_graph_config.prefill.backend == Backend.BREAKABLE: ...``,
``(Phase.PREFILL, "backend") in self._cuda_graph_config_locked``). The log holds only the final
value, so those guards need the value at that point of the resolution.

:func:`sequenced` explains the writes in the order they run (the order of the calls from one
root function of a module) and, before each, tells the evaluator the value so far: what the
object is built with (``kit._pysource.built_attribute``: the dataclass defaults, hardware
probes answered when given), then each write that fired. A write whose guards are undecided
makes the value unknown from there on, with its reason. The set of settings the parse step
locked (its ``_set`` helper's ``locked.add((phase, key))``) is known for this field only.
Writes reached from another root, or in another module, see the value as unknown: the order of
those steps against the build is not read.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from kit._pysource import Evaluator, Members, ModuleInfo, Partial, Unknown, built_attribute, render, unknown
from kit._text import short_path

from .guards import call_orders, explain_write
from .result import AssignmentSite
from .sites import TreeIndex, Write

__all__ = ["sequenced"]

_LAUNCH = object()  # the object has not been built yet: readers see its value at launch


@dataclass
class _Entry:
    module: ModuleInfo
    write: Write
    func: ast.AST | None
    orders: list[tuple[str, tuple[int, ...]]]
    root: str = ""
    key: tuple[int, ...] = ()


@dataclass
class _State:
    """What is known of the field at one point of a resolution step."""

    parts: list[str]
    launch: tuple | None  # (value, how) at launch, from the launch command or the defaults
    value: object = _LAUNCH
    how: str = ""
    lock_field: str | None = None
    lock: Members | None = None
    lock_note: str = ""
    pending: dict[str, tuple[object, str]] = field(default_factory=dict)  # per function: a local being built

    @property
    def path(self) -> str:
        return ".".join(self.parts)

    def tell(self, ev: Evaluator) -> None:
        name = self.parts[0]
        if self.value is _LAUNCH:
            if self.launch is not None:
                ev.initial[name] = self.launch
            else:
                ev.initial.pop(name, None)
        else:
            shown = "not known" if isinstance(self.value, Unknown) else repr(self.value)
            note = f"{self.path} is {shown} at this point: {self.how}"
            ev.initial[name] = (_nested(self.parts[1:], self.value, self.path, note), note)
        if self.lock_field and self.lock is not None:
            ev.shadowed.add(self.lock_field)
            ev.initial[self.lock_field] = (self.lock, self.lock_note)

    def written(self, site: AssignmentSite, value, how: str, into: dict | None = None) -> None:
        """A write of the whole path: fired sets it, unknown leaves it unknown unless it writes the same."""
        if site.status == "not fired":
            return
        old = into.get(site.function, (_LAUNCH, ""))[0] if into is not None else self.value
        if site.status == "fired":
            new, text = value, how
        elif _same(old, value):
            return
        else:
            before = f"{old!r} unless " if old is not _LAUNCH and not isinstance(old, Unknown) else ""
            new = unknown(self.path, f"{before}{short_path(site.where)} may set it to {site.value_text} "
                                     f"({site.status_reason})")
            text = new.reason
        if into is not None:
            into[site.function] = (new, text)
        else:
            self.value, self.how = new, text


def sequenced(cache: TreeIndex, parts: list[str], ev: Evaluator, found: list[tuple[ModuleInfo, Write]]):
    """The sites of ``found`` writes to the nested field ``parts``, each evaluated with the value of the
    field where it runs (see the module docstring), and what those steps leave it as, in a sentence."""
    entries = [_entry(cache, module, write) for module, write in found]
    builds = [e for e in entries if e.write.target == parts[0] and e.write.value is not None]
    # The parse step (its `_set` helper keeps a lock) is where the object is built; other whole-object
    # writes (a copy with new batch sizes, 0.5.23 memory_hook) run in steps whose order is not read.
    parse = [e for e in builds if e.func is not None and _lock_field(e.func)] or builds
    homes = {(e.module.path, e.orders[0][0]) for e in parse}
    for e in entries:
        e.root, e.key = next(((r, k) for r, k in e.orders if (e.module.path, r) in homes), e.orders[0])
    groups: dict[tuple[str, str], list[_Entry]] = {}
    for e in entries:
        groups.setdefault((e.module.path, e.root), []).append(e)
    saved_initial, saved_shadowed = dict(ev.initial), set(ev.shadowed)
    launch = ev.initial.get(parts[0])
    sites: list[AssignmentSite] = []
    summary = ""
    try:
        for group, members in groups.items():
            state = _State(parts, launch)
            if homes and group not in homes:
                where = ", ".join(sorted({f"{e.module.display}:{e.write.line}" for e in parse}))
                state.value = unknown(state.path, f"built in another resolution step ({where}); the order of "
                                                  "the steps is not read")
                state.how = state.value.reason
            for e in sorted(members, key=lambda e: e.key):
                state.tell(ev)
                values: dict = {}
                done = explain_write(e.module, e.write, cache.parents(e.module), ev, cache.calls, values)
                _advance(state, e, done, values, ev)
                sites.extend(done)
            if group in homes and state.value is not _LAUNCH and not summary:
                value = ("is not known" if isinstance(state.value, Unknown)
                         else f"ends as {state.value!r}")
                summary = f"in the steps {group[1]} runs, {state.path} {value}: {state.how}"
    finally:
        ev.initial.clear()
        ev.initial.update(saved_initial)
        ev.shadowed.clear()
        ev.shadowed.update(saved_shadowed)
    return sites, summary


def _entry(cache: TreeIndex, module: ModuleInfo, write: Write) -> _Entry:
    parents = cache.parents(module)
    node, func = write.stmt, None
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node
            break
    return _Entry(module, write, func, call_orders(module, write, parents, cache.calls))


def _advance(state: _State, e: _Entry, sites: list[AssignmentSite], values: dict, ev: Evaluator) -> None:
    compute = values.get(id(e.write))
    value, notes = compute() if compute is not None else (unknown(e.write.target, "not evaluated"), [])
    for site in sites:
        how = f"set by {short_path(site.where)} ({site.function})"
        if site.target == state.path:
            # A `_set(phase, key, value)` helper writes into the local being built; it lands when the
            # object is assigned. Any other write lands at once.
            state.written(site, value, how, state.pending if site.kind == "setter call" else None)
        elif site.target == state.parts[0] and site.status != "not fired":
            _built(state, e, site, ev)


def _built(state: _State, e: _Entry, site: AssignmentSite, ev: Evaluator) -> None:
    """The whole object is assigned: its value is what the helpers wrote into it, else its default."""
    where = short_path(site.where)
    if site.function in state.pending:
        value, how = state.pending[site.function]
    else:
        value, notes = ev.collect(lambda: built_attribute(ev, e.module, e.write.value, state.parts[1:], e.func))
        detail = f" ({'; '.join(notes)})" if notes else ""
        how = f"built by {where} ({site.function}) from its defaults{detail}"
        if isinstance(value, Unknown):
            how = f"built by {where} ({site.function}); its default: {value.reason}"
    if site.status == "unknown":
        value = unknown(state.path, f"{where} may rebuild it ({site.status_reason})")
        how = value.reason
    state.value, state.how = value, how
    lock = _lock_field(e.func) if e.func is not None else None
    if lock is not None:
        state.lock_field = lock
        state.lock, state.lock_note = _lock(state, site, lock)


def _lock(state: _State, site: AssignmentSite, lock: str) -> tuple[Members, str]:
    """Whether the parse step locked (phase, key) of this field: a helper write to it fired there."""
    item = (state.parts[-2], state.parts[-1]) if len(state.parts) > 2 else (state.parts[-1],)
    pending = state.pending.get(site.function)
    explicit = _explicit_json(state)
    if explicit is not None and not isinstance(explicit, bool):
        held, why = explicit, explicit.reason
    elif explicit:
        held, why = True, "the launch's --cuda-graph-config JSON sets it"
    elif pending is None:
        held, why = False, f"nothing in {site.function} set it"
    elif isinstance(pending[0], Unknown):
        held, why = pending[0], pending[0].reason
    else:
        held, why = True, pending[1]
    label = f"{lock} (from {site.function})"
    members = Members({item: held}, label, f"only whether {render(item)} is in it is followed")
    state_word = "" if held is True else "not " if held is False else "maybe "
    return members, f"{render(item)} is {state_word}in {label}: {why}"


def _explicit_json(state: _State):
    """Whether the object given at launch (the JSON of --cuda-graph-config) sets this field itself."""
    if state.launch is None:
        return unknown(state.path, "whether the launch's --cuda-graph-config sets it is not known (pass the "
                                   "launch command)")
    node = state.launch[0]
    for part in state.parts[1:]:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _lock_field(func: ast.AST) -> str | None:
    """L in ``def _set(p, k, v): setattr(...); locked.add((p, k))`` ... ``self.L = locked``."""
    for inner in ast.walk(func):
        if inner is func or not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {a.arg for a in inner.args.args}
        for call in ast.walk(inner):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add"
                    and isinstance(call.func.value, ast.Name) and call.args
                    and {n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)} <= params):
                local = call.func.value.id
                for node in ast.walk(func):
                    if (isinstance(node, ast.Assign) and len(node.targets) == 1
                            and isinstance(node.targets[0], ast.Attribute)
                            and isinstance(node.value, ast.Name) and node.value.id == local):
                        return node.targets[0].attr
    return None


def _nested(rest: list[str], value, label: str, note: str):
    """{"prefill": {"backend": value}}, each level saying the rest of the object is not followed."""
    why = f"only {label} is followed through the resolution"
    node = value
    for part in reversed(rest):
        node = Partial({part: node}, why, note)
    return node


def _same(a, b) -> bool:
    if isinstance(a, Unknown) or isinstance(b, Unknown) or a is _LAUNCH:
        return False
    try:
        return type(a) is type(b) and a == b
    except Exception:  # noqa: BLE001
        return False
