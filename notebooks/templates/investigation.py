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
# # Investigation: <one line on the symptom, e.g. "decode dropped from ~70 to 35-40 tok/s">

# %% [markdown]
# **What you will learn**
# - <what this investigation establishes>
#
# **What you need**
# - SSH access to the box running the server, and `python3` there (or the built-in `lab`).

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the only one)

# %% [markdown]
# ## 1. The server under investigation

# %%
nb = kit.notebook.start(target, ssh_config=ssh_config, trust_new_host=trust_new_host, server_port=server_port)
host, server = nb.host, nb.server
server

# %% [markdown]
# ## 2. Findings
#
# <evidence, then the conclusion it supports>
