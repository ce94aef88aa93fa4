"""``make demo``: the whole investigation, on this machine, with no GPU.

    python -m kit.demo [--target lab] [--out out]      # the story: notebooks 00-05 against the lab
    python -m kit.demo source [--version 0.5.11]       # the rule in a real sglang source, in a terminal

The story brings the lab up with the incident's new launch, executes the guided notebooks
00-05 with papermill against it, writes the executed notebooks and one HTML page of them to
``out/``, and prints a summary computed from those runs: the symptom, the causes with their
``file:line``, the fixes, and the gain of each with its confidence interval. The notebooks keep
the server's evidence as a case in ``out/case`` (kit.notebook.start), written as one page too
(``out/case.html``, as ``sgl-kit report --case`` writes it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path

from ._paths import cache_dir
from ._wheels import install_package_source
from .errors import KitError, UsageError
from .notebook import execute
from .source import SourceSnippet, SourceTree
from .target import connect

__all__ = ["NOTEBOOKS", "lab_step", "main", "mark_rules"]

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("00_connect", "01_symptom", "02_config", "03_auto_disable", "04_fix_and_validate", "05_upgrade")
FUNCTION = "ServerArgs._handle_piecewise_cuda_graph"
_RULE_COMMENT = re.compile(r"^\s*#\s*(?P<number>\d+[a-z]?)\.\s*(?P<title>.+)$")


# --------------------------------------------------------------------------- the story


def story(console, target: str, out: Path, requests: int, max_tokens: int, ssh_config: str | None,
          port: int = 0) -> int:
    """Run notebooks 00-05 against the lab; print the summary their runs support."""
    import papermill

    notebooks = ROOT / "notebooks"
    if not (notebooks / "00_connect.ipynb").is_file():
        raise UsageError(f"no notebooks at {notebooks}", hint="run the demo from a clone of the repository")
    out.mkdir(parents=True, exist_ok=True)
    if target == "lab":
        lab_step(console, port or None)
        port = 0  # the notebooks find the lab by its directory, wherever it listens
    summary_path = out / "validation.json"
    summary_path.unlink(missing_ok=True)
    timings = {}
    for name in NOTEBOOKS:
        source = notebooks / f"{name}.ipynb"
        params = papermill.inspect_notebook(str(source))
        values = {"target": target, "requests": requests, "max_tokens": max_tokens, "max_pairs": 3,
                  "summary_path": str(summary_path.resolve()), "server_port": port,
                  "share_to": str((out / f"{name}.html").resolve()),
                  # the server's case, kept by 01 (02-04 find the same server); 05 relaunches the lab on the
                  # launch 01 found, and a second capture of it would only cost time
                  "case_to": "" if name == "05_upgrade" else str((out / "case").resolve())}
        if ssh_config:
            values["ssh_config"] = ssh_config
        values = {k: v for k, v in values.items() if k in params}
        if name == "05_upgrade":
            _dryrun_environments_for(console, params)
        started = time.monotonic()
        with console.status(f"running {name} against {target}"), _stderr_to(out / "kernels.log"):
            execute(source, out / f"{name}.ipynb", values, cwd=notebooks, timeout=600)  # share() finds its file
        timings[name] = time.monotonic() - started
        console.print(f"  {name}: {timings[name]:.0f} s")
    case_page = _case_page(out)
    page = _html(out, console, case_page)
    pays_path = summary_path.with_name(summary_path.stem + "-nospec.json")
    pays = json.loads(pays_path.read_text()) if pays_path.is_file() else None
    front_path = summary_path.with_name(summary_path.stem + "-front.json")
    front = json.loads(front_path.read_text()) if front_path.is_file() else None
    _summary(console, json.loads(summary_path.read_text()), out, page, sum(timings.values()), pays, front,
             front_path.with_suffix(".html"))
    upgrade = json.loads(summary_path.read_text()).get("upgrade")
    if upgrade:
        console.print(f"Before an upgrade (05_upgrade): {upgrade['headline']}", soft_wrap=True, markup=False)
    _case(console, out, case_page)
    if target == "lab":
        _leave_the_lab(console)
    console.print("\nNext: `make lab` opens these notebooks in JupyterLab (a working copy in runs/notebooks/; "
                  "it starts the lab too).", soft_wrap=True, markup=False)
    return 0


def lab_step(console, port: int | None = None):
    """Bring the lab up on the incident's new launch and say where: on ``port`` when given, else where it
    runs, else on its default port when free or the next free one (and then which, and why)."""
    from .lab import Lab

    with console.status("bringing the lab up with the incident's new launch"):
        lab = Lab()
        status = lab.status()
        if not status.running:
            status = lab.up(variant="new", port=port)
        elif status.label != "variant new" or (port is not None and status.port != port):
            status = lab.restart(variant="new", **({"port": port} if port is not None else {}))
    console.print(f"[bold]lab[/]: {status.label} at {status.url} (pid {status.pid})")
    if status.note:
        console.print(f"  {status.note}", soft_wrap=True, markup=False)
    return status


def _dryrun_environments_for(console, params: dict) -> None:
    """05_upgrade resolves the launch with each release it compares: build their dry-run environments first
    (once per machine: 1-2 minutes and about 1.3 GB each), saying so, rather than leave the notebook empty."""
    import ast

    from .dryrun import environment, setup

    versions = []
    for key in ("from_version", "to_versions"):
        default = (params.get(key) or {}).get("default")
        if default:
            versions += [v for v in re.split(r"[\s,]+", ast.literal_eval(default)) if v]
    for version in dict.fromkeys(versions):
        if environment(version).ready:
            continue
        started = time.monotonic()
        with console.status(f"05_upgrade compares sglang {version}: building its dry-run environment "
                            "(once per machine: 1-2 minutes, about 1.3 GB)") as status:
            setup(version, progress=lambda step, status=status, v=version: status.update(f"sglang {v}: {step}"))
        console.print(f"  built the dry-run environment of sglang {version} in {time.monotonic() - started:.0f} s",
                      markup=False)


def _leave_the_lab(console) -> None:
    """Leave the lab on the launch the notebooks teach from, stop the dry-run workers, and say what runs.

    Notebook 04 ends on the fixed launch; `make lab` (which the summary recommends) must open the
    notebooks on the symptom, so the lab goes back to the incident's new launch.
    """
    from .dryrun import stop_workers
    from .lab import Lab

    def say(text: str = "") -> None:
        console.print(text, soft_wrap=True, markup=False)

    lab = Lab()
    status = lab.status()
    if status.running and status.label != "variant new":
        with console.status("putting the lab back on the incident's new launch"):
            status = lab.restart(variant="new")
    stopped = [w for w in stop_workers() if w.alive]
    say()
    say("Left running:")
    if status.running:
        say(f"  - the lab, on the incident's new launch (the slow one, where the notebooks start): {status.url}, "
            f"pid {status.pid}{_rss_text(status.pid)}. Stop it with `sgl-kit lab down`.")
    else:
        say("  - nothing: the lab is not running.")
    for worker in stopped:
        size = f", {worker.rss_bytes / 2**20:.0f} MiB" if worker.rss_bytes else ""
        say(f"  (stopped the warm dry-run worker of sglang {worker.version}, pid {worker.pid}{size}; the next "
            "dry-run starts one again in a few seconds)")


def _rss_text(pid: int | None) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return f", {int(line.split()[1]) / 1024:.0f} MiB resident"
    except (OSError, ValueError, IndexError, TypeError):
        return ""
    return ""


@contextlib.contextmanager
def _stderr_to(path: Path):
    """The kernels' own stderr (start-up warnings) goes to a file; errors in cells are in the notebooks."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _html(out: Path, console, case_page=None) -> Path | None:
    """One HTML page of the executed notebooks: self-contained, secrets removed (kit.report); it links the
    case's page when there is one."""
    paths = [out / f"{name}.ipynb" for name in NOTEBOOKS]
    target = out / "investigation.html"
    from .report import build_report

    links = [("the server's case: its evidence and the doctor's answer, kept", "case.html")] \
        if isinstance(case_page, Path) else None
    result = build_report([str(p) for p in paths], str(target), title="The incident, investigated", links=links)
    console.print(f"  one page of all of them: {target} ({result.bytes / 1e6:.1f} MB; {result.summary()})",
                  markup=False, soft_wrap=True)
    return target


