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
# # 01 · The symptom: is it slow, and compared with what?

# %% [markdown]
# **What you will learn**
# - how to measure decode speed the way a user feels it: tokens per second *per request*, streamed, with
#   the time to the first token and the speculative accept length beside it;
# - why "slow" needs two reference points: what it used to do (a baseline) and what the hardware can do at
#   all (the single-stream roofline);
# - how big the gap is, in tok/s, measured rather than remembered.
#
# **What you need**
# - the target from `00_connect` (`lab` by default: the incident's server, no GPU needed);
# - the speed it used to reach, if you know it (`baseline_tok_s`; the incident's user remembered ~70).

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
ssh_config: str = "~/.ssh/config"  # the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
lab_launch: str = "new"  # the lab only: the launch this notebook teaches from, restarted to if another runs ("": keep it)
requests: int = 8  # measured requests, one at a time (a warm-up request comes first)
max_tokens: int = 128  # output tokens per request: long enough to reach a steady decode rate
baseline_tok_s: float = 70.0  # what the server used to do, per request (0: no baseline)
prometheus_url: str = ""  # a Prometheus that scrapes the server ("": the server's log only); credentials from $SGL_KIT_PROMETHEUS_TOKEN or $SGL_KIT_PROMETHEUS_USER/_PASSWORD
timeline_since: str = "24h"  # how far back the timeline looks
case_to: str = "out/case"  # keep the server's evidence here once, as a case to read later offline (08_case; sgl-kit doctor --case) ("": do not)
share_to: str = ""  # write a shareable report of it here, secrets removed, e.g. "01_symptom.html" ("": do not)

# %% [markdown]
# ## 1. The server
#
# As in `00_connect`: one target string, and discovery finds the server on the box.
#
# The first time a notebook meets a server it also keeps its evidence as a case in `case_to` (`out/case`
# beside the notebook): the arguments, the log, the GPUs, the sglang it runs, and the doctor's answer,
# captured once, read-only, secrets masked. Tomorrow, with the server restarted, `08_case` (or
# `sgl-kit doctor --case out/case --compare`) reads it again without the server.

# %%
nb = kit.notebook.start(target, lab_launch=lab_launch, ssh_config=ssh_config,
                        trust_new_host=trust_new_host, server_port=server_port, capture=case_to)
host, server = nb.host, nb.server
nb

# %% [markdown]
# ## 2. Measure, one request at a time
#
# In the incident the user's complaint was a single number: "35-40 tok/s, it used to be ~70". The first
# job is to reproduce that number under control. One request at a time (`concurrency=1`) measures what one
# user feels; batching many requests would measure throughput, which is a different question.
#
# The kit streams each request and times every chunk the server sends. Decode tok/s is counted *after* the
# first chunk, so the prefill is not in it; the time to the first token is reported on its own. With
# speculative decoding a chunk carries several tokens, and the token counts come from the server's own
# `meta_info`, not from splitting the text. Each finished request is appended to a JSONL file as it ends,
# so a run that dies half-way keeps what it measured.
#
# On a real server this sends real requests: keep `requests` small on a box that serves users.

# %%
run = kit.investigation.measure(host, server, requests=requests, max_tokens=max_tokens, label="symptom")
run

# %% [markdown]
# ## 3. What one request sees
#
# Every dot is a request. A tight cluster means the rate is a property of the launch, not of luck; a wide
# spread would call for more requests before concluding anything.

# %%
kit.display.rate_distribution({"as found": run})

# %%
run.summary()

# %% [markdown]
# The timeline shows each request from send to last token: a long gap before the first-token mark is
# prefill (or queueing), the line after it is decoding.

# %%
kit.display.timeline(run)

# %% [markdown]
# ## When did it drop, and what changed then
#
# A benchmark says how fast the server is now. When it dropped, and what changed at that moment, is in
# what watched it: the Prometheus that scrapes the server (`prometheus_url`), and the server's own
# `Decode batch` log lines (dotted), which need no Prometheus at all. Throughput, accept length, queue and
# token usage over time; restarts are the red dashed lines, and the text below says what each one changed
# in the launch when the evidence shows it. A series the server did not report is named, never drawn as 0.

# %%
history = kit.timeline(server, prometheus_url or None, since=timeline_since)
history.figure()

# %%
print(history.to_text())

# %% [markdown]
# What the server did over the same span, read by the doctor's runtime rules: decode and prefill passes in
# and out of CUDA graphs, time in the queue, retracted requests, prompt tokens served from the prefix cache,
# and the accept length over time. Each finding names the series, the span and the numbers it measured,
# and a rule without its series says which one is missing and why, never reading it as zero. Without
# `prometheus_url` the rules read the server's own `/metrics` page (counters since it started), when it
# runs with `--enable-metrics`.

# %%
kit.display.diagnosis_view(kit.doctor.runtime_diagnosis(host, server, prometheus=prometheus_url or None, since=timeline_since))

# %% [markdown]
# ## 4. Against what: the baseline and the roofline
#
# A rate means little alone. Two references give it a meaning:
#
# - **the baseline**: what this deployment used to do (`baseline_tok_s`);
# - **the roofline**: one stream's decode reads every weight once per step, so the GPUs' memory bandwidth
#   caps tokens per second at *accepted tokens per step x bandwidth / bytes per step*. The kit counts the
#   bytes from the model's `config.json` (for Qwen3.6-27B, about 51.6 GB per step in bf16, with its linear
#   attention state) and takes the bandwidth from the GPU's datasheet. A launch far below its ceiling is
#   leaving speed on the table; one near it needs faster hardware, not flags.
#
# The engineer in the incident had neither number written down: the baseline was a memory and the ceiling
# was never computed.

# %%
symptom = kit.investigation.symptom(host, server, run, baseline_tok_s=baseline_tok_s or None, target=target)
symptom

# %%
symptom.roofline

# %% [markdown]
# ## The gap, measured
#
# The cell above states the measured rate, how far it is from the baseline, and what share of the
# hardware's ceiling this launch reaches, all computed from this run. On the lab, the rate comes from its
# throughput model, calibrated to the incident's reported 35-40 tok/s (see `00_connect`).
#
# **Next:** `02_config` reads what the server is actually running, and compares it with the launch that
# used to be fast.

# %% [markdown]
# ## Share
#
# To attach this notebook to a ticket, save it (Ctrl-S), set `share_to` and run the cell below: it
# writes one self-contained HTML page (no network needed to open it) with the secrets it recognises removed,
# API keys, tokens, passwords in URLs, private keys, and says what it removed, by kind only.
# `sgl-kit report NOTEBOOK -o FILE` does the same from a terminal.

# %%
kit.notebook.share(share_to)
