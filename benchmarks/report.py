"""How long `build_report` takes on an executed investigation notebook, and how big the page is.

The notebook is generated here: ~50 cells like an investigation's (prose, a parameters
cell, launch commands and server logs printed, `/server_info` JSON, tables as HTML, a few
secrets in the environment and the launch command), with --figures plotly figures of
--points points each, stored as `application/vnd.plotly.v1+json` as JupyterLab stores them.
Measured side by side in one run, each the median of --runs builds:

- redaction alone (`redact_notebook`);
- the HTML page (nbconvert, redaction, plotly.js inlined), with and without code cells;
- the Markdown summary.

    .venv/bin/python benchmarks/report.py [--cells 50] [--figures 4] [--points 2000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output  # noqa: E402

from kit.report import build_report, redact_notebook  # noqa: E402

LAUNCH = ("python -m sglang.launch_server --model-path /models/Qwen3.6-27B --tp 2 --port 30000 "
          "--api-key sk-bench7Hq2ZpR4mX9aLw3c --mem-fraction-static 0.85 --speculative-algorithm EAGLE")
ENVIRON = {"HF_TOKEN": "hf_" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef3", "CUDA_VISIBLE_DEVICES": "0,1",
           "NCCL_DEBUG": "INFO", "WANDB_API_KEY": "wb-Q8s2Pq9ZxW4rT6yB"}


def _figure(n: int, points: int, rng: random.Random) -> dict:
    import plotly.graph_objects as go

    x = list(range(points))
    fig = go.Figure([go.Scatter(x=x, y=[30 + rng.gauss(0, 3) for _ in x], name="baseline tok/s"),
                     go.Scatter(x=x, y=[42 + rng.gauss(0, 3) for _ in x], name="fixed tok/s")])
    fig.update_layout(title=f"throughput per request ({n})", xaxis_title="request", yaxis_title="tok/s",
                      template="plotly_white")
    return json.loads(fig.to_json())


def make_notebook(cells: int, figures: int, points: int, seed: int = 0) -> nbformat.NotebookNode:
    rng = random.Random(seed)
    nb = new_notebook()
    nb.metadata["papermill"] = {"parameters": {"target": "ssh://root@gpu-box-17:22", "server_port": 30000},
                                "end_time": "2026-05-01T10:00:00+00:00"}
    body = [new_markdown_cell("# Investigation: decode throughput halved after the upgrade"),
            new_code_cell('target = "ssh://root@gpu-box-17:22"\nserver_port = 30000', execution_count=1)]
    figure_at = {int((i + 1) * cells / (figures + 1)) for i in range(figures)}
    n = 2
    while len(body) < cells:
        n += 1
        if len(body) in figure_at:
            body.append(new_code_cell("fig", execution_count=n, outputs=[new_output(
                "display_data", data={"application/vnd.plotly.v1+json": _figure(n, points, rng),
                                      "text/html": "<div>figure</div>"})]))
        elif n % 4 == 0:
            body.append(new_markdown_cell(f"## Step {n}\n\nWhat the server said, and why it matters. " * 3))
        elif n % 4 == 1:
            log = "".join(f"[2026-05-01 10:00:{i % 60:02d} TP0] Decode batch. #running-req: 8, #token: {i * 37}, "
                          f"gen throughput (token/s): {30 + rng.random() * 10:.2f}\n" for i in range(60))
            body.append(new_code_cell("print(server.log_tail(60))", execution_count=n,
                                      outputs=[new_output("stream", name="stdout", text=f"sglang 0.5.11 at /opt\n{LAUNCH}\n{log}")]))
        elif n % 4 == 2:
            info = {"model_path": "/models/Qwen3.6-27B", "tp_size": 2, "api_key": "sk-bench7Hq2ZpR4mX9aLw3c",
                    "chunked_prefill_size": 8192, "environ": ENVIRON}
            body.append(new_code_cell("server_info", execution_count=n, outputs=[new_output(
                "execute_result", execution_count=n, data={"application/json": info, "text/plain": repr(info)})]))
        else:
            rows = "".join(f"<tr><td>flag_{i}</td><td>{rng.randint(0, 9999)}</td><td>default</td></tr>"
                           for i in range(30))
            body.append(new_code_cell("flags", execution_count=n, outputs=[new_output(
                "execute_result", execution_count=n, data={
                    "text/html": f"<table><tr><th>flag</th><th>value</th><th>source</th></tr>{rows}</table>",
                    "text/plain": "a table of 30 flags"})]))
    nb.cells = body
    return nb


def _median(fn, runs: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def parse_args(description: str) -> argparse.Namespace:
    """The options every report benchmark takes: the notebook's shape and the number of runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--figures", type=int, default=4)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    return parser.parse_args()


def warm_notebook(tmp: str, args: argparse.Namespace) -> tuple[Path, nbformat.NotebookNode]:
    """Write the notebook of ``args`` under ``tmp`` and build its report once (imports, templates, plotly.js)."""
    path = Path(tmp) / "investigation.ipynb"
    nb = make_notebook(args.cells, args.figures, args.points)
    nbformat.write(nb, path)
    build_report([path], Path(tmp) / "warm.html")
    return path, nb


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])

    with tempfile.TemporaryDirectory() as tmp:
        path, nb = warm_notebook(tmp, args)
        rows = []
        seconds, (_, counts) = _median(lambda: redact_notebook(nb), args.runs)
        rows.append(("redaction only", seconds, None, sum(counts.values())))
        for label, name, kwargs in (("HTML page", "r.html", {}), ("HTML, --no-input", "n.html", {"no_input": True}),
                                    ("Markdown summary", "r.md", {"markdown": True})):
            seconds, result = _median(lambda n=name, k=kwargs: build_report([path], Path(tmp) / n, **k), args.runs)
            rows.append((label, seconds, result.bytes, result.secrets))
        print(f"notebook: {len(nb.cells)} cells, {args.figures} plotly figures of {2 * args.points} points, "
              f"{path.stat().st_size / 1e6:.2f} MB on disk; median of {args.runs} runs")
        print(f"{'what':<18} {'time s':>8} {'size':>10} {'secrets':>8}")
        for label, seconds, size, secrets in rows:
            shown = f"{size / 1e6:.2f} MB" if size and size >= 1e6 else (f"{size / 1e3:.1f} kB" if size else "-")
            print(f"{label:<18} {seconds:>8.2f} {shown:>10} {secrets:>8}")


if __name__ == "__main__":
    main()
