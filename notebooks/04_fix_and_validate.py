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
# # 04 · Fix and validate: prove it

# %% [markdown]
# **What you will learn**
# - how to apply fixes one at a time, so each gets its own measured effect;
# - how to compare two launches in interleaved blocks, with an interval and a noise floor, instead of eyeballing
#   two averages that a busy machine can flip;
# - how to see a fix across loads: per-request against total tok/s, as concurrency grows;
# - how to state a conclusion that the data supports, and only that.
#
# **What you need**
# - the target from `03_auto_disable`;
# - on a real server: the right to restart it. The kit never restarts one unless `apply_fix` is True, and
#   even then it only prints the command for you to run; it relaunches the lab itself.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
lab_scenario: str = ""  # the lab only: its scenario, e.g. "p2p-pcie" (PCIe GPUs without P2P); "": keep the running one
requests: int = 8  # measured requests per step, one at a time (a third of them per block when interleaved)
max_pairs: int = 6  # at most this many pairs of interleaved blocks per step (3 at least; more when the first are noisy)
max_tokens: int = 128  # output tokens per request
baseline_tok_s: float = 70.0  # what the server used to do, per request (0: no baseline)
apply_fix: bool = False  # on a real server: True to go on after printing the commands (the lab is always relaunched)
summary_path: str = ""  # write the validation as JSON here ("" : do not write)
pays_launch: str = "nospec"  # the lab only: another launch to try the refused fix on ("": skip section 4)
front_concurrency: str = "1,4,8"  # the lab only: sweep the launch as found and with the fixes at these loads ("": skip)
case_to: str = "out/case"  # keep the server's evidence here once, as a case to read later offline (08_case; sgl-kit doctor --case) ("": do not)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "04_fix_and_validate.html" ("": do not)

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, lab_scenario=lab_scenario, ssh_config=ssh_config,
                        trust_new_host=trust_new_host, server_port=server_port, capture=case_to)
host, server = nb.host, nb.server
server

# %% [markdown]
# ## 1. The plan: one fix per step, largest first
#
# The plan comes from `doctor`: each finding whose fix is a change of flags becomes a step, in the order of
# its estimated cost, and each step keeps the changes of the steps before it. In the incident the two
# causes were fixed together and the result was one number; fixing them one at a time shows what each was
# worth, and catches a fix that does nothing. When the doctor finds nothing to change (its rules about GPUs
# do not apply to a server on CPU, say), the plan is empty and says why: the launch is measured as found,
# and nothing is claimed.
#
# The plan also holds *checks*: changes the doctor predicts to change nothing, because a check in sglang's
# own source refuses them for every request of this launch (`sgl-kit gates FAST_PATH TARGET --restored`
# shows each check with its line). In the incident, `--enforce-piecewise-cuda-graph` is one: under EAGLE, the
# worker runs the target's prefill with `CaptureHiddenMode.FULL`, the piecewise graph was captured with
# `NULL`, and `PiecewiseCudaGraphRunner.can_run` refuses the mismatch. A check is measured last, on top of
# every fix, and reads as a prediction: it holds if nothing moves.

# %%
diagnosis = kit.doctor(target, host=host, server=server)
plan = kit.investigation.fix_plan(diagnosis, server)
print(kit.investigation.describe_plan(plan, diagnosis))

# %% [markdown]
# ## 2. Relaunch, re-bench, compare
#
# For the lab, each step is a `Lab.restart` with the step's flags (the lab resolves them with real SGLang, as
# a real server would), then a wait for `/health` and the same benchmark as `01_symptom`. For a real server
# the commands are printed and nothing is restarted.
#
# Each step is compared with the one before, on two numbers: the mean decode tok/s per request and the mean
# time to first token. Two runs measured one after the other put any change in the machine's load between
# them into the difference, so the two launches take turns instead: a block of the launch before, then pairs of
# blocks (AB, BA, AB ...), relaunching between them. Each pair's difference is one observation; the 95%
# interval is Student's t over the pairs, and drift between pairs widens it rather than becoming the result.
# The launch before is also compared with itself (its consecutive blocks): that is the noise floor, and a
# difference within it is "no change detectable here", whatever its interval. A verdict also needs the change
# to exceed 1% of the value. The first three pairs' noise decides how many more to run (at most six here). The two numbers answer different
# questions: in sglang 0.5.11 speculative verify runs in the decode CUDA graph, so the step count moves decode
# speed, while the prefill (piecewise) graph covers extend and prefill batches, so it could only move time to
# first token, and only for the batches its gate lets it replay.

# %%
validation = kit.investigation.validate(host, target, server, plan, requests=requests, max_tokens=max_tokens,
                                    apply_fix=apply_fix, baseline_tok_s=baseline_tok_s or None, diagnosis=diagnosis,
                                    max_pairs=max_pairs)
validation.plot()

# %% [markdown]
# Each comparison in detail: the blocks of both launches side by side, each pair's difference with the
# interval and the noise floor shaded, and what the machine was doing during the blocks (its load average and
# CPU steal).

