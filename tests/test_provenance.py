"""kit.provenance: which code set a flag, under which guards, and which of them fired.

The version tests run on real sglang releases (0.5.10.post1, 0.5.11, 0.5.23) unpacked
from their wheels; the layout tests use small in-memory trees written for one feature each.
"""

from __future__ import annotations

import gc
import itertools
import json
import weakref
from pathlib import Path

import pytest
from _source_support import DictTree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit._pysource import modules_for
from kit.errors import ModelConfigError
from kit.hosts import LocalHost
from kit.provenance import FlagExplanation, explain, normalize_flag
from kit.server_args import parse_log
from kit.source import SourceTree

DATA = Path(__file__).parent / "data" / "provenance"
QWEN36 = DATA / "qwen3.6-27b" / "config.json"
QWEN3_TEXT = DATA / "qwen3-32b"  # a directory: explain() reads its config.json

# The incident's server args as the 0.5.11 log printed them (the fields the rules read).
INCIDENT = dict(
    model_path="/root/models/Qwen3.6-27B",
    tp_size=2,
    device="cuda",
    speculative_algorithm="EAGLE",
    enforce_piecewise_cuda_graph=False,
    disable_piecewise_cuda_graph=True,
    enable_dp_attention=False,
    enable_torch_compile=False,
    pp_size=1,
    moe_a2a_backend="none",
    moe_runner_backend="auto",
    lora_paths=None,
    enable_lora=None,
    load_format="auto",
    quantization=None,
    dllm_algorithm=None,
    cpu_offload_gb=0,
    enable_hierarchical_cache=False,
    enable_deterministic_inference=False,
    disaggregation_mode="null",
    enable_symm_mem=False,
    enable_eplb=False,
    expert_distribution_recorder_mode=None,
    attn_cp_size=1,
    debug_cuda_graph=False,
    enable_mis=False,
)

SERVER_ARGS = "sglang/srt/server_args.py"
MODEL_CONFIG = "sglang/srt/configs/model_config.py"


@pytest.fixture(scope="module")
def tree_0511(sglang_source):
    return SourceTree.at(LocalHost(), sglang_source("0.5.11"))


@pytest.fixture(scope="module")
def incident(tree_0511) -> FlagExplanation:
    return explain(tree_0511, "disable_piecewise_cuda_graph", INCIDENT, QWEN36)


def _site(exp: FlagExplanation, line: int):
    (site,) = [s for s in exp.sites if s.line == line]
    return site


# --------------------------------------------------------------------------- sglang 0.5.11


def test_incident_names_rule_8_as_the_one_that_fired(incident):
    assert incident.version == "0.5.11"
    assert incident.observed == "True"
    (fired,) = incident.fired
    assert (fired.file, fired.line, fired.function) == (
        SERVER_ARGS,
        1230,
        "ServerArgs._handle_piecewise_cuda_graph",
    )
    assert (fired.rule, fired.rule_line) == ("8. Multimodal / VLM models", 1228)
    assert fired.value_text == "True"
    assert fired.kind == "assign" and fired.target == "disable_piecewise_cuda_graph"
    (caller,) = [g for g in fired.guards if g.kind == "caller"]
    # The method runs only past __post_init__'s early return for dummy models (line 800).
    assert (caller.where, caller.line, caller.negated, caller.passes) == ("ServerArgs.__post_init__:836", 800, True, True)
    early, rule = [g for g in fired.guards if g.kind != "caller"]
    assert (early.text, early.line, early.negated, early.kind, early.result) == (
        "self.enforce_piecewise_cuda_graph",
        1196,
        True,
        "early return",
        False,
    )
    assert (rule.text, rule.line, rule.negated, rule.result) == (
        "self.get_model_config().is_multimodal",
        1229,
        False,
        True,
    )
    assert (
        f"Qwen3_5ForConditionalGeneration is in multimodal_model_archs ({MODEL_CONFIG}:1384)"
        in fired.evidence
    )
    assert f"ModelConfig.is_multimodal = True ({MODEL_CONFIG}:225)" in fired.evidence


