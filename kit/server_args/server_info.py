"""`/server_info` JSON as a snapshot, with what the scheduler changed after loading the model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kit._secrets import mask_named
from kit.errors import ParseError

from .snapshot import ServerArgsSnapshot
from .values import same_value


def from_server_info(data: Mapping[str, Any] | str | bytes) -> ServerArgsSnapshot:
    """The args of a `/server_info` (or deprecated `/get_server_info`) response.

    sglang 0.5.11 (entrypoints/http_server.py `server_info`) returns
    `{**asdict(server_args), **scheduler_info, "internal_states": [...], "version": ...}`,
    one internal state per data-parallel rank. Each state starts from
    `vars(get_global_server_args())` in the scheduler (managers/scheduler.py
    `get_internal_state`), so it shows what the scheduler changed after loading the
    model (e.g. model_runner sets chunked_prefill_size=-1 for some VLMs). Those values
    are taken as effective; every change is listed in `internal_differences`.
    """
    data = mask_named(_json_object(data))  # the kit never needs a server's keys (kit/_secrets.py)
    states = data.get("internal_states") or []
    states = [s for s in (states if isinstance(states, list) else [states]) if isinstance(s, Mapping)]
    top = {k: v for k, v in data.items() if k not in ("internal_states", "version")}
    keys = _arg_keys(top, states)
    fields = {k: states[0][k] if states and k in states[0] else top[k] for k in keys}
    diffs = [
        (rank, k, top[k], state[k])
        for rank, state in enumerate(states)
        for k in keys
        if k in state and not same_value(state[k], top[k])
    ]
    extras: dict[str, Any] = {k: v for k, v in top.items() if k not in fields}
    if states:
        extras["internal_states"] = [{k: v for k, v in s.items() if k not in top} for s in states]
    version = data.get("version")
    return ServerArgsSnapshot(
        fields,
        version=str(version) if version is not None else None,
        form="dict",
        stage="resolved",
        source="server_info",
        internal_differences=diffs,
        extras=extras,
    )


def _json_object(data: Any) -> Mapping[str, Any]:
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as err:
            raise ParseError(f"server_info is not JSON: {err.msg}", position=err.pos) from None
    if not isinstance(data, Mapping):
        raise ParseError(f"server_info must be a JSON object, got {type(data).__name__}", position=0)
    return data


def _arg_keys(top: dict[str, Any], states: list[Mapping[str, Any]]) -> list[str]:
    # The scheduler's state repeats every arg; the keys it lacks are scheduler info.
    if states:
        shared = [k for k in top if k in states[0]]
        if len(shared) * 2 >= len(top):
            return shared
    return list(top)
