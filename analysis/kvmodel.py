"""The one KV-cache capacity model: used by the capacity calculator, the advice and the simulator.

It follows vLLM's own arithmetic (V1 `gpu_worker.determine_available_memory` and
`kv_cache_utils`; V0 `worker.determine_num_available_blocks`):

    KV memory  = total GPU memory x gpu_memory_utilization
                 - model weights - activation peak - non-torch memory        (per GPU)
    bytes/token = 2 (K and V) x layers/pp x kv_heads/tp x head_dim x kv dtype bytes
    blocks      = floor(KV memory / (bytes/token x block_size))
    tokens      = blocks x block_size
    max concurrency = tokens / context_len          (the startup "Maximum concurrency" line)

Units: memory in GiB (2**30 bytes, as vLLM prints it), bandwidth in GB/s (10**9 bytes/s, as
vendors quote it), compute in TFLOP/s (10**12). Parameter counts are plain counts (8.03e9).
Sliding-window layers are budgeted like full-attention layers (see docs/simulator.md): vLLM
allocates the same page per layer, so the block count is exact; only max concurrency for
sliding-window models is a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from preemptscope.errors import ConfigError

GIB = float(2**30)

# Bytes per element for the dtype names found in HF configs and vLLM's --dtype / --kv-cache-dtype.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "auto": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "float8_e4m3fn": 1.0,
    "int8": 1.0,
}

# vLLM's memory profile leaves room for these besides the weights; measured defaults from real
# startup logs of 7-14B models on one GPU (see docs/simulator.md, "KV capacity").
DEFAULT_ACTIVATION_GIB = 1.2
DEFAULT_NON_TORCH_GIB = 0.4


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name (`bfloat16`, `torch.float16`, `fp8`, ...)."""
    key = name.lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {name!r}; expected one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder-only transformer, as far as KV cache and step time need it.

    `num_params` is a plain count (8.03e9 for Llama-3.1-8B): all weights, used for memory.
    `active_params` (MoE: parameters touched per token) drives compute; defaults to num_params.
    """

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    num_params: float
    dtype_bytes: float = 2.0
    sliding_window: int | None = None
    num_attention_heads: int = 0  # 0: hidden_size // head_dim
    active_params: float | None = None
    weight_bytes_per_param: float | None = None  # quantized weights; None: dtype_bytes
    max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "num_kv_heads", "head_dim", "hidden_size"):
            if getattr(self, field_name) <= 0:
                raise ConfigError(f"model {self.name!r}: {field_name} must be positive")
        if self.num_params <= 0 or self.dtype_bytes <= 0:
            raise ConfigError(f"model {self.name!r}: num_params and dtype_bytes must be positive")

    @property
    def query_heads(self) -> int:
        return self.num_attention_heads or max(1, self.hidden_size // self.head_dim)

    @property
    def compute_params(self) -> float:
        return self.active_params if self.active_params is not None else self.num_params

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], *, name: str = "", dtype: str | None = None
    ) -> ModelSpec:
        """Build from a Hugging Face `config.json` mapping.

        Multimodal configs are read through their `text_config`. The parameter count is estimated
        from the shapes (embeddings, attention, gated MLP, MoE experts) when the config has none.
        """
        text = config.get("text_config")
        cfg: Mapping[str, Any] = {**config, **text} if isinstance(text, Mapping) else config
        label = name or str(cfg.get("_name_or_path") or cfg.get("model_type") or "model")

        def need_int(*keys: str) -> int:
            for key in keys:
                value = cfg.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            raise ConfigError(
                f"HF config for {label!r}: missing or invalid {' / '.join(keys)} "
                "(expected a positive integer)"
            )

        layers = need_int("num_hidden_layers", "n_layer", "num_layers")
        hidden = need_int("hidden_size", "n_embd", "d_model")
        heads = need_int("num_attention_heads", "n_head")
        kv_value = cfg.get("num_key_value_heads")
        kv_heads = kv_value if isinstance(kv_value, int) and kv_value > 0 else heads
        hd_value = cfg.get("head_dim")
        head_dim = hd_value if isinstance(hd_value, int) and hd_value > 0 else hidden // heads
        dtype_name = dtype or str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        element = dtype_bytes(dtype_name)

        vocab = int(cfg.get("vocab_size") or 0)
        intermediate = int(cfg.get("intermediate_size") or 4 * hidden)
        experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        per_token_experts = int(cfg.get("num_experts_per_tok") or 0)
        expert_intermediate = int(cfg.get("moe_intermediate_size") or intermediate)
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
        dense_mlp = 3 * hidden * intermediate
        embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
        if experts > 0:
            expert_mlp = 3 * hidden * expert_intermediate
            total = embeddings + layers * (attention + experts * expert_mlp)
            active: float | None = embeddings + layers * (
                attention + max(per_token_experts, 1) * expert_mlp
            )
        else:
            total = embeddings + layers * (attention + dense_mlp)
            active = None

        window = cfg.get("sliding_window")
        uses_window = cfg.get("use_sliding_window", True) is not False
        max_pos = cfg.get("max_position_embeddings")
        return cls(
            name=label,
            num_layers=layers,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            hidden_size=hidden,
            num_params=float(total),
            dtype_bytes=element,
            sliding_window=window if isinstance(window, int) and uses_window else None,
            num_attention_heads=heads,
            active_params=float(active) if active is not None else None,
            max_position_embeddings=max_pos if isinstance(max_pos, int) else None,
        )


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. memory_gib is what `torch.cuda.mem_get_info` reports as total."""

    name: str
    memory_gib: float
    hbm_bandwidth_gbs: float
    bf16_tflops: float  # dense, no sparsity


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, params: float) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=layers,
        num_kv_heads=kv,
        head_dim=hidden // heads,
        hidden_size=hidden,
        num_params=params,
        num_attention_heads=heads,
        max_position_embeddings=131072,
    )


