"""A flag's lineage, and a nested config followed through the resolution, on small trees.

The trees here are written for one feature each, in the shapes real releases have (the real
wheels are in tests/test_versions.py): a deprecated alias stored into a field that folds into
`cuda_graph_config.prefill.backend` (0.5.14-0.5.19), a deprecated flag that does nothing
(0.5.10-0.5.13 `--enable-piecewise-cuda-graph`), the opt-in field of 0.5.4-0.5.9, and a
release before any of them.
"""

from __future__ import annotations

import pytest
from _source_support import DictTree

from kit.errors import UnknownFlag
from kit.provenance import explain, normalize_flag
from kit.server_args import SAME_VALUE, flag_table, folds, lineage

ACTIONS = """
import argparse


class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print("deprecated")


class DeprecatedStoreConstAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const_value)
"""

GRAPH = """
from dataclasses import dataclass, field


class Phase:
    DECODE = "decode"
    PREFILL = "prefill"


class Backend:
    BREAKABLE = "breakable"
    TC_PIECEWISE = "tc_piecewise"
    DISABLED = "disabled"


def default_prefill_backend():
    from sglang.srt.utils import is_cuda

    return Backend.BREAKABLE if is_cuda() else Backend.TC_PIECEWISE


@dataclass
class PhaseConfig:
    backend: str = Backend.DISABLED


@dataclass
class CudaGraphConfig:
    decode: PhaseConfig = field(default_factory=lambda: PhaseConfig(backend="full"))
    prefill: PhaseConfig = field(default_factory=lambda: PhaseConfig(backend=default_prefill_backend()))


def default_cuda_graph_config():
    return CudaGraphConfig()
"""

UTILS = """
def is_cuda():
    import torch

    return torch.cuda.is_available()
"""

# A 0.5.18-shaped release: the per-phase config, its parse step with a `_set` helper and a lock,
# the compatibility rules of the breakable backend, and the deprecated aliases.
NESTED = """
from typing import Optional

from sglang.srt.actions import DeprecatedStoreConstAction
from sglang.srt.graph import Backend, Phase, default_cuda_graph_config


class ServerArgs:
    model_path: str = "m"
    cuda_graph_config: Optional[dict] = None
    cuda_graph_backend_prefill: Optional[str] = None
    disable_prefill_cuda_graph: bool = False
    enable_lora: bool = False

    def __post_init__(self):
        self._handle_cuda_graph_config()

    def _handle_cuda_graph_config(self):
        self._parse_cuda_graph_config()
        self._apply_cuda_graph_compatibility()

    def _parse_cuda_graph_config(self):
        config = default_cuda_graph_config()
        locked: set = set()

        def _set(phase, key, value):
            setattr(getattr(config, phase), key, value)
            locked.add((phase, key))

        if self.disable_prefill_cuda_graph:
            _set(Phase.PREFILL, "backend", Backend.DISABLED)
        if self.cuda_graph_backend_prefill is not None:
            _set(Phase.PREFILL, "backend", self.cuda_graph_backend_prefill)
        self.cuda_graph_config = config
        self._cuda_graph_config_locked = locked

    def _apply_cuda_graph_compatibility(self):
        if (Phase.PREFILL, "backend") in self._cuda_graph_config_locked:
            return
        if self.cuda_graph_config.prefill.backend == Backend.BREAKABLE:
            self._disable_breakable_if_incompatible()

    def _disable_breakable_if_incompatible(self):
        rules = [
            ("LoRA", lambda: self.enable_lora),
        ]
        for name, predicate in rules:
            if predicate():
                self.cuda_graph_config.prefill.backend = Backend.DISABLED
                return

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", type=str, default=ServerArgs.model_path)
        parser.add_argument("--cuda-graph-backend-prefill", type=str, choices=["breakable", "tc_piecewise", "disabled"])
        parser.add_argument("--disable-prefill-cuda-graph", action="store_true")
        parser.add_argument("--enable-lora", action="store_true")
        parser.add_argument(
            "--disable-piecewise-cuda-graph",
            action=DeprecatedStoreConstAction,
            dest="cuda_graph_backend_prefill",
            const_value=Backend.DISABLED,
            new_flag="--cuda-graph-backend-prefill=disabled",
            help="Deprecated alias for --cuda-graph-backend-prefill=disabled.",
        )
"""

