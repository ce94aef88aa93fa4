# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · The fleet is slow: replicas behind sglang's router

# %% [markdown]
# **What you will learn**
# - how to list the replicas a router sends traffic to, and read each one's launch in parallel;
# - how to find the replica whose launch drifted from the others, and which fields differ;
# - how to tell a finding on every replica (the launch everyone shares) from one on some (the drift);
# - how to see where the load goes while it is sent, and why a router's policy can pile it on one replica.
#
# **What you need**
# - the URL of sglang's router (`smg`, sglang's model gateway) in `router_url`, its workers reachable from here;
# - or nothing: with `router_url` empty, the lab starts a fleet of stand-ins on this machine (one of them
#   launched differently) with `smg` in front (`pip install smg`), and stops it in the last cell.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # where the fleet runs when router_url is empty: "lab" starts the lab's stand-ins on this machine
router_url: str = ""  # sglang's router; empty: start the lab's fleet of stand-ins
replicas: int = 3  # lab only: how many stand-ins to start behind the router
drifted_replica: int = 2  # lab only: the stand-in launched from the other launch (0-based)
lab_dir: str = ""  # lab only: where the fleet's replicas keep their directories ("": a new one under the kit's cache)
window_s: float = 20.0  # how long each worker's /metrics is read while the load runs, in seconds
requests: int = 48  # requests sent through the router
concurrency: int = 4  # requests in flight at once
max_tokens: int = 16  # tokens generated per request
prefix_repeats: int = 12  # how many times the shared sentence opens every prompt (the long shared prefix)

# %% [markdown]
# ## 0. The fleet
#
# With `router_url` empty, `kit.fleet.lab_fleet` starts the stand-ins, each in its own lab directory with its
# `/metrics` on, one of them from another launch, and the router in front of them with `--policy cache_aware`.
# With a router given, nothing is started.

# %%
lab_fleet = kit.fleet.lab_fleet(replicas=replicas, drifted=(drifted_replica,), directory=lab_dir or None,
                                router=True) if not router_url and target == "lab" else None
url = router_url or lab_fleet.router_url
print(lab_fleet.to_text() if lab_fleet else f"the router at {url}; nothing started here")

# %% [markdown]
# ## 1. Who is behind the router
#
# The router's own worker list (`GET /workers`), each worker resolved once: the URL its server answers at
# and, for a worker on this machine, the process the kit reads. The router's policy comes from its launch
# or, when it runs here, from the start line of its log.

# %%
fleet = kit.fleet.members(router=url)
print(fleet.to_text())

# %% [markdown]
# ## 2. Where the replicas differ
#
# Every replica's launch, sglang release, model and GPUs, read at once; the replicas that differ from the
# majority come first, each with the fields that differ and the value the others run. Replicas of one
# deployment should differ in nothing but their address.

# %%
fleet_args = kit.fleet.fleet_args(fleet, progress=None)
print(fleet_args.to_text())

# %%
print(f"{len(fleet_args.drift.deviants)} of {len(fleet)} replica(s) drifted"
      + "".join(f"; {name}: {', '.join(fields)}" for name, fields in fleet_args.drift.deviants.items()))

# %% [markdown]
# ## 3. What the doctor finds, on some replicas and on all
#
# The doctor on every replica in parallel, its findings grouped. A finding on *every* replica is the launch
# they share: fixing it is one change to the deployment. A finding on *some* is the drift: those replicas
# are slower than their neighbours, and the router still sends them their share.

# %%
fleet_doctor = kit.fleet.fleet_doctor(fleet, progress=None)
print(fleet_doctor.to_text())

# %%
print(f"{sum(not g['everywhere'] for g in fleet_doctor.groups)} finding(s) on some replicas, "
      f"{sum(g['everywhere'] for g in fleet_doctor.groups)} on every replica")

# %% [markdown]
# ## 4. Where the load goes
#
# Now load through the router, as users send it: prompts that open with the same long text (a system
# prompt, a shared document) and end differently. `kit.bench` has no shared-prefix option; it reads prompts
# from a JSONL file (`prompts_file`), so the cell writes one. While the load runs, each worker's own
# `/metrics` is read every two seconds for `window_s` seconds: requests, tokens, queues and prefix-cache hits
# per worker, then the router's view of each worker's load and its policy.

# %%
shared = " ".join(["The deployment runbook says every replica must answer within its latency budget."]
                  * prefix_repeats)
prompts_file = (lab_fleet.directory if lab_fleet else ".") + "/fleet_prompts.jsonl"
with open(prompts_file, "w") as fh:
    fh.write("\n".join(f'"{shared} Question {i}: which step of the runbook comes next?"' for i in range(requests)))
spread = kit.fleet.balance(fleet, window=window_s, interval=2,
                           load={"target": url, "requests": requests, "concurrency": concurrency, "warmup": 0,
                                 "max_tokens": max_tokens, "prompts_file": prompts_file,
                                 "server_metrics_interval": 0})
run = spread.load_run
print(f"sent {len(run.results)} request(s) through {url}, {sum(r.ok for r in run.results)} answered")
print(spread.to_text())

# %% [markdown]
# Each worker's load over the window, one line per worker (requests per second, tokens, queues, cache hits):

# %%
spread.plot()

# %% [markdown]
# ## 5. What the spread says
#
# An imbalance is a worker that took more than 1.5 times its fair share; the finding names the router's
# policy as its launch set it and what that policy does with traffic like this. When no worker did, the
# line below says so.

# %%
print("\n".join(spread.findings) or f"no imbalance: every worker within {kit.fleet.IMBALANCE_RATIO:g} "
      "times its fair share of the requests")
print("the router's policy: " + str((spread.router or {}).get("policy") or "not read"))

# %% [markdown]
# ## 6. Stop what this notebook started
#
# The lab's fleet (the router and every stand-in) is stopped; a router given in `router_url` is left alone.

# %%
print(lab_fleet.down().to_text() if lab_fleet else f"nothing started here; the router at {url} is left running")
