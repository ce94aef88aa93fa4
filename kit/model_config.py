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
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._data import DATA
from ._paths import cache_dir
from .errors import HostError, ModelConfigError

__all__ = ["CATALOG_DIR", "HUB_ENV", "catalog", "catalog_miss", "config_for", "config_path_for", "load_model_config",
           "model_config_beside"]

CATALOG_DIR = DATA / "model_configs"
HUB_ENV = "SGL_KIT_HF_HUB"  # "0": never ask the Hugging Face hub, the catalog alone answers


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


# Suffixes of quantized copies of a checkpoint: the same layers, heads and experts as the base
# model, another quantization_config (and sometimes torch_dtype). Longest first.
_QUANT_SUFFIX = re.compile(
    r"[-_.](fp8(?:[-_]dynamic|[-_]static|[-_]block)?|fp4|nvfp4|mxfp4|awq(?:[-_]int4)?|gptq(?:[-_]int[48])?|int[48]|"
    r"w8a8|w4a16|w4a8|w8a16|bnb[-_]4bit|4bit|8bit|gguf|mlx)$", re.IGNORECASE)


def catalog() -> dict[str, dict]:
    """The kit's catalog of model configs: hub id to the stored config (with its ``_source``)."""
    global _CATALOG
    if _CATALOG is None:
        entries = {}
        for path in sorted(CATALOG_DIR.glob("*.json")):
            entries[path.stem.replace("--", "/", 1)] = json.loads(path.read_text(encoding="utf-8"))
        _CATALOG = entries
    return _CATALOG


_CATALOG: dict[str, dict] | None = None


def _candidates(model: str) -> list[str]:
    """Hub ids a ``--model-path`` value may name, most specific first: ``Org/Name`` itself, a hub cache
    directory (``models--Org--Name/snapshots/<rev>``), ``Org--Name``, the last two components of a path,
    and the last component alone (``/models/Qwen3-32B``, written ``*/Qwen3-32B``)."""
    text = os.path.expanduser(model.strip()).rstrip("/")
    parts = [p for p in text.split("/") if p and p != "."]
    found = []
    for part in parts:
        if part.startswith("models--") and part.count("--") >= 2:
            found.append(part[len("models--"):].replace("--", "/", 1))
    if len(parts) >= 1 and "--" in parts[-1]:
        found.append(parts[-1].replace("--", "/", 1))
    if len(parts) >= 2:
        found.append("/".join(parts[-2:]))
    if parts:
        found.append("*/" + parts[-1])
    return list(dict.fromkeys(found))


def _match(candidate: str) -> str | None:
    """The catalog id ``candidate`` names, case-insensitively; ``*/Name`` matches a name held by one id only."""
    ids = catalog()
    lower = {i.lower(): i for i in ids}
    if not candidate.startswith("*/"):
        return lower.get(candidate.lower())
    name = candidate[2:].lower()
    named = [i for i in ids if i.split("/", 1)[1].lower() == name]
    return named[0] if len(named) == 1 else None


def _from_catalog(model: str) -> tuple[dict, str] | None:
    for candidate in _candidates(model):
        hit = _match(candidate)
        if hit is not None:
            return _entry(hit), f"the kit's catalog: {hit} ({catalog()[hit]['_source'][0]})"
    for candidate in _candidates(model):
        base, stripped = candidate, []
        while (m := _QUANT_SUFFIX.search(base.split("/")[-1])) is not None:
            stripped.append(m.group(1))
            base = base[: len(base) - len(m.group(0))]
        if not stripped:
            continue
        hit = _match(base) or _match("*/" + base.split("/")[-1])
        if hit is not None:
            return _entry(hit), (
                f"the kit's catalog: {hit} ({catalog()[hit]['_source'][0]}), the base model of {model}: the layers, "
                f"heads and experts are the base model's, but this {'-'.join(stripped).upper()} checkpoint's own "
                "quantization_config (and torch_dtype) are not in it; give --model-config FILE for those")
    return None


def _entry(model_id: str) -> dict:
    """A catalog entry as a config.json would read: without the catalog's own ``_source``/``_note``."""
    return {k: v for k, v in catalog()[model_id].items() if not k.startswith("_")}


def _from_hub(model: str, timeout: float) -> tuple[dict | None, str]:
    """The hub's config.json of ``model`` (cached under ``<cache>/hf``), or None and why not."""
    if os.environ.get(HUB_ENV, "1") == "0":
        return None, f"the hub is not asked ({HUB_ENV}=0)"
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model) or model.startswith((".", "/")):
        return None, "not a hub id"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None, "huggingface_hub is not installed"
    try:
        path = hf_hub_download(model, "config.json", cache_dir=str(cache_dir() / "hf"), etag_timeout=timeout)
        return load_model_config(path), f"the Hugging Face hub: {model} ({path})"
    except Exception as err:  # noqa: BLE001 - no network, gated, unknown repo: the catalog answers instead
        return None, f"the hub did not answer ({type(err).__name__})"


def config_for(model: Any, *, hub: bool = True, timeout: float = 5.0) -> tuple[dict, str] | None:
    """The config.json of the model a launch names (``--model-path``/``--model``), and where it came from.

    ``model`` is a hub id (``Qwen/Qwen3-32B``, any case) or a local path whose last components name one
    (``/models/Qwen3-32B``, ``/data/hf/Qwen--Qwen3-32B``, ``~/.cache/huggingface/hub/models--Qwen--Qwen3-32B/
    snapshots/<rev>``). The hub is asked first (``hub=False`` or ``SGL_KIT_HF_HUB=0`` skips it); when it
    does not answer, the kit's catalog does, and the source says so. A quantized copy (``-FP8``, ``-AWQ``,
    ``-GPTQ-Int4``...) gets its base model's entry with a source that says what is not the copy's own.
    None when neither knows the model.
    """
    if not isinstance(model, str) or not model.strip():
        return None
    why = None
    if hub:
        found, why = _from_hub(model.strip(), timeout)
        if found is not None:
            return found, why
    hit = _from_catalog(model)
    if hit is None:
        return None
    config, source = hit
    if why and why != "not a hub id" and not why.startswith("the hub is not asked"):
        source += f"; {why}"
    return config, source


def catalog_miss(model: Any) -> str:
    """What to say when :func:`config_for` knows nothing of ``model``: which families the catalog has."""
    families = sorted({i.split("/", 1)[1].split("-")[0] for i in catalog()})
    return (f"the kit's catalog of {len(catalog())} model configs has no entry for {model} (it has "
            f"{', '.join(families)}; kit/data/model_configs/)")