def test_incident_every_other_site_is_not_fired_or_unknown_with_a_reason(incident):
    statuses = {s.line: s.status for s in incident.sites}
    unknown = {1215, 1221, 1237}  # rule 5 and 5b probe the hardware; rule 9 reads the model files
    assert statuses == {
        line: "fired" if line == 1230 else "unknown" if line in unknown else "not fired"
        for line in [
            1192,
            1197,
            1203,
            1206,
            1209,
            1212,
            1215,
            1221,
            1224,
            1227,
            1230,
            1237,
            1240,
            1243,
            1246,
            1249,
            1252,
            1255,
            1258,
            1261,
            1277,
            3047,
        ]
    }
    assert _site(incident, 1215).status_reason == (
        "line 1214: is_hip(), is_npu(), is_cpu(), is_mps(), is_xpu(): hardware probe, not in the log"
    )
    assert (
        _site(incident, 1237).status_reason
        == "line 1233: check_gguf_file(): reads files on the server, not in the log"
    )
    assert "current_platform.is_out_of_tree(): hardware probe" in _site(incident, 1221).status_reason
    assert _site(incident, 1206).status_reason == "line 1205: self.enable_dp_attention is False"
    assert _site(incident, 1277).status_reason == "returns early at line 1271: not self.enable_mis is True"
    assert _site(incident, 1203).rule == "1. Disable Model Arch"
    assert (
        f"Qwen3_5ForConditionalGeneration is not in piecewise_cuda_graph_disabled_model_archs ({MODEL_CONFIG}:1446)"
        in (_site(incident, 1203).evidence)
    )
    assert _site(incident, 1221).rule == "5b. OOT platforms that don't support piecewise cuda graph"
    for site in incident.sites:
        assert site.status_reason, site


def test_enforce_piecewise_cuda_graph_skips_every_auto_disable_rule(tree_0511):
    exp = explain(
        tree_0511, "disable_piecewise_cuda_graph", dict(INCIDENT, enforce_piecewise_cuda_graph=True), QWEN36
    )
    (fired,) = exp.fired
    assert (fired.line, fired.value_text, fired.rule) == (
        1197,
        "False",
        "Skip auto-disable when enforce flag is set (for testing)",
    )
    others = [s for s in exp.sites if s is not fired]
    assert {s.status for s in others} == {"not fired"}
    in_handler = [s for s in others if s.function == "ServerArgs._handle_piecewise_cuda_graph"]
    assert len(in_handler) == 18
    assert all(
        s.status_reason == "returns early at line 1196: self.enforce_piecewise_cuda_graph is True"
        for s in in_handler
    )


def test_text_only_model_does_not_fire_rule_8(tree_0511):
    exp = explain(tree_0511, "disable_piecewise_cuda_graph", INCIDENT, QWEN3_TEXT)
    rule8 = _site(exp, 1230)
    assert rule8.status == "not fired"
    assert rule8.guards[-1].result is False
    assert f"none of [Qwen3ForCausalLM] is in multimodal_model_archs ({MODEL_CONFIG}:1384)" in rule8.evidence
    assert f"ModelConfig.is_multimodal = False ({MODEL_CONFIG}:225)" in rule8.evidence
    assert exp.fired == []


def test_a_parsed_log_line_works_as_the_snapshot(tree_0511):
    snapshot = parse_log((DATA / "incident-0.5.11.log").read_text())
    exp = explain(tree_0511, "disable_piecewise_cuda_graph", snapshot, QWEN36)
    assert [s.line for s in exp.fired] == [1230]
    assert exp.observed == "True"
    # moe_runner_backend is rewritten under an env-var check; the logged value decides.
    moe = _site(exp, 3047)
    assert moe.status == "not fired"
    assert (
        "moe_runner_backend is set conditionally (line 3021), so its value from the log is used"
        in moe.evidence
    )


