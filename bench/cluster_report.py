"""The Markdown report of bench/cluster_bench.py and its extrapolation to a 1,000-GPU job."""

from __future__ import annotations

from typing import Any

from bench_common import fmt_bytes, median

FAKE_GPUS = 8
"""GPUs of the fake NVML library the leader samples unless ``--real-gpus``."""


def _per_hour(value: float, seconds: float) -> float:
    return value * 3600.0 / seconds


def extrapolate(result: dict[str, Any], gpus: int = 1000, per_node: int = 8) -> dict[str, float]:
    """Scale the measured job to ``gpus`` ranks (one per GPU) on nodes of ``per_node``.

    Per node: one leader (host + GPU columns) and ``per_node - 1`` process-only ranks, each as
    measured here; counts and bytes scale linearly with ranks and time.
    """
    ranks = result["ranks"]
    sizes = result["sizes"]
    part_s = float(result["args"]["part_seconds"])
    nodes = gpus // per_node

    def mean_of(leader: bool, fn: Any) -> float:
        values = [float(fn(r)) for r in ranks if r["leader"] == leader]
        return sum(values) / len(values) if values else 0.0

    def bph(r: dict[str, Any]) -> float:
        return _per_hour(sizes.get(r["rank"], {"bytes": 0})["bytes"], r["recorded_s"])

    def cores(r: dict[str, Any]) -> float:
        return float(r["process_cpu_s"]) / float(r["window_s"])

    def scrape(key: str) -> Any:
        return lambda r: (r["scrape"] or {}).get(key, 0)

    def node(fn: Any) -> float:  # one leader and per_node - 1 process-only ranks
        return nodes * (mean_of(True, fn) + (per_node - 1) * mean_of(False, fn))

    out = {
        "nodes": float(nodes),
        "files_per_hour": gpus * 3600.0 / part_s,
        "bytes_per_hour": node(bph),
        "sampler_cores": node(cores),
    }
    for key in ("series", "bytes", "gzip_bytes"):
        out[f"prom_{key}"] = node(scrape(key))
    # The dataset's query cost per file, measured at the largest replica (see --scale).
    big = max(result["query"]["scaled"], key=lambda q: q["files"])
    seconds_per_file = (big["open_s"] + big["query_s"]) / max(1, big["files"])
    out["query_s_after_1h"] = seconds_per_file * out["files_per_hour"]
    out["query_s_after_24h"] = seconds_per_file * out["files_per_hour"] * 24
    return out


def _sizes(scrape: dict[str, int]) -> str:
    if not scrape:
        return "—"
    return f"{fmt_bytes(scrape['bytes'])} ({fmt_bytes(scrape['gzip_bytes'])})"


