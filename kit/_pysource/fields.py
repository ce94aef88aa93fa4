"""The fields a (data)class declares, read from its source: annotated names, inherited first."""

from __future__ import annotations

import ast

from .modules import ModuleInfo, Modules, dotted

__all__ = ["class_fields"]


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
