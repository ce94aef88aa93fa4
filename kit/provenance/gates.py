"""Whether a fast path of sglang runs for a launch: every refusal of its setup and of its per-batch
gate, read from the release's own source and evaluated against the launch.

A fast path (the prefill graph, the decode graph, custom all-reduce, torch.compile) is built at
startup by a setup function and then asked, for every batch, whether it can run (``can_run``). Each
``return`` that leaves it unbuilt and each ``return False`` of the gate is a *refusal*. ``gate_chain``
lists them in the order they are tested, each with its ``file:line``, its condition as written and
its verdict for this launch:

- ``refuses``: the condition holds whatever the requests are: the path does not run;
- ``passes``: it cannot hold for this launch;
- ``depends``: it holds for some requests (input embeddings, logprobs, a prompt longer than the
  captured sizes): ``typical`` says what it does for a plain text request;
- ``unknown``: the evidence cannot decide; ``reason`` says what it would take.

What the functions are is data (``kit/data/fast_paths.yaml``); how a batch looks is read from the
source too: its forward mode, the hidden states the speculative worker asks of the target
(``capture_hidden_mode``), and the dataclass defaults of ``ForwardBatch`` for the request-dependent
fields. The runner's own values (``self.capture_hidden_mode``) come from running its ``__init__``
lazily with the evaluator. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from kit._pysource import Env, Evaluator, Scope, Unknown, class_fields, const, truth
from kit._pysource.modules import bound_names as _bound
from kit._pysource.modules import method_named
from kit._pysource.values import MISSING_FACT, ClassRef, EnumMember, Stated
from kit._text import clip, short_path
from kit.errors import UsageError

from .explain import _Defaults
from .gate_chain import BATCHES, FAST_PATHS, REQUEST, GateChain, GateStep, fast_path_names, spec_data
from .gate_source import (
    assigned_after_init as _assigned_after_init,
)
from .gate_source import (
    atom as _atom,
)
from .gate_source import (
    batch_param as _batch_param,
)
from .gate_source import (
    called_name as _called_name,
)
from .gate_source import (
    class_chain as _class_chain,
)
from .gate_source import (
    conjuncts as _conjuncts,
)
from .gate_source import (
    inside as _inside,
)
from .gate_source import (
    is_none_test as _is_none_test,
)
from .gate_source import (
    leaves_unbuilt as _leaves_unbuilt,
)
from .gate_source import (
    line_of as _line,
)
from .gate_source import (
    local_assignment as _local_assignment,
)
from .gate_source import (
    log_message as _log_message,
)
from .gate_source import (
    message_in as _message_in,
)
from .gate_source import (
    parent_if as _parent_if,
)
from .gate_source import (
    qual as _qual,
)
from .gate_source import (
    refusing_ifs as _refusing_ifs,
)
from .gate_source import (
    returns as _returns,
)
from .gate_source import (
    self_method as _self_method,
)
from .gate_source import (
    targets as _targets,
)
from .gate_source import (
    terminates as _terminates,
)
from .gate_source import (
    worker_extend_modes as _worker_extend_modes,
)
from .guards import explain_write
from .sites import Write, index_for

__all__ = ["BATCHES", "FAST_PATHS", "GateChain", "GateStep", "fast_path_names", "gate_chain"]

_REQUEST = REQUEST

# --------------------------------------------------------------------------- entry point


def gate_chain(tree, fast_path: str, snapshot=None, model_config=None, *, facts: dict | None = None,
               probes: dict | None = None, log_text: str | None = None) -> GateChain:
    """The refusals of ``fast_path`` (a key of kit/data/fast_paths.yaml) in ``tree``'s release, for the
    launch whose resolved arguments are ``snapshot`` (a dict or ServerArgsSnapshot).

    ``facts`` are what the evidence says of the machine (``p2p``, ``full_nvlink``, ``same_node``: True,
    False or absent); ``probes`` answers hardware probes (``is_cuda``); ``log_text``, the server's log,
    decides setup refusals that log a message (and the setup as a whole when it logs the capture).
    """
    spec = FAST_PATHS.get(fast_path)
    if spec is None:
        raise UsageError(f"no fast path {fast_path!r}", hint=f"one of {', '.join(FAST_PATHS)}")
    from kit.model_config import load_model_config

    values = dict(getattr(snapshot, "fields", snapshot) or {})
    reader = _Reader(tree, spec, values, load_model_config(model_config), dict(facts or {}), dict(probes or {}),
                     log_text)
    chain = GateChain(fast_path, str(spec.get("title", fast_path)), getattr(tree, "version", None),
                      BATCHES.get(str(spec.get("batch", "")), ""))
    if spec.get("requires"):
        chain.requires = gate_chain(tree, str(spec["requires"]), snapshot, model_config, facts=facts,
                                    probes=probes, log_text=log_text)
    reader.read(chain)
    return chain


# --------------------------------------------------------------------------- reading one fast path


class _Reader:
    def __init__(self, tree, spec: dict, values: dict, model_config, facts: dict, probes: dict,
                 log_text: str | None) -> None:
        self.tree = tree
        self.spec = spec
        self.values = values
        self.model_config = model_config
        self.facts = facts
        self.probes = probes
        self.log = log_text or ""
        self.index = index_for(tree)
        self.modules = self.index.modules
        self.defaults = _Defaults(tree)
        self.notes: list[str] = []
        self.fact_lines: list[str] = []

    # ---- the evaluator of one pass

    def evaluator(self, batch_open: bool) -> Evaluator:
        calls = {}
        for name, (value, how) in (self.spec.get("calls") or {}).items():
            calls[name] = (self._fact(value), how)
        for name in ("get_global_server_args",):
            calls[name] = (None, "")  # set below, once the evaluator's args exist
        ev = Evaluator(self.modules, self.values, self.model_config, defaults=self.defaults,
                       probes=self.probes, calls=calls, follow_calls=tuple(self.spec.get("follow") or ()))
        ev.calls["get_global_server_args"] = (ev.args, "the server's resolved arguments")
        for name in ("get_exec", "get_flags", "get_schedule", "get_memory", "get_spec", "get_parallel"):
            ev.calls[name] = (_ArgsView(ev, f"{name}()"), "a published view of the resolved arguments")
        ev.scratch["batch_open"] = batch_open
        return ev

    def _fact(self, value):
        if isinstance(value, list):
            return [self._fact(v) for v in value]
        if isinstance(value, str) and value.startswith("args."):
            name = value[5:]
            return self.values.get(name, Unknown((name, "not in the resolved arguments")))
        if isinstance(value, str) and value.startswith("fact."):
            name = value[5:]
            if name in self.facts and self.facts[name] is not None:
                return self.facts[name]
            return Unknown((name, f"not in the evidence ({_FACT_WHY.get(name, 'not read')})"))
        return value

    # ---- the chain

    def read(self, chain: GateChain) -> None:
        if self.spec.get("condition"):
            self._condition(chain)
            return
        ev_typ, ev_open = self.evaluator(False), self.evaluator(True)
        runner_typ = self._model_runner(ev_typ)
        runner_open = self._model_runner(ev_open)
        for name in self.spec.get("setup") or ():
            found = self._function(name)
            if found is None:
                continue
            module, cls, func = found
            steps = self._setup_steps(module, cls, func, ev_typ, runner_typ)
            chain.steps += steps
        gate = self._gate(ev_typ, runner_typ)
        if gate is None:
            chain.notes.append(f"no runner of {', '.join(self.spec.get('runner') or [])} with "
                               f"{' or '.join(self.spec.get('gate') or [])} is in sglang {self.tree.version}")
        else:
            module, cls, func = gate
            batches = (self._batch(ev_typ, False, chain), self._batch(ev_open, True, None))
            states = (self._runner_state(ev_typ, cls, module, runner_typ), self._runner_state(ev_open, cls, module,
                                                                                            runner_open))
            typical = self._gate_steps(module, cls, func, ev_typ, {"self": states[0], _batch_param(func): batches[0]})
            opened = self._gate_steps(module, cls, func, ev_open, {"self": states[1], _batch_param(func): batches[1]})
            chain.steps += _combine(typical, opened)
        chain.notes += list(dict.fromkeys(self.notes))
        chain.facts += list(dict.fromkeys(self.fact_lines))
        self._decide_from_log(chain)

    # ---- finding functions

    def _function(self, qualname: str):
        """(module, class node or None, function node) of ``Class.method`` (its own or a base's) or of a
        module-level ``function`` in the tree."""
        in_file, _, qualname = qualname.rpartition(":")
        cls_name, _, name = qualname.rpartition(".")
        if cls_name:
            ref = self._class(cls_name)
            if ref is None:
                return None
            for module, cls in _class_chain(self.modules, ref.module, ref.node):
                func = method_named(cls, name)
                if func is not None:
                    return module, cls, func
            return None
        hits = self.tree.grep(rf"^(async[[:space:]]+)?def {re.escape(name)}\(", max_matches=20)
        for path in dict.fromkeys(h.path for h in hits if h.path.startswith("srt/") and "/test" not in h.path
                                  and h.path.endswith(in_file)):
            module = self.modules.get(path)
            func = next((n for n in module.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == name), None) if module is not None else None
            if func is not None:
                return module, None, func
        return None

    def _gate(self, ev: Evaluator, model_runner: Stated):
        """(module, class, gate method) of the runner the setup builds for this launch."""
        runners = [r for r in (self.spec.get("runner") or ()) if self._class(r) is not None]
        chosen = self._built_runner(runners, ev, model_runner) if len(runners) > 1 else (runners[0] if runners else None)
        for name in [chosen] if chosen else []:
            for method in self.spec.get("gate") or ():
                found = self._function(f"{name}.{method}")
                if found is not None:
                    return found
        return None

    def _built_runner(self, runners: list[str], ev: Evaluator, model_runner: Stated) -> str | None:
        """Which of ``runners`` the setup functions construct for this launch: the first construction whose
        guards hold; with none decided, the first that may run (and a note)."""
        sites = []
        for name in self.spec.get("setup") or ():
            found = self._function(name)
            if found is None:
                continue
            module, cls, func = found
            bind = {"self": model_runner, "model_runner": model_runner}
            for stmt in ast.walk(func):
                if not isinstance(stmt, (ast.Assign, ast.Expr, ast.Return)) or stmt.value is None:
                    continue
                called = {_called_name(c) for c in ast.walk(stmt.value) if isinstance(c, ast.Call)}
                for runner in runners:
                    if runner in called:
                        with _parameters(ev, bind):
                            (site,) = explain_write(module, Write(stmt, "return", "", stmt.value, stmt.lineno),
                                                    self.index.parents(module), ev)
                        # its own branch decides which class, whatever the setup's earlier refusals did
                        own = [g.passes for g in site.guards if g.kind in ("if", "else")]
                        status = "not fired" if False in own else ("fired" if all(p is True for p in own)
                                                                   else "unknown")
                        sites.append((runner, status, f"{short_path(module.display)}:{stmt.lineno}"))
        fired = [s for s in sites if s[1] == "fired"]
        if fired:
            return fired[0][0]
        open_ = [s for s in sites if s[1] == "unknown"]
        if open_:
            if len({s[0] for s in open_}) > 1:
                self.notes.append("which runner is built is not decided by the evidence ("
                                  + "; ".join(f"{r} at {w}" for r, _, w in open_) + f"): {open_[0][0]} is read")
            return open_[0][0]
        return runners[-1] if not sites else sites[0][0]

    def _class(self, name: str):
        hits = self.tree.grep(rf"^class {re.escape(name)}\b", max_matches=10)
        for path in dict.fromkeys(h.path for h in hits if h.path.startswith("srt/")):
            module = self.modules.get(path)
            cls = module.cls(name) if module is not None else None
            if cls is not None:
                return ClassRef(cls, module)
        return None

    def enum(self, cls: str, member: str) -> EnumMember:
        return EnumMember(cls, member, self._class(cls))

    # ---- the objects the code reads

    def _model_runner(self, ev: Evaluator) -> Stated:
        raw = self.values.get("speculative_algorithm")
        algo = "NONE" if isinstance(raw, Unknown) else str(raw or "NONE").upper()
        algo = {"NEXTN": "EAGLE", "MTP": "EAGLE"}.get(algo, algo)
        lora = self.values.get("enable_lora")
        facts = {
            "server_args": ev.args,
            "spec_algorithm": raw if isinstance(raw, Unknown) else self.enum("SpeculativeAlgorithm", algo),
            "is_draft_worker": False,
            "is_generation": True,
            "model_config": ev.model,
            "device": "cuda" if self.probes.get("is_cuda") else Unknown(("device", "the server's device")),
            "lora_manager": lora if isinstance(lora, Unknown) else
            None if not lora else Unknown(("lora_manager", "LoRA is on")),
        }
        return Stated("model_runner", facts, "a value of the running model runner, not read from the evidence")

    def _runner_state(self, ev: Evaluator, cls: ast.ClassDef | None, module, model_runner: Stated) -> Stated:
        """``self`` of the gate: the runner's attributes as its ``__init__`` (and its bases') sets them."""
        if cls is None:
            return model_runner
        inits = []
        for base_module, base in _class_chain(self.modules, module, cls):
            init = method_named(base, "__init__")
            if init is not None:
                inits.append((base_module, base, init))
        memo: dict[str, Any] = {}
        holder: dict[str, Stated] = {}
        later = _assigned_after_init(module, cls, self.modules)

        def lookup(name: str):
            if name in later:
                return Unknown((f"self.{name}", f"set again after __init__ ({later[name]}): its value when a batch "
                                                "runs is not read"))
            if "env" not in memo:
                env = None
                for base_module, base, init in reversed(inits):  # the base's __init__ runs first (super())
                    params = [a.arg for a in init.args.args]
                    start = Env({"self": const(holder["self"])}, Scope(base_module, base, "self", 1, True))
                    for p in params[1:]:
                        start.vars[p] = const(model_runner if "runner" in p else Unknown((p, "a constructor argument")))
                    if env is not None:
                        start.vars.update({k: v for k, v in env.vars.items() if k.startswith("self.")})
                    env = ev.run_block(init.body, start)
                memo["env"] = env
            env = memo["env"]
            thunk = env.vars.get(f"self.{name}") if env is not None else None
            if thunk is None:
                for base_module, base in _class_chain(self.modules, module, cls):
                    if any(name == n for stmt in base.body for n, _ in _bound(stmt)):
                        return ev.class_attr(ClassRef(base, base_module), name)  # a class attribute
                return MISSING_FACT
            value = thunk.force(ev)
            if not isinstance(value, Unknown) and name not in memo:
                memo[name] = True
                lines = [f"{short_path(m.display)}:{n.lineno}" for m, _c, init in inits for n in ast.walk(init)
                         if isinstance(n, (ast.Assign, ast.AnnAssign)) and any(
                             isinstance(t, ast.Attribute) and t.attr == name and ast.unparse(t.value) == "self"
                             for t in _targets(n))]
                self.fact_lines.append(f"self.{name} = {clip(repr(value), 60)} (set in {cls.name}.__init__ at "
                                       f"{', '.join(lines) or 'a line not found'})")
            return value

        state = Stated(cls.name, {"model_runner": model_runner}, "not set in its __init__ as read", lookup=lookup)
        holder["self"] = state
        return state

    def _batch(self, ev: Evaluator, open_: bool, chain: GateChain | None) -> Stated:
        """The batch the gate is asked about: its mode and hidden states from the source; the other fields
        at their ForwardBatch defaults (a plain text request), or unknown when ``open_``."""
        kind = str(self.spec.get("batch") or "")
        raw = self.values.get("speculative_algorithm")
        algo = "" if isinstance(raw, Unknown) else str(raw or "").upper()
        facts: dict[str, Any] = {}
        if kind == "target-prefill":
            facts["forward_mode"] = self.enum("ForwardMode", "EXTEND")
            facts["capture_hidden_mode"] = raw if isinstance(raw, Unknown) else self._prefill_hidden_mode(ev, algo)
        elif kind == "decode":
            facts["forward_mode"] = raw if isinstance(raw, Unknown) else \
                self.enum("ForwardMode", "TARGET_VERIFY" if algo else "DECODE")
        defaults = self._batch_defaults(ev)
        declared = self.__dict__.get("_batch_fields", set())

        def lookup(name: str):
            if name in defaults and not open_:
                return defaults[name]  # a plain text request leaves it at its dataclass default
            if name in defaults or name in declared:
                return Unknown((f"forward_batch.{name}", _REQUEST))
            return MISSING_FACT

        if kind == "all-reduce":
            return Stated("the all-reduced tensor", facts, f"its size: {_REQUEST} (the batch's tokens x hidden size)")
        return Stated("forward_batch", facts, "depends on the batch (not read)", lookup=lookup)

    def _batch_defaults(self, ev: Evaluator) -> dict:
        """Request-dependent fields of ForwardBatch with a literal default in its dataclass (None, False)."""
        memo = self.__dict__.setdefault("_defaults_memo", {})
        if memo:
            return memo
        ref = self._class("ForwardBatch")
        if ref is None:
            return memo
        fields = self.__dict__.setdefault("_batch_fields", set())
        for _module, node in class_fields(self.modules, ref.module, ref.node):
            name = node.target.id
            if name not in ("forward_mode", "capture_hidden_mode"):
                fields.add(name)
            if node.value is None or name in ("forward_mode", "capture_hidden_mode"):
                continue
            try:
                memo[name] = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                continue
        memo.setdefault("input_embeds", None)
        memo.setdefault("replace_embeds", None)
        return memo

    def _prefill_hidden_mode(self, ev: Evaluator, algo: str):
        """The hidden states the target's prefill batch asks for: set by the speculative worker before it
        runs the target's extend (read from the worker's source), else the schedule batch's default."""
        null = self._enum_value(ev, "CaptureHiddenMode", "NULL")
        if not algo or algo == "NONE":
            hidden = self.values.get("enable_return_hidden_states")
            if isinstance(hidden, Unknown):
                return hidden
            if hidden:
                return Unknown(("capture_hidden_mode", "requests may return hidden states"))
            self.fact_lines.append("without speculative decoding a text request's prefill asks no hidden states "
                                   "(CaptureHiddenMode.NULL)")
            return null
        algo_member = self.enum("SpeculativeAlgorithm", {"NEXTN": "EAGLE", "MTP": "EAGLE"}.get(algo, algo))
        worker = Stated("the speculative worker", {"speculative_algorithm": algo_member,
                                                   "spec_algorithm": algo_member, "server_args": ev.args},
                        "a value of the running speculative worker")
        found = _worker_extend_modes(self.tree, self.modules, ev, worker)
        families = (spec_data().get("speculative_workers") or {}).get(algo_member.name) or ()
        mine = [(v, w) for v, w in found if any(w.split("/")[-1].startswith(f) for f in families)]
        found = mine or found
        if not found:
            return Unknown(("capture_hidden_mode", "the speculative worker's target prefill was not found"))
        values = {v for v, _ in found}
        sites = ", ".join(sorted({w for _, w in found}))
        if len(values) == 1:
            value = next(iter(values))
            self.fact_lines.append(f"the speculative worker runs the target's prefill with capture_hidden_mode = "
                                   f"{_mode_name(ev, self, value)} ({sites})")
            return value
        return Unknown(("capture_hidden_mode", f"the speculative workers set different modes ({sites})"))

    def _enum_value(self, ev: Evaluator, cls: str, member: str):
        ref = self._class(cls)
        return ev.class_attr(ref, member) if ref is not None else Unknown((f"{cls}.{member}", "not found"))

    # ---- refusals of a setup function

    def _setup_steps(self, module, cls, func, ev: Evaluator, model_runner: Stated) -> list[GateStep]:
        params = [a.arg for a in func.args.args + func.args.kwonlyargs]
        bind = {p: model_runner for p in params if p == "self" and cls is not None and cls.name == "ModelRunner"}
        bind.update({p: model_runner for p in params if p == "model_runner"})
        if cls is not None and cls.name != "ModelRunner":
            bind["self"] = self._runner_state(ev, cls, module, model_runner)
        steps = []
        for ret in _returns(func):
            if not _leaves_unbuilt(ret):
                continue
            steps += self._refusal(module, func, ret, ev, bind, "setup")
        followed, replaced = self._none_results(module, func, ev, bind)
        steps = [s for s in steps if _line(s.where) not in replaced or s.where.rsplit(":", 1)[0] != short_path(module.display)]
        steps += followed
        return sorted(steps, key=lambda s: (s.where.rsplit(":", 1)[0] != short_path(module.display), _line(s.where)))

    def _none_results(self, module, func, ev: Evaluator, bind: dict) -> tuple[list[GateStep], set[int]]:
        """``x = helper(...)`` then ``if x is None: return``: helper's ``return None``s refuse too (its
        parameters bound to the call's arguments); the lines of those ``is None`` tests, which they replace."""
        out, replaced = [], set()
        for node in ast.walk(func):
            if not (isinstance(node, ast.If) and _is_none_test(node.test) and _terminates(node.body)):
                continue
            name = node.test.left.id
            assign = next((a for a in ast.walk(func) if isinstance(a, ast.Assign) and a.lineno < node.lineno
                           and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
                           and isinstance(a.value, ast.Call)), None)
            if assign is None:
                continue
            callee = _called_name(assign.value)
            found = self._function(callee) if callee else None
            if found is None:
                continue
            c_module, _c_cls, c_func = found
            inner = dict(bind)
            inner.update(self._arguments(module, func, assign, assign.value, c_func, ev, bind))
            for ret in _returns(c_func):
                if ret.value is None or (isinstance(ret.value, ast.Constant) and ret.value.value is None):
                    out += self._refusal(c_module, c_func, ret, ev, inner, "setup", via=func.name)
            replaced.add(node.test.lineno)
        return out, replaced

    def _arguments(self, module, func, stmt, call: ast.Call, callee, ev: Evaluator, bind: dict) -> dict:
        """The callee's parameters as the call at ``stmt`` passes them, evaluated where the call is."""
        params = [a.arg for a in callee.args.args + callee.args.kwonlyargs]
        if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            params = params[1:]
        keys = [ast.Constant(k.arg) for k in call.keywords if k.arg]
        vals = [k.value for k in call.keywords if k.arg]
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        keys += [ast.Constant(params[i]) for i in range(min(len(positional), len(params)))]
        vals += positional[: len(params)]
        table = ast.Dict(keys=keys, values=vals)
        ast.copy_location(table, stmt)
        ast.fix_missing_locations(table)
        with _parameters(ev, bind):
            computed: dict = {}
            explain_write(module, Write(stmt, "return", "", table, stmt.lineno), self.index.parents(module), ev,
                          values=computed)
            fn = next(iter(computed.values()), None)
            bound, _ = fn() if fn is not None else ({}, [])
        if not isinstance(bound, dict):
            return {p: Unknown((p, "an argument not evaluated")) for p in params}
        return bound

    # ---- refusals of the gate

    def _gate_steps(self, module, cls, func, ev: Evaluator, bind: dict, via: str = "", depth: int = 0) -> list[GateStep]:
        steps: list[GateStep] = []
        for ret in _returns(func):
            value = ret.value
            if isinstance(value, ast.Constant) and value.value is False:
                helper = self._helper_in_guard(module, func, ret, cls)
                if helper is not None and depth < 3:
                    steps += self._follow(module, cls, func, ret, helper, ev, bind, depth)
                    continue
                steps += self._refusal(module, func, ret, ev, bind, "gate", via=via)
            elif value is not None and not (isinstance(value, ast.Constant)):
                call = value if isinstance(value, ast.Call) else None
                if call is not None and _self_method(call) and depth < 3 and self._method(module, cls, _self_method(call)):
                    steps += self._follow(module, cls, func, ret, call, ev, bind, depth)
                    continue
                for part in _conjuncts(value):
                    steps += self._requirement(module, func, ret, part, ev, bind, via)
        return sorted(steps, key=lambda s: (s.via != via, _line(s.where)))

    def _method(self, module, cls, name: str):
        for m, c in _class_chain(self.modules, module, cls) if cls is not None else ():
            f = method_named(c, name)
            if f is not None:
                return m, c, f
        return None

    def _helper_in_guard(self, module, func, ret: ast.Return, cls):
        """``if not self.helper(...): return False``: the call, when helper is a method of the class."""
        parent = _parent_if(func, ret)
        if parent is None:
            return None
        test = parent.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call):
            name = _self_method(test.operand)
            if name and self._method(module, cls, name):
                return test.operand
        return None

    def _follow(self, module, cls, func, ret, call: ast.Call, ev: Evaluator, bind: dict, depth: int) -> list[GateStep]:
        """The refusals of ``self.helper(...)``, its parameters bound to the call's arguments."""
        m_module, m_cls, m_func = self._method(module, cls, _self_method(call))
        bound = self._arguments(module, func, ret, call, m_func, ev, bind)
        inner = dict(bind)
        inner.update(bound)
        inner["self"] = bind.get("self")
        return self._gate_steps(m_module, m_cls, m_func, ev, inner, via=m_func.name, depth=depth + 1)

    # ---- one refusal

    def _refusal(self, module, func, ret: ast.Return, ev: Evaluator, bind: dict, stage: str,
                 via: str = "") -> list[GateStep]:
        with _parameters(ev, bind):
            (site,) = explain_write(module, Write(ret, "return", "", ret.value, ret.lineno),
                                    self.index.parents(module), ev)
        refusing = _refusing_ifs(func)
        own = [g for g in site.guards if g.kind in ("if", "else", "loop", "except")
               or (g.kind == "early return" and g.line not in refusing and _inside(func, g.line, ret))]
        if not own:
            return []  # an unconditional return is the end of the function, not a refusal
        text = " and ".join(g.condition for g in own)
        passes = [g.passes for g in own]
        if all(p is True for p in passes):
            verdict = "refuses"
        elif any(p is False for p in passes):
            verdict = "passes"
        else:
            verdict = "unknown"
        reason = "; ".join(dict.fromkeys(g.reason for g in own if g.reason))
        step = GateStep(f"{short_path(module.display)}:{own[-1].line}", _qual(module, func), text, stage, verdict,
                        reason=reason, message=_log_message(module, own[-1].line, ret.lineno), via=via)
        return [step]

    def _requirement(self, module, func, ret: ast.Return, part: ast.expr, ev: Evaluator, bind: dict,
                     via: str) -> list[GateStep]:
        """``return a and b``: the gate refuses when ``a`` is false; names are shown with their definition."""
        negated = ast.UnaryOp(op=ast.Not(), operand=part)
        ast.copy_location(negated, part)
        with _parameters(ev, bind):
            computed: dict = {}
            (site,) = explain_write(module, Write(ret, "return", "", negated, ret.lineno),
                                    self.index.parents(module), ev, values=computed)
            fn = computed.get(next(iter(computed), None))
            value, notes = fn() if fn is not None else (Unknown(("?", "not evaluated")), [])
        t = truth(value)
        text = f"not {ast.unparse(part)}" if _atom(part) else f"not ({ast.unparse(part)})"
        line = part.lineno
        if isinstance(part, ast.Name):
            assign = _local_assignment(func, part.id, ret.lineno)
            if assign is not None:
                text = f"not {part.id} ({part.id} = {clip(ast.unparse(assign.value), 160)})"
                line = assign.lineno
        if isinstance(t, Unknown):
            verdict, reason = "unknown", t.reason
        else:
            verdict, reason = ("refuses" if t else "passes"), "; ".join(notes)
        return [GateStep(f"{short_path(module.display)}:{line}", _qual(module, func), text, "gate", verdict,
                         reason=reason, via=via)]

    # ---- a condition of another chain (torch.compile's compile_bs)

    def _condition(self, chain: GateChain) -> None:
        spec = self.spec["condition"]
        name = str(spec["name"])
        ev = self.evaluator(False)
        for qual in spec.get("function") or ():
            found = self._function(qual)
            if found is None:
                continue
            module, _cls, func = found
            assign = next((a for a in ast.walk(func) if isinstance(a, (ast.Assign, ast.AnnAssign))
                           and name in {t.id for t in _targets(a) if isinstance(t, ast.Name)}
                           | {t.attr for t in _targets(a) if isinstance(t, ast.Attribute)}), None)
            if assign is None:
                continue
            conditions = [n for n in ast.walk(assign.value) if isinstance(n, ast.IfExp)]
            where = f"{short_path(module.display)}:{assign.lineno}"
            for cond in conditions:
                with _parameters(ev, {"server_args": ev.args}):
                    value, notes = ev.collect(lambda c=cond, m=module: ev.ev(c.test, Env({"server_args": const(ev.args)},
                                                                                      Scope(m))))
                t = truth(value)
                verdict = "unknown" if isinstance(t, Unknown) else ("passes" if t else "refuses")
                chain.steps.append(GateStep(where, _qual(module, func), f"not ({ast.unparse(cond.test)})", "setup",
                                            verdict, reason=t.reason if isinstance(t, Unknown) else "; ".join(notes)))
            bound = [n for n in ast.walk(assign.value) if isinstance(n, ast.Compare)]
            for comp in bound:
                chain.steps.append(GateStep(where, _qual(module, func), f"not ({clip(ast.unparse(comp), 160)})", "gate",
                                            "depends", typical="", reads=["batch size"],
                                            reason="only the captured batch sizes that satisfy it are compiled"))
            return
        chain.notes.append(f"{name} was not found in {', '.join(spec.get('function') or [])}")

    # ---- the log decides setup refusals

    def _decide_from_log(self, chain: GateChain) -> None:
        if not self.log:
            return
        built = [m for m in (self.spec.get("log") or {}).get("built") or [] if m in self.log]
        for step in chain.steps:
            if step.stage != "setup":
                continue
            if step.message and _message_in(step.message, self.log):
                step.verdict, step.reason = "refuses", f"the server's log says it: {step.message!r}"
            elif built and step.verdict == "unknown":
                step.verdict, step.reason = "passes", f"the server's log shows the capture ({built[0]!r})"


