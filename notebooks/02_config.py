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
# # 02 · The configuration: what is the server actually running?

# %% [markdown]
# **What you will learn**
# - why the launch command is not the configuration: SGLang changes arguments at startup, silently;
# - how to read the *effective* arguments, and sort each one by origin: default, explicit,
#   explicit-overridden, or auto-changed (changed by SGLang with no flag asking for it);
# - how to compare them with the launch that used to be fast, and which differences matter.
#
# **What you need**
# - the target from `01_symptom`;
# - the known-good launch as a file (a log with its `server_args` line, a saved `/server_info`, or the launch
#   command), or `lab:old`: the incident's old launch, as the lab records it.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
baseline: str = "lab:old"  # the known-good launch: lab:old, defaults (sglang's own), or a log / /server_info JSON / command file
case_to: str = "out/case"  # keep the server's evidence here once, as a case to read later offline (08_case; sgl-kit doctor --case) ("": do not)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "02_config.html" ("": do not)

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, ssh_config=ssh_config,
                        trust_new_host=trust_new_host, server_port=server_port, capture=case_to)
host, server = nb.host, nb.server
tree = kit.source_for_server(server)  # its own sglang source, copied once to this machine when remote
nb

# %% [markdown]
# ## 1. The effective arguments
#
# SGLang prints every argument it runs with once, at startup: the `server_args=ServerArgs(...)` line of its
# log (a dict from 0.5.19 on). A running server also answers `GET /server_info`, which adds values the
# scheduler changed after loading the model. In the incident this line was found with `grep` in a log on the
# box, and read by eye: 368 fields on one line.
#
# The kit reads it without running SGLang's code (values are parsed, never `eval`-ed), from `/server_info`
# when the server answers, else from the log. If a real server's log is not readable by your user, the next
# cell says so; `/server_info` still works.

# %%
args = kit.args(server=server, tree=tree)
args.snapshot

# %% [markdown]
# ## 2. Where each value came from
#
# Each field is set against two other sources, both read from *this server's own* sglang source: the
# default (`argparse`'s, which is what a command line starts from) and the launch command (`/proc/PID/cmdline`).
#
# - **default**: nobody touched it;
# - **explicit**: the command set it, and the server runs that value;
# - **explicit-overridden**: the command set it, and SGLang replaced it;
# - **auto-changed**: no flag asked, yet the server runs something other than the default.
#
# *auto-changed* is where silent decisions hide. Pick an origin in the drop-down.

# %%
args.table(start="auto-changed")

# %% [markdown]
# ## 3. Against the launch that used to be fast
#
# The incident's engineer compared two commands by eye and found `--speculative-num-steps 1` where it used
# to be 3. A diff does it for every field. A launch command tells what was *asked*; a log or `/server_info`
# tells what *ran*. With a command as the baseline, its values are its flags over the defaults of this
# sglang release (not resolved), so differences in fields that SGLang fills at startup are left out below.
# With no known-good launch at hand, `baseline = "defaults"` compares with sglang's own defaults for this
# release: what the launch asked for, and what SGLang decided by itself.

# %%
base = kit.investigation.baseline_launch(baseline, tree, server=server)
diff = kit.investigation.compare_launch(server, tree, base)
print(diff.to_text())

# %% [markdown]
# ## 4. The differences that matter
#
# Not every difference costs speed. The table keeps the fields that decide throughput (speculative decoding,
# CUDA graphs, the scheduler, caches, parallelism, memory) and says *why* this server has its value: asked
# on its command line, or the line of sglang's source that set it (found by reading the source, the next
# notebook shows how).

# %%
differences = kit.investigation.differences_that_matter(diff, server, tree)
differences

# %% [markdown]
# The same rows, read for this server: those its launch command asked for, and those SGLang set with no flag
# asking, each with the line of the source that did it. On the lab (the incident's server) they are the
# speculative step count, asked lower than before, and the prefill CUDA graph, turned off by SGLang itself.

# %%
kit.investigation.what_differs(differences, base)

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
