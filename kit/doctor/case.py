"""One server under examination: its evidence, and the questions rules ask of it, each answered once.

A rule asks ``case.value("disable_overlap_schedule")``, ``case.asked("...")`` (did the launch
command set it?), ``case.explain("...")`` (provenance: which lines of this version's source set
it, and which fired), ``case.option("...")`` (the flag in this version's words). Answers that
need the source are None when there is none; a rule then says less, it does not fail.

While a rule runs in strict mode (kit.doctor.facts), the case records the facts the rule touches:
each Evidence attribute read through ``case.ev`` counts as its fact, and the cached answers
(``explain``, ``flags``, ``fields``, ``spec_auto``, the gate chains, ...) count as the facts they
stand for (``source``), whatever they read inside, so what a rule is seen to read does not depend
on which rule asked first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from kit._text import short_path
from kit.errors import KitError

from .evidence import Evidence

__all__ = ["Case"]

_MISSING = object()


class _answer:
    """A cached answer of the Case that stands for ``facts``: reading it counts as reading them."""

    def __init__(self, *facts: str) -> None:
        self.facts = facts

    def __call__(self, fn):
        self.fn, self.name, self.__doc__ = fn, "_answer_" + fn.__name__, fn.__doc__
        return self

    def __get__(self, case, owner=None):
        if case is None:
            return self
        case.touch(*self.facts)
        if self.name not in case.__dict__:
            with case.reading():
                case.__dict__[self.name] = self.fn(case)
        return case.__dict__[self.name]

    def __set__(self, case, value) -> None:
        case.__dict__[self.name] = value


def _stands_for(*facts: str):
    """A method of the Case whose answer counts as reading ``facts`` (and only them)."""
    def wrap(fn):
        @wraps(fn)
        def method(self, *args, **kwargs):
            with self.reading(*facts):
                return fn(self, *args, **kwargs)
        return method
    return wrap


class Case:
    def __init__(self, evidence: Evidence) -> None:
        self._ev = evidence
        self._seen: set[str] | None = None  # strict mode: the facts the running rule touched
        self._quiet = 0
        self._explained: dict[str, Any] = {}
        self.roofline = None  # kit.doctor.Roofline, set before the rules run
        self.found: list[str] = []  # ids of the rules that fired so far
        self.covered: set[str] = set()  # fields their findings speak of
        self.questions: list[str] = []  # open questions rules leave (a known issue that may apply: what to send)
        self.refused: list[str] = []  # "path:line: why" for each site :meth:`cited` refused (the engine reads
        # and clears it around each rule, so a finding lists the sites its rule looked at and left out)

    # ---- what a rule reads (kit.doctor.facts)

    @property
    def ev(self) -> Evidence:
        if self._seen is None or self._quiet:
            return self._ev
        from .facts import Watched

        return Watched(self._ev, self._seen)  # type: ignore[return-value]

    @ev.setter
    def ev(self, evidence: Evidence) -> None:
        self._ev = evidence

    @contextmanager
    def watching(self) -> Iterator[set[str]]:
        """Record the facts read through this case (strict mode), for one rule."""
        self._seen, self._quiet = set(), 0
        try:
            yield self._seen
        finally:
            self._seen = None

    def touch(self, *facts: str) -> None:
        if self._seen is not None and not self._quiet:
            self._seen.update(facts)

    @contextmanager
    def reading(self, *facts: str) -> Iterator[None]:
        """An answer that stands for ``facts``: they are recorded, what it reads inside is not."""
        self.touch(*facts)
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    # ---- values

    def value(self, name: str, default: Any = None) -> Any:
        """A field, or a dotted path into a nested one (``cuda_graph_config.prefill.backend``)."""
        node: Any = self.ev.args
        for part in name.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif node is not None and hasattr(node, part) and not isinstance(node, (str, int, float)):
                node = getattr(node, part)
            else:
                return default
        return node

    def has(self, name: str) -> bool:
        return self.value(name, _MISSING) is not _MISSING

    def unknown(self, name: str) -> str | None:
        """Why the evidence does not tell this field (a cut-off server_args line, a flag set to
        `${VAR}`), or None. An unknown field is not at its default: it is not known."""
        return self.ev.unknown.get(name.split(".")[0])

    def asked(self, name: str) -> bool | None:
        """Whether the launch command set the field; None when the command is not known."""
        if self.ev.explicit is None:
            return None
        top = name.split(".")[0]
        return top in self.ev.explicit or top in self.ev.asked_unknown

    @property
    def tp(self) -> int:
        return int(self.value("tp_size") or 1)

    def quantization(self) -> tuple[str | None, str]:
        """The quantization method the server loads and where that was read: the resolved
        ``quantization`` field, else config.json's ``quantization_config.quant_method`` (sglang reads the
        checkpoint's own when no --quantization is given)."""
        asked = self.value("quantization")
        if asked and not self.unknown("quantization"):
            return str(asked), "server arguments (quantization)"
        config = self.ev.model_config
        if config is not None:
            q = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config")
            if isinstance(q, dict) and q.get("quant_method"):
                return str(q["quant_method"]), "config.json quantization_config.quant_method"
        return None, ""

    def tp_gpus(self) -> tuple[list[str], str]:
        """The topology names (GPU0, GPU1, ...) of the GPUs the TP ranks run on, and how that was decided."""
        tp = self.tp
        visible = (self.ev.environ or {}).get("CUDA_VISIBLE_DEVICES")
        base, step = int(self.value("base_gpu_id") or 0), int(self.value("gpu_id_step") or 1)
        ids = [str(i) for i in range(64)]
        how = "GPU 0.. (no CUDA_VISIBLE_DEVICES)"
        if visible:
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            how = f"CUDA_VISIBLE_DEVICES={visible}"
        chosen = [ids[base + i * step] for i in range(tp) if base + i * step < len(ids)]
        return [f"GPU{c}" for c in chosen if c.isdigit()], how + f", base_gpu_id {base}, tp_size {tp}"

    @property
    def speculative(self) -> bool:
        return self.value("speculative_algorithm") not in (None, "", "NONE")

    # ---- the source of this version

    @_answer("source")
    def fields(self) -> set[str]:
        """The ServerArgs fields of this version (empty without a source)."""
        from kit.server_args import defaults

        if self.ev.tree is None:
            return set(self.ev.args)
        try:
            return set(defaults(self.ev.tree))
        except KitError:
            return set(self.ev.args)

    @_answer("source")
    def flags(self):
        from kit.server_args import flag_table

        if self.ev.tree is None:
            return None
        try:
            return flag_table(self.ev.tree)
        except KitError:
            return None

    def option(self, field: str) -> str | None:
        """This version's command-line flag for a field (``--enforce-piecewise-cuda-graph``), or None."""
        if self.flags is None:
            return None
        spec = next((s for s in self.flags if s.field == field), None)
        return spec.name if spec is not None else None

    @_stands_for("source")
    def explain(self, name: str):
        """kit.provenance.explain of the field against this server's args, config, command and environment."""
        if name not in self._explained:
            self._explained[name] = None
            if self.ev.tree is not None:
                from kit.provenance import explain

                try:
                    self._explained[name] = explain(self.ev.tree, name, self.ev.args, self.ev.model_config,
                                                    command=self.ev.explicit, environ=self.ev.environ,
                                                    probes=self.probes)
                except KitError:
                    pass
        return self._explained[name]

    @property
    def probes(self):
        """sglang's hardware probes answered as NVIDIA GPUs would, when the evidence shows them, with
        what the server's host answers (``Evidence.probes``: kit.provenance.host_probes)."""
        out = dict(self.ev.probes or {})
        gpus = getattr(self.ev.hardware, "gpus", None) or []
        if gpus and all("NVIDIA" in (g.name or "").upper() for g in gpus):
            from kit.provenance import CUDA_PROBES

            out = {**out, **CUDA_PROBES}
        return out or None

    @property
    def no_gpu(self) -> str | None:
        """Why this server has no GPU to run CUDA graphs or GPU attention kernels on, or None: its
        device is ``cpu`` (sglang then keeps every tensor and kernel on the host)."""
        device = self.value("device")
        if isinstance(device, str) and device.lower() == "cpu":
            gpus = getattr(self.ev.hardware, "gpus", None)
            seen = "; no GPU visible on its host" if gpus == [] else ""
            return f"device = 'cpu'{seen}"
        return None

    def fired(self, name: str) -> list:
        exp = self.explain(name)
        return exp.fired if exp is not None else []

    def resolved_by(self, name: str) -> list:
        """Fired writes in sglang's argument resolution (server_args, arg_groups), not runtime copies,
        that can have set this launch's value (:meth:`cited`: reached from a caller whose guards hold
        or are undecided, and a literal value equal to the one the evidence shows)."""
        return [s for s in self.fired(name) if ("server_args" in s.file or "arg_groups" in s.file)
                and self.cited(s.where, (name,))[0]]

    # ---- which cited sites can be the cause

    @_answer("source")
    def reacher(self):
        """kit.provenance.Reacher for this launch (None without a source)."""
        if self.ev.tree is None:
            return None
        from kit.provenance import Reacher

        try:
            return Reacher(self.ev.tree, self.ev.args, self.ev.model_config, command=self.ev.explicit,
                           environ=self.ev.environ, probes=self.probes)
        except KitError:
            return None

    def _explained_site(self, where: str, fields) -> tuple[str, Any] | None:
        """(field, AssignmentSite) of an explained write at ``where``, from the fields asked about first."""
        short = short_path(where)
        names = [f for f in fields if f] + [n for n in self._explained if n not in fields]
        for name in names:
            exp = self.explain(name) if name in fields else self._explained.get(name)
            for site in exp.sites if exp is not None else []:
                if short_path(site.where) == short:
                    return name, site
        return None

    def cited(self, where: str, fields=()) -> tuple[bool, str]:
        """Whether a finding may cite ``where`` (``file:line``) as the cause of the ``fields`` it speaks
        of: False, with why, when every path to that line has a guard that is false for this launch
        (its own, or a caller's in any module), or when it writes a literal other than the value the
        evidence shows. Undecided guards keep it."""
        fields = tuple(f for f in fields if f)
        found = self._explained_site(where, fields)
        whys = []
        if found is not None:
            name, site = found
            literal = _literal(site.value_text)
            value = self.value(name, _MISSING) if "." not in name else _MISSING
            if literal is not _MISSING and value is not _MISSING and not self.unknown(name) \
                    and not _same_value(literal, value):
                whys.append(f"it writes {name} = {site.value_text}, and this launch has {value!r}")
        reach = None
        if self.reacher is not None:
            if found is not None:
                reach = self.reacher.reach(short_path(where), site=found[1], shadowed={found[0].split(".")[0]})
            else:
                reach = self.reacher.reach(short_path(where), shadowed={f.split(".")[0] for f in fields})
            if reach.status == "not fired":
                whys.insert(0, reach.why_not())
        if whys:
            return self._refuse(where, "; and ".join(whys))
        return True, reach.status if reach is not None else "unknown"

    def _refuse(self, where: str, why: str) -> tuple[bool, str]:
        self.refused.append(f"{short_path(where)}: {why}")
        return False, why

    def origin(self, name: str) -> str:
        """Why the field has its value, in a few words, with the site that set it."""
        if self.unknown(name) and not self.has(name):
            return f"not known: {self.unknown(name)}"
        if self.asked(name):
            return "the launch command sets it"
        res = getattr(self.ev, "resolution", None)
        change = res.change(name) if res is not None else None
        if change is not None and change.decided and change.how != "read":
            rule = f" ({change.rule})" if change.rule else ""
            return f"sglang set it at {change.site}{rule}, resolved {change.how}"
        fired = self.resolved_by(name)
        if fired:
            site = fired[-1]
            rule = f" ({site.rule})" if site.rule else ""
            return f"sglang set it at {short_path(site.where)}{rule}"
        if self.asked(name) is None:
            return "not known whether the launch asked for it (no launch command)"
        default = self.cli_defaults.get(name.split(".")[0])
        if default is None or not default.known or default.value == self.value(name):
            return "the default"
        exp = self.explain(name)
        maybe = [short_path(s.where) for s in (exp.sites if exp is not None else []) if s.status == "unknown"
                 and ("server_args" in s.file or "arg_groups" in s.file) and s.value_text == repr(self.value(name))]
        where = f"; the sites that can, with guards the log cannot decide: {', '.join(maybe[:3])}" if maybe else ""
        return f"not asked for and not the default ({default.value!r}): sglang set it{where}"

    @_answer("source")
    def cli_defaults(self) -> dict:
        from kit.server_args import cli_defaults

        if self.ev.tree is None:
            return {}
        try:
            return dict(cli_defaults(self.ev.tree))
        except KitError:
            return {}

    # ---- speculative decoding

    @_answer("source", "model_config")
    def spec_auto(self):
        """sglang's own choice of (steps, topk, draft tokens) for this model, or None."""
        if self.ev.tree is None or not self.speculative:
            return None
        from kit.provenance import choice

        arch = ((self.ev.model_config or {}).get("architectures") or [""])[0]
        try:
            found = choice(self.ev.tree, ("auto_choose_speculative_params", "_auto_choose_speculative_params"),
                           self.ev.args, self.ev.model_config, parameters={"model_arch": arch})
        except KitError:
            return None
        return found if found is not None and found.known else None

    @property
    def accept_length(self) -> tuple[float | None, str]:
        if self.ev.bench and self.ev.bench.get("accept_length"):
            return float(self.ev.bench["accept_length"]), f"the benchmark {self.ev.bench['source']}"
        if self.ev.decode and self.ev.decode.get("accept_len"):
            return float(self.ev.decode["accept_len"]), self.ev.sources.get("decode", "the log")
        return None, ""

    @property
    def measured_tok_s(self) -> tuple[float | None, str]:
        if self.ev.bench and self.ev.bench.get("tok_s"):
            return float(self.ev.bench["tok_s"]), f"the benchmark {self.ev.bench['source']}"
        if self.ev.decode and self.ev.decode.get("gen_throughput") and self.ev.decode.get("single_stream"):
            return float(self.ev.decode["gen_throughput"]), self.ev.sources.get("decode", "the log")
        return None, ""

    # ---- the model

    @_answer("model_config")
    def text_config(self) -> dict:
        config = self.ev.model_config or {}
        return config.get("text_config") or config

    @property
    def hybrid_linear(self) -> bool:
        types = self.text_config.get("layer_types") or []
        return any("linear" in str(t) or "mamba" in str(t) for t in types) or "full_attention_interval" in self.text_config

    def gpu_profile(self):
        hw = self.ev.hardware
        name = getattr(hw, "gpu_name", None)
        if not name:
            return None
        from kit.dryrun import gpu_profile

        try:
            return gpu_profile(name)
        except KitError:
            return None


def _literal(text: str):
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _MISSING


def _same_value(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) < 1e-9
    return a == b or str(a) == str(b)
