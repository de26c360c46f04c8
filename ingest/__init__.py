"""Version-tolerant readers: vLLM logs, /metrics scrapes, benchmark results into frames."""
