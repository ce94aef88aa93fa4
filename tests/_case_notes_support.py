"""A case directory made by hand, in the layout of kit.case.layout, from real evidence files.

The evidence is a real sglang 0.5.11 log (tests/data/real_server/, from a real server run), a real
`nvidia-smi` (tests/data/hardware/), the model's config.json of that run, and a /server_info made from the
log's own server_args line by the kit's reader; findings.json is the doctor's answer over those files, and
sources/ holds the lines of sglang 0.5.11 the first cited finding points at, with their hashes.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

from kit.case.layout import FILES, FINDINGS_FILE, Excerpt, sha256_text, write_meta

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "data" / "real_server" / "qwen3_5-cpu-0.5.11.log"
SMI = ROOT / "tests" / "data" / "hardware" / "smi_classic_1x_h100_590.txt"
CONFIG = ROOT / "tests" / "data" / "real_server" / "tiny-qwen3.5-config.json"
RUN = ROOT / "tests" / "data" / "real_server" / "bench-native-cpu-0.5.11.jsonl"
CAPTURED_AT = "2026-12-02T00:38:00Z"


@functools.lru_cache(maxsize=1)
def _evidence() -> tuple[str, str, str]:
    """(server_info.json text, findings.json text, the source root the doctor read)."""
    import tempfile

    import kit.doctor
    from kit.server_args import parse_log

    info = dict(parse_log(LOG.read_text(encoding="utf-8")).fields) | {"version": "0.5.11"}
    info_text = json.dumps(info, default=str, indent=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server_info.json"
        path.write_text(info_text, encoding="utf-8")
        d = kit.doctor.doctor(log=str(LOG), server_info=str(path), nvidia_smi=str(SMI), model_config=str(CONFIG),
                              sglang="0.5.11")
    data = d.to_dict()
    return info_text, json.dumps(data, default=str, indent=1), data["sources"]["source"]


def findings() -> list[dict]:
    """What the answer lists: its findings, then those found but not applicable here (the log's server runs
    on CPU, so the GPU rules' findings are listed apart); a note may name either."""
    data = json.loads(_evidence()[1])
    return data["findings"] + data["not_applicable"]


def ranked() -> list[dict]:
    """The answer's findings alone (the causes it ranks)."""
    return json.loads(_evidence()[1])["findings"]


def make_case(parent: Path, name: str = "slow-tuesday") -> Path:
    """A captured case of the real evidence above, as `sgl-kit capture` lays it out (format 1)."""
    info_text, findings_text, source_root = _evidence()
    case = parent / name
    (case / "sources").mkdir(parents=True)
    shutil.copyfile(LOG, case / "server.log")
    shutil.copyfile(SMI, case / "nvidia-smi.txt")
    shutil.copyfile(CONFIG, case / "config.json")
    (case / "server_info.json").write_text(info_text, encoding="utf-8")
    (case / FINDINGS_FILE).write_text(findings_text, encoding="utf-8")
    written = ["server.log", "nvidia-smi.txt", "config.json", "server_info.json", FINDINGS_FILE]
    site = next(s for f in findings() for s in f["sites"])  # srt/...py:LINE
    file, line = site.rsplit(":", 1)
    whole = (Path(source_root) / file).read_text(encoding="utf-8")
    lines = whole.splitlines()[int(line) - 3:int(line) + 2]
    excerpt_text = "".join(f"{int(line) - 2 + i}: {text}\n" for i, text in enumerate(lines))
    excerpt_path = f"sources/{file.replace('/', '__')}.txt"
    (case / excerpt_path).write_text(excerpt_text, encoding="utf-8")
    excerpt = Excerpt(file, sha256_text(whole), sha256_text(excerpt_text), excerpt_path, [int(line)])
    meta = {
        "format": 1, "id": name, "kind": "captured",
        "captured": {"at": CAPTURED_AT, "seconds": 4.2, "kit": "0.1.0", "target": "gpu-box",
                     "server": {"pid": 4242, "port": 30000, "url": "http://127.0.0.1:30000"}, "interval": 5.0},
        "sglang": {"version": "0.5.11", "record_sha256": "ab" * 32, "wheel_sha256": None},
        "files": {n: FILES[n][0] for n in sorted(written)},
        "missing": {"metrics-1.prom": "the server runs without --enable-metrics (GET /metrics: 404)"},
        "endpoints": {},
        "redacted": [],
        "excerpts": [excerpt.to_dict()],
        "notes": [],
    }
    write_meta(case, meta)
    return case
