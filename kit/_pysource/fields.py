"""The fields a (data)class declares, read from its source: annotated names, inherited first."""

from __future__ import annotations

import ast

from .modules import ModuleInfo, Modules, dotted

__all__ = ["built_attribute", "class_fields"]


def class_fields(modules: Modules, module: ModuleInfo, cls: ast.ClassDef,
                 depth: int = 0) -> list[tuple[ModuleInfo, ast.AnnAssign]]:
    """``NAME: TYPE [= DEFAULT]`` lines of a class and of its bases in the tree, in dataclass order.

    A base's fields come first and a subclass redefining one keeps the subclass's line, as
    ``dataclasses`` orders them. ``ClassVar`` annotations are not fields.
    """
    inherited: list[tuple[ModuleInfo, ast.AnnAssign]] = []
    for base in cls.bases:
        found = modules.class_of(module, dotted(base) if isinstance(base, (ast.Name, ast.Attribute)) else "")
        if found is not None and depth < 8:
            inherited += class_fields(modules, *found, depth + 1)
    own = [
        (module, n)
        for n in cls.body
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and "ClassVar" not in (module.segment(n.annotation) or "")
    ]
    names = {n.target.id for _, n in own}
    return [f for f in inherited if f[1].target.id not in names] + own


def built_attribute(ev, module: ModuleInfo, expr: ast.expr, path: list[str], function: ast.AST | None = None,
                    depth: int = 0):
    """The value of ``<expr>.<path>`` for an object built from its defaults, read without running it.

    ``config = default_cuda_graph_config()`` then ``config.prefill.backend``: follows a local of
    ``function``, a function of the tree with one ``return``, a constructor's keywords, and the
    class's field defaults (``default=``, ``default_factory=lambda: ...``); the last step is
    left to the evaluator ``ev`` (which answers hardware probes it was given). Unknown otherwise.
    """
    from .scope import Env, Scope
    from .values import ClassRef, FuncRef, unknown

    subject = f"{ast.unparse(expr)}.{'.'.join(path)}" if path else ast.unparse(expr)
    if depth > 12:
        return unknown(subject, "built through too many steps to follow")
    if not path:
        return ev.ev(expr, Env({}, Scope(module, follow=True)))
    if isinstance(expr, ast.Name) and function is not None:
        found = [n for n in ast.walk(function) if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == expr.id]
        if len(found) == 1:
            return built_attribute(ev, module, found[0].value, path, None, depth + 1)
        return unknown(subject, f"{expr.id} is not assigned once in the function")
    call = expr if isinstance(expr, ast.Call) else None
    callee = ev.ev((call.func if call is not None else expr), Env({}, Scope(module)))
    if isinstance(callee, ClassRef):
        keyword = next((k for k in (call.keywords if call is not None else []) if k.arg == path[0]), None)
        if keyword is not None:
            return built_attribute(ev, module, keyword.value, path[1:], None, depth + 1)
        declared = next((n for m, n in class_fields(ev.modules, callee.module, callee.node)
                         if n.target.id == path[0]), None)
        if declared is None or declared.value is None:
            return unknown(subject, f"{callee.node.name}.{path[0]} has no default in the source")
        return built_attribute(ev, callee.module, _field_default_expr(declared.value), path[1:], None, depth + 1)
    if isinstance(callee, FuncRef) and isinstance(callee.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        returns = [n for n in ast.walk(callee.node) if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) == 1:
            return built_attribute(ev, callee.module, returns[0].value, path, callee.node, depth + 1)
    return unknown(subject, "built by code the kit does not follow")


def _field_default_expr(value: ast.expr) -> ast.expr:
    """X of ``field(default=X)``, ``field(default_factory=lambda: X)``, ``field(default_factory=C)`` (as
    ``C()``), or the plain default itself."""
    if isinstance(value, ast.Call) and dotted(value.func).rsplit(".", 1)[-1] == "field":
        kw = {k.arg: k.value for k in value.keywords if k.arg}
        if "default" in kw:
            return kw["default"]
        factory = kw.get("default_factory")
        if isinstance(factory, ast.Lambda):
            return factory.body
        if factory is not None:
            return ast.copy_location(ast.Call(func=factory, args=[], keywords=[]), factory)
    return value