def test_without_a_model_config_the_model_rules_say_what_is_missing(tree_0511):
    exp = explain(tree_0511, "disable_piecewise_cuda_graph", INCIDENT)
    rule8 = _site(exp, 1230)
    assert rule8.status == "unknown"
    assert rule8.status_reason == "line 1229: the model's config.json: not given (pass model_config=)"


def test_without_a_snapshot_nothing_is_evaluated(tree_0511):
    exp = explain(tree_0511, "--disable-piecewise-cuda-graph")
    assert exp.flag == "disable_piecewise_cuda_graph"
    assert len(exp.sites) == 22 and not exp.evaluated
    assert {s.status for s in exp.sites} == {"unknown"}
    assert all(g.result is None for s in exp.sites for g in s.guards)
    assert "guards not evaluated" in exp.to_text()


def test_renderings_of_the_incident(incident):
    text = incident.to_text()
    lines = text.splitlines()
    assert lines[0] == (
        "disable_piecewise_cuda_graph in sglang 0.5.11: 22 assignment sites, 1 fired, 3 unknown, "
        "18 not fired; value in the log: True"
    )
    assert lines[1].split() == ["STATUS", "WHERE", "FUNCTION", "RULE", "VALUE"]
    assert lines[2].split()[:4] == [
        "fired",
        "srt/server_args.py:1230",
        "ServerArgs._handle_piecewise_cuda_graph",
        "8.",
    ]
    assert lines[3].strip() == (
        "called at ServerArgs.__post_init__:836 if not (self.model_path.lower() in ['none', 'dummy']) [ok]"
    )
    assert (
        lines[4].strip()
        == "if not self.enforce_piecewise_cuda_graph [ok] and self.get_model_config().is_multimodal [ok]"
    )
    assert text.index("srt/server_args.py:1215") < text.index(
        "srt/server_args.py:1192"
    )  # unknown before not fired

    data = json.loads(json.dumps(incident.to_dict()))
    assert data["fired"] == [f"{SERVER_ARGS}:1230"]
    site = next(s for s in data["sites"] if s["line"] == 1230)
    assert [g["kind"] for g in site["guards"]] == ["caller", "early return", "if"]
    assert site["guards"][1]["condition"] == "not self.enforce_piecewise_cuda_graph"
    assert site["guards"][2]["passes"] is True

    html = incident._repr_html_()
    assert html.count("<details>") == 23  # each site's source, and the fold of the ones that did not fire
    fold = html.index("site(s) that did not fire")
    assert html.index("8. Multimodal / VLM models") < fold  # the fired site comes first, unfolded
    assert html.index("srt/server_args.py:1192") > fold and "table-layout:fixed" in html
    assert "&gt;  1230              self.disable_piecewise_cuda_graph = True" in html
    assert "  1228          # 8. Multimodal / VLM models" in html

    assert repr(incident) == (
        "<FlagExplanation disable_piecewise_cuda_graph sglang 0.5.11: 22 sites, 1 fired "
        f"[{SERVER_ARGS}:1230 8. Multimodal / VLM models]>"
    )


def test_snippet_shows_comment_guard_and_assignment(incident):
    snippet = _site(incident, 1230).snippet.splitlines()
    numbered = {int(line[1:7]): line[9:] for line in snippet}
    assert numbered[1228].strip() == "# 8. Multimodal / VLM models"
    assert numbered[1229].strip() == "if self.get_model_config().is_multimodal:"
    assert snippet[[int(x[1:7]) for x in snippet].index(1230)].startswith(">")


# --------------------------------------------------------------------------- other versions


def test_0_5_10_calls_it_rule_9_and_also_disables_for_speculative_decoding(sglang_source):
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.10.post1"))
    exp = explain(tree, "disable_piecewise_cuda_graph", INCIDENT, QWEN36)
    fired = {s.line: s for s in exp.fired}
    assert set(fired) == {1090, 1111}
    rule9 = fired[1111]
    assert (rule9.rule, rule9.rule_line, rule9.guards[-1].line) == ("9. Multimodal / VLM models", 1109, 1110)
    assert (fired[1090].rule, fired[1090].guards[-1].text) == (
        "2. Speculative decoding",
        "self.speculative_algorithm is not None",
    )


