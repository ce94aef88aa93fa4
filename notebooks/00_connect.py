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
# # 00 · Connect to the server and see what runs there

# %% [markdown]
# **What you will learn**
# - how one target string names the box you investigate: `lab`, `local`, `ssh://user@host:port` or an alias
#   from `~/.ssh/config`;
# - how the kit finds the SGLang server on that box, without being told: its process, launch command,
#   environment, log file, Python interpreter and sglang install, and a URL that reaches it;
# - what hardware the box has.
#
# **What you need**
# - nothing but this repository for the default target, `lab`: a stand-in for the incident's server
#   (Qwen3.6-27B, tensor parallel 2 on two RTX A6000, MTP speculative decoding) that needs no GPU;
# - for a real box: SSH access to it (keys in `~/.ssh/config`) and `python3` there. The kit installs nothing.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "00_connect.html" ("": do not)

# %% [markdown]
# ## 1. Connect
#
# `kit.notebook.start`, the first cell of every notebook, connects to the target. For `lab` it first
# starts the lab on this machine if it is not running yet (`sgl-kit lab up` does the same from a
# terminal). For any other target it starts nothing: the kit never starts or stops a real server.
#
# The connection opens on the first command. SSH host keys are checked against
# `known_hosts`, and an unknown host is refused unless `trust_new_host` is set.

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, ssh_config=ssh_config, trust_new_host=trust_new_host,
                        find_server=False)  # the server is found step by step below
host = nb.host
nb

# %% [markdown]
# ## 2. What the box has
#
# One round trip: OS, CPUs, memory, and the NVIDIA GPUs that `nvidia-smi` reports. The lab has
# no GPU, and says so: its GPUs exist only in the arguments and the throughput model.

# %%
kit.inventory(host)

# %% [markdown]
# ## 3. Find the server
#
# `discover` reads `/proc` on the box and lists every SGLang server: `python -m sglang.launch_server`,
# `sglang serve`, and the lab's `python -m kit.lab.launch_server`. For each it finds the log through the
# process's stdout (`/proc/PID/fd/1`), the interpreter from its argv, and the sglang package that
# interpreter imports. When the server listens on 127.0.0.1 of a remote box, its URL goes through an
# SSH port forward.

# %%
servers = kit.discover(host)
servers

# %%
server = kit.resolve_server(host, target, port=server_port or None, servers=servers)
server

# %% [markdown]
# ## 4. The sglang version, the launch command and the log
#
# These three answer the first questions of any investigation: which SGLang runs, how it was
# started, and what it said. The next notebook reads the effective arguments out of this log.

# %%
print(f"sglang {server.sglang_version} at {server.sglang_dir}")
print(f"python {server.python}")
print(f"url    {server.url}")

# %%
print(server.command)

# %%
print("\n".join(server.log_tail(12)))

# %% [markdown]
# ## Where the lab's numbers come from
#
# When the target is the lab, everything it *reads and resolves* is real SGLang: the sglang 0.5.11
# source in its `ml-env`, and arguments resolved by the dry-run (real `ServerArgs.__post_init__`).
# What it *generates* is a model: tokens arrive at the speed of `kit/data/scenarios/incident.yaml`,
# calibrated to the incident's single-stream numbers (35-40 tok/s for the new launch, 50-57 tok/s with 3
# speculative steps). The 66-72 tok/s of the fixed launch is an **assumption**: the incident reports
# no final number for it. The first line of the lab's log says the same.

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
