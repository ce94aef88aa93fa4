"""Answers to the host-level questions under sglang's hardware probes, read from the server's host.

sglang 0.5.11's ``is_cpu()`` (sglang/srt/utils/common.py:181) is
``os.getenv("SGLANG_USE_CPU_ENGINE", "0") == "1" and (is_host_cpu_x86() or is_host_cpu_arm64())``,
and ``is_host_cpu_x86()`` reads ``platform.machine()`` and ``torch.cpu.is_available()``. The
evaluator follows that definition (kit/_pysource) with the server's environment; these two
leaves it cannot know from the source alone come from the host:

- ``platform.machine``: ``uname -m`` on the server's host (what Python's platform.machine() returns);
- ``torch.cpu.is_available``: the definition in the server's own torch
  (``site-packages/torch/cpu/__init__.py``), taken only when its body is a constant ``return``.

Anything not readable stays unanswered, so the probe stays unknown. A server found with
``discover(host, prefetch=True)`` brought both with it (the same ``uname -m`` machine and file text),
so they cost no round trip then.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import posixpath

from kit.errors import KitError

__all__ = ["host_probes"]


def host_probes(server) -> dict:
    """{"platform.machine": "x86_64", "torch.cpu.is_available": True} as far as the host shows them."""
    host = getattr(server, "host", None)
    if host is None:
        return {}
    out: dict = {}
    prefetched = getattr(server, "prefetched", None) or {}
    with contextlib.suppress(KitError, OSError):
        if isinstance(prefetched.get("machine"), str):
            machine, ok = prefetched["machine"].strip(), True
        else:
            res = host.run(["uname", "-m"], timeout=15)
            machine, ok = res.stdout.strip(), res.ok
        if ok and machine:
            out["platform.machine"] = machine
    if server.sglang_dir:
        path = posixpath.join(posixpath.dirname(server.sglang_dir.rstrip("/")), "torch", "cpu", "__init__.py")
        with contextlib.suppress(KitError, OSError, SyntaxError, ValueError):
            fetched = prefetched.get("torch_cpu")
            if fetched and fetched[0] == path:
                if fetched[1] is None:
                    raise OSError(f"{path} is not readable on {host.name}")
                text = base64.b64decode(fetched[1]).decode("utf-8", errors="replace")
            else:
                text = host.read_text(path)
            value = _constant_return(text, "is_available")
            if isinstance(value, bool):
                out["torch.cpu.is_available"] = value
    return out


def _constant_return(text: str, name: str):
    """The constant a module-level ``def name()`` returns, when its body (docstring aside) is one ``return``."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name and not node.args.args:
            body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant):
                return body[0].value.value
    return None