def _case_page(out: Path):
    """The page of the case the notebooks kept in ``out/case`` (``out/case.html``, as ``sgl-kit report --case``
    writes it): its path, None when there is no case, or the error that kept it from being written."""
    from .case.layout import CASE_FILE
    from .report.case_page import case_report

    if not ((out / "case") / CASE_FILE).is_file():
        return None
    try:
        page = case_report(out / "case", out / "case.html")
    except KitError as err:
        return err
    return page.path


def _case(console, out: Path, page) -> None:
    """What the notebooks kept in ``out/case``, its page beside the notebooks' (linked from it), and how to read
    it again."""
    def say(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False)

    case = out / "case"
    if page is None:
        say(f"The case: none in {_shown(case)} (the first cell of 01_symptom says why it was not captured).")
        return
    shown = _shown(case)
    say(f"The case: {shown} (the server's evidence and the doctor's answer, kept) - replay it with "
        f"`sgl-kit doctor --case {shown} --compare`, or in notebooks/08_case with case_dir set to it.")
    if isinstance(page, KitError):
        say(f"  its page was not written: {page.message}")
        return
    say(f"  its page: {_shown(page)} ({page.stat().st_size / 1e3:.0f} kB), linked from "
        f"{_shown(out / 'investigation.html')}")


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (``out/case``), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# A finding with no line of sglang behind it for this launch (the launch itself set the value): its
# evidence, in 03/04, says where the value came from.
_NO_SITE = "no line of sglang set it for this launch (the finding's evidence in 04 says what did)"