def markdown(result: dict[str, Any]) -> str:
    """The result as the Markdown that goes into bench/RESULTS.md."""
    a = result["args"]
    ranks = result["ranks"]
    sizes = result["sizes"]
    q = result["query"]
    hz = 1.0 / float(a["interval"])
    lines = [
        f"### {len(ranks)} ranks x {float(a['seconds']):g} s at {hz:g} Hz, parts every "
        f"{float(a['part_seconds']):g} s",
        "",
        f"Machine: {result['machine']}, {result['cpus']} CPUs; other processes used "
        f"{result['other_cores']:.2f} cores meanwhile. GPUs: "
        + ("the machine's NVML." if a["real_gpus"] == "True" else f"{FAKE_GPUS} fake (NVML lib)."),
        "",
        "| rank | role | columns | rows | missed | sampler thread CPU | process CPU | "
        "whole run CPU | files | bytes (footers) | bytes / rank-hour | /metrics series | "
        "bytes (gzip) |",
        "|" + " --- |" * 2 + " ---: |" * 11,
    ]
    tot = {"thread": 0.0, "proc": 0.0, "run": 0.0, "files": 0, "bytes": 0, "series": 0, "sb": 0}
    for r in ranks:
        w = float(r["window_s"])
        size = sizes.get(r["rank"], {"files": 0, "bytes": 0})
        sc = r["scrape"] or {}
        run_cpu = result["rusage_cpu_s"].get(r["rank"], r["run_cpu_s"])
        tot["thread"] += r["thread_cpu_s"] / w
        tot["proc"] += r["process_cpu_s"] / w
        tot["run"] += run_cpu
        tot["files"] += size["files"]
        tot["bytes"] += size["bytes"]
        tot["series"] += sc.get("series", 0)
        tot["sb"] += sc.get("bytes", 0)
        lines.append(
            f"| {r['rank']} | {'host+GPUs+process' if r['leader'] else 'process'} | "
            f"{r['columns']} | {r['rows']} | {r['ticks_missed']} | "
            f"{100 * r['thread_cpu_s'] / w:.2f} % | {100 * r['process_cpu_s'] / w:.2f} % | "
            f"{run_cpu:.2f} s | {size['files']} | {fmt_bytes(size['bytes'])} "
            f"({fmt_bytes(size.get('footer', 0))}) | "
            f"{fmt_bytes(_per_hour(size['bytes'], r['recorded_s']))} | "
            f"{sc.get('series', '—')} | {_sizes(sc)} |"
        )
    lines.append(
        f"| all | | | {sum(r['rows'] for r in ranks)} | {sum(r['ticks_missed'] for r in ranks)} | "
        f"{100 * tot['thread']:.2f} % | {100 * tot['proc']:.2f} % | {tot['run']:.2f} s | "
        f"{tot['files']} | {fmt_bytes(tot['bytes'])} | | {tot['series'] or '—'} | "
        f"{fmt_bytes(tot['sb']) if tot['sb'] else '—'} |"
    )
    recorded = {r["rank"]: r["rows"] for r in ranks}
    agree = all(q["rows_per_rank"].get(k) == v for k, v in recorded.items())
    lines += [
        "",
        "CPU columns are percent of one core over the sampling window (sampler thread: its own "
        "clock; process: getrusage, everything the rank's sampler, part writer and exporter "
        "did); whole run: the process's CPU from exec to exit, start-up and imports included.",
        "",
        f"`open_dataset` + DuckDB aggregate (rows, mean `proc.cpu_pct`, max `proc.rss_bytes` per "
        f"rank) over {tot['files']} files: open {1000 * median(q['open_s']):.1f} ms, query "
        f"{1000 * median(q['query_s']):.1f} ms (median of 3; first "
        f"{1000 * (q['open_s'][0] + q['query_s'][0]):.1f} ms). Rows per rank in the dataset "
        + ("equal" if agree else "DIFFER from")
        + " the rows each rank recorded.",
    ]
    lines += [
        "",
        "The same query on the dataset replicated as if more nodes had written it (parts "
        "hard-linked under new host/rank partitions; one run each, page cache warm):",
        "",
        "| replicas | ranks | files | rows | open_dataset | DuckDB aggregate |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for sq in q["scaled"]:
        lines.append(
            f"| {sq['factor']} | {sq['factor'] * len(ranks)} | {sq['files']} | {sq['rows']} | "
            f"{sq['open_s']:.2f} s | {sq['query_s']:.2f} s |"
        )
    x = extrapolate(result)
    lines += [
        "",
        f"Extrapolated to 1,000 GPUs ({x['nodes']:.0f} nodes of 8, one rank per GPU, same rate):",
        "",
        f"- files: {x['files_per_hour']:,.0f} per hour ({24 * x['files_per_hour']:,.0f} per day)",
        f"- bytes: {fmt_bytes(x['bytes_per_hour'])} per hour",
        f"- sampler CPU: {x['sampler_cores']:.1f} cores cluster-wide",
        f"- Prometheus: {x['prom_series']:,.0f} series, {fmt_bytes(x['prom_bytes'])} per scrape "
        f"round ({fmt_bytes(x['prom_gzip_bytes'])} gzip)",
        f"- open + aggregate, per file as at the largest replica: "
        f"{x['query_s_after_1h']:.0f} s after 1 h, "
        f"{x['query_s_after_24h']:.0f} s after 24 h",
    ]
    return "\n".join(lines)