@pytest.fixture(scope="module")
def prefill_0523(sglang_source) -> FlagExplanation:
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.23"))
    snapshot = dict(model_path="/root/models/Qwen3.6-27B", disable_prefill_cuda_graph=True, pp_size=1)
    return explain(tree, "cuda_graph_config.prefill.backend", snapshot, QWEN36)


def test_0_5_23_finds_the_multimodal_rule_in_the_arg_group_hooks(prefill_0523):
    (rule,) = [s for s in prefill_0523.sites if s.rule == "multimodal model"]
    assert rule.file == "sglang/srt/arg_groups/cuda_graph_hook.py"
    assert rule.function == "disable_breakable_cudagraph_if_incompatible"
    assert rule.kind == "rules table" and rule.value_text == "Backend.DISABLED"
    assert rule.target == "cuda_graph_config.prefill.backend"
    assert rule.line < rule.write_line
    kinds = [g.kind for g in rule.guards]
    # It runs only when apply_cuda_graph_compatibility finds the prefill backend BREAKABLE.
    assert kinds == ["caller"] * 4 + ["earlier rule"] * 6 + ["rule"]
    assert rule.guards[3].text == "cfg.cuda_graph_config.prefill.backend == Backend.BREAKABLE"
    assert rule.guards[3].where == "apply_cuda_graph_compatibility:165"
    assert rule.guards[-1].text.startswith("model_config_of(server_args).is_multimodal and")
    # 0.5.23 lets Qwen3.5 keep its breakable prefill graph, so the rule does not fire.
    assert rule.status == "not fired"
    assert (
        f"Qwen3_5ForConditionalGeneration is in multimodal_breakable_cuda_graph_supported_model_archs ({MODEL_CONFIG}:2501)"
        in (rule.evidence)
    )


def test_0_5_23_explains_the_prefill_off_switch(prefill_0523):
    (switch,) = [
        s for s in prefill_0523.sites if s.guards and s.guards[-1].text == "cfg.disable_prefill_cuda_graph"
    ]
    assert (switch.kind, switch.function, switch.value_text) == (
        "setter call",
        "parse_cuda_graph_config",
        "Backend.DISABLED",
    )
    assert switch.status == "fired"


# --------------------------------------------------------------------------- layouts, on small trees


CHAINS = """
class ServerArgs:
    def _resolve(self):
        if self.mode == "off":
            return
        elif self.mode == "skip":
            raise ValueError("skip")

        # A. big batches
        if self.batch > 8:
            self.flag = True
        else:
            # B. small batches
            self.flag = False
        for item in self.items:
            self.flag = item
        setattr(self, "flag", "via setattr")

    def _other(self):
        def helper(x):
            self.flag = x
        declare_resolution(self, "source", flag=self.batch * 2)
"""


def test_chains_early_returns_else_loops_setattr_and_keyword_writes():
    tree = DictTree({"srt/server_args.py": CHAINS})
    exp = explain(tree, "flag", {"mode": "on", "batch": 16, "items": [1]})
    by_line = {s.line: s for s in exp.sites}
    assert sorted(by_line) == [11, 14, 16, 17, 21, 22]
    big = by_line[11]
    assert [(g.condition, g.kind, g.passes) for g in big.guards] == [
        ("not (self.mode == 'off')", "early return", True),
        ("not (self.mode == 'skip')", "early return", True),
        ("self.batch > 8", "if", True),
    ]
    assert (big.rule, big.rule_line, big.status) == ("A. big batches", 9, "fired")
    small = by_line[14]
    assert (small.rule, small.status, small.guards[-1].kind) == ("B. small batches", "not fired", "else")
    assert (by_line[16].status, by_line[16].guards[-1].kind) == ("unknown", "loop")
    assert (by_line[17].kind, by_line[17].value_text, by_line[17].status) == (
        "setattr",
        "'via setattr'",
        "fired",
    )
    assert by_line[21].function == "ServerArgs._other.<locals>.helper"
    assert by_line[21].status == "unknown"
    assert (by_line[22].kind, by_line[22].value_text, by_line[22].status) == (
        "keyword",
        "self.batch * 2",
        "fired",
    )

    off = explain(tree, "flag", {"mode": "off", "batch": 16, "items": []})
    assert _site(off, 11).status_reason == "returns early at line 4: self.mode == 'off' is True"


