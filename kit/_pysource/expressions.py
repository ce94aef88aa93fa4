"""Expressions: names, attributes, operators, comparisons, comprehensions and calls.

Nothing is ever run: values come from literals, the server args, config.json and
definitions in the tree; a call outside the tree (hardware, files, environment) becomes
Unknown with a reason. Operations that could make a huge value are refused.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping

from .environment import env_call
from .modules import bound_names, dotted, method_named, short
from .plain import NOT_PURE, PURE_CALLS, from_plain, pure_call
from .scope import DONE, RET, Env, Scope, const
from .values import (
    Args,
    Cfg,
    ClassRef,
    EnumMember,
    External,
    FuncRef,
    Members,
    ModelCfg,
    ModuleRef,
    OriginList,
    Stated,
    Unknown,
    has_unknown,
    opaque,
    plain_text,
    render,
    same,
    truth,
    unknown,
    wrap,
)


class Expressions:
    """Expressions: names, attributes, operators, comprehensions and calls."""

    # ---- expressions

    def ev(self, node: ast.AST, env: Env):
        method = getattr(self, "_ev_" + type(node).__name__, None)
        if method is None:
            return unknown(short(node), f"{type(node).__name__} is not evaluated")
        return method(node, env)

    def _ev_Constant(self, node: ast.Constant, env: Env):
        return node.value

    def _ev_Name(self, node: ast.Name, env: Env):
        if node.id in env.vars:
            return env.vars[node.id].force(self)
        if env.scope.class_body and env.scope.cls is not None and _binds(env.scope.cls, node.id):
            return self.class_attr(ClassRef(env.scope.cls, env.scope.module), node.id)
        return self.global_value(env.scope.module, node.id)

    def _ev_Attribute(self, node: ast.Attribute, env: Env):
        if isinstance(node.value, ast.Name):
            key = f"{node.value.id}.{node.attr}"
            if key in env.vars:
                return env.vars[key].force(self)
        return self.attr(self.ev(node.value, env), node.attr, node)

    def attr(self, obj, name: str, node: ast.AST | None = None):
        if isinstance(obj, Unknown):
            return opaque(obj)
        if isinstance(obj, (Cfg, Args, ModelCfg, Stated)):
            return obj.get(name)
        if isinstance(obj, EnumMember) and obj.ref is not None and name in ("name", "value"):
            return obj.name if name == "name" else unknown(f"{obj}.value", "an auto() value")
        if isinstance(obj, ModuleRef):
            return self.global_value(obj.module, name)
        if isinstance(obj, ClassRef):
            return self.class_attr(obj, name)
        if isinstance(obj, External):
            return External(f"{obj.dotted}.{name}")
        if isinstance(obj, Mapping) and name in obj:  # snapshot dicts read as objects
            return wrap(obj[name], name, self.registry)
        subject = short(node) if node is not None else name
        return unknown(subject, f"cannot read .{name} of {type(obj).__name__} {render(obj)}")

    def _ev_Subscript(self, node: ast.Subscript, env: Env):
        obj = self.ev(node.value, env)
        key = self.ev(node.slice, env)
        for v in (obj, key):
            if isinstance(v, Unknown):
                return opaque(v)
        if isinstance(obj, Cfg) and isinstance(key, str):
            return obj.get(key)
        if isinstance(obj, ClassRef) and isinstance(key, str):  # an enum's member by name: `cls[upper]`
            member = self.class_attr(obj, key)
            return member if isinstance(member, EnumMember) else unknown(short(node), f"no member {key} in the enum")
        try:
            return obj[key]
        except (TypeError, KeyError, IndexError):
            return unknown(short(node), "index not available")

    def _ev_Slice(self, node: ast.Slice, env: Env):
        parts = [self.ev(p, env) if p is not None else None for p in (node.lower, node.upper, node.step)]
        bad = [p for p in parts if isinstance(p, Unknown)]
        return bad[0] if bad else slice(*parts)

    def _ev_BoolOp(self, node: ast.BoolOp, env: Env):
        want_and = isinstance(node.op, ast.And)
        pending: Unknown | None = None
        value = None
        for sub in node.values:
            value = self.ev(sub, env)
            t = truth(value)
            if isinstance(t, Unknown) and t.error:
                return t if pending is None else pending + t
            if isinstance(t, Unknown):
                pending = t if pending is None else pending + t
            elif t is not want_and:  # `and` stops at a falsy value, `or` at a truthy one
                # After an unknown operand the value may be that operand; only the truth is sure.
                return value if pending is None else Unknown(*pending.causes, truth=t)
        return pending if pending is not None else value

    def _ev_UnaryOp(self, node: ast.UnaryOp, env: Env):
        value = self.ev(node.operand, env)
        if isinstance(node.op, ast.Not):
            t = truth(value)
            return opaque(t) if isinstance(t, Unknown) else not t
        if isinstance(value, Unknown):
            return opaque(value)
        return arith(type(node.op).__name__, value, None, node)

    def _ev_BinOp(self, node: ast.BinOp, env: Env):
        left, right = self.ev(node.left, env), self.ev(node.right, env)
        for v in (left, right):
            if isinstance(v, Unknown) or has_unknown(v):
                return opaque(v) if isinstance(v, Unknown) else unknown(short(node), "holds unknown items")
        return arith(type(node.op).__name__, left, right, node)

    def _ev_IfExp(self, node: ast.IfExp, env: Env):
        t = truth(self.ev(node.test, env))
        if isinstance(t, Unknown):
            a, b = self.ev(node.body, env), self.ev(node.orelse, env)
            return a if same(a, b) else t
        return self.ev(node.body if t else node.orelse, env)

    def _ev_Compare(self, node: ast.Compare, env: Env):
        left = self.ev(node.left, env)
        pending: Unknown | None = None
        for op, comp in zip(node.ops, node.comparators, strict=False):
            right = self.ev(comp, env)
            result = self.compare(op, left, right, node)
            if isinstance(result, Unknown):
                pending = result if pending is None else pending + result
            elif not result:
                return False
            left = right
        return pending if pending is not None else True

    def compare(self, op: ast.cmpop, left, right, node: ast.AST):
        for v in (left, right):
            if isinstance(v, Unknown):
                return opaque(v)
            if isinstance(v, External):
                return unknown(v.dotted, "outside the sglang source; not evaluated")
        name = type(op).__name__
        if name in ("In", "NotIn"):
            return self._membership(left, right, name == "In", node)
        if has_unknown(left) or has_unknown(right):  # `[x] == [1]` with x unknown
            return unknown(short(node), "compares containers holding unknown items")
        try:
            return COMPARE[name](left, right)
        except TypeError:
            return Unknown(
                (short(node), f"Python cannot compare {render(left)} with {render(right)}"), error=True
            )

    def _membership(self, item, container, positive: bool, node: ast.AST):
        if isinstance(container, Members):
            if has_unknown(item):
                return unknown(short(node), "searches for an unknown value")
            found = container.contains(item)
            if isinstance(found, Unknown):
                return found
            self.note(f"{render(item)} is {'' if found else 'not '}in {container.label}")
            return found if positive else not found
        if isinstance(container, Cfg):
            found = container.has(item) if isinstance(item, str) else False
        elif isinstance(container, (list, tuple, set, frozenset, dict, str)):
            if has_unknown(item):
                return unknown(short(node), "searches for an unknown value")
            try:
                found = item in container
            except TypeError:
                return unknown(short(node), "membership test on unhashable value")
            if not found and has_unknown(container):
                return unknown(short(node), f"{render(item)} is not among the known items")
        else:
            return unknown(short(node), f"cannot search {render(container)}")
        if isinstance(container, OriginList):
            self.note(f"{plain_text(item)} is {'' if found else 'not '}in {container.label}")
        return found if positive else not found

    def _ev_List(self, node: ast.List, env: Env):
        return self._sequence(node.elts, env)

    def _ev_Tuple(self, node: ast.Tuple, env: Env):
        seq = self._sequence(node.elts, env)
        return seq if isinstance(seq, Unknown) else tuple(seq)

    def _ev_Set(self, node: ast.Set, env: Env):
        seq = self._sequence(node.elts, env)
        try:
            return seq if isinstance(seq, Unknown) else set(seq)
        except TypeError:
            return unknown(short(node), "set of unhashable values")

    def _sequence(self, elts: list[ast.expr], env: Env):
        out: list = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                inner = self.ev(elt.value, env)
                if not isinstance(inner, (list, tuple, set)):
                    return inner if isinstance(inner, Unknown) else unknown(short(elt), "cannot unpack")
                out.extend(inner)
            else:
                value = self.ev(elt, env)
                if isinstance(value, Unknown) and value.error:
                    return value  # Python raises while building the sequence: nothing after it runs
                # An unknown element keeps its place: membership of other items stays decidable.
                out.append(value)
        return out

    def _ev_Dict(self, node: ast.Dict, env: Env):
        out = {}
        for k, v in zip(node.keys, node.values, strict=False):
            key = self.ev(k, env) if k is not None else None
            if k is None or isinstance(key, Unknown):
                return unknown(short(node), "dict with computed keys")
            out[key] = self.ev(v, env)
        return out

    def _ev_Lambda(self, node: ast.Lambda, env: Env):
        return FuncRef(node, env.scope.module, env, cls=env.scope.cls)

    def _ev_GeneratorExp(self, node, env: Env):
        return self._comprehension(node, env)

    _ev_ListComp = _ev_GeneratorExp
    _ev_SetComp = _ev_GeneratorExp

    def _comprehension(self, node, env: Env, sources: list | None = None):
        envs = [env]
        for gen in node.generators:
            envs = self._expand_generator(gen, envs, sources)
            if isinstance(envs, Unknown):
                return envs
        return [self.ev(node.elt, e) for e in envs]

    def _expand_generator(self, gen: ast.comprehension, envs: list[Env], sources: list | None):
        out: list[Env] = []
        for e in envs:
            items = self.ev(gen.iter, e)
            if isinstance(items, Cfg):
                items = list(items.data)
            if not isinstance(items, (list, tuple, set, dict, str)) or len(items) > MAX_SEQ:
                return (
                    items if isinstance(items, Unknown) else unknown(short(gen.iter), "not iterable here")
                )
            if sources is not None and isinstance(items, OriginList):
                sources.append(items)
            for item in items:
                bound = self._bind(gen.target, item, e)
                if isinstance(bound, Unknown):
                    return bound
                keep = [truth(self.ev(cond, bound)) for cond in gen.ifs]
                if any(isinstance(k, Unknown) for k in keep):
                    return next(k for k in keep if isinstance(k, Unknown))
                if all(keep):
                    out.append(bound)
        return out

    def _bind(self, target: ast.AST, value, env: Env):
        if isinstance(target, ast.Name):
            return env.with_vars(**{target.id: const(value)})
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Unknown) or not isinstance(value, (list, tuple)):
                return unknown(short(target), "cannot unpack")
            if len(value) != len(target.elts):
                return unknown(short(target), "unpacks a different number of values")
            for sub, item in zip(target.elts, value, strict=False):
                env = self._bind(sub, item, env)
                if isinstance(env, Unknown):
                    return env
            return env
        return unknown(short(target), "unsupported loop target")

    def _ev_JoinedStr(self, node: ast.JoinedStr, env: Env):
        return unknown(short(node), "f-string not evaluated")

    # ---- calls

    def _ev_Call(self, node: ast.Call, env: Env):
        if _reads_environment(node):
            args, _ = self._args(node, env)
            found = env_call(self, node, args)
            if found is not None:
                return found
        func = node.func
        if isinstance(func, ast.Name) and func.id in BUILTINS and not self._shadowed_name(func.id, env):
            return self._builtin(func.id, node, env)
        if isinstance(func, ast.Attribute):
            owner = self.ev(func.value, env)
            return self._method_call(owner, func.attr, node, env)
        if (isinstance(func, ast.Name) and func.id not in env.vars and not env.scope.follow
                and func.id not in (getattr(self, "follow_calls", None) or ())):
            early = self._opaque_global_call(func.id, node, env)
            if early is not None:
                return early
        return self.call(self.ev(func, env), node, env)

    def _opaque_global_call(self, name: str, node: ast.Call, env: Env):
        """A module-level call with nothing from config.json in its arguments: unknown, unread."""
        args, kwargs = self._args(node, env)
        stated = self.stated_call(name)
        if stated is not NO_PROBE:
            return stated
        if name.endswith("_view") or "model_config" in name:
            return self._accessor(name, args or [])
        if args is None or any(isinstance(v, (Cfg, ModelCfg)) for v in [*args, *kwargs.values()]) \
                or from_plain([*args, *kwargs.values()]):
            return None
        given = self.probe(name)
        if given is NO_PROBE and not args and PROBE.search(name):
            callee = self.ev(node.func, env)  # defined in the tree: its definition may decide it
            if isinstance(callee, FuncRef):
                return self._probe_from_source(callee, node, env, f"{name}()", name)
        return given if given is not NO_PROBE else unknown(f"{name}()", why_call(name))

    def stated_call(self, name: str):
        """What the caller states a call returns (``calls`` of the Evaluator: ``get_global_server_args``,
        ``dist.get_world_size``), by its dotted or its last name, with a note; NO_PROBE when not stated."""
        calls = getattr(self, "calls", None) or {}
        for key in (name, name.rsplit(".", 1)[-1]):
            if key in calls:
                value, how = calls[key]
                self.note(f"{name}() = {render(value)} ({how})")
                return value
        return NO_PROBE

    def probe(self, name: str):
        """The value given for a hardware probe (``is_cuda``), with a note; NO_PROBE when none was given."""
        probes = getattr(self, "probes", None) or {}
        for key in (name, name.rsplit(".", 1)[-1]):
            if key in probes and PROBE.search(key):
                self.note(f"{key}() = {probes[key]!r} (given: the server's hardware)")
                return probes[key]
        return NO_PROBE

    def _shadowed_name(self, name: str, env: Env) -> bool:
        return name in env.vars or name in env.scope.module.bindings

    def _args(self, node: ast.Call, env: Env):
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                return None, None
            args.append(self.ev(a, env))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                return None, None
            kwargs[kw.arg] = self.ev(kw.value, env)
        return args, kwargs

    def _builtin(self, name: str, node: ast.Call, env: Env):
        if name in ("any", "all") and len(node.args) == 1:
            return self._any_all(name, node.args[0], env)
        args, kwargs = self._args(node, env)
        if args is None:
            return unknown(short(node), "call with *args/**kwargs")
        if name in ("hasattr", "getattr"):
            return self._getattr(name, args, node)
        if name == "isinstance" and len(node.args) == 2:
            return isinstance_check(args[0], node.args[1], node)
        for v in [*args, *kwargs.values()]:
            if isinstance(v, Unknown):
                return opaque(v)
            if has_unknown(v) and name != "len":
                return unknown(short(node), f"{name}() over unknown items")
        if name == "callable":
            return bool(args) and isinstance(args[0], (FuncRef, ClassRef))
        if name == "bool":
            return truth(args[0]) if args else False
        try:
            return BUILTINS[name](*args, **kwargs)
        except Exception:  # noqa: BLE001 - a wrong call is an unknown, not a crash
            return unknown(short(node), f"{name}() failed on these values")

    def _getattr(self, name: str, args: list, node: ast.Call):
        if len(args) < 2 or isinstance(args[1], Unknown) or not isinstance(args[1], str):
            return unknown(short(node), f"{name}() with a computed name")
        obj, attr = args[0], args[1]
        if isinstance(obj, Unknown):
            return opaque(obj)
        if isinstance(obj, Cfg):
            found = obj.has(attr)
            if found and name == "hasattr":
                self.note(f"{obj.label} has `{attr}`")
            if name == "hasattr":
                return found
            return obj.get(attr, *args[2:3])
        if obj is None:
            return (
                False if name == "hasattr" else (args[2] if len(args) > 2 else unknown(attr, "read on None"))
            )
        if isinstance(obj, Args) and name == "getattr" and len(args) > 2 and attr.startswith("_") \
                and attr not in obj.values and (self.defaults is None or self.defaults.get(attr) is None):
            # `getattr(self, "_resolution_finished", False)`: a private mark the resolution itself sets,
            # not a field, so it is absent when the resolution starts
            self.note(f"`{attr}` is not a field of ServerArgs: absent before the resolution sets it")
            return args[2]
        value = self.attr(obj, attr, node)
        if name == "hasattr":
            return value if isinstance(value, Unknown) else True
        return value

    def _any_all(self, name: str, arg: ast.expr, env: Env):
        sources: list[OriginList] = []
        if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            values = self._comprehension(arg, env, sources)
        else:
            values = self.ev(arg, env)
        if isinstance(values, Unknown):
            return values
        if isinstance(values, (Cfg, Args, ModelCfg, Stated)) or not hasattr(values, "__iter__"):
            return unknown(short(arg), f"{name}() over a value that is not a sequence here")
        truths = [truth(v) for v in values]
        known = [t for t in truths if not isinstance(t, Unknown)]
        unknowns = [t for t in truths if isinstance(t, Unknown)]
        decided = (True in known) if name == "any" else (False in known)
        if decided:
            result = name == "any"
        elif unknowns:
            return sum(unknowns[1:], unknowns[0])
        else:
            result = name == "all"
        self._note_scan(arg, values, truths, sources, result, env)
        return result

    def _note_scan(self, arg, values, truths, sources, result, env: Env) -> None:
        """Say which entry of a source-defined list matched, as `x is in LIST (file:line)`."""
        if not sources or not isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            return
        src = sources[0]
        if result:
            hit = next(i for i, t in enumerate(truths) if t is True)
            self.note(f"{plain_text(src[hit])} is in {src.label}")
            return
        other = other_side(arg, env, self)
        what = f"none of {plain_text(other)}" if other is not None else "no entry"
        self.note(f"{what} is in {src.label}")

    def _method_call(self, owner, name: str, node: ast.Call, env: Env):
        if isinstance(owner, (Unknown, External)) and not node.args:
            given = self.probe(dotted(node.func))  # current_platform.is_out_of_tree()
            if given is not NO_PROBE:
                return given
        if isinstance(owner, Unknown):
            why = why_call(dotted(node.func))
            return owner if why == WHY_DEFAULT else unknown(f"{dotted(node.func)}()", why)
        if isinstance(owner, Args):
            return self._args_method(owner, name, node, env)
        if isinstance(owner, ModelCfg):
            return self._bound_method(self._model_class(), owner, name, node, env)
        if isinstance(owner, Stated):
            if not node.args and not node.keywords:
                return owner.call(name)
            return unknown(f"{dotted(node.func)}()", f"a method of {owner.label} with arguments; {owner.why}")
        if isinstance(owner, EnumMember) and owner.ref is not None and env.scope.depth < MAX_DEPTH:
            # ForwardMode.EXTEND.is_target_verify(): the enum's own method, read from the source
            method = method_named(owner.ref.node, name)
            if method is None or node.args or node.keywords:
                return unknown(f"{dotted(node.func)}()", "not a method of the enum without arguments")
            return self.invoke(FuncRef(method, owner.ref.module, bound=owner, cls=owner.ref.node), [], {},
                               env.scope.depth + 1)
        if isinstance(owner, (str, list, tuple, dict)) and name in SAFE_METHODS.get(type(owner), ()):
            args, kwargs = self._args(node, env)
            if args is None or any(isinstance(a, Unknown) for a in [*args, *kwargs.values()]):
                return unknown(short(node), "arguments not known")
            try:
                return getattr(owner, name)(*args, **kwargs)
            except Exception:  # noqa: BLE001
                return unknown(short(node), f".{name}() failed on these values")
        if isinstance(owner, Cfg) and name == "get":
            args, _ = self._args(node, env)
            return owner.get(*args) if args and isinstance(args[0], str) else unknown(short(node), "get()")
        if isinstance(owner, (ModuleRef, ClassRef, External)):
            return self.call(self.attr(owner, name, node.func), node, env)
        return unknown(f"{dotted(node.func)}()", f"method of {type(owner).__name__} not evaluated")

    def _args_method(self, owner, name: str, node: ast.Call, env: Env):
        if "model_config" in name:
            return self.model_or_unknown()
        method = self._one_line_method(name)
        if method is not None and not node.args and not node.keywords and env.scope.depth < MAX_DEPTH:
            # `def enable_mamba_extra_buffer(self): return self.mamba_scheduler_strategy == "extra_buffer"`
            return self.invoke(FuncRef(method[0], method[1], bound=owner, cls=method[2]), [], {},
                               env.scope.depth + 1)
        return unknown(f"{dotted(node.func)}()", "a ServerArgs method; not evaluated")

    def _one_line_method(self, name: str):
        """(method, module, class) of a ServerArgs method that only returns an expression of itself,
        after at most a few imports and local assignments (0.5.15 ``_resolved``: import
        ``resolved_view``, return ``resolved_view(self)``; ``use_mla_backend``)."""
        module = self.modules.get("srt/server_args.py")
        cls = module.cls("ServerArgs") if module is not None else None
        method = method_named(cls, name) if cls is not None else None
        if method is None or len(method.args.args) != 1 or method.args.vararg or method.args.kwarg:
            return None
        body = [b for b in method.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
        if not body or len(body) > 4 or not isinstance(body[-1], ast.Return) or body[-1].value is None:
            return None
        if not all(isinstance(b, (ast.Import, ast.ImportFrom, ast.Assign)) for b in body[:-1]):
            return None
        return method, module, cls

    def _bound_method(self, cls: ClassRef | None, owner, name: str, node: ast.Call, env: Env):
        method = method_named(cls.node, name) if cls else None
        if method is None:
            return unknown(f"{dotted(node.func)}()", "method not found in the source")
        return self.call(FuncRef(method, cls.module, bound=owner, cls=cls.node), node, env)

    def call(self, callee, node: ast.Call, env: Env):
        label = f"{dotted(node.func)}()"
        stated = self.stated_call(dotted(node.func)) if getattr(self, "calls", None) else NO_PROBE
        if stated is not NO_PROBE:
            return stated
        if isinstance(callee, (FuncRef, External)):
            args, _ = self._args(node, env)
            name = callee.name if isinstance(callee, FuncRef) else callee.dotted.rsplit(".", 1)[-1]
            special = self._accessor(name, args or [])
            if special is not None:
                return special
            given = self.probe(name) if not args else NO_PROBE
            if given is not NO_PROBE:
                return given
            if not args and PROBE.search(name):  # is_cuda(): the answer is the hardware's, not the code's
                return self._probe_from_source(callee, node, env, label, name)
        if isinstance(callee, Unknown):
            return callee
        if isinstance(callee, FuncRef):
            return self._call_function(callee, node, env, label)
        if isinstance(callee, External):
            args, kwargs = self._args(node, env) if callee.dotted in PURE_CALLS else (None, None)
            found = pure_call(callee.dotted, args, kwargs, label)
            if found is not NOT_PURE:
                return found
            return unknown(label, why_call(callee.dotted))
        if isinstance(callee, ClassRef):
            return unknown(label, "constructs an object; not evaluated")
        return unknown(label, f"{render(callee)} is not callable here")

    def _probe_from_source(self, callee, node: ast.Call, env: Env, label: str, name: str):
        """A hardware probe with no answer given, from its definition in the tree when that decides it.

        sglang 0.5.11 ``is_cpu()`` is ``os.getenv("SGLANG_USE_CPU_ENGINE", "0") == "1" and
        is_host_cpu_supported``: the server's environment decides it when the variable is unset,
        and with the host's machine (a given probe, ``platform.machine``) when it is set. A
        definition that reads the hardware stays unknown, with the reason of a probe.
        """
        if not isinstance(callee, FuncRef) or env.scope.depth >= MAX_DEPTH:
            return unknown(label, why_call(name))
        value, notes = self.collect(lambda: self.invoke(callee, [], {}, env.scope.depth + 1))
        if isinstance(value, Unknown) or not isinstance(value, bool):
            return unknown(label, why_call(name))
        where = f"sglang/{callee.module.path}:{callee.node.lineno}"
        self.note(f"{name}() = {value!r} (its definition, {where}, with " + "; ".join(notes or ["no lookups"]) + ")")
        return value

    def _call_function(self, fn: FuncRef, node: ast.Call, env: Env, label: str):
        args, kwargs = self._args(node, env)
        if args is None:
            return unknown(label, "call with *args/**kwargs")
        if not self._may_interpret(fn, args, kwargs, env):
            return unknown(label, why_call(fn.name))
        if env.scope.depth >= MAX_DEPTH:
            return unknown(label, "calls nested too deep to follow")
        found = self.invoke(fn, args, kwargs, env.scope.depth + 1, env.scope.follow)
        if isinstance(found, Unknown) and found.causes and from_plain([*args, *kwargs.values()]) \
                and not any(isinstance(v, (Cfg, ModelCfg)) for v in [*args, *kwargs.values()]):
            # followed only for its plain arguments: the call the source shows is what is not known, for the
            # first reason inside (`check_gguf_file(): reads files on the server`)
            return unknown(label, found.causes[0][1])
        return found

    def _accessor(self, name: str, args: list):
        """SGLang's accessors over server args: `*_view(args)` reads them, `*model_config*` builds one."""
        if len(args) != 1 or not isinstance(args[0], Args):
            return None
        if name.endswith("_view"):
            return args[0]
        if "model_config" in name:
            return self.model_or_unknown()
        return None

    def _may_interpret(self, fn: FuncRef, args, kwargs, env: Env) -> bool:
        # Follow definitions only where the answer comes from config.json; other calls
        # (hardware, files, network) would need the live server.
        if isinstance(fn.node, ast.Lambda) or env.scope.follow:
            return True
        if fn.name in (getattr(self, "follow_calls", None) or ()):
            return True  # a function the caller says reads only what is stated (resolved config, the args)
        values = [*args, *kwargs.values()]
        return from_plain(values) or any(isinstance(v, (Cfg, ModelCfg)) for v in values)

    def invoke(self, fn: FuncRef, args: list, kwargs: dict, depth: int, follow: bool = True):
        follow = follow if isinstance(fn.node, ast.Lambda) else True
        scope = Scope(fn.module, fn.cls, None, depth, follow)
        base = fn.closure.vars if fn.closure is not None else {}
        env = Env(dict(base), scope)
        bound = self._bind_params(fn, args, kwargs, env)
        if isinstance(bound, Unknown):
            return bound
        if isinstance(fn.node, ast.Lambda):
            return self.ev(fn.node.body, bound)
        out = self.run_block(fn.node.body, bound)
        return self._result(out)

    def _result(self, env: Env):
        ret = env.vars.get(RET)
        done = env.vars.get(DONE)
        if ret is None:
            return None
        if done is None:
            return ret.force(self)
        d = truth(done.force(self))
        if isinstance(d, Unknown):
            value = ret.force(self)
            return value if value is None else d
        return ret.force(self) if d else None

    def _bind_params(self, fn: FuncRef, args: list, kwargs: dict, env: Env):
        spec = fn.node.args
        positional = [*spec.posonlyargs, *spec.args]
        if fn.bound is not None and positional:
            env.scope.self_name = positional[0].arg
            env.vars[positional[0].arg] = const(fn.bound)
            positional = positional[1:]
        defaults = dict(
            zip(
                [a.arg for a in positional][len(positional) - len(spec.defaults) :],
                spec.defaults,
                strict=False,
            )
        )
        defaults.update(
            {a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=False) if d is not None}
        )
        if len(args) > len(positional) and spec.vararg is None:
            return unknown(f"{fn.name}()", "called with too many arguments")
        values = dict(zip([a.arg for a in positional], args, strict=False))
        values.update(kwargs)
        for a in [*positional, *spec.kwonlyargs]:
            if a.arg in values:
                env.vars[a.arg] = const(values[a.arg])
            elif a.arg in defaults:
                env.vars[a.arg] = const(self.ev(defaults[a.arg], Env({}, Scope(fn.module))))
            else:
                return unknown(f"{fn.name}()", f"missing argument {a.arg}")
        return env