MODEL_PRESETS: dict[str, ModelSpec] = {
    "llama-3.1-8b": _llama("meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 32, 8, 8.03e9),
    "llama-3.1-70b": _llama("meta-llama/Llama-3.1-70B-Instruct", 80, 8192, 64, 8, 70.6e9),
    "qwen2.5-7b": replace(
        _llama("Qwen/Qwen2.5-7B-Instruct", 28, 3584, 28, 4, 7.62e9), max_position_embeddings=32768
    ),
    "qwen2.5-72b": replace(
        _llama("Qwen/Qwen2.5-72B-Instruct", 80, 8192, 64, 8, 72.7e9), max_position_embeddings=32768
    ),
    "qwen3-14b": replace(
        _llama("Qwen/Qwen3-14B", 40, 5120, 40, 8, 14.8e9),
        head_dim=128,
        max_position_embeddings=40960,
    ),
    "mistral-7b": replace(
        _llama("mistralai/Mistral-7B-Instruct-v0.3", 32, 4096, 32, 8, 7.25e9),
        max_position_embeddings=32768,
    ),
}

GPU_PRESETS: dict[str, GpuSpec] = {
    # memory_gib: total as torch reports it (slightly under the marketing figure).
    "A100-40G": GpuSpec("A100-40G", 39.4, 1555.0, 312.0),
    "A100-80G": GpuSpec("A100-80G", 79.2, 2039.0, 312.0),
    "H100": GpuSpec("H100-SXM-80G", 79.2, 3350.0, 989.0),
    "H200": GpuSpec("H200-141G", 139.8, 4800.0, 989.0),
    "L4": GpuSpec("L4-24G", 22.0, 300.0, 121.0),
    "A10G": GpuSpec("A10G-24G", 22.0, 600.0, 70.0),
}


def model_preset(name: str) -> ModelSpec:
    try:
        return MODEL_PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r}; known: {sorted(MODEL_PRESETS)}"
        ) from None


def gpu_preset(name: str) -> GpuSpec:
    for key, spec in GPU_PRESETS.items():
        if key.lower() == name.lower():
            return spec
    raise ConfigError(f"unknown GPU preset {name!r}; known: {sorted(GPU_PRESETS)}")


