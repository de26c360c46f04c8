#!/usr/bin/env bash
# The parity harness's own venv: vLLM 0.33.0 (no deps: its CUDA extension is not needed) and
# the CPU build of torch, plus the small pure-Python imports vLLM's scheduler asks for.
# About 1 GB; never part of the project's own install or CI.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
pip=.venv/bin/pip
$pip install -q torch==2.13.0
$pip install -q --no-deps vllm==0.33.0
$pip install -q prometheus_client==0.26.0 transformers==5.20.2 cbor2 psutil pyzmq urllib3 \
    aiohttp requests openai-harmony openai msgspec pillow pybase64 cachetools cloudpickle \
    uvloop py-cpuinfo xgrammar fastapi partial-json-parser llguidance einops
echo "ready: .venv/bin/python harness.py OUT_DIR; then, in the project venv:"
echo "       python bench/parity/predict.py OUT_DIR"