MAX_DEPTH = 12


NO_PROBE = object()  # Expressions.probe(): no value was given for this probe


MAX_SEQ = 4096


# Calls whose result only the live process knows; the reason says which kind.
PROBE = re.compile(
    r"(^|\.)(is_(hip|npu|cpu|mps|xpu|cuda|musa|hpu|cuda_alike|blackwell|hopper)\w*|is_sm\d+\w*"
    r"|get_device\w*|\w*platform\w*|\w*_available)"
)


ENV = re.compile(r"(^|\.)(envs?\.|\w*getenv|environ|get_\w*env_var)")


FILES = re.compile(r"(check_\w*file|exists|is_?file|is_?dir|listdir|^open$|Path$|glob|load_\w+|download)")


WHY_DEFAULT = "not evaluated (its result is not in the log)"


def why_call(name: str) -> str:
    if ENV.search(name):
        return "reads an environment variable of the server process, not in the log"
    if PROBE.search(name):
        return "hardware probe, not in the log"
    if FILES.search(name.rsplit(".", 1)[-1]):
        return "reads files on the server, not in the log"
    return WHY_DEFAULT


def other_side(gen, env: Env, ev):
    """In `any(x in OTHER for x in LIST)`, the value of OTHER (for a readable note)."""
    elt = gen.elt
    if isinstance(elt, ast.Compare) and len(elt.ops) == 1 and isinstance(elt.ops[0], ast.In):
        names = {n.id for g in gen.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        if not any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(elt.comparators[0])):
            value = ev.ev(elt.comparators[0], env)
            return None if isinstance(value, Unknown) else value
    return None


