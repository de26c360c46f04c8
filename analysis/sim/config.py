"""What the simulated deployment is: scheduler flags, hardware, and the roofline step-time model."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from preemptscope.analysis.kvmodel import (
    DEFAULT_ACTIVATION_GIB,
    DEFAULT_NON_TORCH_GIB,
    GPU_PRESETS,
    MODEL_PRESETS,
    GpuSpec,
    KVCapacity,
    ModelSpec,
    kv_bytes_per_token,
    kv_capacity,
    weights_gib,
)

from preemptscope.errors import ConfigError

Policy = Literal["fcfs", "priority"]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SimConfig:
    """One deployment: vLLM flags (names as vLLM spells them) plus the hardware and cost model."""

    model: ModelSpec = field(default_factory=lambda: MODEL_PRESETS["llama-3.1-8b"])
    gpu: GpuSpec = field(default_factory=lambda: GPU_PRESETS["A100-80G"])
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    block_size: int = 16
    scheduling_policy: Policy = "fcfs"
    enable_chunked_prefill: bool = True
    num_gpu_blocks_override: int | None = None  # vLLM's --num-gpu-blocks-override
    kv_cache_dtype_bytes: float | None = None  # None: the model dtype (--kv-cache-dtype auto)
    activation_gib: float = DEFAULT_ACTIVATION_GIB
    non_torch_gib: float = DEFAULT_NON_TORCH_GIB
    # Roofline cost model (docs/simulator.md): fraction of peak reached, fixed per-step cost.
    hbm_efficiency: float = 0.75
    compute_efficiency: float = 0.5
    step_overhead_s: float = 0.003
    # A step cost fitted from the deployment's own data (calibrate.py) replaces the roofline.
    step_cost: FittedStepCost | None = None
    # V1 scheduler details (vLLM 0.33 defaults): admit a waiting request only when its whole
    # sequence fits (scheduler_reserve_full_isl), keep `watermark` x blocks free for
    # admissions, and give a resumed request back its surviving blocks (prefix caching).
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ConfigError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this combination at startup too.
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than "
                f"or equal to max_num_seqs ({self.max_num_seqs})"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) without chunked prefill"
            )
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ConfigError(
                f"scheduling_policy must be fcfs or priority, not {self.scheduling_policy!r}"
            )
        if not 0 < self.hbm_efficiency <= 1 or not 0 < self.compute_efficiency <= 1:
            raise ConfigError("hbm_efficiency and compute_efficiency must be in (0, 1]")
        if not 0 <= self.watermark < 1:
            raise ConfigError(f"watermark must be in [0, 1), not {self.watermark}")
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, not {self.block_size}")

    def capacity(self) -> KVCapacity:
        """KV blocks for this deployment from the shared KV model (or the override)."""
        cap = kv_capacity(
            self.model,
            self.gpu,
            gpu_memory_utilization=self.gpu_memory_utilization,
            activation_gib=self.activation_gib,
            non_torch_gib=self.non_torch_gib,
            tp=self.tensor_parallel_size,
            pp=self.pipeline_parallel_size,
            block_size=self.block_size,
            context_len=self.max_model_len,
            kv_dtype_bytes=self.kv_cache_dtype_bytes,
        )
        if self.num_gpu_blocks_override is not None:
            blocks = self.num_gpu_blocks_override
            cap = dataclasses.replace(
                cap,
                num_gpu_blocks=blocks,
                kv_cache_tokens=blocks * self.block_size,
                max_concurrency=blocks * self.block_size / self.max_model_len,
            )
        if cap.kv_cache_tokens < self.max_model_len:
            raise ConfigError(
                f"The model's max seq len ({self.max_model_len}) is larger than the maximum "
                f"number of tokens that can be stored in KV cache ({cap.kv_cache_tokens}). Try "
                "increasing `gpu_memory_utilization` or decreasing `max_model_len`."
            )
        return cap

    def with_changes(self, changes: Mapping[str, Any]) -> SimConfig:
        """A copy with vLLM flag names (dashes or underscores) changed; unknown names fail."""
        known = {f.name for f in dataclasses.fields(self)}
        aliases = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size"}
        clean: dict[str, Any] = {}
        for raw, value in changes.items():
            key = aliases.get(raw, raw.lstrip("-").replace("-", "_"))
            if key not in known:
                raise ConfigError(f"unknown setting {raw!r}; known: {sorted(known)}")
            clean[key] = value
        return dataclasses.replace(self, **clean)

    def non_default_args(self) -> dict[str, Any]:
        """The flags as vLLM's `non-default args:` line would show them (v0.9+)."""
        args: dict[str, Any] = {"model": self.model.name}
        defaults = SimConfig()
        for key in (
            "max_model_len",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "block_size",
            "gpu_memory_utilization",
            "max_num_batched_tokens",
            "max_num_seqs",
            "scheduling_policy",
        ):
            value = getattr(self, key)
            if key == "max_model_len" or value != getattr(defaults, key):
                args[key] = value
        return args


# vLLM PR #37307 (merged 2026-03-24) made whole-sequence admission the default; 0.19.0 is the
# first release we read it in. Older releases admit a prompt when its first chunk fits.
FULL_ISL_SINCE = (0, 19)