TABLE = """
def handle(server_args):
    cfg = resolving_view(server_args)
    if cfg.locked:
        return
    rules = [
        ("too big", lambda: cfg.batch > 8),
        # needs the accelerator
        (None, lambda: is_hip()),
        ("lora", lambda: bool(cfg.lora_paths) or cfg.enable_lora),
        (None, lambda: cfg.other),
    ]
    for name, predicate in rules:
        if predicate():
            declare_resolution(server_args, "handle", graph=with_phase(cfg.graph, Phase.PREFILL, backend="off"))
            return
"""


def test_rules_table_expands_into_one_site_per_rule():
    tree = DictTree({"srt/arg_groups/graph_hook.py": TABLE})
    exp = explain(
        tree, "graph.prefill.backend", {"locked": False, "batch": 4, "lora_paths": ["a"], "enable_lora": None}
    )
    sites = exp.sites
    assert [(s.rule, s.line, s.write_line) for s in sites] == [
        ("too big", 7, 15),
        ("needs the accelerator", 9, 15),
        ("lora", 10, 15),
        ("", 11, 15),  # a comment above an earlier entry is not this entry's label
    ]
    assert [s.status for s in sites] == ["not fired", "unknown", "unknown", "not fired"]
    assert sites[3].status_reason == "an earlier rule 'lora' matched first and the loop stopped"
    assert sites[1].status_reason.endswith("is_hip(): hardware probe, not in the log")
    # The loop stops at the first match, so "lora" fires only if the accelerator rule did not.
    assert [g.kind for g in sites[2].guards] == ["early return", "earlier rule", "earlier rule", "rule"]
    assert sites[2].guards[-1].passes is True
    assert exp.sites[0].target == "graph.prefill.backend" and exp.sites[0].value_text == "'off'"

    decode_only = TABLE.replace("Phase.PREFILL", "Phase.DECODE")
    assert (
        explain(DictTree({"srt/arg_groups/graph_hook.py": decode_only}), "graph.prefill.backend").sites == []
    )


PASSES = """
def register_post_process(fn):
    return fn


@register_post_process
def _sampling_default(view):
    if view.platform_default:
        return {"sampling_backend": "flashinfer" if view.fast else "pytorch"}
    return {}


@register_post_process
def _picked(view):
    out = {}
    if view.deterministic:
        out["sampling_backend"] = "pytorch"
    return out


def not_a_pass(view):
    return {"sampling_backend": "never"}
"""


def test_a_resolution_pass_writes_the_keys_of_the_dict_it_returns():
    """0.5.19+ passes (`@register_post_process`, given a view of the args) decide fields by returning them."""
    tree = DictTree({"srt/arg_groups/overrides.py": PASSES})
    exp = explain(tree, "sampling_backend", {"platform_default": True, "fast": True, "deterministic": False})
    assert [(s.function, s.line, s.kind, s.status) for s in exp.sites] == [
        ("_sampling_default", 9, "returned", "fired"),
        ("_picked", 17, "returned", "not fired"),
    ]
    assert exp.sites[0].value_text == "'flashinfer' if view.fast else 'pytorch'"


