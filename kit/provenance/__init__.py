"""Why a server flag has its value: the code that assigns it, its guards, and which fired.

`explain(tree, "disable_piecewise_cuda_graph", snapshot, model_config)` finds every
assignment to the flag in the SGLang source on the box (by ast, never by line
number), walks up to the conditions that guard each one (early returns included),
and evaluates those conditions against the server args from the log and the
model's config.json. Model-config properties such as `is_multimodal` are followed
into `ModelConfig`'s own source, so the answer names the list and line that made
the decision.

It knows the layouts SGLang moved this logic through:
- chains of numbered `if` rules in a `ServerArgs` method (0.5.10-0.5.13);
- rules tables of `(name, lambda)` pairs walked by a loop (0.5.14-0.5.18), including
  `_handle_model_capability_adjustments` (0.5.17-0.5.18);
- hook modules that call `declare_resolution(server_args, ..., field=...)` (0.5.19 and later).
From 0.5.14 the prefill graph is a nested config, `cuda_graph_config.prefill.backend`, built
and then tested during the resolution: ``sequence.py`` follows its value in the order the
writes run, so the rules that test it are decided. A name from another release is resolved
first (kit.server_args.lineage): `why disable_piecewise_cuda_graph` on 0.5.18 explains
`cuda_graph_config.prefill.backend` and says why.

- ``explain.py``: the entry point; ``sites.py``: finding the writes; ``sequence.py``: a nested config in order;
- ``guards.py``: the conditions on the way to each write, and which held;
- ``result.py``: Guard, AssignmentSite, FlagExplanation; ``render.py``: text and HTML;
- ``choices.py``: which ``return`` of a function fires (sglang's automatic choices);
- ``fixes.py``: the flag that skips a rule (``escapes``), and startup checks that refuse a launch (``refusals``);
- ``startup.py``: every startup check of a release (raise/assert of the resolution and its hooks), evaluated
  for one launch (``startup_checks``): refuses, passes or unchecked with what it needs;
- ``compute.py``: what a function computes for numbers the evidence holds, by its own arithmetic (``compute``);
- ``reach.py``: whether a line runs for a launch, with the calls from other modules that reach it (``Reacher``).
"""

from .choices import Choice, choice
from .compute import SERVER_ARGS, Computed, compute
from .explain import CUDA_PROBES, explain, explain_server, normalize_flag, why
from .fixes import Escape, Refusal, escapes, refusals
from .reach import Reach, Reacher
from .result import AssignmentSite, FlagExplanation, Guard
from .startup import StartupCheck, StartupReport, check_functions
from .startup import evaluate as startup_checks

__all__ = ["CUDA_PROBES", "SERVER_ARGS", "AssignmentSite", "Choice", "Computed", "compute", "Escape", "FlagExplanation", "Guard", "Reach", "Reacher", "Refusal", "choice", "escapes", "explain", "explain_server", "why",
           "normalize_flag", "refusals", "StartupCheck", "StartupReport", "check_functions", "startup_checks"]