def _summary(console, data: dict, out: Path, page: Path | None, seconds: float, pays: dict | None = None,
             front: dict | None = None, front_page: Path | None = None) -> None:
    steps = data["steps"]
    fixes = [s for s in steps[1:] if not s.get("predicted")]
    checks = [s for s in steps[1:] if s.get("predicted")]

    def say(text: str = "") -> None:
        console.print(text, soft_wrap=True, markup=False)

    say()
    say(f"The symptom: {data['before_tok_s']:.1f} tok/s per request, against a baseline of "
        f"{data['baseline_tok_s']:g}.")
    say("The causes, found in the source of the server's own sglang:")
    for step in fixes:
        say(f"  - {step['step']} ({step['finding']}): {', '.join(step['sites']) or _NO_SITE}")
    for step in checks:
        say(f"  - {step['step']} ({step['finding']}): {', '.join(step['sites']) or _NO_SITE}; restoring it "
            f"is predicted to change nothing here: {step['predicted'].split(': ', 1)[-1]}")
    say("The fixes, one at a time, each measured against the launch before it in interleaved blocks (means, 95% "
        "interval over the pairs of blocks, and the launch's noise floor against itself):")
    for step in fixes:
        say(f"  - {', '.join(step['changes'])}: {step.get('effect') or step['rate_tok_s']}")
    for step in checks:
        held = "the prediction holds: a validated negative" if step.get("prediction_holds") else \
            "the measurement disagrees with the prediction"
        say(f"  - check {', '.join(step['changes'])} (predicted no change): {step.get('effect')}: {held}")
    if data.get("ceiling_tok_s"):
        say(f"After: {data['after_tok_s']:.1f} tok/s, {data['after_tok_s'] / data['ceiling_tok_s']:.0%} of the "
            f"single-stream roofline; the symptom is {'gone' if data['symptom_gone'] else 'still there'}.")
    if data.get("unexplained_tok_s"):
        say(f"Unexplained: {data['unexplained_tok_s']:.1f} tok/s of the gap to the baseline; no fix measured here "
            "closes it. What else to check, and what would decide it (the doctor's list):")
        from .doctor.result import brief_questions

        for question in brief_questions(data.get("open_questions") or []):
            say(f"  - {question}")
    if front and front.get("levels"):
        levels = front["levels"]
        say(f"The fix across loads (the launch as found and with the fixes, swept at concurrency "
            f"{', '.join(str(v['concurrency']) for v in levels)}; plot: {_shown(front_page)}):")
        for statement in front.get("statements") or []:
            say(f"  - {statement}")
    if pays and pays.get("steps"):
        say("Where the refused fix would pay (the lab's launch without speculative decoding, where no check of the "
            "prefill graph's gate refuses a text request):")
        for step in pays["steps"][1:]:
            say(f"  - {', '.join(step['changes'])}: {step.get('effect') or step['rate_tok_s']}")
    say("(On the lab the speeds come from its throughput model: the step count's gain follows sglang's rounds, "
        "whether the prefill graph replays is read from sglang 0.5.11's own checks when the lab starts (under EAGLE "
        "it does not), the size of its gain where it does is an assumption, and the baseline's ~70 tok/s is the "
        "write-up's, which does not show what reached it.)")
    say()
    say(f"Executed notebooks: {out}/ (00-05, {seconds:.0f} s in all)" + (f"; one page: {page}" if page else ""))


