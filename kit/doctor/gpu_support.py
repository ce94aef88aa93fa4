"""Which quantization kernels each GPU architecture runs, per sglang release, read from that release's
source where it decides (kit/data/gpu_support.json, rebuilt by ``python -m kit.doctor.gpu_support --write``):

- the registry of ``--quantization`` methods (``QUANTIZATION_METHODS`` of srt/layers/quantization), each
  method's class and the compute capability its ``get_min_capability()`` returns;
- the check that refuses a method below that capability at load (``capability < quant_config.
  get_min_capability()``, srt/model_loader/loader.py);
- FP8 on GPUs without FP8 tensor cores: the SM range where sglang runs FP8 checkpoints through the Marlin
  weight-only kernel (``can_auto_enable_marlin_fp8``), or the assignment of ``use_marlin`` where it decides.

- the attention backend sglang picks by default on each architecture, for a dense (MHA) and an MLA model
  launched with no other flag: from a dry-run of the release's own code where its environment is set up
  (``sgl-kit dryrun setup --sglang V``), with the line that chose it and what sglang logged; for the other
  releases, the defaults its source can assign (``attention_backend = "..."``), not decided per GPU.

A release whose quantization comes from vllm (0.3 to 0.4.x import vllm's configs) says so: its capability
numbers live in vllm's source, not sglang's, and the table does not guess them.

    python -m kit.doctor.gpu_support                # the table: methods by release, SM each needs
    python -m kit.doctor.gpu_support --write        # mine the releases again (one per patch series)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

from kit._text import short_path

__all__ = ["ARCH_GPUS", "DATA", "MODELS", "attention_default", "gpu_lines", "main", "mine", "runs_on", "support"]

DATA = Path(__file__).resolve().parent.parent / "data" / "gpu_support.json"
_REGISTRY = "srt/layers/quantization/__init__.py"


def _parse(tree, path: str) -> ast.Module | None:
    """One file of the release, parsed once per tree by the kit's one source model (kit._pysource); None when
    the release has no such file."""
    from kit._pysource import modules_for
    from kit.errors import KitError

    try:
        found = modules_for(tree).get(path)
    except (KitError, OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return found.tree if found is not None else None


def _imports(module: ast.Module, path: str = "") -> dict[str, str]:
    """name -> the module it is imported from (dotted, ``sglang.`` first), anywhere in the file (try/if
    blocks included); a relative import is made absolute from ``path``."""
    out = {}
    package = ["sglang"] + path.split("/")[:-1]
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and (node.module or node.level):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                dotted = ".".join(base + ([node.module] if node.module else []))
            else:
                dotted = node.module
            for alias in node.names:
                out[alias.asname or alias.name] = dotted
    return out


def _registry(module: ast.Module) -> dict[str, tuple[str, int]]:
    """method -> (class name, line) from every ``*QUANTIZATION_METHODS`` dict of the GPU registry (not the
    CPU/NPU ones) and its ``.update({...})`` calls."""
    out: dict[str, tuple[str, int]] = {}

    def take(d: ast.Dict) -> None:
        for k, v in zip(d.keys, d.values, strict=False):
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Name):
                out.setdefault(k.value, (v.id, k.lineno))

    def wanted(name: str) -> bool:
        return name.endswith("QUANTIZATION_METHODS") and not re.match(r"(CPU|NPU|MUSA|XPU|HPU)_", name)

    for node in ast.walk(module):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and wanted(target.id) and isinstance(node.value, ast.Dict):
            take(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Name) and wanted(node.func.value.id):
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    take(arg)
    return out


def _module_path(dotted: str) -> str | None:
    return short_path(dotted.replace(".", "/")) if dotted.startswith("sglang.") else None


def _class(tree, path: str, name: str, depth: int = 0):
    """(module ast, path, ClassDef) of ``name`` as defined in ``path`` (a module, or a package's
    __init__) or imported there from sglang."""
    if depth > 4:
        return None
    for candidate in ([path] if path.endswith(".py") else [f"{path}.py", f"{path}/__init__.py"]):
        module = _parse(tree, candidate)
        if module is None:
            continue
        for node in module.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, candidate, node
        source = _imports(module, candidate).get(name)
        target = _module_path(source) if source else None
        return _class(tree, target, name, depth + 1) if target else None
    return None


def _min_capability(tree, path: str, cls_name: str, depth: int = 0) -> dict:
    """What ``get_min_capability()`` of a class returns: the integers it can return, the line, whether a
    condition picks among them, and the class that holds it (a base class when this one does not)."""
    found = _class(tree, path, cls_name)
    if found is None or depth > 3:
        return {"class": cls_name, "min_capability": None, "why": f"{cls_name} is not defined in sglang's source"}
    module, where, cls = found
    method = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "get_min_capability"), None)
    if method is None:
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id not in ("QuantizationConfig", "object"):
                got = _min_capability(tree, where, base.id, depth + 1)
                if got.get("min_capability") is not None:
                    return got
        return {"class": cls_name, "min_capability": None, "why": f"{cls_name} has no get_min_capability()"}
    values, conditional = [], False
    for node in _cuda_returns(method):
        if node.value is not None:
            value = node.value
            if isinstance(value, ast.IfExp) and _OTHER_PLATFORM.search(ast.unparse(value.test)):
                negated = isinstance(value.test, ast.UnaryOp) and isinstance(value.test.op, ast.Not)
                value_nodes = [value.body if negated else value.orelse]  # the branch a CUDA GPU takes
            elif isinstance(value, ast.IfExp):
                conditional = True
                value_nodes = [value.body, value.orelse]
            else:
                value_nodes = [value]
            for v in value_nodes:
                if isinstance(v, ast.Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
                    values.append(v.value)
                elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) \
                        and v.func.attr == "get_min_capability" and isinstance(v.func.value, ast.Name):
                    other = _min_capability(tree, where, v.func.value.id, depth + 1)
                    values += other.get("values") or []
    returns = _cuda_returns(method)
    conditional = conditional or len(returns) > 1
    out = {"class": cls.name, "site": f"{where}:{method.lineno}", "values": sorted(set(values)),
           "min_capability": min(values) if values else None, "conditional": conditional}
    if conditional:
        out["code"] = " ".join(ast.unparse(method).split())[:300]
    takes = _takes_over(cls, where)
    if takes:
        out["takes_over"] = takes
    return out


def _takes_over(cls: ast.ClassDef, where: str) -> dict | None:
    """When the class takes over a checkpoint of another method at load (``override_quantization_method``,
    run by the model config for every registered method): the ``--quantization`` values it accepts, from its
    ``is_valid_user_quant = ...`` (None: no --quantization given)."""
    method = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "override_quantization_method"),
                  None)
    if method is None:
        return None
    accepts: list[str] = []
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "is_valid_user_quant"
                                                for t in node.targets):
            for cmp in ast.walk(node.value):
                if isinstance(cmp, ast.Compare) and ast.unparse(cmp.left) == "user_quant":
                    for op, right in zip(cmp.ops, cmp.comparators, strict=False):
                        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
                            accepts.append("(none)")
                        elif isinstance(op, ast.Eq) and isinstance(right, ast.Constant):
                            accepts.append(str(right.value))
                        elif isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                            accepts += [str(e.value) for e in right.elts if isinstance(e, ast.Constant)]
    return {"site": f"{where}:{method.lineno}", "accepts": sorted(set(accepts))} if accepts else \
        {"site": f"{where}:{method.lineno}", "accepts": None}


_OTHER_PLATFORM = re.compile(r"(?i)\b_?(is_)?(npu|musa|hip|xpu|hpu|cpu)\b")


def _cuda_returns(func: ast.FunctionDef) -> list[ast.Return]:
    """The returns of a function that a CUDA GPU can reach: those under a test of another platform
    (``if _is_musa: return 31``, ``if is_npu(): return 0``) are left out."""
    out = []

    def visit(stmts) -> None:
        for node in stmts:
            if isinstance(node, ast.Return):
                out.append(node)
            elif isinstance(node, ast.If):
                if not _OTHER_PLATFORM.search(ast.unparse(node.test)):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.Try, ast.With, ast.For, ast.While)):
                visit(getattr(node, "body", []))

    visit(func.body)
    return out


def _capability_check(tree) -> str | None:
    """Where a release refuses a method below its capability at load: the comparison's file:line."""
    for path in ("srt/model_loader/loader.py", "srt/model_executor/model_runner.py", "srt/configs/model_config.py"):
        module = _parse(tree, path)
        if module is None:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.Compare) and "get_min_capability" in ast.unparse(node) \
                    and isinstance(node.ops[0], (ast.Lt, ast.Gt)):
                return f"{path}:{node.lineno}"
    return None


