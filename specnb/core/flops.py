"""FLOPs per generated token from a transformers config alone (``specnb.models.flop_count`` checks
them against a FLOP counter on a meta-device forward).

References: Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (Table 1: a forward pass
costs about 2 FLOPs per parameter plus 2·n_layer·n_ctx·d_attn per token for attention); Leviathan
et al. 2023 and Chen et al. 2023 (speculative decoding, where the draft/verifier cost ratio c
enters the expected speedup).

The *seed convention* for ``flops_per_token`` is 2 × the multiply-accumulates (MACs) of every
matrix multiply a token meets with no context: q, k, v, o, gate, up, down in each layer, plus the
lm_head (counted whether or not it is tied to the embedding; the embedding lookup itself is free).
That is exactly what fvcore reports (1 "flop" per MAC, doubled here) on a model whose attention runs
through ``scaled_dot_product_attention``, because fvcore silently drops SDPA. Biases are excluded
(one add per output is not a MAC); they are reported separately as ``bias_flops_per_token``.

Attention adds ``4 · L · n_heads · head_dim`` FLOPs per attended position (q·k and p·v, 2 MACs each
per head dimension), so at context N: ``flops_per_token + 4·L·n_heads·head_dim·N``. "Context N" is
the number of key positions the new token attends to (N−1 cached plus itself, Kaplan's n_ctx);
context 0 is the seed convention. Sliding-window attention is not modelled (every shipped config
has ``use_sliding_window: false``).

Names become configs through ``specnb.core.configs.resolve_config`` (no network when avoidable).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specnb.core.configs import resolve_config
from specnb.core.errors import ConfigError, ParameterError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

@dataclass(frozen=True, kw_only=True)
class ModelDims:
    """The handful of config numbers that decide FLOPs and parameters of a Llama-style decoder."""

    model_type: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool


@dataclass(kw_only=True)
class FlopsReport:
    """Analytic FLOPs per generated token (seed convention) and the parameter count, from a config."""

    model: str
    flops_per_token: int
    flops_per_token_at_context: int
    context: int
    attention_flops_per_position: int
    bias_flops_per_token: int
    params: int
    layers: int
    hidden_size: int
    model_type: str
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    lm_head_flops_per_token: int

    def to_dict(self) -> dict:
        return asdict(self)


def _field(config, name: str, default=None) -> int:
    value = getattr(config, name, None)
    if value is None:
        value = default
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"config ({getattr(config, 'model_type', '?')}) has no valid {name!r} (got {value!r}); "
            "pass a complete transformers config.json"
        )
    return value


def _bias_layout(config, model_type: str) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o bias, MLP bias): Qwen2 always has q/k/v biases; Llama/Qwen3 read config flags."""
    if model_type == "qwen2":
        return True, False, False
    attention_bias = bool(getattr(config, "attention_bias", False))
    mlp_bias = bool(getattr(config, "mlp_bias", False)) if model_type == "llama" else False
    return attention_bias, attention_bias, mlp_bias


