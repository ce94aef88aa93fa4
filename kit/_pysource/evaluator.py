"""The Evaluator: names across modules, field defaults, following ModelConfig, and constants.

Guards are evaluated directly. Model-config properties (``ModelConfig.is_multimodal``)
are followed into ``ModelConfig.__init__``, run lazily, which is what lets the kit follow
``is_multimodal`` through ``get_hf_text_config`` and ``multimodal_model_archs`` without
importing transformers or hard-coding a list of architectures.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from .environment import Environment
from .expressions import EXTERNAL_OK
from .modules import (
    ModuleInfo,
    Modules,
    bound_names,
    constructor_return,
    method_named,
    param_default,
    param_names,
)
from .scope import Env, Scope, Thunk, const
from .statements import Statements
from .values import (
    Args,
    Cfg,
    ClassRef,
    EnumMember,
    External,
    FuncRef,
    ModelCfg,
    ModuleRef,
    OriginList,
    Unknown,
    render,
    unknown,
    wrap,
)


class Evaluator(Statements):
    """Evaluates expressions of the tree against server args and a model's config.json.

    ``values`` are the server args the log printed; ``defaults`` the declared field
    defaults (kit.server_args.defaults: each with ``known``, ``value`` and ``source``),
    used for a field the log does not have; ``shadowed`` names fields whose logged value
    must not be used (the flag being explained: the log has only its final value);
    ``initial`` gives such a field's value at launch, ``{name: (value, how)}``, when the
    launch command is known; ``environ`` is the server's environment, for ``envs.X.get()``;
    ``probes`` answers hardware probes by name (``{"is_cuda": True}``) when the caller knows the GPU;
    ``calls`` states what other calls return (``{"dist.get_world_size": (2, "tp_size")}``) and
    ``follow_calls`` names functions of the tree to interpret although no config.json reaches them.
    """

    def __init__(
        self,
        modules: Modules,
        values: Mapping | None = None,
        model_config: Mapping | None = None,
        shadowed: set[str] = frozenset(),
        defaults: Mapping | None = None,
        environ: Environment | None = None,
        initial: Mapping | None = None,
        parameters: Mapping | None = None,
        probes: Mapping | None = None,
        calls: Mapping | None = None,
        follow_calls=(),
    ) -> None:
        self.modules = modules
        # Answers to hardware probes the caller knows ({"is_cuda": True}); the others stay unknown.
        self.probes = dict(probes or {})
        # What calls return, as the caller states it: {"get_global_server_args": (value, how)}.
        self.calls = dict(calls or {})
        # Functions of the tree to interpret although no config.json reaches them (they read stated values).
        self.follow_calls = frozenset(follow_calls or ())
        # Values of named function parameters, for a caller that knows them (model_arch="Qwen3_5...").
        self.parameters = dict(parameters or {})
        self.registry: dict[int, Cfg] = {}
        self.args = Args(self, values or {})
        self.config = wrap(dict(model_config), "config.json", self.registry) if model_config else None
        self.model = ModelCfg(self)
        self.shadowed = set(shadowed)
        self.notes: list[list[str]] = [[]]
        self._model_state: Env | None = None
        self.defaults = defaults
        self.environ = environ
        # Values at launch (the command line and its defaults) of shadowed fields, with how each is known.
        self.initial = dict(initial or {})
        self._global_memo: dict[tuple[str, str], object] = {}
        self.scratch: dict[str, object] = {}  # per-evaluation caches of the layers above (provenance's walks)

    # ---- notes

    def note(self, *texts: str) -> None:
        self.notes[-1].extend(texts)

    def collect(self, fn: Callable[[], object]) -> tuple[object, list[str]]:
        """Run fn, returning its value and the lookups it made (deduplicated, in order)."""
        self.notes.append([])
        try:
            value = fn()
        finally:
            notes = self.notes.pop()
        return value, list(dict.fromkeys(notes))

    # ---- entry points

    def lazy(self, fn: Callable[[], object], line: int | None = None) -> Thunk:
        return Thunk(fn, line)

    def initial_env(self, module: ModuleInfo, func: ast.AST, cls: ast.ClassDef | None) -> Env:
        """The function's parameters: the first one is the server args when it looks like them."""
        params = param_names(func)
        env = Env({}, Scope(module, cls, params[0] if cls is not None and params else None))
        for i, name in enumerate(params):
            env.vars[name] = const(self._param_value(name, i, cls, _annotation(func, name)))
        return env

    def _param_value(self, name: str, index: int, cls: ast.ClassDef | None, annotation: str = ""):
        if name in self.parameters:
            return self.parameters[name]
        if (
            "server_args" in name
            or annotation.strip("'\"") == "ServerArgs"  # def auto_choose_speculative_params(self: ServerArgs)
            or (index == 0 and cls is not None and name == "self" and "Args" in cls.name)
            or (index == 0 and cls is None and name in ("args", "cfg", "view"))  # a resolution pass takes a view
        ):
            return self.args
        return unknown(name, "is a parameter; its value at the call is not known")


    # ---- names across modules

    def global_value(self, module: ModuleInfo, name: str):
        key = (module.path, name)
        if key not in self._global_memo:
            self._global_memo[key] = unknown(name, "depends on itself (cycle)")
            self._global_memo[key] = self._global_value(module, name)
        return self._global_memo[key]

    def _global_value(self, module: ModuleInfo, name: str):
        node = module.bindings.get(name)
        if node is None:
            star = self._from_star(module, name)
            if star is not None:
                return star
            return External(name) if name in EXTERNAL_OK else unknown(name, "not defined in the source")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return FuncRef(node, module)
        if isinstance(node, ast.ClassDef):
            return ClassRef(node, module)
        if isinstance(node, ast.ImportFrom):
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            return self._imported(module, node, alias.name)
        if isinstance(node, ast.Import):
            return self._imported_module(node, name)
        value = self.ev(node.value, Env({}, Scope(module)))
        if isinstance(value, (list, tuple)) and not isinstance(value, OriginList):
            value = OriginList(value, name, module.where(node))
            for line, when in module.growth.get(name, ()):
                self.note(f"{name} is extended at import{when} ({module.display}:{line})")
        return value

    def _from_star(self, module: ModuleInfo, name: str):
        for stmt in module.tree.body:
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                target = self.modules.find(self.modules.resolve_from(module, stmt))
                if target is not None and (name in target.bindings):
                    return self.global_value(target, name)
        return None

    def _imported(self, module: ModuleInfo, node: ast.ImportFrom, name: str):
        source = self.modules.resolve_from(module, node)
        target = self.modules.find(source)
        if target is None:
            sub = self.modules.find(f"{source}.{name}")
            return ModuleRef(sub) if sub is not None else External(f"{source}.{name}")
        return self.global_value(target, name)

    def _imported_module(self, node: ast.Import, name: str):
        for alias in node.names:
            if (alias.asname or alias.name).split(".")[0] == name:
                target = self.modules.find(alias.name)
                return ModuleRef(target) if target is not None and alias.asname else External(name)
        return External(name)

    def class_attr(self, ref: ClassRef, name: str):
        for stmt in ref.node.body:
            for bound, node in bound_names(stmt):
                if bound == name:
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_auto(node.value) and _is_enum(ref.node):
                        return EnumMember(ref.node.name, name, ref)
                    if isinstance(node, (ast.Assign, ast.AnnAssign)):
                        return self.ev(node.value, Env({}, Scope(ref.module, ref.node, class_body=True)))
                    if isinstance(node, ast.FunctionDef):
                        classmethod_ = any(isinstance(d, ast.Name) and d.id == "classmethod" for d in node.decorator_list)
                        return FuncRef(node, ref.module, bound=ref if classmethod_ else None, cls=ref.node)
        return unknown(f"{ref.node.name}.{name}", "not defined in the class body")

    # ---- server-args defaults

    def default_of(self, name: str):
        """A field's declared default, for a field the snapshot does not have."""
        found = self.defaults.get(name) if self.defaults is not None else None
        if found is None:
            return unknown(name, "not in the snapshot")
        if not found.known:
            return unknown(name, "not in the snapshot (its default is computed)")
        where = f"{self.modules.package}/{found.source}"
        self.note(f"{name} is not in the snapshot: its default {found.value!r} is used ({where})")
        return found.value

    # ---- ModelConfig

    def model_or_unknown(self):
        if self.config is None:
            return unknown("the model's config.json", "not given (pass model_config=)")
        return self.model

    def _model_class(self) -> ClassRef | None:
        module = self.modules.get("srt/configs/model_config.py")
        cls = module.cls("ModelConfig") if module else None
        return ClassRef(cls, module) if cls else None

    def model_attr(self, name: str):
        if name == "hf_config":
            return self.config
        state = self._state()
        if isinstance(state, Unknown):
            return state
        thunk = state.vars.get(f"self.{name}")
        if thunk is None:
            return unknown(f"ModelConfig.{name}", "not set in ModelConfig.__init__ as read")
        value = thunk.force(self)
        if not isinstance(value, Unknown):
            where = state.scope.module.where(thunk.line) if thunk.line else state.scope.module.display
            self.note(f"ModelConfig.{name} = {render(value)} ({where})")
        return value

    def _state(self):
        if self._model_state is None:
            ref = self._model_class()
            if ref is None:
                return unknown("ModelConfig", "class not found in srt/configs/model_config.py")
            self._model_state = self._build_model_state(ref)
        return self._model_state

    def _build_model_state(self, ref: ClassRef) -> Env:
        init = method_named(ref.node, "__init__")
        scope = Scope(ref.module, ref.node, "self", 1, True)
        env = Env({"self": const(self.model), "self.hf_config": const(self.config)}, scope)
        passed = self._from_server_args(ref)
        for name in param_names(init)[1:]:
            if name in passed:
                env.vars[name] = passed[name]
            else:
                default = param_default(init, name)
                value = self.ev(default, Env({}, Scope(ref.module))) if default is not None else None
                env.vars[name] = const(value if default is not None else self.args.get(name))
        return self.run_block(init.body, env)

    def _from_server_args(self, ref: ClassRef) -> dict[str, Thunk]:
        """ModelConfig's keyword arguments as `from_server_args` fills them from the server args."""
        factory = method_named(ref.node, "from_server_args")
        if factory is None:
            return {}
        found = constructor_return(factory, ref.node.name)
        if found is None:
            return {}
        index, call = found
        params = param_names(factory)
        env = Env({params[0]: const(self.args)} if params else {}, Scope(ref.module, None, None, 1, True))
        for p in params[1:]:
            default = param_default(factory, p)
            env.vars[p] = const(self.ev(default, Env({}, Scope(ref.module))) if default is not None else None)
        # We are computing the path that reaches `return ModelConfig(...)`: earlier exits did not happen.
        straight = [
            s for s in factory.body[:index] if not any(isinstance(n, ast.Return) for n in ast.walk(s))
        ]
        env = self.run_block(straight, env)
        return {kw.arg: self.lazy(lambda v=kw.value: self.ev(v, env)) for kw in call.keywords if kw.arg}