def _fp8_marlin(tree) -> dict | None:
    """The SM range where FP8 checkpoints run on Marlin's weight-only kernel, from the function that decides
    it; else the ``use_marlin`` assignment of the FP8 linear method, as written."""
    for path in ("srt/layers/quantization/fp8_utils.py", "srt/layers/quantization/marlin_utils_fp8.py",
                 "srt/layers/quantization/fp8.py"):
        module = _parse(tree, path)
        if module is None:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef) and node.name == "can_auto_enable_marlin_fp8":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Compare):
                        text = ast.unparse(ret.value)
                        nums = [int(n) for n in re.findall(r"\b(\d{2,3})\b", text)]
                        if len(nums) == 2 and re.fullmatch(r"\d+ <= sm < \d+", text):
                            return {"site": f"{path}:{ret.lineno}", "condition": text, "sm": nums}
                return {"site": f"{path}:{node.lineno}", "condition": " ".join(ast.unparse(node).split())[:300]}
    module = _parse(tree, "srt/layers/quantization/fp8.py")
    for node in ast.walk(module) if module is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "use_marlin"
                                                for t in node.targets):
            text = ast.unparse(node.value)
            if text not in ("False", "True"):
                return {"site": f"srt/layers/quantization/fp8.py:{node.lineno}", "condition": text}
    return None


