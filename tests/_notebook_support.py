"""Reading executed notebooks in tests: their cells, a cell's source, and the text of their outputs."""

from __future__ import annotations

import json
from pathlib import Path


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def outputs(path: Path) -> list[str]:
    """The text of every output, in order; an error output fails the test with its name and value."""
    texts = []
    for cell in cells(path):
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            texts.append("".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", "")))
    return texts