def test_a_hook_run_by_run_hook_is_reached_under_its_callers_guard():
    """`run_hook(handle, server_args)` calls `handle`: the guard around that call decides whether its writes run."""
    hooks = """
def run_hook(fn, server_args):
    fn(server_args)


def handle_spec(server_args):
    server_args.max_running_requests = 48


def pipeline(server_args):
    if server_args.speculative_algorithm is not None:
        run_hook(handle_spec, server_args)
"""
    tree = DictTree({"srt/arg_groups/pipeline.py": hooks})
    plain = explain(tree, "max_running_requests", {"speculative_algorithm": None, "max_running_requests": None})
    spec = explain(tree, "max_running_requests", {"speculative_algorithm": "EAGLE", "max_running_requests": None})
    assert [s.status for s in plain.sites] == ["not fired"] and [s.status for s in spec.sites] == ["fired"]
    assert plain.sites[0].guards[0].kind == "caller"


def test_rules_table_without_a_stop_fires_every_match():
    source = """
    class ServerArgs:
        def _table(self):
            rules = [("a", lambda: self.x), ("b", lambda: self.y)]
            for _name, predicate in rules:
                if predicate():
                    self.graph.prefill.backend = "off"
    """
    exp = explain(DictTree({"srt/server_args.py": source}), "graph.prefill.backend", {"x": True, "y": True})
    assert [(s.rule, s.status) for s in exp.sites] == [("a", "fired"), ("b", "fired")]


def test_setter_helpers_and_whole_object_writes():
    source = """
    class ServerArgs:
        def _parse(self):
            config = default_config()

            def _set(phase, key, value):
                setattr(getattr(config, phase), key, value)

            if self.disable_prefill:
                _set(Phase.PREFILL, "backend", "off")
            if self.disable_decode:
                _set(Phase.DECODE, "backend", "off")
            self.graph = config
    """
    exp = explain(
        DictTree({"srt/server_args.py": source}), "graph.prefill.backend", {"disable_prefill": True}
    )
    assert [(s.line, s.kind, s.target, s.value_text, s.status) for s in exp.sites] == [
        (10, "setter call", "graph.prefill.backend", "'off'", "fired"),
        (13, "assign", "graph", "config", "fired"),
    ]


def test_guards_are_never_executed(tmp_path):
    marker = tmp_path / "ran"
    source = f"""
    class ServerArgs:
        def _evil(self):
            if __import__("os").system("touch {marker}") == 0 or open("{marker}", "w"):
                self.flag = True
    """
    exp = explain(DictTree({"srt/server_args.py": source}), "flag", {})
    assert exp.sites[0].status == "unknown"
    assert not marker.exists()


def test_the_model_config_is_followed_through_helpers_and_lists():
    model_config = """
    ARCHS = [
        "VisionLM",
        *EXTRA,
    ]
    EXTRA = ("OtherVL",)

    def is_vision(archs):
        return any(a in ARCHS for a in archs)

    class ModelConfig:
        def __init__(self, model_path, enable_vision=None):
            if enable_vision is None:
                enable_vision = True
            self.is_vision = enable_vision and is_vision(self.hf_config.architectures)

        @staticmethod
        def from_server_args(server_args):
            return ModelConfig(model_path=server_args.model_path, enable_vision=server_args.vision)
    """
    server_args = """
    class ServerArgs:
        vision: bool = None

        def _h(self):
            if self.get_model_config().is_vision:
                self.flag = True
    """
    tree = DictTree({"srt/configs/model_config.py": model_config, "srt/server_args.py": server_args})
    yes = explain(tree, "flag", {"model_path": "/m"}, {"architectures": ["OtherVL"]})
    assert yes.sites[0].status == "fired"
    assert "OtherVL is in ARCHS (sglang/srt/configs/model_config.py:2)" in yes.sites[0].evidence
    assert (
        "vision is not in the snapshot: its default None is used (sglang/srt/server_args.py:3)"
        in yes.sites[0].evidence
    )
    no = explain(tree, "flag", {"model_path": "/m", "vision": False}, {"architectures": ["OtherVL"]})
    assert no.sites[0].status == "not fired"


