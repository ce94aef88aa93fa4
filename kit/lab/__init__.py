"""The lab: an SGLang-compatible stand-in server for training and tests, with no GPU.

``python -m kit.lab.launch_server <sglang flags>`` is the server; ``sgl-kit lab up`` prepares
a lab directory shaped like the incident's box and starts it there (:class:`Lab` in
Python). This package's ``__init__`` imports nothing heavy, because the server imports
it on hosts that have only python3; the names below load on first use.

- ``control.py``: Lab, LabStatus: prepare, start, stop (through ``kit/_remote/lab_agent.py``);
- ``launch_server.py``: the server's entry point; ``launches.py``: from flags to the
  arguments real sglang resolves; ``throughput.py``: the scenario's tok/s model;
- ``engine.py``, ``api.py``, ``http.py``, ``metrics.py``: generation, sglang's HTTP API, the
  asyncio HTTP server, ``/metrics``;
- ``packaging.py``: the wheels a remote lab host needs;
- ``fleet.py``: LabFleet, fleet_up: several stand-ins at once, sglang's router (smg) in front.
"""

from __future__ import annotations

__all__ = ["Lab", "LabError", "LabFleet", "LabStatus", "down", "ensure_running", "find_lab_server",
           "fleet_up", "status", "up", "variants"]


def __getattr__(name: str):
    if name in ("Lab", "LabStatus", "variants"):
        from . import control

        return getattr(control, name)
    if name in ("LabFleet", "fleet_up"):
        from . import fleet

        return getattr(fleet, name)
    if name == "LabError":
        from kit.errors import LabError

        return LabError
    raise AttributeError(f"module 'kit.lab' has no attribute {name!r}")


def up(variant: str | None = None, flags: list[str] | None = None, **options):
    """Start the lab on this machine (or return its status if it runs already)."""
    from .control import Lab

    return Lab().up(variant=variant, flags=flags, **options)


def down():
    """Stop the lab on this machine."""
    from .control import Lab

    return Lab().down()


def status():
    """Whether the lab on this machine runs, and where."""
    from .control import Lab

    return Lab().status()


def ensure_running(target: str = "lab", launch: str | None = None, scenario: str | None = None):
    """For target ``lab``, start the lab unless it runs; other targets are left alone (None).

    ``launch`` names the incident's launch a notebook teaches from (``new``, ``old`` or
    ``fixed``). When the lab runs another one (``make demo`` and notebook 04 end on the fixed
    launch), it is restarted with that one, and the status's note says what was found and done.
    ``None`` or ``""`` keeps whatever runs. ``scenario`` (kit/data/scenarios) restarts the lab
    in that scenario when it runs another one (``None``: keep it; the incident's to start).
    """
    from kit.target import parse_target

    from .control import Lab

    if parse_target(target)["kind"] != "lab":
        return None
    lab = Lab()
    current = lab.status()
    wanted = f"variant {launch}" if launch else None
    if not current.running:
        status = lab.up(variant=launch or None, **({"scenario": scenario} if scenario else {}))
        status.note = f"started the lab with {status.label or 'custom flags'}" + (f"; {status.note}" if status.note
                                                                                   else "")
        return status
    if scenario and current.scenario != scenario:
        status = lab.restart(variant=launch or "new", scenario=scenario)
        status.note = (f"the lab was running scenario {current.scenario or 'incident'} (pid {current.pid}); "
                       f"restarted it in scenario {scenario}")
        return status
    if wanted is None or current.label == wanted:
        current.note = f"the lab runs {current.label or 'custom flags'}, the launch this notebook teaches from" \
            if wanted else f"the lab runs {current.label or 'custom flags'}; kept as it is (launch not set)"
        return current
    status = lab.restart(variant=launch)
    status.note = (f"the lab was running {current.label or 'custom flags'} (pid {current.pid}); restarted it with "
                   f"the incident's {launch} launch, the state this notebook teaches from. Set lab_launch = \"\" "
                   "in the parameters to keep whatever the lab runs.")
    return status


def find_lab_server(host, servers=None):
    """The lab's server on ``host``: :func:`kit.target.resolve_server` of the target ``lab``."""
    from kit.target import resolve_server

    return resolve_server(host, "lab", servers=servers)
