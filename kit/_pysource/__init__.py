"""The one static model of Python source, shared by server_args and provenance.

It never runs the code it reads: it parses files of a tree once (``modules.py``),
finds the fields a class declares (``fields.py``), and evaluates expressions and
statements with a small safe interpreter (``values.py``, ``scope.py``,
``expressions.py``, ``statements.py``, ``evaluator.py``). What it cannot know without
the live process (a hardware probe, a file on the server, an environment variable)
becomes ``Unknown`` with a reason an engineer can act on.

- ``modules_for(tree)``: the parse cache of one tree (``freeze_parsed()``: a short-lived process
  keeps parsed trees out of the cyclic garbage collector's walks);
- ``class_fields(...)``: dataclass fields, inherited ones first;
- ``Evaluator``: guards against server args, defaults and config.json;
- ``constant(...)``: the value of a constant expression, or NotConstant;
- ``index_of(modules)``: the persistent index of a tree (``index.py``), facts kept between runs;
  with it, a module's functions are parsed when first looked into (``skeleton.py``, ``is_deferred``).
"""

from .environment import Environment
from .evaluator import Evaluator, NotConstant, constant, constant_named, plain_constant
from .fields import built_attribute, class_fields
from .index import MISSING, SourceIndex, index_of
from .modules import ModuleInfo, Modules, dotted, freeze_parsed, modules_for, param_names
from .scope import Env, Scope, Thunk, const
from .skeleton import is_deferred
from .values import Members, Partial, Unknown, has_unknown, render, truth, unknown

__all__ = [
    "Env",
    "Environment",
    "Evaluator",
    "MISSING",
    "Members",
    "ModuleInfo",
    "Modules",
    "NotConstant",
    "Partial",
    "Scope",
    "SourceIndex",
    "Thunk",
    "Unknown",
    "built_attribute",
    "class_fields",
    "const",
    "constant",
    "constant_named",
    "dotted",
    "freeze_parsed",
    "has_unknown",
    "index_of",
    "is_deferred",
    "modules_for",
    "param_names",
    "plain_constant",
    "render",
    "truth",
    "unknown",
]
