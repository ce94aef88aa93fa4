"""A case: one investigation's evidence, captured once from a live server, kept, annotated and replayed.

    import kit
    kit.capture("lab", "out/case")                  # sgl-kit capture lab -o out/case
    d = kit.case.replay("out/case")                 # sgl-kit doctor --case out/case (offline)
    d, diff = kit.case.compare_case("out/case")     # ... --compare: new, gone, changed

- ``layout.py``: the directory (case.yaml, findings.json, the evidence files, sources/);
- ``capture.py``: collecting it from a live target, read-only, secrets masked;
- ``replay.py``: the doctor over it again, offline, and the comparison with its findings.json;
- ``notes.py``: notes on findings, and the cause found.
"""

from __future__ import annotations

from .capture import ENDPOINTS, CaptureResult, capture
from .layout import FORMAT, CaseDir, open_case
from .notes import note, resolve, show
from .replay import Comparison, compare, compare_case, evidence, replay

__all__ = ["ENDPOINTS", "FORMAT", "CaptureResult", "CaseDir", "Comparison", "capture", "compare", "compare_case",
           "evidence", "note", "open_case", "replay", "resolve", "show"]
