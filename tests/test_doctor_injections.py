"""The live doctor on PyPI's real sglang 0.5.11 (CPU, a tiny Qwen3), relaunched with one misconfiguration at a
time and loaded by `kit.bench` in a way that shows it; the bench keeps the server's /metrics pages, and the doctor
reads both sides. Each row asserts the answer names the injected limit with the server's own numbers, and the
clean launch under random prompts gets no cause (the prefix cache's low hit rate is not one: the prompts share
no prefix). The table the closing notes quote is printed (`pytest -s`).

Nothing here reads back what a launch was configured to do as a confirmation: the numbers the answer gives
(running at the cap, chunks filled, tokens per streamed chunk, the pool's use) are the server's and the
client's measurements of the load, and the test checks them against the server's /metrics and the run file.
"""

from __future__ import annotations

import json

import pytest
from _real_server_support import START_TIMEOUT, serve_real

import kit
from kit.investigation import relaunch
from kit.server_args import server_flags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(START_TIMEOUT) * 8 + 900)]

SHARED = " ".join(f"policy{j}" for j in range(150))  # a long system prompt every request begins with
# (kind, flags added to the default CPU launch, the load as kit.bench options)
INJECTIONS = [  # the clean row first: the server's first launch is the default one, so it needs no relaunch
    ("clean", [], {"concurrency": 1, "requests": 6, "max_tokens": 32, "input_len": 64}),
    ("running cap", ["--max-running-requests", "2"],
     {"concurrency": 8, "requests": 16, "max_tokens": 32, "input_len": 48}),
    ("KV pool", ["--max-total-tokens", "700"],
     {"concurrency": 8, "requests": 16, "max_tokens": 96, "input_len": 64}),
    ("prefill chunk", ["--chunked-prefill-size", "32"],
     {"concurrency": 1, "requests": 4, "max_tokens": 16, "input_len": 160}),
    ("stream interval", ["--stream-interval", "8"],
     {"concurrency": 1, "requests": 4, "max_tokens": 64, "input_len": 32}),
    ("radix off, shared prefix", ["--disable-radix-cache"],
     {"concurrency": 1, "requests": 8, "max_tokens": 8, "prompts_file": "shared"}),
]


def _delta(run, sample: str) -> float:
    """What the server's counter counted between the run's first and last /metrics page."""
    from kit.metrics import parse_metrics_text

    (_, first), (_, last) = run.server_pages[0], run.server_pages[-1]
    def value(text: str) -> float:
        page = parse_metrics_text(text)
        return float(page[page["sample"] == sample]["value"].sum())

    return value(last) - value(first)


def _row(kind, flags, load, d, run) -> dict:
    a = d.answer
    return {"kind": kind, "flags": " ".join(flags) or "(default CPU launch)",
            "load": ", ".join(f"{k}={v}" for k, v in load.items() if k != "prompts_file")
                    + (", prompts share a 150-word prefix" if load.get("prompts_file") else ", random prompts"),
            "top3": [f.id for f in d.findings[:3]], "verdict": a.verdict, "class": a.problem_class,
            "signal": a.strongest_signal, "guess": a.best_guess, "next": a.next_step, "risk": a.risk,
            "apart": [f.id for f in d.not_applicable], "pages": len(run.server_pages)}


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    """Each injection: the server relaunched with it, the load run, the live doctor's answer."""
    servers = serve_real(tmp_path_factory, "qwen3", set_lab_dir=False)
    mine = next(servers)
    work = tmp_path_factory.mktemp("injections")
    shared = work / "shared.jsonl"
    shared.write_text("".join(json.dumps({"prompt": f"{SHARED} question {i}: say a word"}) + "\n" for i in range(8)))
    default = mine.server()
    base = server_flags(default.argv)
    rows = {}
    try:
        running = base
        for kind, flags, load in INJECTIONS:
            if [*base, *flags] != running:
                running = [*base, *flags]
                relaunch(mine.host, mine.server(), running, timeout=START_TIMEOUT)
            server = mine.server()
            options = {**load, "prompts_file": str(shared)} if load.get("prompts_file") else dict(load)
            path = work / f"{kind.replace(' ', '-').replace(',', '')}.jsonl"
            run = kit.bench(server=server, out=path, progress=None, server_metrics_interval=0.5, **options)
            d = kit.doctor("local", host=mine.host, server=server, bench=str(path))
            rows[kind] = (d, run, _row(kind, flags, load, d, run))
        table = ["| injected | load | top 3 | verdict | problem class | strongest signal | next step |",
                 "| --- | --- | --- | --- | --- | --- | --- |"]
        table += [f"| {r['kind']} (`{r['flags']}`) | {r['load']} | {', '.join(r['top3']) or '-'} | {r['verdict']} | "
                  f"{r['class']} | {r['signal']} | {r['next']} |" for _, _, r in rows.values()]
        print("\n" + "\n".join(table))
        (work / "table.md").write_text("\n".join(table) + "\n")
        yield rows
    finally:
        servers.close()


