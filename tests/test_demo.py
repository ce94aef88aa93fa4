"""`python -m kit.demo source`: the rule in a real sglang source, that it fired, and the fix of that version.

The story (`make demo`: notebooks 00-04 against the lab) runs over SSH in tests/test_notebooks.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _demo(*args: str, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.run([sys.executable, "-m", "kit.demo", "source", *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def at_80_columns() -> str:
    """`python -m kit.demo source` at 80 columns, run once: the two tests below read the same output."""
    return _demo(columns=80)


def test_demo_marks_rule_8_and_reports_it_fired(at_80_columns):
    out = at_80_columns
    assert "1228-1230: rule 8: Multimodal / VLM models" in out
    assert "if self.get_model_config().is_multimodal:" in out
    assert "1 fired" in out and "server_args.py:1230" in out
    # The fix comes from the source of this version: the early return at the top of the method.
    assert ("In 0.5.11 the way out is --enforce-piecewise-cuda-graph (the early return "
            "`if self.enforce_piecewise_cuda_graph` at srt/server_args.py:1196), which skips every rule") in out
    # and the source says it would not pay for this launch: the graph's own gate refuses the EAGLE target
    assert "But turned back on, the graph would not run for this launch" in " ".join(out.split())
    assert "piecewise_cuda_graph_runner.py:454" in out
    assert ("--language-only is not it: sglang 0.5.11 refuses it at startup (srt/server_args.py:3809: "
            "\"requires at least one encoder urls to be set via --encoder-urls\").") in out


def test_demo_at_80_columns_cuts_no_command_or_line_number(at_80_columns):
    out = at_80_columns
    made_by = [line for line in out.splitlines() if line.strip().startswith("sgl-kit dryrun ")]
    assert len(made_by) == 1 and made_by[0].rstrip().endswith("--speculative-num-draft-tokens 2")
    assert "..." not in made_by[0]
    assert "srt/server_args.py:1196" in out and "srt/server_args.py:3809" in out


def test_demo_derives_the_fix_for_another_version():
    out = _demo("--version", "0.5.10.post1", columns=160)
    assert "1109-1111: rule 9: Multimodal / VLM models" in out
    assert ("In 0.5.10.post1 the way out is --enforce-piecewise-cuda-graph (the early return "
            "`if self.enforce_piecewise_cuda_graph` at srt/server_args.py:1080), which skips every rule") in out
    assert "srt/server_args.py:3281" in out