# one GPU per architecture sglang tells apart (SM 8.0, 8.6, 8.9, 9.0, 10.0, 12.0), and the two model shapes
# its attention default distinguishes
ARCH_GPUS = ("a100-80gb", "a6000", "l40s", "h100", "b200", "rtx5090")
MODELS = {"dense": "meta-llama--Llama-3.1-8B-Instruct.json", "mla": "deepseek-ai--DeepSeek-V3.json"}
_ATTENTION_FILES = ("srt/server_args.py", "srt/model_executor/model_runner.py")


def _attention_defaults(tree) -> list[dict]:
    """Every ``attention_backend = "<name>"`` the release's source can assign, with its line (the choices
    of its default, not evaluated for a GPU)."""
    out = []
    files = list(_ATTENTION_FILES)
    files += [f for f in tree.files("*.py") if f.startswith("srt/arg_groups/")]
    for path in files:
        module = _parse(tree, path)
        for node in ast.walk(module) if module is not None else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str) \
                    and any(isinstance(t, ast.Attribute) and t.attr == "attention_backend" for t in node.targets):
                out.append({"site": f"{path}:{node.lineno}", "backend": node.value.value})
            elif isinstance(node, ast.FunctionDef) and "default_attn_backend" in node.name:
                out += [{"site": f"{path}:{r.lineno}", "backend": r.value.value} for r in ast.walk(node)
                        if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant)
                        and isinstance(r.value.value, str)]
    return sorted(out, key=lambda e: (e["site"].rsplit(":", 1)[0], int(e["site"].rsplit(":", 1)[1])))