def test_every_run_kept_the_servers_pages(injected):
    for kind, (d, _run, row) in injected.items():
        assert row["pages"] >= 2, kind
        assert d.sources["runtime"].startswith(f"{row['pages']} scrapes of "), (kind, d.sources["runtime"])


def test_the_running_cap_is_named_with_its_numbers_and_the_loads_concurrency(injected):
    d, run, row = injected["running cap"]
    assert row["verdict"] == "cause found" and row["class"].startswith("capacity")
    assert "the limit that holds is the running cap: 2 requests ran at once, at the cap max_running_requests 2" \
        in row["signal"], row["signal"]
    assert "the load sent 8 at once" in row["signal"]
    top = d.findings[0]
    assert top.id == "queue-time-measured" and [str(c) for c in top.changes] == ["--max-running-requests 8"]
    assert "8 running requests need 8 times a request's KV tokens" in row["risk"]
    # the queue it names is the server's own: requests waited, by its histogram over the bench's minutes
    assert top.estimate.basis == "measured" and top.estimate.share > 0.2


def test_a_full_kv_pool_is_named_with_the_pools_size(injected):
    d, run, row = injected["KV pool"]
    assert row["verdict"] == "cause found", row
    assert "the KV pool is full" in row["signal"] and "of a pool of" in row["signal"], row["signal"]
    ids = row["top3"]
    assert "requests-retracted-measured" in ids or "kv-pool-full" in ids or "queue-time-measured" in ids


def test_prompts_split_into_small_prefill_chunks_are_named(injected):
    d, run, row = injected["prefill chunk"]
    assert row["top3"][0] == "prefill-chunk-small", row
    f = d.findings[0]
    prompts = sum(r.prompt_tokens for r in run.results if r.ok) / len([r for r in run.results if r.ok])
    assert f"the benchmark's prompts have {prompts:.0f} tokens on average" in f.evidence[0]
    assert [str(c) for c in f.changes] == ["--chunked-prefill-size 512"]


def test_a_stream_interval_is_named_from_the_tokens_the_client_received(injected):
    d, run, row = injected["stream interval"]
    assert row["top3"][0] == "stream-interval-batches-tokens", row
    f = d.findings[0]
    per = [r.tokens_per_chunk for r in run.results if r.ok and r.tokens_per_chunk]
    assert sum(per) / len(per) > 4  # what the client measured, not what was configured
    assert f.estimate.basis == "measured" and [str(c) for c in f.changes] == ["--stream-interval 1"]


def test_radix_off_on_a_workload_that_shares_a_prefix_is_a_cause(injected):
    d, run, row = injected["radix off, shared prefix"]
    assert run.prefix_reuse["share"] > 0.8
    assert "radix-cache-off" in row["top3"] or "prefix-cache-hit-low" in row["top3"], row
    assert [str(c) for f in d.findings if f.id == "radix-cache-off" for c in f.changes] == ["remove --disable-radix-cache"]


def test_the_clean_launch_under_random_prompts_has_no_cause(injected):
    d, run, row = injected["clean"]
    assert run.prefix_reuse["share"] < 0.05
    assert row["verdict"] != "cause found", row
    assert not any(f.id in ("prefix-cache-hit-low", "radix-cache-off") for f in d.findings)
    # the server's own hit rate over the run (its pages): when low, it is seen and listed apart as no cause
    # (no cached_tokens_total series at all is a zero: sglang counts cached tokens only when there are some)
    hit = _delta(run, "sglang:cached_tokens_total") / _delta(run, "sglang:prompt_tokens_total")
    if hit < 0.10:
        assert "prefix-cache-hit-low" in row["apart"], (hit, row["apart"])
        apart = next(f for f in d.not_applicable if f.id == "prefix-cache-hit-low")
        assert "the workload's prompts share 0%" in apart.not_here
    else:
        assert "prefix-cache-hit-low" not in row["apart"], hit
    # the GPU rules do not apply on a CPU server: apart, never ranked
    assert "decode-passes-eager" in row["apart"] and not any(f.id == "decode-passes-eager" for f in d.findings)
    text = d.to_text()
    assert text.index("the answer:") < text.index("found, but not on this hardware or workload")
