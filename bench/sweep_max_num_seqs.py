"""max_num_seqs sweep under heavy preemption: does lowering it raise net throughput?

Run: python bench/sweep_max_num_seqs.py  (prints a Markdown table for docs/simulator.md)
"""

from __future__ import annotations

import sys
import time

from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.scenarios import chat_traffic
from preemptscope.analysis.sim.whatif import sweep

VALUES = (4, 8, 12, 16, 20, 24, 32, 48, 64, 128, 256)


def main(argv: list[str]) -> int:
    gpu = argv[1] if len(argv) > 1 else "A10G"
    rate = float(argv[2]) if len(argv) > 2 else 1.5
    workload = chat_traffic(rate=rate, duration=600, seed=1)
    base = SimConfig(model=MODEL_PRESETS["llama-3.1-8b"], gpu=GPU_PRESETS[gpu])
    began = time.perf_counter()
    curve = sweep(workload, "max_num_seqs", VALUES, base=base)
    elapsed = time.perf_counter() - began
    cap = base.capacity()
    print(
        f"Llama-3.1-8B on {gpu}: {cap.kv_cache_tokens:,} KV tokens; {len(workload)} requests at "
        f"{rate} req/s for 600 s (prompt ~1024, output ~384 tokens); {elapsed:.1f} s to simulate"
    )
    print()
    print(
        "| max_num_seqs | preemptions | recomputed prompt tokens | output tok/s | "
        "e2e mean | e2e p99 | p99/mean | TTFT p99 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for o in curve:
        ratio = o.e2e_p99_over_mean
        print(
            f"| {o.settings['max_num_seqs']} | {o.preemptions:,} | {o.recomputed_tokens:,} | "
            f"{o.output_throughput:,.1f} | {o.e2e_mean or 0:,.1f} s | {o.e2e_p99 or 0:,.1f} s | "
            f"{ratio or 0:.2f} | {o.ttft_p99 or 0:,.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