def reserves_full_isl(version: str | None) -> bool | None:
    """Whether the vLLM release a log names admits whole prompts only (None: unknown)."""
    if not version:
        return None
    parts = []
    for piece in version.lstrip("v").split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        if not digits:
            return None
        parts.append(int(digits))
    if len(parts) < 2:
        return None
    return (parts[0], parts[1]) >= FULL_ISL_SINCE


@dataclass(frozen=True)
class FittedStepCost:
    """Step time fitted from observed data: per step + per prefill token + per decode token
    + per context token.

    A decode token stands for one running request's step. The context term is the part of a
    step that grows with the KV it reads (attention over every scheduled request's context):
    without it a step costs the same whatever the KV in use, and a what-if with more KV blocks
    runs too fast. It is 0 where the data could not tell it apart (`basis` says so). The fit
    needs no hardware or model figures. `basis` says which data it came from.
    """

    per_step_s: float
    per_prefill_token_s: float
    per_decode_token_s: float
    basis: str = ""
    points: int = 0
    rel_error: float | None = None  # median |fit - observed| / observed over the points
    per_context_token_s: float = 0.0

    def step_time(
        self, tokens: float, context_tokens: float, attention_pairs: float, decode: float
    ) -> float:
        """Seconds for one step; context_tokens as StepCostModel.step_time takes it."""
        return (
            self.per_step_s
            + self.per_prefill_token_s * (tokens - decode)
            + self.per_decode_token_s * decode
            + self.per_context_token_s * context_tokens
        )

    def decode_step_times(self, batch: int, context0: float, steps: int) -> FloatArray:
        """Times of `steps` pure-decode steps of `batch` requests (context0 as in
        StepCostModel.decode_step_times: each step adds one token per request)."""
        fixed = self.per_step_s + self.per_decode_token_s * batch
        if self.per_context_token_s == 0.0:
            return np.full(steps, fixed, dtype=np.float64)
        j = np.arange(1, steps + 1, dtype=np.float64)
        times: FloatArray = fixed + self.per_context_token_s * (context0 + batch * j)
        return times


def cost_model(config: SimConfig) -> StepCostModel | FittedStepCost:
    """The fitted step cost when there is one, else the roofline of the presets."""
    return config.step_cost if config.step_cost is not None else StepCostModel.from_config(config)


@dataclass(frozen=True)
class StepCostModel:
    """Roofline step time: max(memory time, compute time) + a fixed per-step overhead.

    Memory: weights (once per step) + the KV of every scheduled token's context, read at
    hbm_efficiency x HBM bandwidth. Compute: 2 x active params per scheduled token plus causal
    attention (4 x layers x query dim x context per token), at compute_efficiency x peak.
    Tensor parallelism divides both across GPUs; pipeline stages are treated the same way.
    """

    weight_bytes: float  # per GPU
    kv_bytes_per_token: float  # per GPU
    flops_per_token: float  # dense, whole model
    attn_flops_per_token_ctx: float  # per (token x context token), whole model
    bandwidth: float  # bytes/s per GPU, effective
    flops: float  # FLOP/s per GPU, effective
    gpus: int
    overhead: float

    @classmethod
    def from_config(cls, config: SimConfig) -> StepCostModel:
        model, gpu = config.model, config.gpu
        tp, pp = config.tensor_parallel_size, config.pipeline_parallel_size
        return cls(
            weight_bytes=weights_gib(model, tp=tp, pp=pp) * 2**30,
            kv_bytes_per_token=kv_bytes_per_token(
                model, kv_dtype_bytes=config.kv_cache_dtype_bytes, tp=tp, pp=pp
            ),
            flops_per_token=2.0 * model.compute_params,
            attn_flops_per_token_ctx=4.0 * model.num_layers * model.query_heads * model.head_dim,
            bandwidth=gpu.hbm_bandwidth_gbs * 1e9 * config.hbm_efficiency,
            flops=gpu.bf16_tflops * 1e12 * config.compute_efficiency,
            gpus=tp * pp,
            overhead=config.step_overhead_s,
        )

    def step_time(
        self, tokens: float, context_tokens: float, attention_pairs: float, decode: float = 0.0
    ) -> float:
        """Seconds for one step computing `tokens` new tokens (`decode` of them decodes).

        context_tokens: sum over scheduled requests of their context length after the step (KV
        read); attention_pairs: sum over new tokens of the context each attends to.
        """
        memory = (self.weight_bytes + context_tokens * self.kv_bytes_per_token) / self.bandwidth
        compute = (
            tokens * self.flops_per_token + attention_pairs * self.attn_flops_per_token_ctx
        ) / (self.flops * self.gpus)
        return self.overhead + max(memory, compute)

    def decode_step_times(self, batch: int, context0: float, steps: int) -> FloatArray:
        """Times of `steps` consecutive pure-decode steps of `batch` requests.

        context0 is the batch's summed context before the first of them; each step adds one
        token per request (and reads one more KV entry per request).
        """
        j = np.arange(1, steps + 1, dtype=np.float64)
        context = context0 + batch * j
        memory = (self.weight_bytes + context * self.kv_bytes_per_token) / self.bandwidth
        compute = (batch * self.flops_per_token + context * self.attn_flops_per_token_ctx) / (
            self.flops * self.gpus
        )
        times: FloatArray = self.overhead + np.maximum(memory, compute)
        return times
