"""Statements, run lazily: every assignment becomes a memoized thunk and every `if` a gated
choice, so only what a question asks for is ever computed."""

from __future__ import annotations

import ast

from .expressions import MAX_DEPTH, MAX_SEQ, Expressions
from .modules import method_named, param_default, param_names
from .scope import DONE, RET, Env, Scope, Thunk, const, default_for
from .values import Args, Cfg, FuncRef, Unknown, same, truth, unknown


class Statements(Expressions):
    """Statements, run lazily: every assignment a thunk, every `if` a gated choice."""

    # ---- statements (lazy)

    def run_block(self, stmts: list[ast.stmt], env: Env) -> Env:
        """The environment after `stmts`: each name maps to a thunk, gated on earlier returns."""
        for stmt in stmts:
            done = env.vars.get(DONE)
            if done is not None and done.state == 2 and done.value is True:
                break
            after = self.step(stmt, env)
            env = after if done is None else self._gate_done(done, env, after)
        return env

    def _gate_done(self, done: Thunk, before: Env, after: Env) -> Env:
        changed = {k: t for k, t in after.vars.items() if before.vars.get(k) is not t}
        merged = dict(before.vars)
        for key, thunk in changed.items():
            old = before.vars.get(key) or self._prior(key, before)
            merged[key] = self.choose(done, old, thunk, self._logged(key, before))
        return Env(merged, after.scope)

    def choose(self, test: Thunk, if_true: Thunk, if_false: Thunk, logged: str | None = None) -> Thunk:
        """Pick a branch's value; when the test is unknown, a field the log shows wins."""

        def pick():
            t = truth(test.force(self))
            if isinstance(t, Unknown):
                a, b = if_true.force(self), if_false.force(self)
                if same(a, b):
                    return a
                if logged is not None:
                    where = f" (line {test.line})" if test.line else ""
                    self.note(f"{logged} is set conditionally{where}, so its value from the log is used")
                    return self.args.get(logged)
                return t
            return (if_true if t else if_false).force(self)

        return Thunk(pick, if_true.line or if_false.line)

    def _prior(self, key: str, env: Env) -> Thunk:
        """The value of `key` before a branch that may set it: `self.x` reads the object itself."""
        base, _, name = key.partition(".")
        if name and base in env.vars:
            holder = env.vars[base]
            return self.lazy(lambda: self.attr(holder.force(self), name))
        return const(default_for(key))

    def _logged(self, key: str, env: Env) -> str | None:
        """The server-args field behind `self.X` when the log has it (and it is not the flag itself)."""
        base, _, name = key.partition(".")
        holder = env.vars.get(base) if name and "." not in name else None
        if holder is None or holder.state != 2 or not isinstance(holder.value, Args):
            return None
        return name if name in self.args.values and name not in self.shadowed else None

    def step(self, stmt: ast.stmt, env: Env) -> Env:
        handler = getattr(self, "_st_" + type(stmt).__name__, None)
        return handler(stmt, env) if handler else env

    def _st_Assign(self, stmt: ast.Assign, env: Env) -> Env:
        value = self.lazy(lambda: self.ev(stmt.value, env), stmt.lineno)
        out = Env(dict(env.vars), env.scope)
        for target in stmt.targets:
            self._assign(target, value, out, stmt.lineno)
        return out

    def _st_AnnAssign(self, stmt: ast.AnnAssign, env: Env) -> Env:
        if stmt.value is None:
            return env
        value = self.lazy(lambda: self.ev(stmt.value, env), stmt.lineno)
        out = Env(dict(env.vars), env.scope)
        self._assign(stmt.target, value, out, stmt.lineno)
        return out

    def _st_AugAssign(self, stmt: ast.AugAssign, env: Env) -> Env:
        out = Env(dict(env.vars), env.scope)
        fake = ast.BinOp(left=as_load(stmt.target), op=stmt.op, right=stmt.value)
        ast.copy_location(fake, stmt)
        self._assign(stmt.target, self.lazy(lambda: self.ev(fake, env), stmt.lineno), out, stmt.lineno)
        return out

    def _assign(self, target: ast.AST, value: Thunk, out: Env, line: int) -> None:
        key = target_key(target, out.scope)
        if key is not None:
            if not (key.endswith(".hf_config") and is_model_config(out.scope)):  # config.json is given
                out.vars[key] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            for i, sub in enumerate(target.elts):
                self._assign(sub, self.lazy(lambda i=i: item_of(value.force(self), i), line), out, line)

    def _st_If(self, stmt: ast.If, env: Env) -> Env:
        test = self.lazy(lambda: self.ev(stmt.test, env), stmt.lineno)
        body = self.run_block(stmt.body, env)
        other = self.run_block(stmt.orelse, env)
        return self.merge(test, env, body, other)

    def merge(self, test: Thunk, env: Env, body: Env, other: Env) -> Env:
        keys = {k for k, t in body.vars.items() if env.vars.get(k) is not t}
        keys |= {k for k, t in other.vars.items() if env.vars.get(k) is not t}
        out = dict(env.vars)
        for key in keys:
            fallback = env.vars.get(key) or self._prior(key, env)
            out[key] = self.choose(
                test, body.vars.get(key, fallback), other.vars.get(key, fallback), self._logged(key, env)
            )
        return Env(out, env.scope)

    def _st_Return(self, stmt: ast.Return, env: Env) -> Env:
        value = self.lazy(lambda: self.ev(stmt.value, env) if stmt.value else None, stmt.lineno)
        return env.with_vars(**{RET: value, DONE: const(True)})

    def _st_Raise(self, stmt: ast.Raise, env: Env) -> Env:
        return env.with_vars(
            **{RET: const(unknown("raise", f"raises at line {stmt.lineno}")), DONE: const(True)}
        )

    def _st_With(self, stmt: ast.With, env: Env) -> Env:
        return self.run_block(stmt.body, env)

    def _st_Try(self, stmt: ast.Try, env: Env) -> Env:
        # The normal path: no exception. A handler's assignments are ignored.
        return self.run_block([*stmt.body, *stmt.orelse], env)

    def _st_For(self, stmt: ast.stmt, env: Env) -> Env:
        """A `for` over a known, short sequence is unrolled (lazily); other loops poison what they set."""
        keys = {k for s in stmt.body + stmt.orelse for k in assigned_keys(s, env.scope)}
        if isinstance(stmt, ast.For):
            keys |= set(assigned_keys(ast.Assign(targets=[stmt.target], value=stmt.iter), env.scope))
        if any(isinstance(n, ast.Return) for s in stmt.body for n in ast.walk(s)):
            keys |= {RET, DONE}
        unrolled = self.lazy(lambda: self._unroll(stmt, env), stmt.lineno)

        def read(key: str):
            out = unrolled.force(self)
            if isinstance(out, Unknown):
                return out
            thunk = out.vars.get(key) or env.vars.get(key)
            return thunk.force(self) if thunk is not None else default_for(key)

        return env.with_vars(**{k: self.lazy(lambda k=k: read(k), stmt.lineno) for k in keys})

    def _unroll(self, stmt: ast.stmt, env: Env):
        why = unknown(f"loop at line {stmt.lineno}", "assigned inside a loop; not followed")
        if not isinstance(stmt, ast.For) or has_jump(stmt.body):
            return why
        items = self.ev(stmt.iter, env)
        if isinstance(items, Cfg):
            items = list(items.data)
        if not isinstance(items, (list, tuple, set, dict, str)) or len(items) > MAX_SEQ:
            return items if isinstance(items, Unknown) else why
        for item in items:
            bound = self._bind(stmt.target, item, env)
            if isinstance(bound, Unknown):
                return bound
            env = self.run_block(stmt.body, bound)
        return self.run_block(stmt.orelse, env)

    _st_While = _st_For
    _st_AsyncFor = _st_For

    def _st_FunctionDef(self, stmt: ast.FunctionDef, env: Env) -> Env:
        return env.with_vars(**{stmt.name: const(FuncRef(stmt, env.scope.module, env, cls=env.scope.cls))})

    def _st_ImportFrom(self, stmt: ast.ImportFrom, env: Env) -> Env:
        out = env.with_vars()
        for alias in stmt.names:
            if alias.name != "*":
                name = alias.asname or alias.name
                out.vars[name] = self.lazy(
                    lambda a=alias: self._imported(env.scope.module, stmt, a.name), stmt.lineno
                )
        return out

    def _st_Expr(self, stmt: ast.Expr, env: Env) -> Env:
        """`self._derive_x(...)`: run the method so the attributes it sets are visible."""
        call = stmt.value
        scope = env.scope
        mutated = mutated_local(call, env)
        if mutated is not None:
            return env.with_vars(**{mutated: self.lazy(lambda: self._mutate(call, env), stmt.lineno)})
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == scope.self_name
            and scope.cls is not None
            and scope.depth < MAX_DEPTH
        ):
            return env
        method = method_named(scope.cls, call.func.attr)
        if method is None:
            return env
        return self._run_method(method, call, env)

    def _mutate(self, call: ast.Call, env: Env):
        """`items.append(x)` and friends on a local, as a new value; other mutations make it unknown."""
        name, method = call.func.value.id, call.func.attr
        old = env.vars[name].force(self)
        if not isinstance(old, (list, set, dict)):
            return old  # a config object: attributes set at runtime are not modelled
        args = [self.ev(a, env) for a in call.args]
        if len(args) == 1 and not isinstance(args[0], Unknown):
            if method == "append" and isinstance(old, list):
                return [*old, args[0]]
            if method == "extend" and isinstance(old, list) and isinstance(args[0], (list, tuple)):
                return [*old, *args[0]]
            if method == "add" and isinstance(old, set):
                return old | {args[0]}
        return unknown(name, f"changed by .{method}() at line {call.lineno}")

    def _run_method(self, method: ast.FunctionDef, call: ast.Call, env: Env) -> Env:
        scope = env.scope
        inner = Env(
            {k: t for k, t in env.vars.items() if k.startswith(scope.self_name + ".")},
            Scope(scope.module, scope.cls, None, scope.depth + 1, scope.follow),
        )
        params = param_names(method)
        if not params:
            return env
        inner.scope.self_name = params[0]
        inner.vars = {params[0] + k[len(scope.self_name) :]: t for k, t in inner.vars.items()}
        inner.vars[params[0]] = env.vars.get(scope.self_name, const(unknown("self", "unbound")))
        for i, name in enumerate(params[1:]):
            inner.vars[name] = self._arg_thunk(call, i, name, method, env)
        out = self.run_block(method.body, inner)
        prefix = params[0] + "."
        updates = {
            scope.self_name + k[len(params[0]) :]: t
            for k, t in out.vars.items()
            if k.startswith(prefix) and inner.vars.get(k) is not t
        }
        return env.with_vars(**updates)

    def _arg_thunk(self, call: ast.Call, index: int, name: str, method: ast.FunctionDef, env: Env) -> Thunk:
        node = call.args[index] if index < len(call.args) else None
        node = node or next((kw.value for kw in call.keywords if kw.arg == name), None)
        if node is None:
            default = param_default(method, name)
            if default is None:
                return const(unknown(name, "parameter not passed"))
            return self.lazy(lambda: self.ev(default, Env({}, Scope(env.scope.module))))
        return self.lazy(lambda: self.ev(node, env))


