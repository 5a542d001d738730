"""GPU classes and Carbon's shapes (and the demo model's): the memory arithmetic behind each GPU
profile's batch size, and the FLOPs a token that the scan plan's estimates and the GPU check
count.

A batch is sized in tokens (`batch_tokens`): the memory a forward pass needs beyond the weights
grows with the tokens in the batch, whatever the window length. Per token, in bf16, the most any
model stage holds at once is one decoder layer's MLP (gate, up and their product: 3 x the
intermediate size) plus the residual stream (3 x the hidden size), and, for sequence recovery,
the KV cache of every layer (2 x layers x KV heads x head dim) filled during the prefill. The
scoring stages' own tensors per token (final hidden state, 4,096 float32 k-mer log-probs: 22 KB
for Carbon-3B) are smaller than a layer's MLP and are not held at the same time.

Carbon-3B: 3 x 8,448 x 2 + 3 x 3,072 x 2 + 2 x 30 x 4 x 96 x 2 = 115,200 bytes a token. With a
25% margin (allocator fragmentation) that is 144 kB a token; the weights take 6.90 GB (2.973 B
body + 478.5 M tied embedding parameters, 2 bytes each), and 3 GB are left aside for the CUDA
context, cuBLAS workspaces and fixed-size transients (the full-vocabulary normaliser's chunks;
`upcast_output_layer` casting the output layer to float32 in generation: 1.9 GB). What remains,
divided by the bytes a token, is the budget a GPU class can hold; profiles use it rounded down
to a power of two and at most SATURATING_TOKENS: beyond a few thousand tokens a forward pass's
matmuls are already as fast as they get (M >= 16k rows), so a larger batch gains no speed, holds
more memory, and halves coarser on OOM. These are arithmetic, not measurements: `make gpu-check`
reports the peak memory a batch really takes (docs/gpu.md has the arithmetic and its sources).
No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The Llama configs of the Carbon sizes (random-weight stand-ins need nothing else): the shapes
# of Carbon's model cards (docs/gpu.md), which give 2.973 B and 0.352 B body parameters; and
# Carbon-8B, which the Carbon report says shares Llama 3-8B's layer count, hidden size, FFN
# dimension and attention configuration (its config.json is not in our sources; its card says
# LlamaForCausalLM with Carbon-3B's tokenizer, so the same vocabulary): 6.979 B body parameters.
CARBON_SHAPES: dict[str, dict[str, int]] = {
    "Carbon-500M": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                        num_attention_heads=16, num_key_value_heads=8, head_dim=64),
    "Carbon-3B": dict(hidden_size=3072, intermediate_size=8448, num_hidden_layers=30,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=96),
    "Carbon-8B": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128),
}  # fmt: skip
CARBON_VOCAB = 155_776
BF16 = 2

# The demo model's shape, defined here alone: model.demo builds it (on Carbon's vocabulary), and
# a model with `build_demo` is priced at it, also before the run has built it
DEMO_MODEL = "demo model"
DEMO_SHAPE: dict[str, int] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64 // 4,
)  # fmt: skip
MODEL_SHAPES = {**CARBON_SHAPES, DEMO_MODEL: DEMO_SHAPE}  # every shape model_shape names
DEMO_MAX_POSITIONS = 8192  # the demo's context: its config's max_position_embeddings


@dataclass(frozen=True)
class GpuClass:
    memory_gb: float  # device memory as CUDA reports it (nvidia-smi's total, in 10^9 bytes)
    bf16_tflops: float  # dense bf16 peak, for estimates (H100: as measured, not the data sheet)
    # device-memory bandwidth, TB/s (the data sheet's; None: not known): a decode step's floor
    memory_tb_s: float | None = None


# Bandwidths from NVIDIA's data sheets (docs/gpu.md, its facts and sources): A10 600 GB/s
# GDDR6, A100 80GB SXM 2,039 GB/s, H100 SXM 3.35 TB/s, H200 4.8 TB/s
GPU_CLASSES = {
    "A10": GpuClass(memory_gb=24.1, bf16_tflops=125.0, memory_tb_s=0.6),
    "A100": GpuClass(memory_gb=85.1, bf16_tflops=312.0, memory_tb_s=2.039),  # the 80 GB model
    "H100": GpuClass(memory_gb=85.5, bf16_tflops=800.0, memory_tb_s=3.35),  # 80 GB HBM3
    # 141 GB HBM3e: 143,771 MiB as CUDA reported it on the lent H200; the same SMs and clocks
    # as the H100 SXM, so its peak is taken as about the lent machine's page gives (790 TFLOP/s;
    # the GPU check measured 673-698 there in six runs, 2026-11-28/29, as it measured 717 on an
    # H100 against the H100's 800 here: docs/gpu.md)
    "H200": GpuClass(memory_gb=150.8, bf16_tflops=790.0, memory_tb_s=4.8),
}


def gpu_class_named(name: str) -> str | None:
    """The GPU class a device or profile name names ("NVIDIA A100-SXM4-80GB", "a10", "H100
    80GB HBM3"), if one: the longest class name in it, so an A100 is not taken for an A10."""
    named = [g for g in GPU_CLASSES if g in name.upper()]
    return max(named, key=len) if named else None


def gpu_spec(gpu: str | GpuClass) -> GpuClass:
    """A GPU class by name (GPU_CLASSES), or one already sized (`device_gpu_class`)."""
    return gpu if isinstance(gpu, GpuClass) else GPU_CLASSES[gpu]


def device_gpu_class(total_memory_bytes: int, measured_tflops: float) -> GpuClass:
    """The class of a device at hand, from what it reports of itself: its memory as CUDA
    reports it (torch.cuda.get_device_properties) and the bf16 peak measured on it. Any GPU,
    named in GPU_CLASSES or not, is sized this way where it can be measured: nothing refused,
    nothing taken from another GPU's figures."""
    return GpuClass(memory_gb=total_memory_bytes / 1e9, bf16_tflops=measured_tflops)


RESERVED_GB = 3.0  # CUDA context, workspaces, fixed-size transients
MARGIN = 1.25  # allocator fragmentation
SATURATING_TOKENS = 131_072


def body_parameters(shape: dict[str, int]) -> int:
    """Parameters of the decoder layers (attention and MLP; the norms are negligible)."""
    h, heads, kv = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    d = shape["head_dim"]
    attention = h * heads * d * 2 + h * kv * d * 2  # q and o, k and v
    return shape["num_hidden_layers"] * (attention + 3 * h * shape["intermediate_size"])


def body_flops(shape: dict[str, int]) -> int:
    """Matmul FLOPs of the decoder layers a token (2 a parameter: a multiply-add)."""
    return 2 * body_parameters(shape)


def attention_flops(shape: dict[str, int]) -> int:
    """FLOPs of QK^T and AV a token for each token of context it attends to, every layer."""
    return 4 * shape["num_attention_heads"] * shape["head_dim"] * shape["num_hidden_layers"]


def prefill_flops(shape: dict[str, int], tokens: int, kept: int | None = None) -> int:
    """Matmul FLOPs of a causal pass over `tokens` tokens (no cache): every layer's projections
    and MLP a token, attention a query-key pair. `kept`: the last layer runs its keys and values
    at every token and the rest at the last `kept` tokens only (model.last_layer)."""
    whole = body_flops(shape) * tokens + attention_flops(shape) * tokens * (tokens + 1) // 2
    if kept is None or kept >= tokens:
        return whole  # query i sees keys 0..i
    layers = shape["num_hidden_layers"]
    keys_values = 2 * 2 * shape["hidden_size"] * shape["num_key_value_heads"] * shape["head_dim"]
    skipped = tokens - kept  # the last layer's first queries: all but their keys and values go
    return (
        whole
        - (body_flops(shape) // layers - keys_values) * skipped
        - attention_flops(shape) // layers * skipped * (skipped + 1) // 2
    )


def output_flops(shape: dict[str, int], rows: int) -> int:
    """FLOPs a scored position spends in `rows` rows of the output layer."""
    return 2 * rows * shape["hidden_size"]


def weight_bytes(shape: dict[str, int], vocab: int = CARBON_VOCAB, dtype_bytes: int = BF16) -> int:
    """The weights (bf16 unless said): the body and the tied embedding / output layer."""
    return dtype_bytes * (body_parameters(shape) + vocab * shape["hidden_size"])


def bytes_per_token(shape: dict[str, int]) -> int:
    """The most a batch holds per token beyond the weights, in any model stage (bf16)."""
    layer = BF16 * (3 * shape["intermediate_size"] + 3 * shape["hidden_size"])
    kv_cache = (
        BF16 * 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"]
    )
    scoring = BF16 * shape["hidden_size"] + 4 * 4096
    return max(layer, scoring) + kv_cache


def memory_batch_tokens(memory_gb: float, shape: dict[str, int]) -> int:
    """Tokens a batch of this shape can hold on a GPU with `memory_gb` (arithmetic)."""
    free = memory_gb * 1e9 - weight_bytes(shape) - RESERVED_GB * 1e9
    return max(0, int(free / (bytes_per_token(shape) * MARGIN)))


def profile_batch_tokens(memory_gb: float, shape: str = "Carbon-3B") -> int:
    """A profile's batch_tokens: the memory budget of the largest model it serves, rounded down
    to a power of two, at most SATURATING_TOKENS."""
    fits = memory_batch_tokens(memory_gb, CARBON_SHAPES[shape])
    return min(SATURATING_TOKENS, 1 << max(0, fits.bit_length() - 1)) if fits else 0


# ---- host memory of a model job ------------------------------------------------------------
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HOST_RESERVED_GB = 4.0  # measured 2.0 GB beside the weights on an H100 (CUDA's host side
# included), and as much again for a job's own tables, batches and writer thread
HOST_WEIGHT_COPIES = 1  # measured: the peak was the checkpoint + 2.0 GB for every Carbon shape


def host_memory_mb(shape: dict[str, int] | None, dtype: str) -> int:
    """Host memory (MB, rounded up to a thousand) a model job asks its scheduler for: the
    weights in the model's dtype once, and HOST_RESERVED_GB beside them. Measured on an H100
    (benchmark/gpu/host_memory.py, docs/gpu.md): a fresh process loading a bf16 checkpoint
    peaked at its size + 2.0 GB, the tensors being views of the mapped file until they move to
    the device. A checkpoint stored wider than it runs (float32 run in bf16) adds the
    converted copy, while the file's pages stay reclaimable cache: still one copy that a
    memory limit must hold (arithmetic, not measured). A model whose shape is not known (a
    local folder without a Llama-style config.json) gets the reserve alone."""
    weights = 0
    if shape is not None:
        vocab = shape.get("vocab_size", CARBON_VOCAB)
        weights = HOST_WEIGHT_COPIES * weight_bytes(shape, vocab, DTYPE_BYTES[dtype])
    return 1000 * math.ceil((HOST_RESERVED_GB * 1e9 + weights) / 1e9)


# ---- Genomic-NIAH: one long prompt a row --------------------------------------------------
NIAH_SHAPES = MODEL_SHAPES  # the NIAH estimates' name for the same shapes
ASSUMED_EFFICIENCY = 0.5  # share of bf16 peak good PyTorch prefill reaches (40-70%)


def model_shape(path: str, build_demo: bool) -> str:
    """The shape (a MODEL_SHAPES name) whose cost a model is estimated at: the demo model's when
    the run builds it (`build_demo`: its path names no Carbon size, nor is it built yet);
    else the Carbon size its name says, 500M or 8B, else 3B (an unknown 3B-class model;
    estimates then err towards more GPU-hours)."""
    if build_demo:
        return DEMO_MODEL
    name = path.lower().rstrip("/").rsplit("/", 1)[-1]
    sizes = [s for s in CARBON_SHAPES if s.split("-")[1].lower() in name]
    return sizes[0] if len(sizes) == 1 else "Carbon-3B"


def niah_shape(path: str, build_demo: bool) -> str:
    """The shape of the NIAH estimates: as model_shape."""
    return model_shape(path, build_demo)


def kv_bytes_per_token(shape: dict[str, int]) -> int:
    """bf16 keys and values of every layer for one token."""
    return BF16 * 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"]


def niah_memory_bytes(
    shape: dict[str, int], ctx: int, prefill_chunk: int, *, rows: int = 1
) -> dict[str, float]:
    """Device memory of a NIAH batch of `rows` prompts of `ctx` tokens (arithmetic): weights,
    the KV cache (held once: the two continuations run one after the other off it), one prefill
    chunk's activations (one layer's MLP and residual stream a token) and the boolean attention
    mask transformers builds for a chunk that attends to a cache (chunk x context), the
    reserve, and the margin on what grows with the context."""
    chunk = min(prefill_chunk or ctx, ctx)
    kv = kv_bytes_per_token(shape) * ctx * rows
    activations = BF16 * (3 * shape["intermediate_size"] + 3 * shape["hidden_size"]) * chunk * rows
    mask = chunk * ctx * rows if chunk < ctx else 0
    parts = {
        "weights": float(weight_bytes(shape)),
        "kv_cache": float(kv),
        "prefill_activations": float(activations),
        "chunk_mask": float(mask),
    }
    parts["total"] = parts["weights"] + RESERVED_GB * 1e9 + MARGIN * (kv + activations + mask)
    return parts


def niah_row_seconds(shape: dict[str, int], ctx: int, gpu: str | GpuClass) -> float:
    """Seconds a row's prefill takes at ASSUMED_EFFICIENCY of the GPU's bf16 peak (the
    generation and likelihood steps, a few tokens, are left out): body FLOPs a token, and
    causal attention over on average half the context."""
    flops = ctx * body_flops(shape) + attention_flops(shape) * ctx * ctx / 2
    return flops / (gpu_spec(gpu).bf16_tflops * 1e12 * ASSUMED_EFFICIENCY)


VLLM_PAGE_TOKENS = 16  # vLLM's KV-cache block (page) size, tokens


def vllm_niah_plan(
    shape: dict[str, int],
    ctx: int,
    gpu: str | GpuClass,
    utilization: float = 0.9,
    gpus: int = 1,
) -> dict[str, float]:
    """vLLM on NIAH rows of `ctx` tokens (arithmetic): the memory left to its paged KV cache
    (the GPUs' `utilization` share, less the weights and the reserve for activations), its
    pages, the rows whose prompts fit at once (a row's continuations share its prompt's pages
    with prefix caching), and rows/s: prefill-bound, the prefill as `niah_row_seconds` over
    `gpus` GPUs (tensor parallelism, taken as ideal)."""
    budget = gpu_spec(gpu).memory_gb * 1e9 * gpus * utilization
    kv = budget - weight_bytes(shape) - RESERVED_GB * 1e9 * gpus
    page = kv_bytes_per_token(shape) * VLLM_PAGE_TOKENS
    pages = max(int(kv // page), 0)
    row_pages = -(-(ctx + VLLM_PAGE_TOKENS) // VLLM_PAGE_TOKENS)  # prompt + a value's tokens
    seconds = niah_row_seconds(shape, ctx, gpu) / gpus
    return {
        "kv_cache_gb": kv / 1e9,
        "page_bytes": float(page),
        "pages": float(pages),
        "rows_at_once": float(pages // row_pages),
        "rows_per_s": 1 / seconds,
    }
