"""Code the kit runs on the target, and the one loader that ships it there.

Each module in this folder is a stand-alone script: standard library only, no imports
of the kit or of each other, compatible with old Python 3 (the target's ``python3`` may
be 3.6), and a ``main()`` that reads its arguments from ``sys.argv`` and ends by printing
one line ``KIT-RESULT <json>``. The kit never installs them: :func:`run` sends the text
with ``python -c`` (or, for the helper, over the helper's stdin) and reads the answer.

- ``helper.py``: the persistent helper behind every Host (``kit.hosts``).
- ``locate.py``: where a package is installed and which version it is.
- ``processes.py``: the SGLang server processes in ``/proc`` (``kit.target.discover``), and with
  ``prefetch`` what is read next about each (log head and tail, ``/server_info``, probe answers).
- ``inventory.py``: OS, CPUs, memory and GPUs (``kit.target.inventory``).
- ``lab_agent.py``: prepares, starts and stops the lab on its host (``kit.lab``), and restarts a
  server with new flags when a person asks (``kit.investigation.relaunch``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from kit.errors import HostError

__all__ = ["MARKER", "SCRIPTS", "parse_result", "run", "run_json", "script"]

MARKER = "KIT-RESULT "
_HERE = Path(__file__).resolve().parent
SCRIPTS = ("helper", "inventory", "lab_agent", "locate", "processes")


@cache
def script(name: str) -> str:
    """The text of one remote script."""
    if name not in SCRIPTS:
        raise ValueError(f"no remote script {name!r}; known: {', '.join(SCRIPTS)}")
    return (_HERE / f"{name}.py").read_text(encoding="utf-8")


def run(host, name: str, *args: str, python: str = "python3", timeout: float = 60.0, stdin: bytes | None = None,
        env: dict | None = None, cwd: str | None = None):
    """Run a script on ``host`` with ``python`` as ``python -c <text> ARGS...``; the CommandResult.

    An argv list, never a shell: the script text and its arguments pass as they are.
    """
    return host.run([python, "-c", script(name), *args], timeout=timeout, stdin=stdin, env=env, cwd=cwd)


def run_json(host, name: str, *args: str, python: str = "python3", timeout: float = 60.0, what: str = "",
             hint: str = "", stdin: bytes | None = None) -> dict:
    """Run a script and return the JSON object of its ``KIT-RESULT`` line.

    Raises HostError saying what was tried on which host when the script does not answer
    (no such interpreter, a crash, output cut off).
    """
    res = run(host, name, *args, python=python, timeout=timeout, stdin=stdin)
    found = parse_result(res.stdout)
    if found is None:
        tail = (res.stderr or res.stdout).strip()[-400:] or f"exit {res.exited}, no output"
        raise HostError(f"could not {what or 'run the ' + name + ' script'} on {host.name} with {python}: {tail}",
                        host=host.name, hint=hint or f"check that `{python} -c pass` runs there")
    return found


def parse_result(stdout: str) -> dict | None:
    """The JSON object on the last ``KIT-RESULT`` line of a script's output, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                value = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None
