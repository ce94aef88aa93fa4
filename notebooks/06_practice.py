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
# # 06 · Practice: a real incident, from the evidence as posted to the cause

# %% [markdown]
# **What you will learn**
# - how to read evidence as people post it (a log excerpt, a launch script, an issue body cut where the
#   thread was cut) and form a hypothesis before any tool speaks;
# - what the kit's doctor reads in the same evidence, each finding with its basis, and where it is silent;
# - how the thread itself ended: its stated cause, the link, the fix;
# - which evidence would have settled the case faster, so you ask for it first next time.
#
# **What you need**
# - this repository: the cases are real public threads in `data/incidents/` (one folder each, the evidence
#   copied unchanged, `source.md` with the link). An installed kit without a checkout reads a copy of that
#   folder from `corpus` or `$SGL_KIT_CORPUS`;
# - nothing else: no server, no GPU and no network (the doctor reads the sglang source of the release the
#   case names, downloaded once and cached). `sgl-kit practice list` names every case.

# %%
import kit

# %% tags=["parameters"]
case: str = "first"  # a case name (`sgl-kit practice list`), "first" (an easy case with a cause the doctor finds) or "random"
hypothesis: str = ""  # your suspected cause: a rule id or title, "something else", "nothing is wrong" ("": pick below)
seed: int = 0  # for case "random": the same seed picks the same case (a negative seed: a new pick each run)
corpus: str = ""  # the incident corpus ("": $SGL_KIT_CORPUS, or data/incidents/ of this checkout)

# %% [markdown]
# ## 1. The evidence, as posted
#
# This is what the person who opened the thread showed: the setup they named (version, GPU, model) and each
# file of evidence exactly as posted. The thread's title and link are held back, since they often name the
# cause. Read it the way you would read a colleague's message at night: what is the complaint, what is
# measured, what is missing?

# %%
incident = kit.practice.load(case, seed=seed, corpus=corpus)
incident

# %% [markdown]
# ## 2. Your hypothesis
#
# Pick the cause you suspect. The choices are the titles of the doctor's rules (each one a mechanism the kit
# knows how to check), plus "something else" when you think the cause is none of them, and "nothing is wrong"
# when you think the server is fine. Pick before you run the next cells: the doctor speaks next.

# %%
picker = kit.display.hypothesis_picker(kit.practice.choices(), kit.practice.choice_of(hypothesis))
picker

# %% [markdown]
# ## 3. What the doctor reads in the same evidence
#
# The doctor runs offline on the case's files, as `sgl-kit doctor --paste FILE` would: it splits each post into
# its pieces (launch commands, `Decode batch` lines, sglang's notices, nvidia-smi) and runs every rule. Each
# finding shows the evidence lines it rests on and how its impact was reached (measured, modelled, or not
# estimated); what it could not read is listed first.

# %%
diagnosis = kit.practice.run_doctor(incident)
kit.display.diagnosis_view(diagnosis)

# %% [markdown]
# ## 4. The thread's answer
#
# The cause as the thread stated it (quoted briefly), the link to read it whole, whether the posted evidence
# could show it at all, and the fix.

# %%
kit.practice.reveal(incident)

# %% [markdown]
# ## 5. Who was right
#
# Your hypothesis and the doctor's findings, each against the thread's cause. A thread that states no cause
# grades nobody; on a server the thread calls healthy, a finding is not proven false, only not the thread's
# point.

# %%
kit.practice.verdict(incident, diagnosis, picker.value)

# %% [markdown]
# ## 6. What evidence would have settled it faster
#
# The piece of evidence that would have ended the thread early (written for the corpus), then what the doctor
# itself asks about this evidence. Next time, ask for these first.

# %%
kit.practice.settle(incident, diagnosis)