# %%
for result in validation.results[1:]:
    display(kit.display.ab_comparison(result.vs_previous))  # noqa: F821 (IPython's display)
    if result.blocks is not None:
        print(f"{result.step.title}: {result.blocks.plan}; the machine: {result.blocks.machine()}")

# %% [markdown]
# ## 3. The conclusion, computed from the runs
#
# Every number below comes from the runs above, as means (the same statistic as the differences): each fix's
# effect on decode and on time to first token with its interval, the final rate as a share of the single-stream
# roofline, and whether the symptom is gone (at least 90% of the baseline). When the fixes leave a gap to the
# baseline, the conclusion says it is unexplained, and lists what the doctor says to check next and which
# evidence would decide it; it does not invent a cause.
#
# On the lab, speeds come from its throughput model: the incident's write-up reports ~70 tok/s on the old
# deployment, 35-40 on the new launch and 50-57 with 3 steps restored, and nothing after the prefill-graph fix.
# The lab follows sglang's mechanisms, and reads from 0.5.11's source, when it starts, whether the prefill
# graph's gate lets a prefill batch replay it. Under EAGLE it does not, so the enforced graph changes nothing
# in the lab either: the check's "no change detectable here" is the prediction and the lab agreeing, read from the
# same source; on a real GPU server it is a measurement. That is a validated negative: the flag costs capture
# time and memory and buys nothing here, and the write-up's author ended on it.
#
# What closed the rest of the gap to ~70 tok/s on the old deployment is not in the write-up. The conclusion
# says it is unexplained and lists what the doctor would check next; it does not invent a cause.
#
# Every step is benchmarked from an empty prefix cache (the kit flushes it before each run): a relaunch
# empties it, so a first run against a cache warmed by earlier notebooks would read a lower time to first
# token than any step can.
#
# With `lab_scenario = "p2p-pcie"` the lab is two PCIe GPUs without peer access: sglang's custom all-reduce
# is off and NCCL all-reduces over PCIe. The doctor finds it from `nvidia-smi topo -p2p` and models its cost.
# Those GPUs report GNS (GPU not supported): no BIOS or driver setting gives them peer access, so the doctor
# prescribes nothing and the plan is empty; the modelled cost is what GPUs with peer access would buy. Set
# `baseline_tok_s = 0` there: that scenario has no baseline.

# %%
kit.display.Text(validation.conclusion())

# %%
if summary_path:
    print(f"written: {validation.save(summary_path)}")

# %% [markdown]
# ## 3b. The fix across loads
#
# One concurrency shows one point. Users weigh a fix by the curve: what each user gets (decode tok/s per
# request) against what the server gives in all (total output tok/s), as concurrency grows, and the time to
# first token at each load. On the lab, the launch as found and the launch with every fix are each swept
# (`kit.bench.sweep`, the same as `sgl-kit bench sweep`), and the two Pareto fronts are compared: the text
# says where one dominates, computed from the points. The lab is left on the launch as found.

# %%
front = None
if front_concurrency:
    front = kit.investigation.fix_front(host, target, server, plan, max_tokens=min(max_tokens, 24),
                                    requests=max(requests, 8),
                                    concurrencies=[int(c) for c in front_concurrency.split(",")])
if front is not None and summary_path:
    base = summary_path.replace(".json", "")
    print(f"written: {front.save_html(base + '-front.html')}, {front.save(base + '-front.json')}")
front.plot() if front is not None else None

# %% [markdown]
# ## 4. When would the prefill graph pay?
#
# A fix the source refuses here may pay elsewhere. The incident's model without speculative decoding (the
# lab's `nospec` launch) still has the prefill graph turned off by the multimodal rule, but nothing in the
# gate refuses its text requests: the prefill batch asks for no hidden states, the same mode the graph was
# captured with. The doctor reads that from the source and offers `--enforce-piecewise-cuda-graph` as the fix
# there; the run measures time to first token before and after. On the lab the size of the gain is the
# scenario's assumption (20% of prefill, kit/data/scenarios/incident.yaml: the write-up has no number); what
# the source decides is whether there is one at all.
#
# The flag is still a testing flag ("Used for testing" in its help): it skips every rule of the chain, the
# ones that keep output correct on other launches included. The lasting way is a release that keeps the
# graph for this model and lets the EAGLE target replay it: the doctor names them (`05_upgrade` compares one).

# %%
pays = None
if pays_launch:
    # the question here is time to first token: short outputs are enough
    pays = kit.investigation.where_it_pays(host, target, server, launch=pays_launch, requests=requests,
                                       max_tokens=min(max_tokens, 16), max_pairs=max_pairs)
if pays is not None and summary_path:
    print(f"written: {pays.save(summary_path.replace('.json', '') + '-' + pays_launch + '.json')}")
kit.display.Text(pays.conclusion() if pays is not None else "")

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
