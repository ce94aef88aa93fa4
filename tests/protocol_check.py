"""Validate JSON payloads against sglang's own OpenAI protocol models (pydantic), run with the dry-run's python.

    <dry-run python> tests/protocol_check.py < lines       # each line: {"model": NAME, "data": {...}}

NAME is a class of sglang/srt/entrypoints/openai/protocol.py (ChatCompletionStreamResponse,
CompletionStreamResponse, ...). sglang's modules import GPU packages at import time, so the
dry-run's stand-ins (kit/dryrun/_inside.py) are installed first, as the dry-run does. Prints one
JSON line per payload: {"ok": bool, "error": str, "unknown": [keys the model does not declare]}.
"""

import importlib.util
import json
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("inside", Path(__file__).resolve().parent.parent / "kit/dryrun/_inside.py")
inside = importlib.util.module_from_spec(spec)
spec.loader.exec_module(inside)
inside.install_stand_ins(inside._sglang_dir())

from pydantic import BaseModel  # noqa: E402
from sglang.srt.entrypoints.openai import protocol  # noqa: E402


def unknown_keys(model: type, data, prefix: str = "") -> list[str]:
    """Keys of `data` that the model (and its nested models) do not declare."""
    if not isinstance(data, dict) or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    out = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            out.append(prefix + key)
            continue
        for inner in _models_in(field.annotation):
            if isinstance(value, list):
                for item in value:
                    out += unknown_keys(inner, item, f"{prefix}{key}[].")
            else:
                out += unknown_keys(inner, value, f"{prefix}{key}.")
    return sorted(set(out))


def _models_in(annotation) -> list:
    found, todo = [], [annotation]
    while todo:
        a = todo.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
        todo += list(getattr(a, "__args__", ()) or ())
    return found


for line in sys.stdin:
    item = json.loads(line)
    model = getattr(protocol, item["model"])
    try:
        model.model_validate(item["data"])
        result = {"ok": True, "error": "", "unknown": unknown_keys(model, item["data"])}
    except Exception as exc:  # a validation error is the answer, not a crash
        result = {"ok": False, "error": str(exc)[:500], "unknown": []}
    print(json.dumps(result), flush=True)
