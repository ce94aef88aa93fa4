"""Rules over sglang's capacity arithmetic (kit.doctor.capacity): the KV pool against the context length and
the load, and prefill chunks that hold decode. The graph ceiling and the state-pool cap are told by
rules.py's and rules_runtime.py's rules; their checks show in ``sgl-kit doctor --capacity``."""

from __future__ import annotations

from .capacity import FINDING, report
from .case import Case
from .rulebase import ALL_VERSIONS, Fix, Impact, Rule, not_estimated, rule

__all__: list[str] = []


def _check(case: Case, id: str):
    found = report(case).check(id)
    return found if found.status == FINDING else None


def _lines(id: str):
    def when(case: Case) -> list[str] | None:
        check = _check(case, id)
        if check is None:
            return None
        return [check.conclusion] + [f"input {i.text()}" for i in check.inputs if i.value is not None]
    return when


def _impact(id: str):
    def impact(case: Case) -> Impact:
        check = _check(case, id)
        return not_estimated(check.impact.removeprefix("not estimated: ").split("; would tell:")[0],
                             "throughput under load", *check.impact.split("would tell: ")[1:])
    return impact


def _sites(id: str):
    return lambda case: [s.where for s in (_check(case, id).sites if _check(case, id) else [])]


def _kv_fix(case: Case) -> Fix:
    return [], ["a --context-length no larger than the pool, or more room for it (a higher --mem-fraction-static, "
                "a larger --max-total-tokens, more GPUs)"], []


def _chunk_fix(case: Case) -> Fix:
    return [], [f"{case.option('enable_mixed_chunk') or '--enable-mixed-chunk'} runs decode alongside prefill chunks; "
                "a smaller --chunked-prefill-size shortens each stall"], []


rule(Rule("kv-pool-short", "The KV pool is short of the context length or the load", ALL_VERSIONS,
          ("args",), when=_lines("kv-pool"), impact=_impact("kv-pool"),
          fix=_kv_fix, sites=_sites("kv-pool"), affects=("queueing",), after="findings",
          uses=("bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "prefill", "source", "version")))
rule(Rule("prefill-chunks-hold-decode", "Prefill chunks hold the running requests' decode", ALL_VERSIONS,
          ("prefill",), when=_lines("chunked-prefill"), impact=_impact("chunked-prefill"),
          fix=_chunk_fix, sites=_sites("chunked-prefill"), affects=("prefill/extend",), after="findings",
          uses=("args", "bench", "capacity", "command", "decode", "environ", "hardware", "model_config", "notices", "source", "version")))
