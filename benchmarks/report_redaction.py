"""The cost of redaction in `build_report`: the kit's own time beside the scanner's (detect-secrets).

The notebook is the one of ``benchmarks/report.py`` (about 50 cells like an
investigation's, --figures plotly figures of --points points each, secrets in its launch
command and environment). Each build is timed whole, and inside it:

- **scanner**: the time spent in detect-secrets' code, its pattern detectors and its
  entropy measure (``kit.report.scanner.COST``);
- **nbconvert**: the HTML exporter (``kit.report.page.render_html``), a library too;
- **kit**: the rest, the kit's own work (its rules, tainting, the encoded forms, the
  survivors' walk, the page's assembly).

Times are CPU seconds of this process (``time.process_time``), so a busy machine does not
inflate them; the wall-clock total is printed beside. The target is kit <= 1 s for a
50-cell notebook with 4 figures, the scanner's cost beside it. Each row is the median of
--runs builds, after one warm-up build.

    .venv/bin/python benchmarks/report_redaction.py [--cells 50] [--figures 4] [--points 2000] [--runs 5]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import parse_args, warm_notebook  # noqa: E402

import kit.report.page as page  # noqa: E402
from kit.report import build_report  # noqa: E402
from kit.report.scanner import COST, detect_secrets_version  # noqa: E402

SPENT = {"nbconvert": 0.0}


def _timed_render(render):
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return render(*args, **kwargs)
        finally:
            SPENT["nbconvert"] += time.process_time() - start
    return wrapper


def _one(path: Path, out: Path, **kwargs) -> dict:
    COST["seconds"], COST["calls"], SPENT["nbconvert"] = 0.0, 0, 0.0
    start, wall = time.process_time(), time.perf_counter()
    result = build_report([path], out, **kwargs)
    total, wall = time.process_time() - start, time.perf_counter() - wall
    scanner, nbconvert = COST["seconds"], SPENT["nbconvert"]
    return {"wall": wall, "total": total, "scanner": scanner, "nbconvert": nbconvert, "kit": total - scanner - nbconvert,
            "calls": COST["calls"], "secrets": result.secrets, "kept": result.kept_strings}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    page.render_html = _timed_render(page.render_html)

    with tempfile.TemporaryDirectory() as tmp:
        path, nb = warm_notebook(tmp, args)  # the warm-up also loads detect-secrets' plugins
        print(f"notebook: {len(nb.cells)} cells, {args.figures} plotly figures of {2 * args.points} points, "
              f"{path.stat().st_size / 1e6:.2f} MB; scanner: detect-secrets {detect_secrets_version()}; "
              f"median of {args.runs} runs")
        print(f"{'what':<20} {'kit s':>7} {'scanner s':>10} {'nbconvert s':>12} {'total s':>8} {'wall s':>7} "
              f"{'scans':>6} {'secrets':>8} {'kept':>5}")
        for label, name, kwargs in (("HTML page", "r.html", {}), ("HTML, --strict", "s.html", {"strict": True}),
                                    ("Markdown summary", "r.md", {"markdown": True})):
            runs = [_one(path, Path(tmp) / name, **kwargs) for _ in range(args.runs)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{label:<20} {med['kit']:>7.2f} {med['scanner']:>10.3f} {med['nbconvert']:>12.2f} "
                  f"{med['total']:>8.2f} {med['wall']:>7.2f} {int(med['calls']):>6} {int(med['secrets']):>8} {int(med['kept']):>5}")


if __name__ == "__main__":
    main()
