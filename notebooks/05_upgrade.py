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
# # 05 · The upgrade: what changes when you upgrade SGLang?

# %% [markdown]
# **What you will learn**
# - why an upgrade changes how a server runs even when its launch command does not change: defaults move,
#   the rules SGLang applies at startup change, and flags are renamed, deprecated or removed;
# - how to resolve *this* server's launch with the real argument code of each release, on this machine,
#   without a GPU, and read every setting that differs, with the line of SGLang that set it in each release;
# - how a renamed flag hides a change, and how the kit pairs the old name with the new one;
# - what to check before you upgrade, and what to do when a release is too old for the dry-run.
#
# **What you need**
# - the target from `00_connect` (its server's launch command and its model's `config.json` are read there);
# - the dry-run environment of each release you compare, built once on this machine
#   (`sgl-kit dryrun setup --sglang X`, 1-2 minutes and about 1.3 GB each). A release without one is named
#   below, with the command that builds it.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
from_version: str = "0.5.11"  # the sglang release the server runs now (the lab runs 0.5.11)
to_versions: str = "0.5.23"  # the releases to upgrade to, separated by commas, e.g. "0.5.18, 0.5.23"
gpu: str = "a6000"  # the GPU profile the dry-run answers SGLang's hardware probes with (kit/data/gpus.yaml)
old_versions: str = "0.4.6, 0.4.8"  # two releases before the dry-run's reach, compared statically ("": skip)
summary_path: str = ""  # add the diff's headline to this run summary (JSON) ("": do not write)
case_to: str = "out/case"  # keep the server's evidence here once, as a case to read later offline (08_case; sgl-kit doctor --case) ("": do not)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "05_upgrade.html" ("": do not)

# %% [markdown]
# ## 1. The launch to carry over
#
# An upgrade is judged on *your* launch: the flags your server was started with, its model and its GPUs.
# The same flags can resolve to different settings on another model (a multimodal architecture turns rules
# on) or another GPU (SGLang asks the hardware which backends it can use). So the cell reads the running
# server's command line, and its model's `config.json` beside the model path on the box.

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, ssh_config=ssh_config,
                        trust_new_host=trust_new_host, server_port=server_port, capture=case_to)
host, server = nb.host, nb.server
flags = kit.server_flags(server.argv)
model_config = kit.model_config_beside(host, kit.effective_args(server).get("model_path"))
print(f"sglang {server.sglang_version}, launched with:\n  {' '.join(flags)}")

# %% [markdown]
# ## 2. The same launch, resolved by each release
#
# Release notes list new features; they rarely list the defaults that moved or the rules that
# `ServerArgs.__post_init__` gained. Those change what a server runs without any error: the incident's prefill
# CUDA graph was switched off by such a rule, with nothing in the log.
#
# `upgrade_diff` runs SGLang's own argument resolution of every release you name (the dry-run: the real
# `ServerArgs`, on CPU, with the hardware probes answering like `gpu`), then compares the resolved settings.
# Each row is a setting that differs, with, in each release, the line of SGLang that set it, or *asked* (your
# flag) or *default*. A release whose environment is not built here is listed with the command that builds it.

# %%
diff = kit.upgrade_diff(flags, [from_version, to_versions], model=model_config, gpu=gpu)
diff

# %%
if summary_path:
    print(f"written: {diff.save_summary(summary_path)}")

# %% [markdown]
# ## 3. Renamed flags, and flags that no longer parse
#
# A rename hides a change twice. First the launch: a flag the new release no longer knows stops the server
# at startup (`unrecognized arguments`), or, when it survives as a deprecated alias, it may now set something
# else: in 0.5.18 `--enforce-piecewise-cuda-graph` means `--cuda-graph-backend-prefill=tc_piecewise`, a value
# 0.5.23 refuses. Then the evidence: `grep disable_piecewise_cuda_graph` in a 0.5.23 log finds nothing, because
# the setting is now `cuda_graph_config.prefill.backend`, so a diff of two logs shows one field removed and
# another added, and the change between them is lost.
#
# The kit pairs the names through their lineage (`kit/data/lineage.yaml`, and each release's own flag table,
# where a deprecated alias names its successor), shows them as one row, and resolves your launch with the new
# name, saying so. Where nothing records a rename it says "(no lineage known)" and keeps the rows apart.
# The report below lists it all: changed settings, refused and deprecated flags, renamed settings, and the
# fields that exist in one release only. Its last section, FAST PATHS, asks each release's own runtime checks
# whether the prefill and decode graphs run for the launch it resolved (`sgl-kit gates` shows every check):
# on 0.5.11 the incident's prefill graph is off at startup, and turned back on it would be refused for every
# speculative prefill (the check in `PiecewiseCudaGraphRunner.can_run`); 0.5.23 resolves the same launch to the
# breakable prefill backend, whose runner captures the EAGLE target's graph with full hidden states, so no
# check refuses it. The releases between, and the pull requests behind each change, are in
# `kit/data/fast_path_history.yaml` (each entry checked against the releases' own source by the tests).

# %%
print(diff.to_text())

# %% [markdown]
# ## 4. Releases before the dry-run's reach
#
# The dry-run builds environments for 0.5.6 and later. Users reported regressions further back (two RTX 4090
# dropping from 27 to 20 tok/s between 0.4.6 and 0.4.8, half the throughput after 0.4.7). For such releases the
# kit reads each release's source instead: your flags over that release's defaults. That is **not resolved**:
# no `__post_init__` ran, so whatever SGLang decides at startup (backends, graph sizes, auto-disables) is not
# shown, and the result says so. When the flags and defaults agree (they do for the lab's launch), the change
# is in the code that runs, and the next step is a benchmark of both releases (`04_fix_and_validate`), not a
# flag.

# %%
if old_versions:
    print(kit.upgrade_diff(flags, old_versions).to_text())

# %% [markdown]
# ## What to check before you upgrade
#
# - Resolve your exact launch (flags, model, GPU) with the release you want, before you deploy it.
# - Fix every flag that no longer parses: the server would not start. Prefer the new name the report gives.
# - Replace deprecated flags now: a deprecated alias can be removed in the next release, or take another value.
# - Read each changed row with a line of SGLang beside it: that is a decision SGLang makes for you. If you
#   depend on the old behaviour, ask for it with a flag, so the next release cannot change it silently.
# - Then benchmark the new release against the old one on the same box (`01_symptom`, `04_fix_and_validate`):
#   the resolved arguments explain a change in speed, they do not measure it.
#
# The dry-run answers SGLang's hardware probes where the argument code asks them; code elsewhere that asks
# the hardware directly sees no GPU, so check a surprising backend with `sgl-kit why FIELD` on the real box.

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