def _check_parallel(model: ModelSpec, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise ConfigError(f"tensor/pipeline parallel sizes must be >= 1 (got tp={tp}, pp={pp})")
    if model.num_layers < pp:
        raise ConfigError(f"model {model.name!r} has {model.num_layers} layers, fewer than pp={pp}")


def kv_bytes_per_token(
    model: ModelSpec, *, kv_dtype_bytes: float | None = None, tp: int = 1, pp: int = 1
) -> float:
    """KV-cache bytes one token occupies on one GPU.

    KV heads are split across tensor-parallel ranks; with fewer KV heads than ranks vLLM
    replicates them, so each rank keeps at least one. Layers are split across pipeline stages
    (the largest stage decides, as vLLM sizes every stage's cache the same).
    """
    _check_parallel(model, tp, pp)
    element = model.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    heads_per_gpu = max(1, model.num_kv_heads // tp)
    layers_per_gpu = math.ceil(model.num_layers / pp)
    return 2.0 * layers_per_gpu * heads_per_gpu * model.head_dim * element


def weights_gib(model: ModelSpec, *, tp: int = 1, pp: int = 1) -> float:
    """Weight memory per GPU in GiB (even split across tp x pp ranks)."""
    _check_parallel(model, tp, pp)
    per_param = model.weight_bytes_per_param or model.dtype_bytes
    return model.num_params * per_param / (tp * pp) / GIB


@dataclass(frozen=True)
class KVCapacity:
    num_gpu_blocks: int
    block_size: int
    kv_cache_tokens: int
    kv_memory_gib: float  # the "Available KV cache memory" vLLM prints
    max_concurrency: float  # requests of context_len tokens that fit at once
    context_len: int
    bytes_per_token: float = 0.0
    weights_gib: float = 0.0


def kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gpu_memory_utilization: float,
    weights_gib: float | None = None,
    activation_gib: float = DEFAULT_ACTIVATION_GIB,
    non_torch_gib: float = DEFAULT_NON_TORCH_GIB,
    tp: int = 1,
    pp: int = 1,
    block_size: int = 16,
    context_len: int,
    kv_dtype_bytes: float | None = None,
) -> KVCapacity:
    """KV blocks and tokens per GPU, as vLLM computes them at startup.

    Raises ConfigError with vLLM's own wording when nothing is left for the cache.
    """
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if block_size <= 0 or context_len <= 0:
        raise ConfigError("block_size and context_len must be positive")
    weights = _weights(model, weights_gib, tp, pp)
    per_token = kv_bytes_per_token(model, kv_dtype_bytes=kv_dtype_bytes, tp=tp, pp=pp)
    available = gpu.memory_gib * gpu_memory_utilization - weights - activation_gib - non_torch_gib
    if available <= 0:
        raise ConfigError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"(model weights {weights:.2f} GiB + activation {activation_gib:.2f} GiB + "
            f"non-torch {non_torch_gib:.2f} GiB exceed {gpu_memory_utilization:.2f} x "
            f"{gpu.memory_gib:.2f} GiB on {gpu.name}, tp={tp}, pp={pp})"
        )
    blocks = int(available * GIB // (per_token * block_size))
    tokens = blocks * block_size
    return KVCapacity(
        num_gpu_blocks=blocks,
        block_size=block_size,
        kv_cache_tokens=tokens,
        kv_memory_gib=available,
        max_concurrency=tokens / context_len,
        context_len=context_len,
        bytes_per_token=per_token,
        weights_gib=weights,
    )


def _weights(model: ModelSpec, given: float | None, tp: int, pp: int) -> float:
    return weights_gib(model, tp=tp, pp=pp) if given is None else given


def utilization_for_tokens(
    model: ModelSpec,
    gpu: GpuSpec,
    kv_tokens: int,
    *,
    weights_gib: float | None = None,
    activation_gib: float = DEFAULT_ACTIVATION_GIB,
    non_torch_gib: float = DEFAULT_NON_TORCH_GIB,
    tp: int = 1,
    pp: int = 1,
    block_size: int = 16,
    kv_dtype_bytes: float | None = None,
) -> float:
    """The gpu_memory_utilization that gives at least `kv_tokens` KV tokens per GPU.

    The inverse of kv_capacity (rounded up to whole blocks). A result above 1.0 means the
    tokens do not fit on this GPU at any utilization: more GPUs (tp) or a smaller model are needed.
    """
    if kv_tokens < 0:
        raise ConfigError(f"kv_tokens must be >= 0, got {kv_tokens}")
    weights = _weights(model, weights_gib, tp, pp)
    per_token = kv_bytes_per_token(model, kv_dtype_bytes=kv_dtype_bytes, tp=tp, pp=pp)
    blocks = math.ceil(kv_tokens / block_size)
    kv_gib = blocks * block_size * per_token / GIB
    needed = (weights + activation_gib + non_torch_gib + kv_gib) / gpu.memory_gib
    # Round up to 4 decimals (vLLM takes the flag as a float), then make sure it really fits.
    return math.ceil(needed * 10_000) / 10_000


def blocks_for_tokens(tokens: int, block_size: int = 16) -> int:
    """KV blocks a sequence of `tokens` tokens holds: ceil(tokens / block_size)."""
    return -(-tokens // block_size)
