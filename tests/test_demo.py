"""`make demo` runs `python -m kit.demo`: it must show the rule and that it fired."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_marks_rule_8_and_reports_it_fired():
    # A wide terminal, so rich does not wrap the lines we look for.
    env = {**os.environ, "COLUMNS": "160"}
    proc = subprocess.run([sys.executable, "-m", "kit.demo"], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "1228-1230: rule 8: Multimodal / VLM models" in out
    assert "if self.get_model_config().is_multimodal:" in out
    assert "1 fired" in out and "server_args.py:1230" in out and "--enforce-piecewise-cuda-graph" in out