def test_a_warm_tree_is_not_read_again_and_its_cache_goes_with_it():
    tree = DictTree({"srt/server_args.py": CHAINS})
    first = explain(tree, "flag", {"mode": "on", "batch": 1, "items": []})
    reads = tree.reads
    assert reads > 0
    second = explain(tree, "flag", {"mode": "on", "batch": 16, "items": []})
    assert tree.reads == reads
    assert _site(first, 11).status == "not fired" and _site(second, 11).status == "fired"
    cached = weakref.ref(modules_for(tree))
    assert modules_for(tree) is cached()  # the parsed modules explain() used, kept with the tree
    del tree
    gc.collect()
    assert cached() is None


def test_input_errors():
    tree = DictTree({"srt/server_args.py": CHAINS})
    with pytest.raises(ModelConfigError, match="cannot read the model config"):
        explain(tree, "flag", {}, "/nonexistent/config.json")
    with pytest.raises(TypeError, match="snapshot must be"):
        explain(tree, "flag", 42)
    with pytest.raises(ValueError):
        normalize_flag("--")
    empty = explain(tree, "no_such_flag", {})
    assert empty.sites == [] and "nothing in this tree assigns no_such_flag" in empty.hint


# --------------------------------------------------------------------------- the evaluator, by property

DOMAIN = [None, False, True, 0, 1, 2]
FIELDS = ["a", "b", "c"]

leaves = st.one_of(
    st.sampled_from(FIELDS).map(lambda f: ("field", f)),
    st.sampled_from(DOMAIN).map(lambda v: ("const", v)),
)
exprs = st.recursive(
    leaves,
    lambda sub: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), sub, sub),
        st.tuples(st.just("not"), sub),
        st.tuples(st.just("cmp"), st.sampled_from(["==", "!=", "<", ">=", "is", "is not"]), sub, sub),
        st.tuples(st.sampled_from(["in", "not in"]), sub, st.lists(sub, max_size=3)),
    ),
    max_leaves=6,
)


def _source(e) -> str:
    kind = e[0]
    if kind == "field":
        return f"self.{e[1]}"
    if kind == "const":
        return repr(e[1])
    if kind == "not":
        return f"(not {_source(e[1])})"
    if kind == "cmp":
        return f"({_source(e[2])} {e[1]} {_source(e[3])})"
    if kind in ("in", "not in"):
        return f"({_source(e[1])} {kind} [{', '.join(_source(x) for x in e[2])}])"
    return f"({_source(e[1])} {kind} {_source(e[2])})"


def _oracle(e, env):
    """Python's own semantics for the generated expression, computed without eval."""
    kind = e[0]
    if kind == "field":
        return env[e[1]]
    if kind == "const":
        return e[1]
    if kind == "not":
        return not _oracle(e[1], env)
    if kind == "and":
        left = _oracle(e[1], env)
        return _oracle(e[2], env) if left else left
    if kind == "or":
        left = _oracle(e[1], env)
        return left if left else _oracle(e[2], env)
    if kind in ("in", "not in"):
        found = _oracle(e[1], env) in [_oracle(x, env) for x in e[2]]
        return found if kind == "in" else not found
    a, b = _oracle(e[2], env), _oracle(e[3], env)
    return {
        "==": lambda: a == b,
        "!=": lambda: a != b,
        "<": lambda: a < b,
        ">=": lambda: a >= b,
        "is": lambda: a is b,
        "is not": lambda: a is not b,
    }[e[1]]()


