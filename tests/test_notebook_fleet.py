"""Notebook 07 (the fleet) run with papermill against the lab's fleet: stand-ins from ``kit.lab.fleet_up``, one
of them from the other launch, sglang's real router (smg) in front. What is checked is read from the executed
notebook's outputs: the drift's first row is the drifted replica with the fields where the launches differ, the
imbalance finding (or the "no imbalance" line) agrees with the balance numbers printed, and nothing of the
fleet's directory runs afterwards. Plus ``fleet_up``'s errors, which start nothing.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from _fleet_support import drifted_fields
from _notebook_support import outputs

from kit.errors import LabError
from kit.lab.fleet import fleet_up

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SMG = Path(sys.executable).with_name("smg")


def _processes_under(directory: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if directory in argv:
            found.append(f"{entry}: {argv[:200]}")
    return found


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not SMG.exists(), reason="smg (sglang's router) is not installed next to this python")
def test_the_fleet_notebook_finds_the_drifted_replica_and_the_spread(tmp_path):
    import papermill

    out = NOTEBOOKS / "_executed" / "07_fleet.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    fleet_dir = str(tmp_path / "fleet")
    papermill.execute_notebook(str(NOTEBOOKS / "07_fleet.ipynb"), str(out), kernel_name="python3",
                               progress_bar=False, cwd=str(NOTEBOOKS), execution_timeout=240,
                               parameters={"lab_dir": fleet_dir, "drifted_replica": 2, "window_s": 20.0})
    text = "\n".join(outputs(out))

    # the lab fleet: replica 2 runs the fixed launch; its port names it
    started = re.search(r"replica 2\s+http://127\.0\.0\.1:(\d+)\s+variant fixed", text)
    assert started, text[:2000]
    drifted = f"127.0.0.1:{started[1]}"

    # the drift: the drifted replica first, with exactly the fields where the two launches differ
    head = re.search(r"(\d+) of 3 replica\(s\) differ from the majority\n((?:  \S+ +\S+ .*\n)+)", text)
    assert head and head[1] == "1", text[:3000]
    rows = [line.split() for line in head[2].splitlines()]
    assert rows[0][0] == drifted
    assert {r[1] for r in rows if r[0] == drifted} == drifted_fields()
    assert f"1 of 3 replica(s) drifted; {drifted}: " in text

    # the doctor: some findings on some replicas (the drift's), named with the replicas they are on
    assert re.search(r"- .+ \[[\w-]+\]  on 2 of 3: ", text) and "on every replica (3)" in text

    # the balance: the numbers printed, and the finding (or its absence) that they imply
    shares = {w: int(n) for w, n in re.findall(r"^  (127\.0\.0\.1:\d+) +(\d+) requests \(\d+%\)", text, re.M)}
    assert len(shares) == 3, text[-4000:]
    total, top = sum(shares.values()), max(shares, key=shares.get)
    claimed = re.search(r"^- imbalance: (\S+) took (\d+) of (\d+) requests", text, re.M)
    if total >= 12 and shares[top] > 1.5 * total / 3:
        assert claimed and claimed[1] == top and int(claimed[2]) == shares[top] and int(claimed[3]) == total
        assert "the router's policy is cache_aware" in text
    else:
        assert not claimed and "no imbalance" in text
    assert "the router's policy: cache_aware" in text

    # stopped: the last cell says so, and nothing of the fleet's directory runs
    assert "lab fleet (stopped)" in text
    assert _processes_under(fleet_dir) == []


def test_fleet_up_refuses_what_it_cannot_start(tmp_path):
    with pytest.raises(LabError, match="at least one replica"):
        fleet_up(replicas=0, directory=str(tmp_path))
    with pytest.raises(LabError, match="outside 0..1"):
        fleet_up(replicas=2, drifted=(5,), directory=str(tmp_path))
    with pytest.raises(LabError, match="unknown lab variant 'nope'"):
        fleet_up(replicas=1, drifted=(), variant="nope", directory=str(tmp_path))
    with pytest.raises(LabError) as err:
        fleet_up(replicas=1, drifted=(), router=True, smg=str(tmp_path / "no-smg"), directory=str(tmp_path))
    assert "no-smg" in err.value.message and "pip install smg" in err.value.hint
    assert list(tmp_path.iterdir()) == []  # refused before anything was made or started


def test_a_replica_that_fails_stops_the_others(tmp_path, monkeypatch):
    """The second replica's start fails: the first, already up, is stopped, and the error names the failure."""
    from kit.lab import control

    real_up = control.Lab.up

    def up(self, *args, **kwargs):
        if self.directory.endswith("replica-1"):
            raise LabError("planted failure", hint="none")
        return real_up(self, *args, **kwargs)

    monkeypatch.setattr(control.Lab, "up", up)
    with pytest.raises(LabError, match="replica 1 \\(new\\): planted failure"):
        fleet_up(replicas=2, drifted=(), router=False, directory=str(tmp_path / "fleet"))
    assert _processes_under(str(tmp_path / "fleet")) == []