def arith(op: str, left, right, node: ast.AST):
    if right is not None and not small_enough(op, left, right):
        return unknown(short(node), "the result would be too large to compute")
    try:
        if right is None:
            value = {"USub": lambda: -left, "UAdd": lambda: +left, "Invert": lambda: ~left}[op]()
        else:
            value = BINOPS[op](left, right)
    except (KeyError, TypeError, ValueError, ArithmeticError, MemoryError):
        return unknown(short(node), "arithmetic not evaluated")
    return value if bounded(value) else unknown(short(node), "the result is too large")


MAX_ITEMS = 100_000


def small_enough(op: str, left, right) -> bool:
    """Refuse operations whose result could be huge (`10 ** 10 ** 9`, `"x" * 10 ** 12`)."""
    if op == "Pow":
        return isinstance(right, (int, float)) and abs(right) <= 256 and not (
            isinstance(left, int) and abs(left) > 2**64)
    if op == "LShift":
        return isinstance(right, int) and right <= 256
    if op == "Mult":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
                return len(seq) * times <= MAX_ITEMS
    return True


def bounded(value) -> bool:
    if isinstance(value, (str, bytes, list, tuple, set, frozenset, dict)) and len(value) > MAX_ITEMS:
        return False
    return not (isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4096)


BINOPS = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mult": lambda a, b: a * b,
    "Div": lambda a, b: a / b,
    "FloorDiv": lambda a, b: a // b,
    "Mod": lambda a, b: a % b if not isinstance(a, str) else no_format(),
    "BitOr": lambda a, b: a | b,
    "BitAnd": lambda a, b: a & b,
    "BitXor": lambda a, b: a ^ b,
    "Pow": lambda a, b: a**b,
    "LShift": lambda a, b: a << b,
    "RShift": lambda a, b: a >> b,
}