def is_model_config(scope: Scope) -> bool:
    return scope.cls is not None and scope.cls.name == "ModelConfig"






def target_key(target: ast.AST, scope: Scope) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == scope.self_name
    ):
        return f"{target.value.id}.{target.attr}"
    return None


MUTATORS = {"append", "extend", "insert", "add", "update", "pop", "remove", "clear", "discard", "setdefault"}


def mutated_local(call, env: Env) -> str | None:
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in MUTATORS
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in env.vars
        and call.func.value.id != env.scope.self_name
    ):
        return call.func.value.id
    return None


def has_jump(body: list[ast.stmt]) -> bool:
    """break/continue of this loop (not of a loop nested in it)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.Lambda)):
            todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
    return False


def assigned_keys(stmt: ast.stmt, scope: Scope):
    for node in ast.walk(stmt):
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in MUTATORS
            and target_key(call.func.value, scope) is not None
        ):
            yield target_key(call.func.value, scope)  # `xs.append(...)`, `self.layers.append(...)`
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    key = target_key(sub, scope)
                    if key is not None and isinstance(getattr(sub, "ctx", None), ast.Store):
                        yield key


def item_of(value, index: int):
    if isinstance(value, Unknown):
        return value
    try:
        return value[index]
    except (TypeError, IndexError, KeyError):
        return unknown(f"item {index}", "cannot unpack")


def as_load(target: ast.AST) -> ast.AST:
    clone = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(clone, target)
