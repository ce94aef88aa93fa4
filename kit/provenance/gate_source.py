"""The shapes kit.provenance.gates looks for in sglang's source: returns that refuse, guards that
belong to earlier refusals, helper calls, a speculative worker's target prefill, log messages."""

from __future__ import annotations

import ast
import re
from typing import Any

from kit._pysource import Env, Evaluator, Scope, Unknown, const
from kit._pysource.values import Stated
from kit._text import short_path


def worker_extend_modes(tree, modules, ev: Evaluator, worker: Stated) -> list[tuple[Any, str]]:
    """(value, site) of the hidden-state mode a speculative worker gives the target model's forward on an
    extend (prefill) batch: a ``capture_hidden_mode=`` argument of that call (0.5.2x), or the last
    ``X.capture_hidden_mode = V`` on its batch before it (0.5.1x). ``worker`` stands for the worker's ``self``."""
    hits = tree.grep(r"target_worker\.forward_batch_generation\(", max_matches=80)
    out = []
    for path in dict.fromkeys(h.path for h in hits if h.path.startswith("srt/speculative/")):
        module = modules.get(path)
        if module is None:
            continue
        for func in ast.walk(module.tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(func):
                if not (isinstance(call, ast.Call)
                        and ast.unparse(call.func).endswith("target_worker.forward_batch_generation")):
                    continue
                if not on_extend_path(func, call):
                    continue
                env = Env({"self": const(worker)}, Scope(module, None, "self", 1, True))
                keyword = next((k.value for k in call.keywords if k.arg == "capture_hidden_mode"), None)
                if keyword is not None:
                    if isinstance(keyword, ast.Name):
                        local = local_assignment(func, keyword.id, call.lineno)
                        expr, line = (local.value, local.lineno) if local is not None else (keyword, call.lineno)
                    else:
                        expr, line = keyword, call.lineno
                elif call.args and isinstance(call.args[0], ast.Name):
                    batch = call.args[0].id
                    sets = [a for a in ast.walk(func) if isinstance(a, ast.Assign) and a.lineno < call.lineno
                            and any(isinstance(t, ast.Attribute) and t.attr == "capture_hidden_mode"
                                    and ast.unparse(t.value) == batch for t in a.targets)]
                    if not sets:
                        continue
                    last = max(sets, key=lambda a: a.lineno)
                    expr, line = last.value, last.lineno
                    if isinstance(expr, ast.Name):
                        local = local_assignment(func, expr.id, last.lineno)
                        expr, line = (local.value, local.lineno) if local is not None else (expr, line)
                else:
                    continue
                value = ev.ev(expr, env)
                if not isinstance(value, Unknown):
                    out.append((value, f"{short_path(module.display)}:{line}"))
    return out


def on_extend_path(func, call) -> bool:
    """The call runs for an extend (prefill) batch: its function is about extend or prefill, or an ``if``
    around it tests ``is_extend``."""
    if "extend" in func.name or "prefill" in func.name:
        return True
    return any(isinstance(n, ast.If) and "is_extend" in ast.unparse(n.test) and n.body
               and n.body[0].lineno <= call.lineno <= (n.body[-1].end_lineno or n.body[-1].lineno)
               for n in ast.walk(func))


def class_chain(modules, module, cls: ast.ClassDef, depth: int = 0):
    """The class, then its bases found in the tree (nearest first)."""
    out = [(module, cls)]
    for base in cls.bases:
        name = ast.unparse(base)
        found = modules.class_of(module, name) if depth < 6 else None
        if found is not None:
            out += class_chain(modules, found[0], found[1], depth + 1)
    return out


def refusing_ifs(func) -> set[int]:
    """Lines of the ``if`` tests whose body ends in a refusal (an earlier refusal, not this one's condition)."""
    out = set()
    for node in ast.walk(func):
        if isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Return):
            ret = node.body[-1]
            if ret.value is None or (isinstance(ret.value, ast.Constant) and ret.value.value in (None, False)) \
                    or leaves_unbuilt(ret):
                out.add(node.test.lineno)
    return out


def inside(func, line: int, ret: ast.Return) -> bool:
    """Whether the ``if`` at ``line`` sits in a block that also holds ``ret`` (a sibling before it)."""
    for node in ast.walk(func):
        for block in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if isinstance(block, list) and any(s is ret for s in block):
                return any(isinstance(s, ast.If) and s.test.lineno == line for s in block)
    return False


def assigned_after_init(module, cls, modules) -> dict[str, str]:
    """``self.X`` written by a method of the class (or its bases) other than ``__init__``: name -> site."""
    out: dict[str, str] = {}
    for m, c in class_chain(modules, module, cls):
        for func in c.body:
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name == "__init__":
                continue
            for node in ast.walk(func):
                for target in targets(node) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else ():
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        out.setdefault(target.attr, f"{c.name}.{func.name}, {short_path(m.display)}:{node.lineno}")
    return out


def returns(func) -> list[ast.Return]:
    """The function's own returns (not those of nested functions), in order."""
    out = []

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Return):
                out.append(child)
            walk(child)

    walk(func)
    return sorted(out, key=lambda r: r.lineno)


def leaves_unbuilt(ret: ast.Return) -> bool:
    """A setup's return that builds nothing: bare, None, False, or a result holding None / the eager runner."""
    if ret.value is None:
        return True
    if isinstance(ret.value, ast.Constant):
        return ret.value.value in (None, False)
    text = ast.unparse(ret.value)
    return bool(re.search(r"\beager_runner\b|\(None\b|runner=None", text))


def is_none_test(test) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None)


def terminates(body) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def self_method(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        return f.attr
    return None


def parent_if(func, ret: ast.Return):
    for node in ast.walk(func):
        if isinstance(node, ast.If) and node.body and any(r is ret for r in node.body):
            return node
    return None


def conjuncts(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And):
        return [p for v in expr.values for p in conjuncts(v)]
    return [expr]


def local_assignment(func, name: str, before: int):
    found = [a for a in ast.walk(func) if isinstance(a, ast.Assign) and a.lineno < before
             and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)]
    return max(found, key=lambda a: a.lineno) if found else None


def targets(a) -> list:
    targets = list(a.targets) if isinstance(a, ast.Assign) else [a.target]
    return [t for target in targets for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]


def batch_param(func) -> str:
    params = [a.arg for a in func.args.args[1:]]
    return next((p for p in params if "batch" in p), params[0] if params else "forward_batch")


def atom(node: ast.expr) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))


def qual(module, func) -> str:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef) and any(b is func for b in node.body):
            return f"{node.name}.{func.name}"
    return func.name


def line_of(where: str) -> int:
    try:
        return int(where.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


LOG_CALL = re.compile(r"logger\.(?:warning|info|warn|error)|log_info_on_rank0|print_warning_once|warnings\.warn")


def log_message(module, guard_line: int, return_line: int) -> str:
    """The literal text of the log call between a refusal's test and its return (f-string parts kept)."""
    lines = module.lines[guard_line - 1: return_line]
    text = "\n".join(lines)
    if not LOG_CALL.search(text):
        return ""
    parts = re.findall(r'f?"((?:[^"\\]|\\.)*)"', text[LOG_CALL.search(text).start():])
    message = "".join(parts)
    return re.sub(r"\{[^}]*\}", "*", message).strip()


def message_in(message: str, log: str) -> bool:
    fixed = [p for p in message.split("*") if len(p.strip()) > 12]
    return bool(fixed) and all(p.strip() in log for p in fixed)