def no_format():
    raise TypeError("string formatting is not evaluated")


COMPARE = {
    "Eq": lambda a, b: equal(a, b),
    "NotEq": lambda a, b: not equal(a, b),
    "Lt": lambda a, b: a < b,
    "LtE": lambda a, b: a <= b,
    "Gt": lambda a, b: a > b,
    "GtE": lambda a, b: a >= b,
    "Is": lambda a, b: a is b,
    "IsNot": lambda a, b: a is not b,
}


def equal(a, b) -> bool:
    if isinstance(a, (Cfg, Args, ModelCfg)) or isinstance(b, (Cfg, Args, ModelCfg)):
        return a is b
    return a == b


def bounded_range(*args) -> range:
    """``range`` over integers, refused when it would hold more than MAX_ITEMS."""
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        raise TypeError("range takes integers")
    found = range(*args)
    if len(found) > MAX_ITEMS:
        raise ValueError("the range is too long to evaluate")
    return found


BUILTINS: dict[str, Callable] = {
    "len": len,
    "range": bounded_range,
    "any": any,
    "all": all,
    "bool": bool,
    "hasattr": hasattr,
    "getattr": getattr,
    "callable": callable,
    "isinstance": isinstance,
    "min": min,
    "max": max,
    "str": str,
    "int": int,
    "float": float,
    "list": list,
    "tuple": tuple,
    "set": set,
    "sorted": sorted,
    "abs": abs,
    "frozenset": frozenset,
    "dict": dict,
}