def _attention_by_dry_run(version: str, progress=print) -> dict | None:
    """arch -> model shape -> what a dry-run of ``version`` chose for attention_backend, or None when the
    release's dry-run environment is not set up here."""
    from kit.dryrun import built_versions, dry_run
    from kit.hardware import gpu_profiles

    if version not in built_versions():
        return None
    models = Path(__file__).resolve().parent.parent / "data" / "model_configs"
    out: dict = {}
    for key in ARCH_GPUS:
        profile = gpu_profiles()[key]
        for shape, config in MODELS.items():
            progress(f"sglang {version}: dry-run on {key} ({profile.arch}), {shape} model")
            result = dry_run([], model=str(models / config), gpu=key, sglang=version)
            if result.error is not None:
                err = result.error
                entry = {"refused": f"{err.type}: {err.message[:240]}", "kind": err.kind,
                         "site": f"{short_path(err.file)}:{err.line}" if err.line else None}
            else:
                chose = [c for c in result.changes if c.field == "attention_backend"]
                last = chose[-1] if chose else None
                said = [m.message for c in chose for m in getattr(c, "messages", [])][:1]
                entry = {"backend": result.final.get("attention_backend"),
                         "site": last.where if last is not None else None}
                if said:
                    entry["logged"] = said[0][:200]
            out.setdefault(profile.arch, {})[shape] = {"gpu": key, **entry}
    return out


def mine(tree) -> dict:
    """The quantization facts of one release's source."""
    module = _parse(tree, _REGISTRY)
    if module is None:
        return {"methods": {}, "note": f"no {_REGISTRY}: quantization is not in sglang's own source"}
    imports = _imports(module, _REGISTRY)
    methods = {}
    for name, (cls, line) in sorted(_registry(module).items()):
        source = imports.get(cls, "")
        if source.startswith("vllm"):
            methods[name] = {"class": cls, "registered": f"{_REGISTRY}:{line}", "min_capability": None,
                             "why": f"imported from {source}: vllm's source decides it"}
            continue
        path = (_module_path(source) if source else None) or _REGISTRY
        methods[name] = {"registered": f"{_REGISTRY}:{line}", **_min_capability(tree, path, cls)}
    out = {"methods": methods, "capability_check": _capability_check(tree), "fp8_marlin": _fp8_marlin(tree)}
    from_vllm = sum(1 for m in methods.values() if str(m.get("why", "")).startswith("imported from vllm"))
    if from_vllm:
        out["note"] = f"{from_vllm} of {len(methods)} methods come from vllm; their capability is vllm's"
    return out


def _releases() -> list[str]:
    """One release per patch series (the newest of each 0.x.y), 0.3 to the newest the table of releases holds."""
    from packaging.version import Version

    from .infer import known_releases

    newest: dict[tuple, str] = {}
    for r in known_releases():
        v = Version(r)
        key = v.release[:3]
        if key not in newest or Version(newest[key]) < v:
            newest[key] = r
    return sorted(newest.values(), key=Version)


def write(releases: list[str] | None = None, progress=print) -> dict:
    from kit.launch_file import source_tree

    data = {"made_by": "python -m kit.doctor.gpu_support --write", "releases": {}}
    if releases and DATA.exists():  # --release: those are mined again, the others kept
        data["releases"] = json.loads(DATA.read_text(encoding="utf-8"))["releases"]
    for version in releases or _releases():
        progress(f"sglang {version}: reading its quantization and attention source")
        tree = source_tree(sglang=version)
        facts = mine(tree)
        facts["attention_defaults"] = _attention_defaults(tree)
        by_run = _attention_by_dry_run(version, progress)
        if by_run is not None:
            facts["attention"] = by_run
        data["releases"][version] = facts
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    support.cache_clear()
    return data


@lru_cache(maxsize=1)
def support() -> dict:
    """kit/data/gpu_support.json: release -> its quantization facts."""
    from packaging.version import Version

    releases = json.loads(DATA.read_text(encoding="utf-8"))["releases"]
    return dict(sorted(releases.items(), key=lambda kv: Version(kv[0])))


