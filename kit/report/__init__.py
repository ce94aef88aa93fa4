"""Share an investigation: executed notebooks to one self-contained HTML page or a Markdown summary.

An executed notebook from a production box holds secrets: API keys in launch commands,
tokens in the environment, passwords in URLs. ``build_report`` removes each secret its
rules recognise (detect-secrets' detectors and the kit's own), lists by place the long
random-looking strings they kept (``strict=True`` removes those too), and writes a report
that opens anywhere, with no network and no Jupyter::

    from kit.report import build_report, redact
    result = build_report(["notebooks/_executed/00_connect.ipynb"], "report.html")
    print(result)          # report.html (5.1 MB): 2 secrets removed: 1 api_key, 1 hf_token
    redact("--api-key sk-123abc --tp 2")   # ('--api-key <redacted:api_key> --tp 2', Counter({'api_key': 1}))

What counts as a secret, and the forms it is found in, is the docstring of
``kit.report.redaction``; how the page stays offline is that of ``kit.report.page``.
"""

from __future__ import annotations

from kit._verbs import make_callable

from .build import ReportResult, build_report, hosts_summary, kept_summary, redaction_summary, scope_note
from .redaction import Redactor, redact, redact_notebook

__all__ = ["Redactor", "ReportResult", "build_report", "hosts_summary", "kept_summary", "redact", "redact_notebook",
           "redaction_summary", "scope_note"]


make_callable(__name__, "build_report")  # kit.report([...], out) is build_report([...], out)