def model_dims(config_or_name) -> ModelDims:
    """Read the dimensions of a Llama-style (SwiGLU, RMSNorm, GQA) decoder; ConfigError otherwise."""
    config = resolve_config(config_or_name)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"model_type {model_type!r} is not a supported decoder; analytic FLOPs cover "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (SwiGLU MLP, GQA attention)"
        )
    hidden = _field(config, "hidden_size")
    heads = _field(config, "num_attention_heads")
    if getattr(config, "head_dim", None) is None and hidden % heads:
        raise ConfigError(f"hidden_size {hidden} is not divisible by num_attention_heads {heads} and no head_dim is "
                          "set")
    qkv_bias, o_bias, mlp_bias = _bias_layout(config, model_type)
    return ModelDims(
        model_type=model_type,
        layers=_field(config, "num_hidden_layers"),
        hidden_size=hidden,
        heads=heads,
        kv_heads=_field(config, "num_key_value_heads", heads),
        head_dim=_field(config, "head_dim", hidden // heads),
        intermediate_size=_field(config, "intermediate_size"),
        vocab_size=_field(config, "vocab_size"),
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        qk_norm=model_type == "qwen3",
    )


def _layer_macs(d: ModelDims) -> int:
    q_out, kv_out = d.heads * d.head_dim, d.kv_heads * d.head_dim
    attention = d.hidden_size * (q_out + 2 * kv_out) + q_out * d.hidden_size  # q, k, v, o
    mlp = 3 * d.hidden_size * d.intermediate_size  # gate, up, down
    return attention + mlp


def _bias_flops(d: ModelDims) -> int:
    """One add per biased output element per token (excluded from the seed convention)."""
    per_layer = 0
    if d.qkv_bias:
        per_layer += (d.heads + 2 * d.kv_heads) * d.head_dim
    if d.o_bias:
        per_layer += d.hidden_size
    if d.mlp_bias:
        per_layer += 2 * d.intermediate_size + d.hidden_size
    return d.layers * per_layer


def _params(d: ModelDims) -> int:
    """Parameter count from dimensions (tied embeddings counted once), as ``model.parameters()`` sees it."""
    layer = _layer_macs(d) + 2 * d.hidden_size  # weights + two RMSNorms
    layer += _bias_flops(d) // d.layers  # each bias element is one parameter
    layer += 2 * d.head_dim if d.qk_norm else 0
    embeddings = d.vocab_size * d.hidden_size * (1 if d.tied_embeddings else 2)
    return d.layers * layer + embeddings + d.hidden_size  # + final norm


def _model_label(config_or_name, config) -> str:
    if isinstance(config_or_name, str):
        return config_or_name
    return getattr(config, "_name_or_path", "") or getattr(config, "model_type", "config")


def check_context(context) -> int:
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ParameterError(f"context must be an integer >= 0 (positions attended), got {context!r}")
    return context


def analytic_flops(config_or_name, context: int = 0) -> FlopsReport:
    """FLOPs per token in the seed convention, plus the attention term at ``context`` positions."""
    context = check_context(context)
    config = resolve_config(config_or_name)
    d = model_dims(config)
    # a draft with a trimmed head (specnb.models.trimmed_head) scores only its ``head_tokens`` most frequent tokens
    lm_head = 2 * d.hidden_size * (getattr(config, "head_tokens", None) or d.vocab_size)
    seed = 2 * d.layers * _layer_macs(d) + lm_head
    per_position = 4 * d.layers * d.heads * d.head_dim
    return FlopsReport(
        model=_model_label(config_or_name, config),
        flops_per_token=seed,
        flops_per_token_at_context=seed + per_position * context,
        context=context,
        attention_flops_per_position=per_position,
        bias_flops_per_token=_bias_flops(d),
        params=_params(d),
        layers=d.layers,
        hidden_size=d.hidden_size,
        model_type=d.model_type,
        heads=d.heads,
        kv_heads=d.kv_heads,
        head_dim=d.head_dim,
        intermediate_size=d.intermediate_size,
        vocab_size=d.vocab_size,
        tied_embeddings=d.tied_embeddings,
        lm_head_flops_per_token=lm_head,
    )


def cost_ratio(draft, verifier, context: int = 0) -> float:
    """c by FLOPs: draft ÷ verifier FLOPs per token (names, folders or configs accepted)."""
    draft_flops = analytic_flops(draft, context).flops_per_token_at_context
    verifier_flops = analytic_flops(verifier, context).flops_per_token_at_context
    return draft_flops / verifier_flops


# --- measurement --------------------------------------------------------------------------------


def flops_table(verifier_config, drafts: dict, context: int = 128, verifier: str = "verifier"):
    """FLOPs per token (seed convention, and with attention over ``context`` cached tokens),
    parameters and the FLOPs cost ratio c of each draft against the verifier, from configs only.

    ``drafts`` maps a name to its config, to a ready ``FlopsReport`` (a head counted by
    ``specnb.models.heads``), or to None for a draft with no model (prompt lookup: no weights, no
    FLOPs). ``specnb.decode.kinds.by_name.flops_table`` takes names instead and resolves them.
    """
    import pandas as pd

    v = analytic_flops(verifier_config, context)
    rows = [{"model": verifier, "role": "verifier", "layers": v.layers, "hidden_size": v.hidden_size,
             "params": v.params, "flops_per_token": v.flops_per_token,
             "flops_at_context": v.flops_per_token_at_context}]
    for name, config in drafts.items():
        d = config if isinstance(config, FlopsReport) or config is None else analytic_flops(config, context)
        rows.append(
            {
                "model": name,
                "role": "draft",
                "layers": d.layers if d else 0,
                "hidden_size": d.hidden_size if d else 0,
                "params": d.params if d else 0,
                "flops_per_token": d.flops_per_token if d else 0,
                "flops_at_context": d.flops_per_token_at_context if d else 0,
            }
        )
    frame = pd.DataFrame(rows)
    frame["c_flops"] = frame["flops_per_token"] / v.flops_per_token
    frame["c_flops_at_context"] = frame["flops_at_context"] / v.flops_per_token_at_context
    frame.attrs["context"] = context
    return frame