def _nearest(version: str) -> str | None:
    """The mined release for ``version``: itself, else the mined one of its patch series (one per series is
    mined: its post releases change no capability here), else None."""
    from packaging.version import InvalidVersion, Version

    table = support()
    if version in table:
        return version
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    series = [r for r in table if Version(r).release[:3] == v.release[:3]]  # 0.5.10 reads as 0.5.10.post1
    below = [r for r in series if Version(r) <= v]
    return max(below, key=Version) if below else min(series, key=Version) if series else None


def runs_on(version: str, method: str, sm: int) -> dict | None:
    """What release ``version`` does with ``--quantization method`` (or a checkpoint of that quant_method) on
    SM ``sm``: {"refused": bool, "marlin": bool, "min_capability", "site", "check", "release"}; None when the
    release or the method was not mined, or its capability is not in sglang's source."""
    release = _nearest(version)
    if release is None:
        return None
    facts = support()[release]
    entry = facts["methods"].get(method)
    if entry is None or entry.get("min_capability") is None:
        return None
    low = entry["min_capability"]
    marlin = facts.get("fp8_marlin") or {}
    on_marlin = method in ("fp8",) and "sm" in marlin and marlin["sm"][0] <= sm < marlin["sm"][1]
    return {"release": release, "min_capability": low, "values": entry.get("values", [low]),
            "conditional": entry.get("conditional", False), "site": entry.get("site"),
            "refused": sm < low, "check": facts.get("capability_check"),  # every branch needs at least ``low``
            "marlin": on_marlin, "marlin_site": marlin.get("site") if on_marlin else None}


def _attention_line(by_arch: dict) -> str:
    return ", ".join(f"{arch} " + "/".join(str(v.get("backend") or "refused") for v in shapes.values())
                     for arch, shapes in by_arch.items())


def attention_default(version: str, sm: int | None, mla: bool) -> dict | None:
    """What the release picks by default on this SM for a dense or an MLA model launched with no other flag,
    from its recorded dry-run (the GPU of that architecture the table ran); None when not recorded."""
    release = _nearest(version)
    if release is None or sm is None:
        return None
    by_arch = support()[release].get("attention") or {}
    entry = (by_arch.get(f"SM{sm}") or {}).get("mla" if mla else "dense")
    return {"release": release, **entry} if entry else None


