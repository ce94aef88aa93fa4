"""`sgl-kit fleet args` over real SSH: three hosts, each a network namespace with its own address, sshd and
lab server on port 30000 (tests/_netns_support.py), one of them launched differently.

Every replica is read the way a real fleet's are: SSH to its host (host keys checked against the given
known_hosts), its server process found by the kit's resolver, its argv, environment and /server_info read,
its GPUs inventoried. What the tests check is what a person reads: the drifted replica first, with the
fields it differs in; a host that cannot be reached named among the failures while the rest are printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from _netns_support import HostSpec, NetnsFleet, netns_fleet

from kit.cli import main

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

DRIFTED = 3  # launched with the lab's variant "old" (3 speculative steps), the others with "new" (1)
DOWN = 4  # a host where nothing listens: no sshd, no server
SPECS = [HostSpec("new"), HostSpec("new"), HostSpec("old"), HostSpec(None, sshd=False)]
# what "old" runs differently from "new", as sglang resolved it (the lab's own SGL_KIT_* labels are not drift)
DIFFERING = {"launch.speculative_num_steps", "launch.speculative_num_draft_tokens"}
STEPS = {"new": 1, "old": 3}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[NetnsFleet]:
    with netns_fleet(tmp_path_factory.mktemp("fleet-netns"), SPECS) as made:
        yield made


def _ssh(fleet: NetnsFleet, known_hosts=None) -> list[str]:
    return ["--known-hosts", str(known_hosts or fleet.known_hosts), "-i", str(fleet.key),
            "--ssh-config", str(fleet.ssh_config)]


def run(capsys, fleet: NetnsFleet, indexes, *, json_out: bool = False, known_hosts=None) -> tuple[int, str, str]:
    """`sgl-kit [common options] fleet args TARGETS --port 30000`, as (exit code, stdout, stderr)."""
    targets = [fleet.host(i).target for i in indexes]
    argv = [*(["--json"] if json_out else []), *_ssh(fleet, known_hosts), "fleet", "args", *targets,
            "--port", "30000"]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_drifted_replica_comes_first_with_the_fields_it_differs_in(fleet, capsys):
    code, out, err = run(capsys, fleet, [1, 2, 3])
    assert code == 0, err
    drifted, others = fleet.host(DRIFTED).member, [fleet.host(i).member for i in (1, 2)]
    lines = out.splitlines()
    assert lines[0] == "1 of 3 replica(s) differ from the majority", out
    named = [line.split() for line in lines[1:lines.index("")]]  # the differences, before the table
    assert named and all(parts[0] == drifted for parts in named), out
    assert {parts[1] for parts in named} == DIFFERING, out
    assert re.search(rf"^  {re.escape(drifted)}\s+launch\.speculative_num_steps\s+3\s+\(majority: 1\)$", out, re.M)
    # the table: the drifted replica's row first, the others in the order listed, same digests among them
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["replica", "differs"])
    rows = [line for line in lines[header + 1:] if line.startswith("ssh://")]
    assert [r.split()[0] for r in rows] == [drifted, *others], out
    assert rows[0].split()[1] == f"{len(DIFFERING)}:" and rows[1].split()[1] == rows[2].split()[1] == "-", out
    assert "fleet args: 3 of 3 replica(s) answered" in out and "!" not in out


def test_json_reads_every_replica_through_ssh_and_orders_the_drift_first(fleet, capsys):
    code, out, err = run(capsys, fleet, [1, 2, 3], json_out=True)
    assert code == 0, err
    data = json.loads(out)
    drift = data["drift"]
    drifted = fleet.host(DRIFTED).member
    assert drift["order"] == [drifted, fleet.host(1).member, fleet.host(2).member]
    assert list(drift["deviants"]) == [drifted] and set(drift["deviants"][drifted]) == DIFFERING
    assert {"replica": drifted, "field": "launch.speculative_num_steps", "value": 3, "majority": 1} \
        in drift["differences"]
    assert data["failures"] == {}
    for i in (1, 2, 3):
        host = fleet.host(i)
        facts = drift["facts"][host.member]
        # the server process of that host (pid as its own PID namespace numbers it), read over SSH to it
        assert facts["read"] == [f"pid {host.lab['pid']} on {host.user}@{host.address}:22 ({host.target})"], facts
        assert facts["sglang"] == "0.5.11" and facts["env"] == "read" and facts["launch"] == "read"
        assert facts["launch.speculative_num_steps"] == STEPS[host.spec.variant]
        assert facts["gpu"].startswith("none (") and facts["driver"] == "none"
    models = {drift["facts"][fleet.host(i).member]["model"] for i in (1, 2, 3)}
    assert len(models) == 1  # the same path on every host: the model is no drift


def test_a_host_that_cannot_be_reached_is_a_failure_and_the_rest_are_printed(fleet, capsys):
    code, out, err = run(capsys, fleet, [1, 2, 3, DOWN], json_out=True)
    assert code == 0, err
    data = json.loads(out)
    down = fleet.host(DOWN)
    assert set(data["drift"]["facts"]) == {fleet.host(i).member for i in (1, 2, 3)}
    assert list(data["failures"]) == [down.member]
    assert "connection refused" in data["failures"][down.member] and down.address in data["failures"][down.member]
    assert data["drift"]["order"][0] == fleet.host(DRIFTED).member

    code, out, err = run(capsys, fleet, [1, 2, 3, DOWN])
    assert code == 0, err
    assert "fleet args: 3 of 4 replica(s) answered" in out
    assert re.search(rf"^  ! {re.escape(down.member)}: connection refused by {re.escape(down.address)}:22", out, re.M)


def test_an_unknown_host_key_is_refused_and_named(fleet, capsys):
    stranger = fleet.host(1)
    code, out, err = run(capsys, fleet, [1, 2, 3], json_out=True, known_hosts=fleet.known_hosts_without(1))
    assert code == 0, err
    data = json.loads(out)
    assert set(data["drift"]["facts"]) == {fleet.host(2).member, fleet.host(3).member}
    why = data["failures"][stranger.member]
    assert f"{stranger.user}@{stranger.address}:22 is not in " in why and "offered ssh-ed25519 key SHA256:" in why
    assert list(data["failures"]) == [stranger.member]


def test_the_common_ssh_options_are_taken_after_the_action_too(fleet, capsys):
    """`sgl-kit fleet args TARGETS --port 30000 --known-hosts FILE -i KEY`, as other commands take them."""
    targets = [fleet.host(i).target for i in (1, 2, 3)]
    capsys.readouterr()
    try:
        code = main(["fleet", "args", *targets, "--port", "30000", *_ssh(fleet), "--json"])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["drift"]["order"][0] == fleet.host(DRIFTED).member