# --------------------------------------------------------------------------- the rule in the source


def mark_rules(snippet: SourceSnippet, pattern: str = r"is_multimodal\b") -> list[int]:
    """Mark the numbered rule whose guard matches ``pattern``: its comment, guard and assignment.

    The rule number and title come from the comment above the guard in the
    installed source, so the same call works on releases that renumbered it.
    """
    marked = []
    for guard in snippet.find(rf"^\s*(el)?if .*{pattern}"):
        comment = guard - 1 if guard > snippet.start else None
        match = _RULE_COMMENT.match(snippet.line(comment)) if comment else None
        label = f"rule {match['number']}: {match['title']}" if match else "matching rule"
        for n in (comment, guard, guard + 1):
            if n is not None and snippet.start <= n <= snippet.end:
                snippet.mark(n, label)
                marked.append(n)
    return marked


_DATA = Path(__file__).parent / "data" / "resolved"
_MODEL = _DATA / "models" / "qwen3.6-27b" / "config.json"


def _incident_snapshot(version: str):
    """The incident's resolved arguments for this version (a committed dry-run snapshot), if there is one."""
    from .server_args import parse_log

    launch = _DATA / f"incident-new-{version}.json"
    if not launch.is_file():
        return None, None
    record = json.loads(launch.read_text())
    return parse_log(record["server_args_line"]), record["made_by"]


def source(console, version: str, target: str) -> int:
    from .investigation import way_out
    from .provenance import explain

    prefix = cache_dir() / "demo" / f"sglang-{version}" / "ml-env"
    with console.status(f"preparing a real sglang {version} source tree (pip download --no-deps)"):
        package_dir = install_package_source("sglang", version, prefix=str(prefix))
    with connect(target) as host:
        tree = SourceTree.at(host, package_dir)
        console.print(f"[bold]target[/]: {host.name}   [bold]sglang[/]: {tree.version}   [bold]package[/]: {tree.root}")
        snippet = tree.function(FUNCTION)
        marked = mark_rules(snippet)
        console.print(snippet)
    if not marked:
        console.print(f"[yellow]no multimodal rule found in {FUNCTION} of sglang {tree.version}[/]")
        return 1
    label = snippet.marks[marked[0]]
    snapshot, made_by = _incident_snapshot(tree.version)
    launch = snapshot if snapshot is not None else {"model_path": "/root/models/Qwen3.6-27B"}
    result = explain(tree, "disable_piecewise_cuda_graph", launch, _MODEL)
    if made_by:
        console.print("\n[bold]Which rule fired for the incident's launch[/], resolved by:")
        console.print(f"  {made_by}", soft_wrap=True, markup=False)
    else:
        console.print(f"\n[bold]Which rule fires[/] for the incident's model with sglang {tree.version}'s defaults "
                      "and --model-path only (no resolved launch is recorded for this version):", soft_wrap=True)
    console.print(result.headline, soft_wrap=True)
    for site in result.fired:
        console.print(f"  [green]fired[/] {site.where}  {site.function}  {site.rule}", soft_wrap=True)
    console.print(
        f"\n[bold]{label}[/] at {snippet.path}:{marked[0]}-{marked[-1]}: a model whose architecture SGLang "
        "counts as multimodal (Qwen3_5ForConditionalGeneration, even used text-only) gets "
        "disable_piecewise_cuda_graph=True with no flag asking for it.", soft_wrap=True)
    if snapshot is None:  # the refusals of --language-only are read for the same launch: defaults + --model-path
        from .server_args import cli_defaults

        snapshot = {**{k: d.value for k, d in cli_defaults(tree).items() if d.known}, **launch}
    console.print(way_out(tree, result, snapshot, _MODEL).to_text(), soft_wrap=True, markup=False)
    return 0


# --------------------------------------------------------------------------- make lab's working copy

JUPYTERLAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                         "checkForUpdates": False}}


