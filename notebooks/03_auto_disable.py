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
# # 03 · The auto-disable: why did SGLang switch it off?

# %% [markdown]
# **What you will learn**
# - how to find every line of SGLang that assigns a flag, the conditions guarding each, and which one fired
#   for *this* server, from the source installed on the box;
# - how to follow a condition such as `is_multimodal` into the model config and the architecture lists;
# - how to check the answer against SGLang's own code run on CPU (the dry-run);
# - the fix that works in this SGLang version, and the one people try first that does not.
#
# **What you need**
# - the target from `02_config`; nothing on the box but the server and its Python.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
flag: str = "disable_piecewise_cuda_graph"  # the argument SGLang changed on its own (from 02_config)
gpu: str = "a6000"  # the GPU profile the dry-run answers SGLang's hardware probes with (kit/data/gpus.yaml)
case_to: str = "out/case"  # keep the server's evidence here once, as a case to read later offline (08_case; sgl-kit doctor --case) ("": do not)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "03_auto_disable.html" ("": do not)

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, ssh_config=ssh_config,
                        trust_new_host=trust_new_host, server_port=server_port, capture=case_to)
host, server = nb.host, nb.server
tree = kit.source_for_server(server)  # its own sglang source, copied once to this machine when remote
tree

# %% [markdown]
# ## 1. Every line that assigns it, and which fired
#
# By hand, this was the long part of the incident: `grep -n disable_piecewise_cuda_graph` across the
# package, then `sed -n 1180,1260p server_args.py` and friends, reading each `if` and guessing which held.
# The first guess (the explicit list of disabled architectures) was a dead end.
#
# `kit.why` does the reading by parsing: every assignment (plain, `setattr`, rules tables, the
# `declare_resolution` hooks of 0.5.2x), the guards on the way to each (enclosing `if`s, early returns, the
# calls that reach its function), each evaluated against this server's effective arguments, its launch
# command, its environment and its model's `config.json`. Guards that need the hardware (`is_hip()`) stay
# *unknown*, with the reason. Lines are found by name, never by number, so the same call works on another
# release.

# %%
explanation = kit.why(flag, server=server, tree=tree)
explanation

# %% [markdown]
# ## 2. The rule, in the source
#
# The function holding the site that fired, with the rule's comment, its guard and the assignment marked:
# the `sed -n` of the incident, found by name.

# %%
kit.investigation.rule_source(tree, explanation)

# %% [markdown]
# ## 3. Follow the guard into what decided it
#
# A guard calls into the rest of SGLang: a property of the model config, a hardware probe, an environment
# variable. The kit follows each call into its own source and evaluates it against this server's evidence.
# The cell below says what decided it for *this* server, from the site that fired, then shows the lines the
# answer rests on.

# %%
kit.investigation.why_it_fired(explanation, server)

# %%
for snippet in kit.investigation.evidence_lines(tree, (explanation.fired or explanation.sites)[0]):
    display(snippet)  # noqa: F821 (IPython's display)

# %% [markdown]
# ## 4. Check it against SGLang itself
#
# A static reading can be wrong. The dry-run runs the real `ServerArgs.__post_init__` of this sglang
# version on CPU, with the GPU probes answering like the target's GPU, and records every write. Where its
# environment is set up here (`sgl-kit dryrun setup`), the check runs live; otherwise it uses the lab's
# committed record of the same launch. The line below says which.

# %%
kit.investigation.dryrun_crosscheck(server, tree, explanation, gpu=gpu)

# %% [markdown]
# ## 5. The way out, and the fix that is not one
#
# A function that holds rules like these often starts with an early return on a flag that skips them all.
# Line numbers and even flag names change between releases, which is why the kit reads the way out from the
# installed source instead of a table, and checks the fixes people try first against the `raise`s SGLang
# would hit at startup. The cell below says what holds for this server: the flag, or why there is nothing
# to change, and the pitfall when there is one.
#
# A flag that turns the graph back on is not yet a fix: the graph must also run. For every batch, sglang asks
# the graph's runner (`can_run`) whether it may replay, and refuses some. The cell reads those checks in this
# release's source and evaluates them for this launch (`sgl-kit gates prefill-graph TARGET --restored` lists
# each one with its line): under speculative decoding on 0.5.11 one of them refuses every prefill of the
# target, so the flag would capture a graph that never replays. `04_fix_and_validate` measures that.

# %%
kit.investigation.way_out(tree, explanation, kit.effective_args(server), None)

# %% [markdown]
# ## 6. All of the above, in one command
#
# `doctor` asks these questions and a dozen more (CUDA graphs, speculative decoding against SGLang's own
# choice for the model, the scheduler, caches, GPU links, NCCL, known regressions) and orders the answers by
# their estimated cost. From a terminal: `sgl-kit doctor TARGET`.

# %%
diagnosis = kit.doctor(target, host=host, server=server)
kit.display.diagnosis_view(diagnosis)

# %% [markdown]
# **Next:** `04_fix_and_validate` applies the fixes one at a time and measures each.

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
