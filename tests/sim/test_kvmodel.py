"""The shared KV-capacity model against vLLM's arithmetic and real startup logs."""

from __future__ import annotations

import pytest
from preemptscope.analysis.kvmodel import (
    GIB,
    GPU_PRESETS,
    MODEL_PRESETS,
    GpuSpec,
    ModelSpec,
    blocks_for_tokens,
    kv_bytes_per_token,
    kv_capacity,
    utilization_for_tokens,
    weights_gib,
)

from preemptscope.errors import ConfigError

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def test_llama3_8b_bytes_per_token_from_hf_config() -> None:
    model = ModelSpec.from_hf_config(LLAMA3_8B_CONFIG, name="llama3-8b")
    assert (model.num_layers, model.num_kv_heads, model.head_dim) == (32, 8, 128)
    assert kv_bytes_per_token(model) == 131072
    # Parameter estimate from shapes lands on the published 8.03B.
    assert model.num_params == pytest.approx(8.03e9, rel=0.005)


def test_tp_splits_kv_heads_and_replicates_below_one_head() -> None:
    model = MODEL_PRESETS["llama-3.1-8b"]
    assert kv_bytes_per_token(model, tp=2) == 65536
    assert kv_bytes_per_token(model, tp=8) == 16384
    # 8 KV heads on 16 ranks: each rank still holds one head (vLLM replicates).
    assert kv_bytes_per_token(model, tp=16) == 16384
    assert kv_bytes_per_token(model, pp=2) == 65536
    assert kv_bytes_per_token(model, kv_dtype_bytes=1.0) == 65536


def test_kv_memory_matches_vllm_profile_log() -> None:
    # Real v0.8 profile: 23.58 GiB x 0.99 = 23.35; weights 21.21; non-torch 0.20;
    # activation 0.37; "the rest of the memory reserved for KV Cache is 1.57GiB".
    gpu = GpuSpec("L4-like", 23.58, 300.0, 121.0)
    cap = kv_capacity(
        MODEL_PRESETS["llama-3.1-8b"],
        gpu,
        gpu_memory_utilization=0.99,
        weights_gib=21.21,
        activation_gib=0.37,
        non_torch_gib=0.20,
        context_len=4096,
    )
    assert cap.kv_memory_gib == pytest.approx(1.57, abs=0.01)
    assert cap.num_gpu_blocks == int(cap.kv_memory_gib * GIB // (131072 * 16))
    assert cap.kv_cache_tokens == cap.num_gpu_blocks * 16


def test_tokens_match_real_v1_startup_lines() -> None:
    # Real v0.10.2/v0.11.0 (Qwen3-14B shape): "Available KV cache memory: 6.51 GiB",
    # "GPU KV cache size: 42,656 tokens",
    # "Maximum concurrency for 32,768 tokens per request: 1.30x".
    model = MODEL_PRESETS["qwen3-14b"]
    assert kv_bytes_per_token(model) == 163840
    gpu = GpuSpec("x", 10.0, 1000.0, 100.0)
    cap = kv_capacity(
        model,
        gpu,
        gpu_memory_utilization=1.0,
        weights_gib=3.49,
        activation_gib=0.0,
        non_torch_gib=0.0,
        context_len=32768,
    )
    assert cap.kv_cache_tokens == 42656
    assert f"{cap.max_concurrency:.2f}" == "1.30"


def test_no_memory_left_is_vllms_error() -> None:
    with pytest.raises(ConfigError, match="No available memory for the cache blocks"):
        kv_capacity(
            MODEL_PRESETS["llama-3.1-70b"],
            GPU_PRESETS["L4"],
            gpu_memory_utilization=0.9,
            context_len=8192,
        )


def test_utilization_inverse_round_trips() -> None:
    model, gpu = MODEL_PRESETS["llama-3.1-8b"], GPU_PRESETS["A100-80G"]
    for tokens in (100_000, 300_000):
        util = utilization_for_tokens(model, gpu, tokens)
        assert util <= 1.0
        cap = kv_capacity(model, gpu, gpu_memory_utilization=util, context_len=8192)
        assert cap.kv_cache_tokens >= tokens
        # ...and not wastefully: 0.001 less no longer reaches the target.
        lower = kv_capacity(model, gpu, gpu_memory_utilization=util - 0.001, context_len=8192)
        assert lower.kv_cache_tokens < tokens
    assert utilization_for_tokens(model, GPU_PRESETS["L4"], 10_000_000) > 1.0


def test_weights_split_and_presets_consistent() -> None:
    model = MODEL_PRESETS["llama-3.1-70b"]
    assert weights_gib(model) == pytest.approx(70.6e9 * 2 / GIB)
    assert weights_gib(model, tp=4) == pytest.approx(weights_gib(model) / 4)
    for gpu in GPU_PRESETS.values():
        assert gpu.memory_gib > 0 and gpu.hbm_bandwidth_gbs > 0 and gpu.bf16_tflops > 0


def test_bad_hf_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        ModelSpec.from_hf_config({"hidden_size": 10, "num_attention_heads": 2}, name="broken")
    with pytest.raises(ConfigError, match="unknown dtype"):
        ModelSpec.from_hf_config(LLAMA3_8B_CONFIG, dtype="int3")


def test_moe_and_multimodal_configs() -> None:
    mixtral = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }
    model = ModelSpec.from_hf_config(mixtral, name="mixtral")
    assert model.num_params == pytest.approx(46.7e9, rel=0.01)
    assert model.compute_params == pytest.approx(12.9e9, rel=0.02)
    wrapped = ModelSpec.from_hf_config({"text_config": LLAMA3_8B_CONFIG, "model_type": "mllama"})
    assert kv_bytes_per_token(wrapped) == 131072


def test_blocks_for_tokens() -> None:
    assert [blocks_for_tokens(n) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]