# --------------------------------------------------------------------------- helpers

_FACT_WHY = {
    "p2p": "nvidia-smi topo -p2p r on the box",
    "full_nvlink": "nvidia-smi topo -m on the box",
    "same_node": "the launch's --nnodes",
}


class _ArgsView(Stated):
    """``get_exec().features.X``: a published namespace of the resolved arguments, read by leaf name."""

    def __init__(self, ev: Evaluator, label: str) -> None:
        super().__init__(label, {}, "a published namespace of the resolved arguments",
                         lookup=lambda name: self._leaf(name))
        self.ev = ev

    def _leaf(self, name: str):
        if name in self.ev.args.values:
            return self.ev.args.get(name)
        if self.ev.defaults is not None and self.ev.defaults.get(name) is not None:
            return self.ev.args.get(name)
        return _ArgsView(self.ev, f"{self.label}.{name}")


class _parameters:
    """Bind the gate's parameters (``self``, ``forward_batch``) for the walks inside the block."""

    def __init__(self, ev: Evaluator, bind: dict) -> None:
        self.ev, self.bind, self.saved = ev, bind, None

    def __enter__(self):
        self.saved = dict(self.ev.parameters)
        self.ev.parameters.update(self.bind)
        return self

    def __exit__(self, *exc):
        self.ev.parameters.clear()
        self.ev.parameters.update(self.saved)


