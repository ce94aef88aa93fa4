"""Packages that are also the verb they are named after: ``kit.doctor("lab")``, ``kit.bench(url)``.

``kit.doctor`` must be both the package of the doctor (``kit.doctor.rules``, ``kit.doctor.Case``)
and the verb ``kit.doctor(target)``. Python sets a package as an attribute of its parent when
it is imported, so a function of that name on ``kit`` would be replaced by the package the
first time anything imports it. Instead the package itself is made callable: its module
object gets a class whose ``__call__`` is the package's verb function.
"""

from __future__ import annotations

import sys
import types

__all__ = ["make_callable"]


class VerbPackage(types.ModuleType):
    """A package whose call is its verb: ``package(*a, **k)`` is ``package.<verb>(*a, **k)``."""

    __verb__: str

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__verb__)(*args, **kwargs)


def make_callable(module_name: str, verb: str) -> None:
    """Make the module ``module_name`` (already in ``sys.modules``) call its function ``verb`` when called."""
    module = sys.modules[module_name]
    module.__verb__ = verb
    module.__class__ = VerbPackage
