"""Draft heads on the verifier's features (EAGLE, Medusa): what a folder holds, loading it onto a
verifier, and the layout that published EAGLE checkpoints use.

Three file layouts are read:

- the standard EAGLE-3 layout (``specnb.models.eagle3``: llama.cpp's, vLLM's and published EAGLE-3
  heads'), which the embedded ``smollm2-eagle`` uses;
- specnb's own (``smollm2-medusa``, and EAGLE heads trained before the standard layout): ``config.json``
  with a ``kind`` ("eagle" or "medusa") and the module's settings, ``weights.safetensors`` with only the
  trained tensors (the verifier's embedding and lm_head are borrowed at load time);
- the published EAGLE-1/-2 layout (Li et al. 2024; github.com/SafeAILab/EAGLE, ``cnets1.py``):
  ``config.json`` is a Llama config with ``num_hidden_layers: 1`` (and ``bias`` for the fc layer),
  weights in ``pytorch_model.bin`` or ``model.safetensors`` named ``fc.weight`` [d, 2d] (input
  ``[embedding ; feature]``), ``fc.bias``, ``layers.0.self_attn.{q,k,v,o}_proj.weight``,
  ``layers.0.mlp.{gate,up,down}_proj.weight`` and ``layers.0.post_attention_layernorm.weight``
  (layer 0 has no input norm, and no norm follows the layer), optionally ``embed_tokens.weight``.

A head made for another verifier (hidden size, vocabulary, layer shapes) is a one-line
``IncompatibleModelsError`` before any generation.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specnb.core.errors import IncompatibleModelsError, ModelNotFoundError, ParameterError
from specnb.core.flops import analytic_flops
from specnb.models.eagle import EagleConfig, EagleDraft
from specnb.models.eagle3 import Eagle3Draft, is_eagle3
from specnb.models.early_exit import exit_config

PUBLISHED_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_PUBLISHED_LAYER = {  # published name -> ours (specnb.models.eagle.EagleDraft)
    **{f"layers.0.self_attn.{p}_proj.weight": f"layer.self_attn.{p}_proj.weight" for p in "qkvo"},
    **{f"layers.0.mlp.{p}_proj.weight": f"layer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
    "layers.0.post_attention_layernorm.weight": "layer.post_attention_layernorm.weight",
}


def read_config(folder: Path) -> dict | None:
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def published_weights(folder: Path) -> Path | None:
    return next((Path(folder) / f for f in PUBLISHED_WEIGHTS if (Path(folder) / f).is_file()), None)


def weight_names(path: Path) -> set[str]:
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return set(f.keys())
    return set(torch.load(path, map_location="meta", weights_only=True))


def head_kind(folder) -> str | None:
    """The draft kind ``folder`` holds when it is a head ("eagle" or "medusa": specnb's layout, or the
    published EAGLE one), None for anything else (an ordinary checkpoint, a missing folder)."""
    config = read_config(folder)
    if config is None:
        return None
    if isinstance(config.get("kind"), str):  # specnb's layout names its kind (``specnb.decode.kinds``)
        return config["kind"]
    weights = published_weights(folder)
    if weights is not None and is_eagle3(config) and "fc.weight" in weight_names(weights):
        return "eagle"  # the standard EAGLE-3 layout (``specnb.models.eagle3``), the embedded head's own
    if weights is not None and config.get("num_hidden_layers") == 1 and \
            {"fc.weight", "layers.0.self_attn.q_proj.weight"} <= weight_names(weights):
        return "eagle"
    return None


def load_head(folder, verifier, head_class, dtype=None):
    """The head in ``folder`` attached to ``verifier`` (its embedding and lm_head), in eval mode:
    ``head_class`` (the kind's module: ``EagleDraft``, ``MedusaHeads``) reads specnb's layout; the
    published EAGLE layout is read by ``read_published``."""
    folder, kind = Path(folder), head_kind(folder)
    if kind is None:
        raise ModelNotFoundError(f"{str(folder)!r} holds no EAGLE or Medusa head (config.json and weights)")
    check_fits(folder, verifier.config, folder.name)
    dtype = dtype or next(verifier.parameters()).dtype
    config = read_config(folder) or {}
    if config.get("kind") == kind:
        head = head_class.load(folder, dtype=dtype)
    elif is_eagle3(config):
        head = Eagle3Draft.load(folder, dtype=dtype)
    else:
        head = read_published(folder, dtype)
    return head.attach(verifier).to(next(verifier.parameters()).device).eval()


def check_fits(folder, verifier_config, name: str) -> None:
    """A head made for another verifier is one line naming what differs, read from its files before
    any weights load: hidden size, vocabulary, the ids of a trimmed head."""
    config, problems = read_config(folder) or {}, []
    hidden, vocab = config.get("hidden_size"), config.get("vocab_size")
    if is_eagle3(config):  # its own width may differ; what it reads is the verifier's
        hidden = config.get("target_hidden_size") or hidden
        ids = config.get("eagle_aux_hidden_state_layer_ids") or \
            (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []
        layers = verifier_config.num_hidden_layers
        if any(not 1 <= int(i) <= layers for i in ids):
            problems.append(f"verifier layers {list(ids)} vs the verifier's {layers}")
    if hidden != verifier_config.hidden_size:
        problems.append(f"hidden size {hidden} vs the verifier's {verifier_config.hidden_size}")
    if vocab != verifier_config.vocab_size:
        problems.append(f"vocabulary {vocab} vs {verifier_config.vocab_size}")
    weights = Path(folder) / "weights.safetensors"
    if config.get("head_tokens") and weights.is_file():
        from safetensors import safe_open

        with safe_open(str(weights), framework="pt") as f:
            top = int(f.get_tensor("head_ids").max()) if "head_ids" in f.keys() else -1
        if top >= verifier_config.vocab_size:
            problems.append(f"head token id {top} outside the verifier's vocabulary")
    if problems:
        target = getattr(verifier_config, "_name_or_path", "") or "this verifier"
        raise IncompatibleModelsError(f"head {name!r} was made for another verifier ({'; '.join(problems)}); "
                                      f"use a head trained for {target}")


def read_published(folder: Path, dtype):
    """An ``EagleDraft`` from the published EAGLE-1/-2 layout (see the module docstring)."""
    config = read_config(folder)
    if config.get("qkv_bias") or config.get("attention_bias"):
        raise IncompatibleModelsError(f"head {folder.name!r} has q/k/v biases (a Qwen2 EAGLE head); only Llama-style "
                                      "heads without biases are supported")
    if config.get("rope_scaling"):
        raise IncompatibleModelsError(f"head {folder.name!r} uses rope_scaling {config['rope_scaling']}; only "
                                      "plain RoPE heads are supported")
    path = published_weights(folder)
    state = load_tensors(path)
    d = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    ours = EagleConfig(hidden_size=d, intermediate_size=int(config["intermediate_size"]), num_attention_heads=heads,
                       num_key_value_heads=int(config.get("num_key_value_heads", heads)),
                       head_dim=int(config.get("head_dim") or d // heads), rms_norm_eps=float(config["rms_norm_eps"]),
                       rope_theta=float(config.get("rope_theta", 10000.0)),
                       max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
                       vocab_size=int(config["vocab_size"]), head_tokens=0, out_norm=False, input_norm=False)
    fc = state["fc.weight"]  # [d, 2d], input [embedding ; feature]
    if tuple(fc.shape) != (d, 2 * d):
        raise IncompatibleModelsError(f"head {folder.name!r}: fc.weight is {tuple(fc.shape)}, expected {(d, 2 * d)}")
    mapped = {"fc.weight": torch.cat([fc[:, d:], fc[:, :d]], 1),  # ours reads [feature ; embedding]
              "fc.bias": state.get("fc.bias", torch.zeros(d))}
    missing = [k for k in _PUBLISHED_LAYER if k not in state]
    if missing:
        raise IncompatibleModelsError(f"head {folder.name!r} lacks {missing[:3]}: not the EAGLE-1/-2 layout")
    mapped.update({ours_name: state[name] for name, ours_name in _PUBLISHED_LAYER.items()})
    draft = EagleDraft(ours)
    draft.load_state_dict({k: v.to(dtype) for k, v in mapped.items()}, strict=False)
    return draft.to(dtype).eval()


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def write_published(draft, folder, bias: bool = True) -> Path:
    """Save an ``EagleDraft`` in the published EAGLE-1 layout (``config.json`` + ``model.safetensors``),
    which has no place for an input or output norm, a trimmed head or a prompt-lookup input."""
    from safetensors.torch import save_file

    config = draft.config
    if config.input_norm or config.out_norm or config.head_tokens or config.lookup_ngram or config.feature_layers:
        raise ParameterError("the EAGLE-1 layout has no input norm, no output norm, no lookup input, no layer fusion "
                             f"and the full head; this draft has input_norm={config.input_norm}, "
                             f"out_norm={config.out_norm}, head_tokens={config.head_tokens}, "
                             f"lookup_ngram={config.lookup_ngram}, feature_layers={config.feature_layers}")
    d, state = config.hidden_size, draft.state_dict()
    fc = state["fc.weight"]  # [d, 2d] reading [feature ; embedding]
    tensors = {"fc.weight": torch.cat([fc[:, d:], fc[:, :d]], 1).contiguous()}
    if bias:
        tensors["fc.bias"] = state["fc.bias"].contiguous()
    tensors.update({name: state[ours].contiguous() for name, ours in _PUBLISHED_LAYER.items()})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": bias, "hidden_act": "silu",
        "hidden_size": d, "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "num_hidden_layers": 1, "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta, "max_position_embeddings": config.max_position_embeddings,
        "vocab_size": config.vocab_size, "torch_dtype": "float32"}, indent=1))
    return folder


def eagle_flops(config: dict, verifier_config):
    """FLOPs per drafted token of an EAGLE head on ``verifier_config``'s features (2 per multiply-add,
    as ``specnb.core.flops``): its fc (2d × d; 3d × d when it reads prompt-lookup matches), one decoder
    layer and its head. ``config``: the head's config.json (head width ``head_tokens``, EAGLE-3's
    ``feature_layers``); a head with no config counts the full vocabulary. An EAGLE-3 head's fusion
    (k·d × d for k fused layers) is in its parameters, not its FLOPs per drafted token: it runs once
    per *verified* token, on the verifier's features, while drafted tokens feed the head's own
    output back unfused."""
    from dataclasses import replace

    d = verifier_config.hidden_size
    layer = exit_config(verifier_config, 1)
    layer.head_tokens = head_width(config, verifier_config)
    base = analytic_flops(layer)
    if is_eagle3(config):  # q/k/v read [embedding ; g] (2d); no fc per drafted token; its own lm_head
        heads, kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
        width = config.get("head_dim") or d // heads
        qkv = d * width * (heads + 2 * kv)  # the extra d-wide half of q, k and v
        fused = len(config.get("eagle_aux_hidden_state_layer_ids") or (0, 0, 0))
        return replace(base, model="eagle", flops_per_token=base.flops_per_token + 2 * qkv,
                       flops_per_token_at_context=base.flops_per_token_at_context + 2 * qkv,
                       params=base.params - verifier_config.vocab_size * d + qkv + fused * d * d + 2 * d)
    inputs = 3 if config.get("lookup_ngram") else 2  # [f ; e (; e(prompt-lookup match))]
    fc = 2 * (inputs * d * d)
    fused = len(config.get("feature_layers") or ())
    fusion = fused * d * d + fused * d if fused else 0  # the fuse linear and its per-layer norm weights
    return replace(base, model="eagle", flops_per_token=base.flops_per_token + fc,
                   flops_per_token_at_context=base.flops_per_token_at_context + fc,
                   params=base.params - verifier_config.vocab_size * d + inputs * d * d + d + fusion)


def medusa_flops(config: dict, verifier_config):
    """FLOPs per drafted token of Medusa heads: their residual blocks (d × d each) and their head
    (``config`` as for ``eagle_flops``, with Medusa's ``blocks``)."""
    from dataclasses import replace

    d, head = verifier_config.hidden_size, head_width(config, verifier_config)
    blocks = int(config.get("blocks", 1))
    flops = 2 * (blocks * d * d + head * d)
    base = analytic_flops(verifier_config)
    return replace(base, model="medusa", flops_per_token=flops, flops_per_token_at_context=flops, layers=0,
                   attention_flops_per_position=0, lm_head_flops_per_token=2 * head * d,
                   params=int(config.get("num_heads", 1)) * blocks * (d * d + d))


def head_width(config: dict, verifier_config) -> int:
    """Rows of a head's lm_head: its trimmed vocabulary, else the verifier's."""
    return int(config.get("head_tokens") or config.get("draft_vocab_size") or verifier_config.vocab_size)
