"""Evidence that is partial, read rather than refused: a version nobody gave (inferred or assumed, said),
flags and numbers named only in sentences, a cut-off server_args line beside the command that fills it,
a GPU the kit's table does not know. kit.doctor.evidence calls these while it gathers an Evidence.
"""

from __future__ import annotations

from kit.errors import KitError

__all__ = ["fill_cut", "infer_version", "prose_evidence", "prose_hardware", "unknown_gpu"]


def infer_version(ev, launches: list, texts: list, whole_line: bool) -> None:
    """No version given, reported or stated: one inferred from the flags, the server_args fields and the
    dates of the evidence, or assumed (kit.doctor.infer); said at the top of the report, never hidden."""
    from .infer import guess_version, launch_options, text_dates

    fields = list(ev.args) if ev.sources.get("args", "").startswith("the server_args line") else []
    guess = guess_version(options=launch_options([t for t in launches if t]), fields=fields,
                          whole_line=whole_line and bool(fields),
                          dates=[d for t in texts if t for d in text_dates(t)])
    ev.version_guess = guess
    if guess.version is None:
        ev.problems.append(guess.line())
        return
    ev.version, ev.version_basis, ev.version_range = guess.version, guess.basis, guess.range
    ev.sources["version"] = guess.line()
    if guess.spans and guess.basis == "inferred":
        ev.problems.append(f"the releases that fit ({guess.range}) differ in what the rules read: "
                           f"{'; '.join(guess.spans)}; the rules read {guess.version}'s (give --sglang VERSION to "
                           "read another)")
    elif guess.spans:
        ev.problems.append(f"sglang {guess.version} is an assumption, and the releases differ in what the rules "
                           f"read ({'; '.join(guess.spans[:4])}{' ...' if len(guess.spans) > 4 else ''}); give "
                           "--sglang VERSION for the release the server runs")


def fill_cut(ev, where: str) -> None:
    """A cut-off server_args line beside the launch command: the fields the cut lost that the command sets
    are read from the command (as written: sglang's resolution may still change them); the rest stay unknown."""
    filled = [n for n in (ev.explicit or {}) if n not in ev.args and "is cut off" in ev.unknown.get(n, "")]
    if not ev.args or not filled:
        return
    for name in filled:
        ev.args[name] = ev.explicit[name]
        ev.unknown.pop(name)
    shown = ", ".join(filled[:8]) + (f" and {len(filled) - 8} more" if len(filled) > 8 else "")
    ev.sources["args"] = (ev.sources.get("args", "") + f"; {len(filled)} fields the cut lost from the launch command "
                          f"in {where}, as it sets them ({shown})").lstrip("; ")


def prose_evidence(ev, where: str, found) -> None:
    """Flags and Decode batch numbers a paste names only in its sentences (``--dp 8``, ``#running-req: 15``),
    when it holds no launch command or no log lines of its own: read each with its line (kit.server_args.prose)."""
    from kit.server_args import decode_summary, flag_table
    from kit.server_args.prose import prose_decode, prose_flags

    taken = {n for p in found.pieces for n in range(p.start, p.end + 1)}
    if ev.decode is None:
        stats = prose_decode(found.text, skip=taken)
        if stats:
            ev.decode = decode_summary(stats)
            ev.sources["decode"] = (f"numbers quoted in the sentences of {where} (line{'s' if len(stats) > 1 else ''} "
                                    f"{', '.join(str(s.line) for s in stats[:6])}), not Decode batch lines")
            ev.problems = [p for p in ev.problems if not p.startswith(f"--paste {where}: no evidence recognised")]
    if ev.tree is None or ev.explicit is not None or found.of("launch"):
        return
    try:
        read = prose_flags(found.text, flag_table(ev.tree), where=where, skip=taken)
    except KitError:
        return
    if read is None:
        return
    named = ", ".join(f"{f.option}{' ' + f.text if f.text else ''} "
                      f"({f.origin.removeprefix(where).strip().removesuffix(' (prose)')})" for f in read.flags[:10])
    ev.sources["prose flags"] = f"{named}: named in sentences, not a launch command"
    ev.problems = [p for p in ev.problems if not p.startswith(f"--paste {where}: no evidence recognised")]
    if not ev.args:
        ev.args = dict(read.explicit)
        ev.sources["args"] = f"only the flags named in the sentences of {where}; every other field is unknown"


def prose_hardware(ev):
    """No nvidia-smi, no --gpu: the GPU model a paste's sentences name ("on two RTX 4090s", "8xH100"), as
    (profile key, count, where it was said, how the count was taken), read as named, not seen; None when
    none is named, or when several different models are (a comparison stands for none, and that is said)."""
    from kit.hardware import prose_gpus

    if getattr(ev.hardware, "gpus", None) or not ev.pastes:
        return None
    named = []
    for where, found in ev.pastes:
        taken = {n for p in found.pieces for n in range(p.start, p.end + 1)}
        named += [(where, g) for g in prose_gpus(found.text, skip=taken)]
    if not named:
        return None
    models = list(dict.fromkeys(g.profile.key for _, g in named))
    if len(models) > 1:
        ev.problems.append(f"the sentences name several GPU models ({', '.join(models)}): the rules take none of "
                           "them; give --gpu NAME (or nvidia-smi output) for the one the server runs on")
        return None
    counts = sorted({g.count for _, g in named if g.count})
    tp = ev.args.get("tp_size") if isinstance(ev.args.get("tp_size"), int) else None
    count = counts[0] if len(counts) == 1 else (tp or 1)
    how = (f"{count} as written" if len(counts) == 1 else
           f"{count}, the tensor-parallel size" if tp else "1 assumed: no count is written next to it")
    where, first = named[0]
    ev.problems = [p for p in ev.problems if not p.startswith(f"--paste {where}: no evidence recognised")]
    return first.profile, count, f"the sentences of {where} (line {first.line}: {first.text!r})", how


def unknown_gpu(ev, gpu: str | None) -> None:
    """A GPU the kit's table does not know (--gpu, or a name nvidia-smi/rocm-smi printed): the rest runs
    without its bandwidth and memory, and one line says what was not computed and how to supply it."""
    from kit.hardware import match_gpu

    names = list(dict.fromkeys(g.name for g in getattr(ev.hardware, "gpus", None) or [] if g.name))
    unknown = [n for n in names if match_gpu(n) is None]
    if not unknown:
        return
    from kit.hardware import gpu_profiles

    how = f"--gpu {gpu}" if gpu and unknown == [gpu] else f"the GPU name {', '.join(map(repr, unknown))}"
    ev.problems.append(
        f"{how}: not a GPU the kit knows, so no bandwidth, roofline or memory checks for it (the rest ran); give "
        f"--gpu with one of the known names ({', '.join(gpu_profiles())}; `sgl-kit dryrun gpus` lists them with "
        "their figures), or add the GPU to kit/data/gpus.yaml (the name nvidia-smi or rocm-smi prints, its "
        "datasheet bandwidth and memory, the datasheet's URL)")