SAFE_METHODS = {
    str: {"startswith", "endswith", "lower", "upper", "strip", "split", "replace", "casefold"},
    list: {"index", "count"},
    tuple: {"index", "count"},
    dict: {"get", "keys", "values", "items"},
}


# Names used without import that we treat as outside objects rather than typos.
EXTERNAL_OK = {"logger", "torch", "os", "envs", "json", "math", "copy"}


TYPES = {
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "set": set,
}


def isinstance_check(value, types: ast.AST, node: ast.AST):
    """isinstance against builtin types; a config is a PretrainedConfig, never a dict; a server argument
    the log prints as a dict (``mm_process_config: {}``) is a dict."""
    if isinstance(value, Unknown):
        return value
    names = [n.id if isinstance(n, ast.Name) else dotted(n) for n in getattr(types, "elts", [types])]
    if isinstance(value, Cfg) and value.label.startswith("server_args."):
        return any(n in ("dict", "Mapping") for n in names)
    if isinstance(value, Cfg):
        return any(n.endswith("Config") for n in names)
    if isinstance(value, (Args, ModelCfg, External, FuncRef, ClassRef, ModuleRef)):
        return unknown(short(node), "isinstance() on a runtime object")
    return any(isinstance(value, TYPES[n]) for n in names if n in TYPES)


def _binds(cls: ast.ClassDef, name: str) -> bool:
    return any(bound == name for stmt in cls.body for bound, _ in bound_names(stmt))


def _reads_environment(node: ast.Call) -> bool:
    name = dotted(node.func)
    return ".get" in name and ("envs." in name or "environ" in name) or name.endswith(("getenv", "get_bool_env_var"))