# A 0.5.11-shaped release: the field itself, and the opt-in flag of before kept as a no-op.
CHAIN = """
from sglang.srt.actions import DeprecatedAction


class ServerArgs:
    disable_piecewise_cuda_graph: bool = False
    enable_mm: bool = False

    def _handle_piecewise_cuda_graph(self):
        if self.enable_mm:
            self.disable_piecewise_cuda_graph = True

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--disable-piecewise-cuda-graph", action="store_true")
        parser.add_argument(
            "--enable-piecewise-cuda-graph",
            action=DeprecatedAction,
            help="Deprecated: Piecewise cuda graph is enabled by default. Use --enforce-piecewise-cuda-graph.",
        )
"""

# A 0.5.4-0.5.9-shaped release: opt-in, nothing writes it.
OPT_IN = """
class ServerArgs:
    enable_piecewise_cuda_graph: bool = False

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--enable-piecewise-cuda-graph", action="store_true")
"""

BARE = """
class ServerArgs:
    tp_size: int = 1

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tp-size", type=int, default=ServerArgs.tp_size)
"""


def nested(version="0.5.18") -> DictTree:
    return DictTree({"srt/server_args.py": NESTED, "srt/actions.py": ACTIONS, "srt/graph.py": GRAPH,
                     "srt/utils/__init__.py": UTILS}, version)


# --------------------------------------------------------------------------- what one tree says


def test_a_deprecated_alias_is_read_with_its_new_flag_dest_and_const():
    spec = flag_table(nested())["--disable-piecewise-cuda-graph"]
    assert (spec.kind, spec.dest, spec.const, spec.new_flag, spec.deprecated) == (
        "store_const", "cuda_graph_backend_prefill", "disabled", "--cuda-graph-backend-prefill=disabled", True)
    assert flag_table(nested())["--cuda-graph-backend-prefill"].deprecated is False


def test_folds_say_which_field_lands_in_the_nested_config():
    found = {(f.field, f.path, f.value, f.when) for f in folds(nested())}
    assert found == {
        ("disable_prefill_cuda_graph", "cuda_graph_config.prefill.backend", "disabled",
         "self.disable_prefill_cuda_graph"),
        ("cuda_graph_backend_prefill", "cuda_graph_config.prefill.backend", SAME_VALUE,
         "self.cuda_graph_backend_prefill is not None"),
    }


def test_an_alias_is_followed_to_the_nested_config_its_field_folds_into():
    line = lineage(nested(), "--disable-piecewise-cuda-graph")
    assert (line.status, line.field, line.dest, line.const, line.new_flag, line.where) == (
        "alias", "cuda_graph_config.prefill.backend", "cuda_graph_backend_prefill", "disabled",
        "--cuda-graph-backend-prefill=disabled", "srt/server_args.py:58")
    assert line.note == (
        "in sglang 0.5.18 --disable-piecewise-cuda-graph is a deprecated alias of --cuda-graph-backend-prefill="
        "disabled (srt/server_args.py:58: it stores 'disabled' into cuda_graph_backend_prefill, which folds into "
        "cuda_graph_config.prefill.backend); explaining cuda_graph_config.prefill.backend")
    assert line.redirected and line.off == "disabled"
    assert normalize_flag("--disable-piecewise-cuda-graph", nested()) == "cuda_graph_config.prefill.backend"
    assert normalize_flag("--disable-piecewise-cuda-graph") == "disable_piecewise_cuda_graph"


