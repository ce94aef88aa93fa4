"""A model's ``config.json``: the one loader, and the one error it raises.

Whether a model counts as multimodal, how big it is and how its layers are laid out
all come from its Hugging Face ``config.json``. The file may be on this machine, on
the target (beside the server's ``model_path``), or already a dict in a notebook; every
part of the kit loads it through :func:`load_model_config`, so a missing or broken file
reads the same everywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import HostError, ModelConfigError

__all__ = ["config_path_for", "load_model_config", "model_config_beside"]


def load_model_config(source: Any, host=None) -> dict | None:
    """The model's config as a dict.

    ``source`` is a dict (returned as a copy), a model directory or a config.json path,
    or None (returns None). Paths are read on ``host`` when one is given, else here.
    Raises ModelConfigError, naming the file and the host, when it is missing, not
    JSON, or not a JSON object.
    """
    if source is None:
        return None
    if isinstance(source, Mapping):
        return dict(source)
    path = os.fspath(source)
    where = f" on {host.name}" if host is not None else ""
    try:
        path = config_path_for(path, host)
        text = host.read_text(path) if host is not None else Path(path).read_text()
    except (OSError, HostError) as err:
        detail = getattr(err, "strerror", None) or getattr(err, "message", None) or str(err)
        raise ModelConfigError(
            f"cannot read the model config {path}{where}: {detail}",
            hint="pass the model's config.json (a copy from the server is enough) or its directory",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"{path}{where} is not valid JSON ({err})",
                               hint="is this the model's config.json?") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}{where} holds a {type(data).__name__}, not a JSON object",
                               hint="is this the model's config.json?")
    return data


def config_path_for(path: str, host=None) -> str:
    """``path`` itself, or ``path/config.json`` when ``path`` is a directory."""
    if host is not None:
        is_dir = host.exists(path) and host.stat(path).is_dir
    else:
        is_dir = os.path.isdir(path)
    return path.rstrip("/") + "/config.json" if is_dir else path


def model_config_beside(host, model_path: Any) -> dict | None:
    """The config.json under a server's ``model_path`` on ``host``, or None when there is none.

    A ``model_path`` that is a hub name (``Qwen/Qwen3.6-27B``) rather than a directory on
    the host gives None, not an error: the server read it from its own cache.
    """
    if not isinstance(model_path, str) or not model_path.startswith("/"):
        return None
    candidate = model_path.rstrip("/") + "/config.json"
    if not host.exists(candidate):
        return None
    return load_model_config(candidate, host)
