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
# # 08 · A case: what the doctor said, kept for the morning after

# %% [markdown]
# **What you will learn**
# - what a case is: a server's evidence captured once (its arguments, log, `/metrics`, GPUs, the sglang it
#   ran with its hashes, the source lines its findings cite) and the doctor's answer at that moment;
# - how to read one offline, with no server, no GPU and no network: what was collected, what could not be
#   and why, the answer then, and the same doctor run again on the kept files today;
# - where notes and the cause found go, and how to hand the whole of it to someone else.
#
# **What you need**
# - a case directory: `sgl-kit capture TARGET -o DIR` writes one, and the guided notebooks 01-05 keep one
#   in `out/case` beside them as they run (set `case_dir` to it);
# - or nothing: with `case_dir` empty the same cells read the live `target` (`lab` by default), so you can
#   see what a capture would keep.

# %%
import kit

# %% tags=["parameters"]
target: str = "lab"  # read live when case_dir is empty: "lab", "local", "ssh://user@host:port" or an ~/.ssh/config alias
case_dir: str = ""  # a case directory (sgl-kit capture TARGET -o DIR; the notebooks keep out/case): read offline ("": the live target)
ssh_config: str = "~/.ssh/config"  # live only: the ssh config file to read host aliases and keys from
trust_new_host: bool = False  # live only: accept an SSH host key seen for the first time (check its fingerprint first)
server_port: int = 0  # live only: the server's HTTP port, when the box runs several servers (0: the lab's, or the only one)
share_to: str = ""  # write a shareable page here, secrets removed, e.g. "case.html" (a case: its page; live: this notebook) ("": do not)

# %% [markdown]
# ## What a case is for
#
# At night someone runs the doctor against a slow server, finds the cause, relaunches it and goes to bed.
# In the morning a teammate asks: *what did it say, exactly?* By then the server has been restarted: its
# counters started again from zero, its log may have rotated, its launch is the fixed one. Running the
# doctor again answers a different question.
#
# A case is the evidence of that night, kept: captured once, read-only, with secrets masked before anything
# is written, in one directory that can be zipped, attached to a ticket or committed. `case.yaml` says when
# and from where it was captured, which sglang the server ran, what each file is and what could not be
# collected, and it holds the notes and the resolution people add later. `findings.json` is the doctor's
# answer as it was given.
#
# The cells below are the same for a case and for the live target; each says which it read.

# %% [markdown]
# ## 1. What is this
#
# When and from where, the sglang release (with the hash of its installed files, so "the same 0.5.11" can be
# checked), each file collected, and each piece that could not be collected with the reason. A piece that
# is missing is named, never silently absent: it tells you what the answer below could not see.

# %%
subject = kit.notebook.open_target(target, case_dir, ssh_config=ssh_config, trust_new_host=trust_new_host,
                                   server_port=server_port)
subject

# %% [markdown]
# ## 2. The doctor's answer
#
# For a case, the doctor runs again on the kept files, offline (`sgl-kit doctor --case DIR`): the same rules
# over the same arguments, log, `/metrics` page and GPUs, with the sglang source of the release the case names
# from this machine's cache. Live, it reads the server now (`sgl-kit doctor TARGET`). Each finding shows the
# evidence it rests on, how its impact was reached, and the fix.

# %%
diagnosis = subject.diagnosis()
kit.display.diagnosis_view(diagnosis)

# %% [markdown]
# ## 3. The same answer as then?
#
# The replay is set against `findings.json`, the answer given at capture time: which findings are new, which
# are gone, and which changed, field by field. "The same answer" is what the teammate needs to hear: what you
# read above is what was said that night. A difference is worth reading: a kit that has learned a rule since,
# or one that fixed a rule, says so here rather than silently rewriting the record
# (`sgl-kit doctor --case DIR --compare` from a terminal).

# %%
subject.comparison()

# %% [markdown]
# ## 4. Notes and the resolution
#
# What people wrote on the case after it was captured, dated and signed, each on one finding or on the case
# as a whole, and the cause found with the fix and the run that showed it. They live in `case.yaml`, beside
# the evidence, so the story stays with what it is about (`sgl-kit case note`, `sgl-kit case resolve`).

# %%
subject.notes()

# %% [markdown]
# ## 5. The source lines it cited
#
# Every finding that names a line of sglang (`file:line`) is only as good as that line. A case keeps the
# cited lines with their context, and the hash of each whole file as the server had it: an excerpt changed
# after capture is refused, and a cached release that differs from the server's install is named in the
# doctor's answer above. Live, the lines are read now from the server's own sglang.

# %%
subject.excerpts()

# %% [markdown]
# ## 6. Share it
#
# A case travels as a directory, or as one self-contained page (`sgl-kit report --case DIR`: the case, the
# resolution, the findings with their notes, the source lines and every file, secrets removed once more).
# Set `share_to` to write the page from here.

# %%
subject.share(share_to)
