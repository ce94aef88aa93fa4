"""Hardware probes followed to their definition in the tree, with the server's environment and host.

The probe definitions below are copied from sglang 0.5.11 (srt/utils/common.py:162-183, is_cpu and
is_host_cpu_x86), trimmed of the other probes; the guard is this file's own, shaped like rule 5 of
srt/server_args.py:1213-1215 (`is_hip() or ... is_cpu()`).
"""

from __future__ import annotations

from _source_support import DictTree

from kit._pysource import Environment
from kit.provenance import explain
from kit.provenance.host_probes import _constant_return

UTILS = '''
import os
import platform

import torch


def is_hip() -> bool:
    return torch.version.hip is not None


def is_host_cpu_x86() -> bool:
    machine = platform.machine().lower()
    return (
        machine in ("x86_64", "amd64", "i386", "i686")
        and hasattr(torch, "cpu")
        and torch.cpu.is_available()
    )


def is_cpu() -> bool:
    is_host_cpu_supported = is_host_cpu_x86()
    return os.getenv("SGLANG_USE_CPU_ENGINE", "0") == "1" and is_host_cpu_supported
'''

ARGS = '''
from sglang.srt.utils.common import is_cpu, is_hip


class ServerArgs:
    def handle(self):
        if is_hip() or is_cpu():
            self.disable_graph = True
'''

HOST = {"platform.machine": "x86_64", "torch.cpu.is_available": True}


def _site(environ, probes=None):
    tree = DictTree({"srt/utils/common.py": UTILS, "srt/server_args.py": ARGS})
    env = Environment(environ, prefixes=("SGLANG_",))
    exp = explain(tree, "disable_graph", {"disable_graph": True}, environ=env, probes=probes)
    (site,) = exp.sites
    return site, exp.to_text()


def test_the_environment_and_the_host_decide_is_cpu():
    site, text = _site({"SGLANG_USE_CPU_ENGINE": "1"}, HOST)
    assert site.status == "fired"
    assert "is_cpu() = True (its definition, sglang/srt/utils/common.py:" in text


def test_without_the_variable_is_cpu_is_false_whatever_the_host():
    site, text = _site({}, {})
    assert site.status == "unknown"  # is_hip() stays the hardware's
    assert "is_cpu()" not in site.status_reason and "is_hip()" in site.status_reason


def test_with_the_variable_but_no_host_facts_is_cpu_stays_unknown():
    site, _ = _site({"SGLANG_USE_CPU_ENGINE": "1"}, {})
    assert site.status == "unknown"
    assert "is_cpu()" in site.status_reason and "hardware probe" in site.status_reason


def test_a_given_answer_wins_over_the_definition():
    site, _ = _site({"SGLANG_USE_CPU_ENGINE": "1"}, {**HOST, "is_cpu": False, "is_hip": False})
    assert site.status == "not fired"


def test_torch_cpu_is_available_is_read_only_from_a_constant_body():
    torch_cpu = 'def is_available() -> bool:\n    r"""Doc."""\n    return True\n\n\ndef other():\n    return 1\n'
    assert _constant_return(torch_cpu, "is_available") is True
    assert _constant_return("def is_available():\n    return probe()\n", "is_available") is None
    assert _constant_return("", "is_available") is None
