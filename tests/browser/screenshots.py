"""Screenshots of the notebooks as JupyterLab renders them: `make screenshots` (out/screenshots/).

Starts what `make lab` starts, each part private and stopped at the end: the built-in lab, a JupyterLab
on the working copy of notebooks/ (kit.demo.workspace), and headless Debian Chromium through Playwright.
Then it runs each notebook asked for (01, 03, 04, 06 by default) with Run All, checks that no cell shows
an error, and saves named PNGs: the whole notebook, and each region a reader looks at (a table, a
figure, a doctor's answer), cut from the page as the reader sees it. ``index.md`` beside them says what
each picture shows. The notebooks run with their own defaults unless ``--quick`` (fewer requests).

    python tests/browser/screenshots.py [--out DIR] [--quick] [--width PX] [01 03 ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _jupyterlab import (
    ROOT,
    Missing,
    chromium,
    code_cells,
    errors_shown,
    full_screenshot,
    jupyterlab,
    lab_up,
    local_only,
    prompts,
    run_all,
    shut_down_kernel,
    tail,
    wait_for_kernel,
    wait_until_executed,
    working_copy,
)

RUN_ALL_TIMEOUT_MS = 900_000  # 04 relaunches the lab and benchmarks three times


@dataclass(frozen=True)
class Region:
    name: str  # the PNG's name after the notebook's number
    cell: str  # text of the code cell whose output this is (the cell's source contains it)
    shows: str  # what a reader checks in it


NOTEBOOKS = {
    "01": ("01_symptom.ipynb", [
        Region("bench", "run = kit.investigation.measure(", "the benchmark's progress bar and its run: the bench mean"),
        Region("rates", 'rate_distribution({"as found": run})', "decode tok/s per request, one point each"),
        Region("history", "print(history.to_text())", "what the server's log and Prometheus said over time"),
        Region("runtime", "runtime_diagnosis(host, server", "the doctor's runtime rules: findings or what is missing"),
        Region("symptom", "symptom = kit.investigation.symptom(", "the measured rate against the baseline and roofline"),
    ]),
    "03": ("03_auto_disable.ipynb", [
        Region("sites", "explanation = kit.why(", "every site that assigns the flag, the guards of each"),
        Region("rule", "kit.investigation.rule_source(", "the rule that fired, in the source"),
        Region("why", "kit.investigation.why_it_fired(", "what decided the guard for this server"),
        Region("evidence", "kit.investigation.evidence_lines(", "the lines of sglang the answer rests on, captioned"),
        Region("crosscheck", "kit.investigation.dryrun_crosscheck(", "the static reading against sglang's own run"),
        Region("way_out", "kit.investigation.way_out(", "the way out, and the fix that is not one"),
        Region("doctor", "diagnosis = kit.doctor(target", "the doctor's table: findings, impact, evidence, fix"),
    ]),
    "04": ("04_fix_and_validate.ipynb", [
        Region("plan", "plan = kit.investigation.fix_plan(", "the plan: one fix per step"),
        Region("steps", "validation.plot()", "decode tok/s at each step, with the baseline and the roofline"),
        Region("ab", "display(kit.display.ab_comparison(", "each step against the one before: A/B and the bootstrap of B - A"),
        Region("conclusion", "kit.display.Text(validation.conclusion())", "the conclusion, computed from the runs"),
        Region("pays", "kit.display.Text(pays.conclusion()", "where the refused fix would pay: the launch without speculative decoding"),
    ]),
    "06": ("06_practice.ipynb", [
        Region("incident", "incident = kit.practice.load(", "the evidence as posted, for the default case"),
        Region("doctor", "diagnosis = kit.practice.run_doctor(", "what the doctor finds in that evidence"),
        Region("reveal", "kit.practice.reveal(incident)", "the thread's stated cause"),
        Region("verdict", "kit.practice.verdict(", "who was right"),
    ]),
}
QUICK = {"requests": 3, "max_tokens": 48}


def _quick(path: Path) -> None:
    """Fewer, shorter requests in the parameters cell (the notebooks that benchmark)."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            text = "".join(cell["source"])
            for name, value in QUICK.items():
                text = re.sub(rf"^({name}: int = )\d+", rf"\g<1>{value}", text, flags=re.M)
            cell["source"] = text.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _file_browser(context, jupyter, out: Path) -> tuple[str, list[str]]:
    """The file browser at the working copy's root: each notebook listed once."""
    page = context.new_page()
    try:
        page.goto(f"{jupyter.url}/lab?token={jupyter.token}&reset", wait_until="domcontentloaded", timeout=60_000)
        listing = page.locator(".jp-FileBrowser .jp-DirListing-item")
        listing.first.wait_for(timeout=60_000)
        page.wait_for_timeout(500)
        names = [t.strip() for t in page.locator(".jp-FileBrowser .jp-DirListing-itemText").all_inner_texts()]
        path = out / "00_file_browser.png"
        page.locator(".jp-FileBrowser").screenshot(path=str(path))
        return str(path), names
    finally:
        page.close()