def _combine(typical: list[GateStep], opened: list[GateStep]) -> list[GateStep]:
    """One step per refusal: decided without the request's fields -> that verdict; decided only for a
    plain text request -> "depends" with what it does for one."""
    by_where = {(s.where, s.text): s for s in opened}
    out = []
    for t in typical:
        o = by_where.get((t.where, t.text))
        if o is None or o.verdict != "unknown":
            out.append(o or t)
            continue
        parts = [p.strip() for p in o.reason.split(";") if p.strip()]
        reads = sorted({p.split(":", 1)[0].removeprefix("forward_batch.") for p in parts if _REQUEST in p})
        loops = ("a loop variable", "inside a loop")
        if reads and all(_REQUEST in p or (any(x in p for x in loops) and t.verdict != "unknown") for p in parts):
            o.verdict = "depends"
            o.reads = reads
            o.typical = t.verdict if t.verdict in ("refuses", "passes") else ""
            o.reason = f"depends on the request ({', '.join(reads)})" + (
                f"; for a plain text request it {t.verdict.removesuffix('s')}s" if o.typical else "")
        out.append(o)
    return out



def _mode_name(ev: Evaluator, reader: _Reader, value) -> str:
    ref = reader._class("CaptureHiddenMode")
    if ref is not None:
        for stmt in ref.node.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value == value:
                return f"{stmt.targets[0].id} ({value})"
    return repr(value)