def gpu_lines(version: str, gpu) -> list[str]:
    """What release ``version`` does on this GPU model, each line with where it was read: its tensor formats and
    links (kit/data/gpu_capabilities.yaml), the attention backend it picks by default (a recorded dry-run), the
    quantization methods it refuses on this SM, and where it runs FP8 through Marlin."""
    from kit.hardware_caps import capabilities

    caps = capabilities(gpu)
    if caps is None:
        return []
    profile, out = caps.profile, []
    if caps.architecture is not None:
        a = caps.architecture
        out.append(f"tensor formats: {a.name} ({profile.arch}): FP8 {'yes' if a.fp8 else 'no'}, FP4 "
                   f"{'yes' if a.fp4 else 'no'} (source: {a.source})")
    if caps.links is not None:
        out.append("links: " + caps.links.sentence(profile.name))
    release = _nearest(version) if profile.sm is not None else None
    if release is None:
        if profile.sm is not None:
            out.append(f"sglang {version}: not in the mined releases (`python -m kit.doctor.gpu_support`)")
        return out
    facts = support()[release]
    shapes = (facts.get("attention") or {}).get(profile.arch)
    if shapes:
        said = "; ".join(f"{shape}: " + (f"{v['backend']} ({v['site']})" if v.get("backend")
                                         else f"refuses to start: {v.get('refused')} ({v.get('site')})")
                         for shape, v in shapes.items())
        out.append(f"attention backend by default in sglang {release} (its dry-run on {shapes['dense']['gpu']}, "
                   f"no other flag): {said}")
    else:
        defaults = facts.get("attention_defaults", [])
        names = sorted({e["backend"] for e in defaults})
        at_load = sorted({e["site"].rsplit(":", 1)[0] for e in defaults if "model_runner" in e["site"]})
        when = (f"it is picked when the model loads ({', '.join(at_load)}), after the server arguments"
                if at_load else "")
        out.append(f"attention backend by default in sglang {release}: not recorded for {profile.arch}; its source "
                   f"can pick {', '.join(names) or 'none found'}" + (f"; {when}" if when else "")
                   + f" ({_how_to_tell(release, profile.key)})")
    refused = sorted((m, e["min_capability"]) for m, e in facts["methods"].items()
                     if e.get("min_capability") is not None and profile.sm < e["min_capability"])
    if refused:
        out.append(f"quantization refused on {profile.arch} by sglang {release} ({facts.get('capability_check')}): "
                   + ", ".join(f"{m} (needs SM{c})" for m, c in refused))
    for name, e in sorted(facts["methods"].items()):
        takes = e.get("takes_over") or {}
        if takes.get("accepts") and name.endswith("_marlin") and e.get("min_capability") is not None \
                and profile.sm >= e["min_capability"]:
            asked = ", ".join("none" if a == "(none)" else a for a in takes["accepts"])
            out.append(f"{name} takes over a compatible checkpoint when --quantization is {asked} "
                       f"({takes['site']}); any other value keeps the checkpoint's own kernel")
    marlin = facts.get("fp8_marlin") or {}
    if "sm" in marlin and marlin["sm"][0] <= profile.sm < marlin["sm"][1]:
        out.append(f"fp8 checkpoints run on Marlin's weight-only kernel on {profile.arch} ({marlin['site']}: "
                   f"{marlin['condition']})")
    if facts.get("note"):
        out.append(f"quantization note for sglang {release}: {facts['note']}")
    return out


def _how_to_tell(release: str, gpu: str) -> str:
    from kit.dryrun import load_rules, supported_versions

    if release not in supported_versions() and not load_rules().covers(release):
        return ("the dry-run does not run this release; the server's log says which it picked: "
                "`Attention backend not set. Use ... backend by default`")
    return f"`sgl-kit dryrun --sglang {release} --gpu {gpu}` tells"


def table_text() -> str:
    rows = []
    for release, facts in support().items():
        methods = facts["methods"]
        known = {m: e["min_capability"] for m, e in methods.items() if e.get("min_capability") is not None}
        marlin = facts.get("fp8_marlin") or {}
        rows.append(f"{release:14} {len(methods):3} methods, {len(known):3} with their capability in sglang's source"
                    + (f"; fp8 on Marlin for {marlin['condition']}" if "sm" in marlin else "")
                    + (f"; {facts['note']}" if facts.get("note") else "")
                    + (f"; attention by dry-run: {_attention_line(facts['attention'])}" if facts.get("attention")
                       else ""))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.doctor.gpu_support", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="read the releases' source again and rewrite "
                        f"{DATA.name} (downloads each release's wheel once)")
    parser.add_argument("--release", action="append", help="with --write: only these releases")
    parser.add_argument("--method", help="one method across the releases: the capability each needs")
    args = parser.parse_args(argv)
    if args.write:
        write(args.release, progress=lambda s: print(s, file=sys.stderr))
    if args.method:
        known = sorted({m for facts in support().values() for m in facts["methods"]})
        if args.method not in known:
            print(f"python -m kit.doctor.gpu_support: no release registers --quantization {args.method!r}; the methods "
                  f"the mined releases register: {', '.join(known)}", file=sys.stderr)
            return 2
        for release, facts in support().items():
            e = facts["methods"].get(args.method)
            print(f"{release:14} " + ("not registered" if e is None else
                                      f"SM {e['min_capability']}+ ({e.get('site') or e.get('why')})"
                                      if e.get("min_capability") is not None else e.get("why", "?")))
        return 0
    print(table_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