def _notebook(context, jupyter, number: str, out: Path, console: list[str]) -> list[tuple[str, str]]:
    name, regions = NOTEBOOKS[number]
    stem = name.removesuffix(".ipynb")
    page = context.new_page()
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    try:
        page.goto(jupyter.lab_url(name), wait_until="domcontentloaded", timeout=60_000)
        wait_for_kernel(page)
        run_all(page)
        wait_until_executed(page, len(code_cells(jupyter.root / name)), RUN_ALL_TIMEOUT_MS)
        errors = errors_shown(page)
        if errors:
            raise RuntimeError(f"{name}: a cell shows an error:\n" + "\n---\n".join(errors))
        if not all(re.fullmatch(r"\[\d+\]:", p) for p in prompts(page)):
            raise RuntimeError(f"{name}: cells not run: {prompts(page)}")
        page.wait_for_timeout(1000)  # figures drawn
        written = []
        whole = out / f"{stem}.png"
        full_screenshot(page, whole)  # also grows the window to the notebook, so each region is on screen
        written.append((str(whole), "the whole notebook after Run All"))
        for region in regions:
            cell = page.locator(".jp-Notebook .jp-CodeCell").filter(
                has=page.locator(".jp-InputArea-editor", has_text=region.cell))
            if cell.count() != 1:
                raise RuntimeError(f"{name}: {cell.count()} code cells hold {region.cell!r}; expected one")
            output = cell.locator(".jp-Cell-outputWrapper")
            path = out / f"{stem}_{region.name}.png"
            output.screenshot(path=str(path))
            written.append((str(path), region.shows))
        shut_down_kernel(page)  # before the next notebook's kernel starts
        return written
    except BaseException:
        try:
            page.screenshot(path=str(out / f"{stem}_failure.png"))
        except Exception as exc:  # noqa: BLE001 - the page may be gone; the original error matters
            print(f"no failure screenshot: {exc}", file=sys.stderr)
        print("browser console errors:\n" + "\n".join(console[-30:]), file=sys.stderr)
        print(f"JupyterLab log:\n{tail(jupyter.log)}", file=sys.stderr)
        raise
    finally:
        page.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", metavar="NN", help=f"which notebooks ({', '.join(NOTEBOOKS)}; default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "screenshots", help="where the PNGs go")
    parser.add_argument("--width", type=int, default=1400, help="the browser window's width in pixels (1400)")
    parser.add_argument("--quick", action="store_true",
                        help=f"benchmark with {QUICK['requests']} requests of {QUICK['max_tokens']} tokens")
    args = parser.parse_args(argv)
    chosen = args.notebooks or list(NOTEBOOKS)
    unknown = [n for n in chosen if n not in NOTEBOOKS]
    if unknown:
        parser.error(f"no screenshots defined for {', '.join(unknown)}; choose from {', '.join(NOTEBOOKS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.glob("*.png"):
        stale.unlink()
    started = time.monotonic()
    shots: list[tuple[str, str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sgl-kit-screenshots-") as tmp:
            base = Path(tmp)
            root = working_copy(base / "notebooks", base / "jupyter" / "overrides.json")
            if args.quick:
                for number in chosen:
                    _quick(root / NOTEBOOKS[number][0])
            print(f"starting the lab, JupyterLab on {root} and Chromium ({args.width} px wide)", flush=True)
            with lab_up(base) as env, jupyterlab(base / "jupyter", env, root) as jupyter, chromium() as browser:
                context = browser.new_context(viewport={"width": args.width, "height": 1000})
                context.set_default_timeout(60_000)
                outside: list[str] = []
                context.route("**/*", lambda route: local_only(route, outside, jupyter.url))
                console: list[str] = []
                path, names = _file_browser(context, jupyter, args.out)
                shots.append((path, "the file browser: " + ", ".join(names)))
                print(f"  {path}: {', '.join(names)}", flush=True)
                for number in chosen:
                    t0 = time.monotonic()
                    for path, shows in _notebook(context, jupyter, number, args.out, console):
                        shots.append((path, shows))
                        print(f"  {path}", flush=True)
                    print(f"{NOTEBOOKS[number][0]}: {time.monotonic() - t0:.0f} s", flush=True)
                context.close()
                if outside:
                    print(f"note: JupyterLab asked for more than its server: {sorted(set(outside))}")
    except Missing as exc:
        print(f"error: screenshots: {exc}", file=sys.stderr)
        return 2
    index = args.out / "index.md"
    index.write_text("# Notebooks in JupyterLab\n\n" + "".join(
        f"- `{Path(p).name}`: {shows}\n" for p, shows in shots))
    print(f"{len(shots)} screenshots in {args.out} ({time.monotonic() - started:.0f} s); what each shows: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