def test_a_field_that_folds_says_where_it_goes():
    line = lineage(nested(), "cuda_graph_backend_prefill")
    assert (line.status, line.field, line.redirected) == ("field", "cuda_graph_backend_prefill", False)
    assert line.note.endswith("it folds into cuda_graph_config.prefill.backend (srt/server_args.py:33)")
    exp = explain(nested(), "cuda_graph_backend_prefill", {})
    assert exp.lineage == "" and exp.notes == [line.note]


def test_a_deprecated_flag_that_does_nothing_points_to_the_setting_of_its_release():
    tree = DictTree({"srt/server_args.py": CHAIN, "srt/actions.py": ACTIONS}, "0.5.11")
    line = lineage(tree, "enable_piecewise_cuda_graph")
    assert (line.status, line.field, line.deprecated) == ("ignored", "disable_piecewise_cuda_graph", True)
    assert line.note.startswith("in sglang 0.5.11 --enable-piecewise-cuda-graph is accepted and does nothing "
                                "(deprecated): Deprecated: Piecewise cuda graph is enabled by default")
    exp = explain(tree, "--enable-piecewise-cuda-graph", {"enable_mm": True})
    assert exp.flag == "disable_piecewise_cuda_graph" and exp.asked == "enable_piecewise_cuda_graph"
    assert [s.line for s in exp.fired] == [11]


# --------------------------------------------------------------------------- what only the data knows


def test_a_name_not_there_yet_points_to_the_field_of_that_time():
    tree = DictTree({"srt/server_args.py": OPT_IN}, "0.5.9")
    line = lineage(tree, "disable_piecewise_cuda_graph")
    assert (line.status, line.field, line.off) == ("not yet", "enable_piecewise_cuda_graph", False)
    assert line.instead == ["leaving out --enable-piecewise-cuda-graph (enable_piecewise_cuda_graph is False by default)"]
    assert any("checked in 0.5.10, 0.5.10.post1, 0.5.11, 0.5.12, 0.5.13" in h for h in line.history)
    exp = explain(tree, "disable_piecewise_cuda_graph", {})
    assert exp.flag == "enable_piecewise_cuda_graph" and exp.sites == []
    assert exp.origin.startswith("nothing in this tree changes enable_piecewise_cuda_graph after launch")
    assert exp.to_text().splitlines()[0].startswith("in sglang 0.5.9 disable_piecewise_cuda_graph does not exist yet")


def test_a_release_without_the_setting_says_so_instead_of_an_error():
    tree = DictTree({"srt/server_args.py": BARE}, "0.5.3")
    exp = explain(tree, "cuda_graph_config.prefill.backend", {})
    assert exp.sites == [] and exp.flag == "cuda_graph_config.prefill.backend"
    assert exp.headline == "cuda_graph_config.prefill.backend in sglang 0.5.3: no such setting"
    assert "this release has no such setting: no prefill CUDA graph at all" in exp.lineage


def test_a_removed_name_says_what_turns_the_setting_off_now():
    tree = nested("0.5.23")
    tree._files["srt/server_args.py"] = tree._files["srt/server_args.py"].split("        parser.add_argument(\n"
                                                                              "            \"--disable-piecewise")[0]
    line = lineage(tree, "--disable-piecewise-cuda-graph")
    assert (line.status, line.field) == ("removed", "cuda_graph_config.prefill.backend")
    assert line.instead == ["--disable-prefill-cuda-graph", "--cuda-graph-backend-prefill disabled"]


def test_names_neither_the_tree_nor_the_data_know_are_still_an_error():
    with pytest.raises(UnknownFlag) as err:
        explain(DictTree({"srt/server_args.py": BARE}, "0.5.11"), "tp_sise")
    assert err.value.suggestions == ["tp_size"]
    assert lineage(DictTree({"srt/server_args.py": BARE}, "0.5.11"), "tp_sise").status == "unknown"


def test_a_tree_of_unknown_version_is_not_placed():
    line = lineage(DictTree({"srt/server_args.py": BARE}, None), "disable_piecewise_cuda_graph")
    assert (line.status, line.field) == ("unknown", None)
    assert "cannot place this version" in line.note


