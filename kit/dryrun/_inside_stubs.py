"""Stand-ins for what a machine without a GPU lacks, for the dry-run's process (`_inside.py`).

Loaded by path from `_inside.py`, in the dry-run environment: standard library only.
`install_stand_ins(sglang_dir, names)` answers `import NAME` for each name of
kit/data/dryrun/rules.yaml's `stub`: triton with sglang's own `_triton_stub.py` when the
version ships one (0.5.10 on), else with the kit's; anything else (torchvision) with
modules whose functions say, when called, that they stand in. Then `torch.compile` becomes
a no-op, because sglang decorates functions with it at import.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types

_THIS_FILE = os.path.abspath(__file__)

def _install_triton_stub(sglang_dir: str) -> str:
    if importlib.util.find_spec("triton") is not None:
        return "real triton"
    path = os.path.join(sglang_dir, "_triton_stub.py")
    if not os.path.isfile(path):  # sglang ships one from 0.5.10 on; older ones get the kit's
        sys.meta_path.insert(0, _TritonFinder)
        importlib.import_module("triton")
        return "the kit's triton stand-in"
    spec = importlib.util.spec_from_file_location("_sgl_kit_triton_stub", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()
    return "sglang/_triton_stub.py"


class _TritonModule(types.ModuleType):
    """The kit's triton: any attribute is another such module (or, when capitalised, a class one may
    subclass or build); calling one decorates, returning the function (`@triton.jit`, `@triton.autotune(...)`).
    It is falsy, empty and contains nothing, like sglang's own stub."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            value = sys.modules[full]
        elif name[:1].isupper():
            value = type(name, (), {"__module__": self.__name__, "__init__": _accept_anything})
        else:
            value = _triton_module(full)
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    def __bool__(self):
        return False

    def __contains__(self, item):
        return False

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0


def _accept_anything(self, *args, **kwargs) -> None:
    self.args, self.kwargs = args, kwargs


def _triton_module(name: str) -> _TritonModule:
    module = _TritonModule(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, _TritonFinder, is_package=True)
    module.__loader__ = _TritonFinder
    module.__file__ = _THIS_FILE
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    if name == "triton":
        module.__version__ = "3.0.0"
        module.cdiv = lambda a, b: -(a // -b)
        module.next_power_of_2 = lambda n: 1 << (n - 1).bit_length() if n > 0 else 1
    elif name == "triton.language":
        module.constexpr = type("constexpr", (), {"__init__": lambda self, value=None: setattr(self, "value", value)})
    return module


class _TritonFinder:
    """Finds and loads `triton` and every `triton.x.y` as the kit's stand-in modules."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname == "triton" or fullname.startswith("triton."):
            return importlib.machinery.ModuleSpec(fullname, _TritonFinder, is_package=True)
        return None

    @staticmethod
    def create_module(spec):
        return sys.modules.get(spec.name) or _triton_module(spec.name)

    @staticmethod
    def exec_module(module) -> None:
        pass


class _StandIn:
    """A stood-in package's function: importable, but calling it says what it is."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a dry-run stand-in: its package is not installed (it needs a GPU)")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(f"{self._name}.{name}")


class _StandInClass(type):
    """A stood-in package's class or enum: every member is a distinct, hashable placeholder."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        member = f"{cls.__name__}.{name}"
        setattr(cls, name, member)
        return member


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            value = _StandInClass(name, (), {"__module__": self.__name__})
        else:
            value = _StandIn(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StandInFinder:
    """Answers `import NAME[.x.y]` with stand-in modules, for packages that need a GPU to install or load."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+dryrun.stand.in"
        return module

    def exec_module(self, module) -> None:
        pass


def _install_stand_in(name: str) -> str:
    if importlib.util.find_spec(name) is not None:
        return f"real {name}"
    sys.meta_path.insert(0, _StandInFinder(name))
    return "import-time stub"


def _no_compile(model=None, **_options):
    """torch.compile(fn), @torch.compile and @torch.compile(...) all return the function unchanged."""
    if model is None:
        return lambda fn: fn
    return model


def install_stand_ins(sglang_dir: str, stubs) -> dict:
    """Stand in for the modules named (kit/data/dryrun/rules.yaml `stub`), then make torch.compile a no-op."""
    done = {}
    for name in stubs:
        done[name] = _install_triton_stub(sglang_dir) if name == "triton" else _install_stand_in(name)
    import torch

    torch.compile = _no_compile
    return {**done, "torch.compile": "no-op"}
