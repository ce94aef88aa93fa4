"""The fleet's reasoning on known inputs: drift against the majority, the doctor's findings grouped, the
imbalance finding, the prefill/decode reading, and the router's answers as smg 1.13 really gives them
(tests/data/fleet/SOURCES.md). The frames of the prefill/decode test are written here, labelled so: sglang on
CPU cannot run the split."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from kit.errors import UsageError
from kit.fleet import drift, group_findings
from kit.fleet.balance import imbalance, pd_waits
from kit.fleet.members import _router_workers, from_targets, router_launch

DATA = Path(__file__).parent / "data" / "fleet"


def _facts(**over):
    base = {"sglang": "0.5.11", "gpu": "NVIDIA RTX A6000, NVIDIA RTX A6000", "driver": "570.1", "launch": "read",
            "env": "read", "launch.tp_size": 2, "launch.speculative_num_steps": 3, "read": []}
    base.update(over)
    return base


def test_the_replica_that_differs_from_the_majority_comes_first_with_its_fields():
    d = drift({"a": _facts(), "b": _facts(**{"launch.speculative_num_steps": 1, "sglang": "0.5.11.post1"}),
               "c": _facts(), "d": _facts()})
    assert d.order()[0] == "b"
    assert d.deviants == {"b": ["launch.speculative_num_steps", "sglang"]}
    assert {(x["field"], x["value"], x["majority"]) for x in d.differences()} == {
        ("launch.speculative_num_steps", 1, 3), ("sglang", "0.5.11.post1", "0.5.11")}
    assert d.table().iloc[0]["replica"] == "b" and d.to_text().startswith("1 of 4 replica(s) differ")


def test_an_env_var_set_on_one_replica_only_is_drift_and_an_unread_field_is_not():
    d = drift({"a": _facts(**{"env.NCCL_P2P_DISABLE": "1"}), "b": _facts(), "c": _facts(gpu="not read")})
    assert d.deviants == {"a": ["env.NCCL_P2P_DISABLE"]}  # c's GPU was not read: it does not vote, nor differ
    assert d.majority["env.NCCL_P2P_DISABLE"] == "(unset)"


def test_two_replicas_that_disagree_have_no_majority_and_a_value_per_replica_is_not_drift():
    two = drift({"a": _facts(driver="570.1"), "b": _facts(driver="550.9")})
    assert two.split == ["driver"] and set(two.deviants) == {"a", "b"}
    many = drift({n: _facts(**{"launch.served_model_name": f"m-{n}"}) for n in "abc"})
    assert many.unique == ["launch.served_model_name"] and not many.deviants
    agree = drift({n: _facts() for n in "abc"})
    assert agree.to_text().startswith("all 3 replica(s) agree")


def test_findings_found_on_some_replicas_come_before_those_on_every_one():
    def diag(*ids):
        return SimpleNamespace(findings=[SimpleNamespace(id=i, title=i.upper(), impact=None) for i in ids])

    groups = group_findings({"a": diag("x", "y"), "b": diag("x"), "c": diag("x")})
    assert [(g["id"], g["on"], g["everywhere"]) for g in groups] == [("y", ["a"], False),
                                                                      ("x", ["a", "b", "c"], True)]
    assert groups[0]["not_on"] == ["b", "c"]


def test_imbalance_needs_enough_requests_and_names_the_policy_and_its_source():
    router = {"policy": "cache_aware", "policy_origin": "log", "read": "the log of pid 7"}
    skewed = {"w1": {"requests": 90, "generated_tokens": 900, "max_queue": 5},
              "w2": {"requests": 5, "generated_tokens": 50, "max_queue": 0},
              "w3": {"requests": 5, "generated_tokens": 50, "max_queue": 0}}
    [text] = imbalance(skewed, router)
    assert text.startswith("imbalance: w1 took 90 of 100 requests (90%, 2.7 times the fair share of 33%)")
    assert "cache_aware (as the router logged it; the log of pid 7)" in text and "queued up to 5" in text
    even = {w: {"requests": 10, "generated_tokens": 0, "max_queue": 0} for w in ("w1", "w2")}
    assert imbalance(even, router) == []
    few = {"w1": {"requests": 5, "generated_tokens": 0, "max_queue": 0},
           "w2": {"requests": 0, "generated_tokens": 0, "max_queue": 0}}
    assert imbalance(few, router) == []  # 5 requests over 2 workers: too few to call a spread
    [unread] = imbalance(skewed, None)
    assert "the router's policy was not read (no router given)" in unread


def _frame(rows):  # written here: (worker, panel, values over time)
    out = []
    for worker, panel, values in rows:
        out += [(pd.Timestamp(1_800_000_000 + i, unit="s", tz="UTC"), worker, panel, v) for i, v in enumerate(values)]
    return pd.DataFrame(out, columns=["time", "worker", "panel", "value"])


def test_prefill_decode_queues_say_which_side_waits():
    roles = {"p1": "prefill", "d1": "decode"}
    waits = pd_waits(_frame([("d1", "decode transfer queue", [0, 4, 9, 6]), ("d1", "decode prealloc queue", [0, 0, 0]),
                             ("p1", "prefill inflight queue", [1, 2, 2])]), roles)
    says = " | ".join(waits["says"])
    assert "decode waits for KV transfers: up to 9" in says and "prefill holds up to 2" in says
    assert "decode waits for memory" not in says
    assert pd_waits(_frame([("d1", "decode transfer queue", [0, 0])]), roles)["says"] == [
        "no prefill/decode queue held a request in the window"]
    assert pd_waits(_frame([("w", "queued requests", [1])]), {"w": "regular"}) == {}


def test_the_router_worker_list_as_smg_answers_it():
    data = json.loads((DATA / "smg-1.13.0-workers.json").read_text())
    members = _router_workers(data, ssh=None)
    assert [m.url for m in members] == [w["url"] for w in data["workers"]]
    assert all(m.role == "regular" and m.target == "local" and m.facts["is_healthy"] for m in members)
    assert members[0].facts["labels"]["version"] == data["workers"][0]["labels"]["version"]
    remote = _router_workers({"workers": [{"url": "http://10.0.0.5:30000", "worker_type": "decode"}]},
                             ssh="root@{host}")
    assert remote[0].target == "root@10.0.0.5" and remote[0].role == "decode"
    assert _router_workers({"urls": ["http://10.0.0.6:30000"]}, ssh=None)[0].target is None  # sglang-router 0.1


def test_the_worker_list_of_sglang_router_0_3_2_as_it_answers_it():
    data = json.loads((DATA / "sglang-router-0.3.2-workers.json").read_text())
    members = _router_workers(data, ssh=None)
    assert [m.url for m in members] == [w["url"] for w in data["workers"]]
    assert members[0].facts["labels"]["model_path"] == data["workers"][0]["metadata"]["model_path"]
    line = DATA / "sglang-router-0.3.2-start-line.log"
    assert router_launch("http://10.9.9.9:1", log=str(line))["policy"] == "cache_aware"


def test_the_router_policy_from_its_log_line_or_its_launch(tmp_path):
    line = (DATA / "smg-1.13.0-start-line.log").read_text()
    port = line.split("Starting router on ")[1].split(" ")[0].rsplit(":", 1)[1]
    got = router_launch(f"http://10.9.9.9:{port}", log=str(DATA / "smg-1.13.0-start-line.log"))
    assert got["policy"] == "cache_aware" and got["policy_origin"] == "log"
    launch = tmp_path / "router.sh"
    launch.write_text("python -m sglang_router.launch_router \\\n  --worker-urls http://a:1 http://b:2 \\\n"
                      "  --policy round_robin --port 8080\n")
    got = router_launch("http://10.9.9.9:8080", log=str(launch))
    assert got["policy"] == "round_robin" and got["policy_origin"] == "explicit"
    assert router_launch("http://10.9.9.9:8080")["read"].startswith("not read: the router runs on 10.9.9.9")
    with pytest.raises(UsageError, match="cannot read the router's log"):
        router_launch("http://10.9.9.9:8080", log=str(tmp_path / "missing.log"))


def test_targets_as_people_type_them():
    got = from_targets(["http://10.0.0.5:30000", "10.0.0.6:30001", "gpu-box", "ssh://ops@h:2222"], port=30000)
    assert [(m.name, m.url, m.target) for m in got] == [
        ("10.0.0.5:30000", "http://10.0.0.5:30000", None), ("10.0.0.6:30001", "http://10.0.0.6:30001", None),
        ("gpu-box:30000", None, "gpu-box"), ("ssh://ops@h:2222:30000", None, "ssh://ops@h:2222")]
    with pytest.raises(UsageError, match="listed twice"):
        from_targets(["10.0.0.5:1", "10.0.0.5:1"])
    with pytest.raises(UsageError, match="neither a URL, host:port nor a target"):
        from_targets(["not a host!"])