# --------------------------------------------------------------------------- the nested config, in order


LAUNCH = {"model_path": "m"}  # the launch command's fields: no --cuda-graph-config JSON


def test_the_built_default_decides_the_rules_that_test_it():
    exp = explain(nested(), "cuda_graph_config.prefill.backend", {"enable_lora": True}, command=LAUNCH,
                  probes={"is_cuda": True})
    fired = {s.line: s for s in exp.fired}
    assert set(fired) == {34, 45}
    assert fired[45].rule == "LoRA"
    assert ("cuda_graph_config.prefill.backend is 'breakable' at this point: built by srt/server_args.py:34 "
            "(ServerArgs._parse_cuda_graph_config) from its defaults (is_cuda() = True (given: the server's "
            "hardware))") in fired[45].evidence
    assert exp.resolved == ("in the steps ServerArgs.__post_init__ runs, cuda_graph_config.prefill.backend ends as "
                            "'disabled': set by srt/server_args.py:45 "
                            "(ServerArgs._disable_breakable_if_incompatible)")


def test_another_default_backend_skips_the_rules_of_the_first():
    exp = explain(nested(), "cuda_graph_config.prefill.backend", {"enable_lora": True}, command=LAUNCH,
                  probes={"is_cuda": False})
    rule = next(s for s in exp.sites if s.rule == "LoRA")
    assert rule.status == "not fired"
    assert rule.status_reason.startswith("line 40: self.cuda_graph_config.prefill.backend == Backend.BREAKABLE is False")
    assert "ends as 'tc_piecewise'" in exp.resolved


def test_a_flag_that_sets_the_backend_locks_it_against_the_rules():
    exp = explain(nested(), "cuda_graph_config.prefill.backend", {"enable_lora": True, "disable_prefill_cuda_graph": True},
                  probes={"is_cuda": True}, command={**LAUNCH, "disable_prefill_cuda_graph": True})
    assert [s.line for s in exp.fired] == [31, 34]
    rule = next(s for s in exp.sites if s.rule == "LoRA")
    assert rule.status == "not fired" and rule.status_reason.startswith(
        "line 38: (Phase.PREFILL, 'backend') in self._cuda_graph_config_locked is True")
    assert "ends as 'disabled': set by srt/server_args.py:31" in exp.resolved


def test_without_the_launch_command_the_lock_is_unknown():
    # The log has only the final cuda_graph_config: whether a --cuda-graph-config JSON set the
    # backend (and so locked it) needs the launch command.
    exp = explain(nested(), "cuda_graph_config.prefill.backend", {"enable_lora": True}, probes={"is_cuda": True})
    rule = next(s for s in exp.sites if s.rule == "LoRA")
    assert rule.status == "unknown"
    assert "whether the launch's --cuda-graph-config sets it is not known (pass the launch command)" in (
        rule.status_reason)


def test_the_hardware_probe_without_an_answer_is_unknown_with_its_reason():
    exp = explain(nested(), "cuda_graph_config.prefill.backend", {"enable_lora": True}, command=LAUNCH)
    assert "is not known" in exp.resolved and "is_cuda(): hardware probe, not in the log" in exp.resolved
    rule = next(s for s in exp.sites if s.rule == "LoRA")
    assert rule.status == "unknown"


def test_enum_members_made_with_auto_compare_by_name():
    tree = DictTree({"srt/server_args.py": """
        from enum import IntEnum, auto


        class Arch(IntEnum):
            MLA = auto()
            MHA = auto()


        class ServerArgs:
            arch: int = 0
            flag: bool = False

            def _resolve(self):
                if Arch.MHA == Arch.MLA:
                    self.flag = True
                if Arch.MHA == Arch.MHA:
                    self.flag = False
        """})
    exp = explain(tree, "flag", {})
    assert {s.line: s.status for s in exp.sites} == {16: "not fired", 18: "fired"}