def _truth_or_error(e, env):
    try:
        return bool(_oracle(e, env))
    except TypeError:
        return "error"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=exprs,
    values=st.fixed_dictionaries({f: st.sampled_from(DOMAIN) for f in FIELDS}),
    known=st.sets(st.sampled_from(FIELDS)),
)
def test_a_known_guard_value_holds_for_every_value_of_the_unknown_fields(expr, values, known):
    """Sound three-valued evaluation: a True/False answer must hold whatever the unknown fields are.

    Worlds where Python would raise (None < 1) are left out: the server being explained
    finished resolving its arguments, so its guards did not raise.
    """
    source = (
        f"class ServerArgs:\n    def _h(self):\n        if {_source(expr)}:\n            self.flag = True\n"
    )
    snapshot = {f: values[f] for f in known}
    (site,) = explain(DictTree({"srt/server_args.py": source}), "flag", snapshot).sites
    result = site.guards[-1].result
    missing = [f for f in FIELDS if f not in known]
    outcomes = {
        _truth_or_error(expr, {**snapshot, **dict(zip(missing, combo, strict=True))})
        for combo in itertools.product(DOMAIN, repeat=len(missing))
    }
    worlds = outcomes - {"error"}
    if result is None:
        assert site.status == "unknown" and site.guards[-1].reason
    else:
        assert worlds <= {result}, (source, snapshot, result, outcomes)
        assert site.status == ("fired" if result else "not fired")
    if not missing:
        assert result == (worlds.pop() if worlds else None), (source, snapshot, result)


def test_a_cli_command_run_in_process_leaves_the_collector_as_it_found_it(capsys):
    # The CLI freezes parsed trees out of the cyclic collector while its command runs; a notebook or
    # a test that calls main() in its own process must get a normal collector back, or the trees
    # (and the test above) would never be freed.
    from kit._pysource import modules
    from kit.cli import main

    tree_source = Path(__file__).parent / "data" / "provenance" / "incident-0.5.11.log"
    assert main(["args", "read", str(tree_source), "--sglang", "0.5.11"]) == 0
    assert capsys.readouterr().out
    assert modules._FREEZE is False and gc.get_freeze_count() == 0


def _package(root: Path, files: dict[str, str]):
    """A small sglang package on disk (a real SourceTree: the callers in other modules are found with grep)."""
    pkg = root / "sglang"
    for rel, text in {"__init__.py": "", "srt/__init__.py": "", "srt/arg_groups/__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return SourceTree.at(LocalHost(), str(pkg))


_HOOK = '''
import re


def is_instance(path):
    return re.match(r"^instance://", path) is not None


def handle_memory(server_args, gpu_mem):
    if gpu_mem is not None and gpu_mem > 40 * 1024:
        server_args.chunked_prefill_size = 8192


def handle_model(server_args):
    if is_instance(server_args.model_path):
        server_args.disable_radix_cache = True
'''


@pytest.mark.parametrize(("gpu_mem", "status"), [(49140, "fired"), (16384, "not fired")])
def test_a_hook_parameter_is_bound_at_its_one_call_in_another_module(tmp_path, gpu_mem, status):
    """0.5.19's pipeline calls `handle_gpu_memory_settings(server_args, gpu_mem)` from pipeline.py: the hook's
    guard on `gpu_mem` is decided by the value at that call."""
    pipeline = ("from sglang.srt.arg_groups.memory_hook import handle_memory\n\n\n"
                f"def run(server_args):\n    gpu_mem = {gpu_mem}\n    handle_memory(server_args, gpu_mem)\n")
    tree = _package(tmp_path, {"srt/arg_groups/memory_hook.py": _HOOK, "srt/arg_groups/pipeline.py": pipeline})
    (site,) = explain(tree, "chunked_prefill_size", {"model_path": "/m"}).sites
    assert site.status == status, site.status_reason


@pytest.mark.parametrize(("path", "status"), [("instance://a", "fired"), ("/models/Qwen3-8B", "not fired")])
def test_a_function_of_plain_values_is_followed_and_a_regex_evaluated(tmp_path, path, status):
    tree = _package(tmp_path, {"srt/arg_groups/memory_hook.py": _HOOK})
    (site,) = explain(tree, "disable_radix_cache", {"model_path": path}).sites
    assert site.status == status, site.status_reason
