"""kit.investigation: the guided notebooks' steps, on a real lab process (no GPU: the lab stands in).

The notebooks themselves run end to end in tests/test_notebooks.py; these pin the pieces a
notebook's conclusion rests on, and the relaunch of a server the kit did not start.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest
from _lab_support import free_port

from kit import investigation
from kit.errors import KitError
from kit.lab.control import Lab
from kit.server_args import server_flags
from kit.source import SourceTree
from kit.target import connect, resolve_server

pytestmark = pytest.mark.slow


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")  # the committed resolutions: starts in a second
    lab = Lab()
    status = lab.up(variant="new", port=free_port())
    host = connect("lab")
    yield lab, host, resolve_server(host, "lab"), status
    lab.down()
    host.close()


def _info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as resp:
        return json.loads(resp.read())


def test_the_plan_applies_each_fix_on_top_of_the_previous_ones(lab):
    from kit.doctor import doctor

    _, host, server, _ = lab
    plan = investigation.fix_plan(doctor("lab", host=host), server)
    assert [s.finding for s in plan] == ["speculative-steps-low", "prefill-cuda-graph-off"]
    first, second = plan
    assert "--speculative-num-steps" in first.flags and first.flags[first.flags.index("--speculative-num-steps") + 1] == "3"
    assert "--enforce-piecewise-cuda-graph" not in first.flags and "--enforce-piecewise-cuda-graph" in second.flags
    assert second.flags[second.flags.index("--speculative-num-steps") + 1] == "3"  # kept from step 1
    # the lab's launch sets --speculative-num-steps 1, so auto_choose_speculative_params (7506) does not run for it
    # (`if self.speculative_num_steps is None`, 3523): it is not cited as the source of the steps finding
    assert first.sites == [] and second.sites == ["srt/server_args.py:1230"]


def test_relaunch_restarts_a_server_the_way_it_ran_with_new_flags(lab):
    _, host, server, status = lab
    flags = server_flags(server.argv)
    flags[flags.index("--speculative-num-steps") + 1] = "3"
    flags[flags.index("--speculative-num-draft-tokens") + 1] = "4"
    result = investigation.relaunch(host, server, flags, timeout=60)
    try:
        assert result["outcome"] == "started" and result["pid"] != server.pid
        info = _info(status.port)
        assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (3, 4)
        again = resolve_server(host, "lab")
        assert again.pid == result["pid"] and again.cwd == server.cwd and again.log_path == server.log_path
        assert again.env.get("CUDA_VISIBLE_DEVICES") == server.env.get("CUDA_VISIBLE_DEVICES")
    finally:
        os.kill(result["pid"], signal.SIGTERM)


def test_a_relaunch_that_fails_says_so_with_the_log(lab):
    _, host, server, _ = lab
    with pytest.raises(KitError) as err:
        investigation.relaunch(host, server, [*server_flags(server.argv), "--no-such-flag"], timeout=60)
    assert "did not come up (exited)" in err.value.message and "--no-such-flag" in err.value.message


def test_the_baseline_by_name_and_its_errors(lab, tmp_path):
    _, _, server, _ = lab
    tree = SourceTree.of_server(server)
    base = investigation.baseline_launch("lab:old", tree)
    assert base.kind == "command" and base.explicit["speculative_num_steps"] == 3
    with pytest.raises(KitError, match="no record of the lab's 'older' launch"):
        investigation.baseline_launch("lab:older", tree)
    with pytest.raises(KitError, match="no such file"):
        investigation.baseline_launch(str(tmp_path / "absent.log"), tree)