def workspace(dest: Path, console=None, *, settings: Path | None = None) -> Path:
    """A working copy of notebooks/ for JupyterLab, so running and saving them leaves the tracked files as
    they are. A notebook whose tracked version changed since it was copied is copied again; when the copy
    was edited too, the edited one is kept beside it as ``NAME.ipynb.mine``. Also turns JupyterLab's news
    pop-up off in this environment's settings (it covers the page).

    The copy holds the .ipynb files only, each unpaired from its jupytext ``.py`` twin (the tracked
    notebooks/ keep both): the file browser lists every notebook once, and saving one writes no ``.py``.
    A ``.py`` an earlier copy made is removed unless it was edited.
    """
    import hashlib

    def say(text: str) -> None:
        if console is not None:
            console.print(text, soft_wrap=True, markup=False)

    source_dir = ROOT / "notebooks"
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / ".copied.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}

    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    for rel in [r for r in manifest if r.endswith(".py")]:  # twins copied by an earlier version of this
        twin = dest / rel
        if twin.is_file() and digest(twin.read_bytes()) != manifest[rel].get("copy"):
            say(f"  {rel}: kept (you edited it); the notebook to open is {Path(rel).with_suffix('.ipynb').name}")
        else:
            twin.unlink(missing_ok=True)
        del manifest[rel]
    for src in sorted(p for p in source_dir.rglob("*.ipynb") if p.is_file() and "_executed" not in p.parts):
        rel = str(src.relative_to(source_dir))
        copy = dest / rel
        now = digest(src.read_bytes())
        wanted = unpaired(src.read_bytes())
        seen = manifest.get(rel, {})
        held = digest(copy.read_bytes()) if copy.exists() else None
        if held == digest(wanted):
            manifest[rel] = {"source": now, "copy": held}
            continue  # already this copy
        if held is not None and seen.get("source") == now and held != seen.get("copy"):
            continue  # the tracked notebook did not change: the user's work in the copy stays
        if held is not None and held != seen.get("copy"):
            copy.replace(copy.with_name(copy.name + ".mine"))
            say(f"  {rel} changed in the repository; your edited copy is kept as {copy.name}.mine")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(wanted)
        manifest[rel] = {"source": now, "copy": digest(wanted)}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    settings = settings or Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    try:
        current = json.loads(settings.read_text()) if settings.is_file() else {}
    except ValueError:
        current = {}
    merged = {**current, **{k: {**current.get(k, {}), **v} for k, v in JUPYTERLAB_OVERRIDES.items()}}
    if merged != current:
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(merged, indent=2))
    say(f"JupyterLab opens a working copy of notebooks/ in {dest} (the tracked notebooks stay unchanged)")
    return dest


def unpaired(notebook: bytes) -> bytes:
    """A notebook's bytes without jupytext's pairing (``metadata.jupytext.formats``), written as nbformat does."""
    nb = json.loads(notebook)
    meta = nb.get("metadata", {})
    jupytext = meta.get("jupytext", {})
    if "formats" not in jupytext:
        return notebook
    jupytext.pop("formats")
    if not jupytext:
        meta.pop("jupytext")
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.demo", description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="story", choices=("story", "source", "workspace"),
                        help="story: notebooks 00-05 against the lab (default); source: the rule in the source; "
                             "workspace: make lab's working copy of notebooks/ (runs/notebooks)")
    parser.add_argument("--target", default="lab", help="story: where the server is (default: lab); "
                                                       "source: where to lay out the tree (default: local)")
    parser.add_argument("--out", default=str(ROOT / "out"), help="story: where the executed notebooks go (out/)")
    parser.add_argument("--requests", type=int, default=4, help="story: requests per benchmark (default 4)")
    parser.add_argument("--max-tokens", type=int, default=48, help="story: tokens per request (default 48)")
    parser.add_argument("--ssh-config", default=None, help="story: ssh config for an SSH target")
    parser.add_argument("--port", type=int, default=0,
                        help="story: the lab's port (default: $SGL_KIT_LAB_PORT or 30000 when free, else the next "
                             "free one); with another --target, the server's port when the box runs several")
    parser.add_argument("--version", default="0.5.11", help="source: sglang release to lay out (default: 0.5.11)")
    args = parser.parse_args(argv)

    from rich.console import Console

    console = Console(highlight=False)
    try:
        if args.what == "workspace":
            workspace(ROOT / "runs" / "notebooks", console)
            return 0
        if args.what == "source":
            return source(console, args.version, "local" if args.target == "lab" else args.target)
        return story(console, args.target, Path(args.out), args.requests, args.max_tokens, args.ssh_config,
                     args.port)
    except KitError as exc:
        console.print(f"[red]error:[/] {exc}", markup=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
