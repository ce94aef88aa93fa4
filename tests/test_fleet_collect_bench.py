"""`sgl-kit fleet collect` and `fleet bench` on real processes: the lab's fleet (two stand-ins started as
labs of their own, read through their processes on this machine) and stand-ins over loopback."""

from __future__ import annotations

import json

import pytest
from _fleet_support import standins

from kit.cli import main


@pytest.fixture(scope="module")
def lab_pair(tmp_path_factory):
    from kit.fleet import lab_fleet

    fleet = lab_fleet(replicas=2, drifted=(1,), router=False, directory=tmp_path_factory.mktemp("fleet-labs"))
    try:
        yield fleet
    finally:
        fleet.down()


def test_collect_keeps_a_case_per_replica_and_names_the_one_without_a_process(lab_pair, tmp_path, capsys):
    out = tmp_path / "cases"
    urls = lab_pair.urls
    code = main(["fleet", "collect", *urls, "http://10.255.255.1:30000", "-o", str(out), "--replica-timeout", "240"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    kept = json.loads((out / "fleet.json").read_text())
    names = [u.removeprefix("http://") for u in urls]
    assert sorted(kept["cases"]) == sorted(names)
    assert list(kept["failures"]) == ["10.255.255.1:30000"] and "HTTP only" in kept["failures"]["10.255.255.1:30000"]
    for name in names:  # each a case sgl-kit capture wrote: its manifest, the launch, the server's own answers
        case = out / name.replace(":", "_")
        assert {"case.yaml", "launch.sh", "server_info.json", "environ.txt"} <= {p.name for p in case.iterdir()}
        assert json.loads((case / "server_info.json").read_text())["port"] == int(name.rsplit(":", 1)[1])
    assert "2 of 3 replica(s) answered" in printed


def test_bench_measures_every_replica_at_once_and_keeps_a_run_file_each(tmp_path, capsys):
    with standins(3, drifted=2) as fleet:
        code = main(["fleet", "bench", *fleet.urls(), "--http-only", "-n", "3", "--max-tokens", "8",
                     "-o", str(tmp_path), "--json"])
        data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["failures"] == {}
    assert sorted(data["runs"]) == sorted(fleet.name(i) for i in range(3))
    for name, path in data["runs"].items():
        head = json.loads(open(path).readline())
        assert head["url"] == f"http://{name}" and head["config"]["requests"] == 3
        assert sum(1 for line in open(path) if json.loads(line).get("kind") == "request") == 3