# --------------------------------------------------------------------------- constants


def _is_auto(value: ast.AST | None) -> bool:
    return isinstance(value, ast.Call) and not value.args and (
        (isinstance(value.func, ast.Name) and value.func.id == "auto")
        or (isinstance(value.func, ast.Attribute) and value.func.attr == "auto"))


def _is_enum(cls: ast.ClassDef) -> bool:
    names = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in cls.bases]
    return any(n in ("Enum", "IntEnum", "StrEnum", "IntFlag", "Flag") for n in names)


def _annotation(func: ast.AST, name: str) -> str:
    args = getattr(func, "args", None)
    for arg in (args.posonlyargs + args.args + args.kwonlyargs) if args is not None else ():
        if arg.arg == name and arg.annotation is not None:
            return ast.unparse(arg.annotation)
    return ""


class NotConstant(Exception):
    """The expression's value cannot be known from the source alone (internal to the callers)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def constant(modules: Modules, node: ast.AST, module: ModuleInfo, cls: ast.ClassDef | None = None,
             evaluator: Evaluator | None = None):
    """The value of a constant expression: literals, arithmetic, module and class constants
    (following imports inside the tree), pure builtins such as ``list()``, and the body of a
    lambda without parameters. Raises NotConstant for anything else.

    Values come back as plain Python data: a tuple stays a tuple, a list a list.
    """
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    ev = evaluator or Evaluator(modules)
    env = Env({}, Scope(module, cls, class_body=cls is not None))
    value = ev.ev(node.body if isinstance(node, ast.Lambda) and not _has_params(node) else node, env)
    return plain_constant(value)


def constant_named(modules: Modules, module: ModuleInfo, name: str, evaluator: Evaluator | None = None):
    """The value of a module-level name, following imports inside the tree; NotConstant otherwise."""
    return plain_constant((evaluator or Evaluator(modules)).global_value(module, name))


def plain_constant(value, depth: int = 0):
    """``value`` as plain data, or NotConstant when it holds anything the evaluator only stands for."""
    if isinstance(value, Unknown):
        raise NotConstant(value.reason)
    if depth > 8:
        raise NotConstant("nested too deep")
    if isinstance(value, OriginList):
        return value.original_type(plain_constant(v, depth + 1) for v in value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(plain_constant(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return {plain_constant(k, depth + 1): plain_constant(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return value
    raise NotConstant(f"{render(value)} is not a constant")


def _has_params(node: ast.Lambda) -> bool:
    a = node.args
    return bool(a.posonlyargs or a.args or a.vararg or a.kwonlyargs or a.kwarg)
