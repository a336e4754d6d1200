"""EAGLE-3 in the standard layout (Li et al. 2025, "EAGLE-3"; the reference code and SpecForge): the head
that llama.cpp (``--spec-type draft-eagle3``), vLLM (``"method": "eagle3"``) and published checkpoints share.

The architecture, as those engines compute it (``vllm/model_executor/models/llama_eagle3.py``,
llama.cpp's ``src/models/eagle3.cpp``):

* ``fc`` [d, k*d_t]: the verifier's hidden states entering decoder layers ``aux_layer_ids`` (k of them,
  EAGLE-3's low, middle and high: 2, L/2 and L-3 of L), concatenated, projected to one feature g
  (optionally RMS-normalised first, ``norm_before_fc``). It runs once per verified token.
* one decoder layer (``midlayer``) whose attention reads ``[input_layernorm(embed(x)) ; hidden_norm(g)]``
  (q/k/v are 2d wide); the residual is g itself (or ``hidden_norm(g)`` with ``norm_before_residual``);
  then the usual post-attention norm and SwiGLU MLP with its residual.
* the layer's output before ``norm`` (the "pre-norm" state) is the next step's g: drafted tokens feed it
  back unfused. ``lm_head(norm(h))`` scores a reduced draft vocabulary of N tokens; draft index i is
  token ``i + d2t[i]`` (``t2d`` [V] marks the tokens the head can propose; the engines ignore it).
* the token embedding is the verifier's unless the checkpoint carries ``embed_tokens``.

Files: ``config.json`` (a Llama config with ``num_hidden_layers: 1``, ``draft_vocab_size``,
``architectures: ["LlamaForCausalLMEagle3"]``, the layer ids both as ``eagle_aux_hidden_state_layer_ids``
and in ``eagle_config``, which is where each engine looks) and ``model.safetensors`` with the names above
(``midlayer.*``; a ``layers.0.*`` prefix is read too). This module's state dict *is* that layout, so
saving is writing it and an exported folder is a copy.

In specnb's loop the class answers the same calls as ``specnb.models.eagle.EagleDraft`` (``forward``
returns the pre-norm state, ``logits`` scores it), so ``EagleDrafter``, the trees, the predictor's trace
and training-time test run it unchanged. specnb counts layers by their *outputs*
(``specnb.models.features``): id j here is specnb's feature layer j - 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from specnb.core.errors import ModelNotFoundError
from specnb.models.eagle import LayerShape, positions_and_mask

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ARCHITECTURE = "LlamaForCausalLMEagle3"


@dataclass(kw_only=True)
class Eagle3Config(LayerShape):
    """Shapes and options of a standard EAGLE-3 head (the keys of its config.json); ``vocab_size`` is the
    verifier's vocabulary."""

    draft_vocab_size: int = 49152  # rows of the head's own lm_head
    target_hidden_size: int = 576
    aux_layer_ids: tuple[int, ...] = (2, 15, 27)  # decoder layers whose *input* hidden state is read
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    own_embeddings: bool = False  # the checkpoint carries embed_tokens (else the verifier's is borrowed)
    meta: dict = field(default_factory=dict)  # specnb's training record (kept under "specnb" in config.json)

    def __post_init__(self):
        self.aux_layer_ids = tuple(int(i) for i in self.aux_layer_ids)
        if len(self.aux_layer_ids) < 2 or min(self.aux_layer_ids) < 1:
            raise ValueError(f"an EAGLE-3 head reads at least two verifier layers >= 1, got {self.aux_layer_ids}")

    # what the decoding loop, the trace and the trainer ask of any EAGLE draft
    @property
    def feature_layers(self) -> tuple[int, ...]:
        """specnb's feature layers (decoder-layer outputs): the input of layer j is the output of j - 1."""
        return tuple(i - 1 for i in self.aux_layer_ids)

    lookup_ngram = 0  # reads no prompt-lookup match
    copy_bias = False

    @property
    def head_tokens(self) -> int:
        return self.draft_vocab_size if self.draft_vocab_size < self.vocab_size else 0

    @classmethod
    def from_verifier(cls, config, **kw) -> Eagle3Config:
        return cls(**cls.fields_of(config), target_hidden_size=config.hidden_size, **kw)

    @classmethod
    def from_json(cls, raw: dict) -> Eagle3Config:
        """A published config.json (SpecForge / EAGLE-3 reference, or a speculators one's
        ``transformer_layer_config``) or one this module wrote."""
        layer = {**raw, **(raw.get("transformer_layer_config") or {})}
        eagle = raw.get("eagle_config") or {}
        ids = raw.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
        rope = layer.get("rope_parameters") or {}
        heads = layer["num_attention_heads"]
        extra = {} if not ids else {"aux_layer_ids": ids}
        return cls(hidden_size=layer["hidden_size"], intermediate_size=layer["intermediate_size"],
                   num_attention_heads=heads, num_key_value_heads=layer.get("num_key_value_heads", heads),
                   head_dim=layer.get("head_dim") or layer["hidden_size"] // heads,
                   rms_norm_eps=layer.get("rms_norm_eps", 1e-5),
                   rope_theta=rope.get("rope_theta", layer.get("rope_theta", 1e4)),
                   max_position_embeddings=layer.get("max_position_embeddings", 4096),
                   vocab_size=layer["vocab_size"], draft_vocab_size=raw.get("draft_vocab_size") or layer["vocab_size"],
                   target_hidden_size=raw.get("target_hidden_size") or layer["hidden_size"],
                   norm_before_fc=bool(raw.get("norm_before_fc", eagle.get("norm_before_fc", False))),
                   norm_before_residual=bool(raw.get("norm_before_residual", False)),
                   meta=raw.get("specnb") or {}, **extra)

    def to_json(self, target: str = "") -> dict:
        """config.json as the engines read it (llama.cpp's converter and vLLM's eagle3 method)."""
        ids = list(self.aux_layer_ids)
        return {"architectures": [ARCHITECTURE], "model_type": "llama", "hidden_act": "silu",
                "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
                "head_dim": self.head_dim, "num_hidden_layers": 1, "rms_norm_eps": self.rms_norm_eps,
                "rope_theta": self.rope_theta, "max_position_embeddings": self.max_position_embeddings,
                "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
                "target_hidden_size": self.target_hidden_size, "tie_word_embeddings": False,
                "attention_bias": False, "mlp_bias": False, "torch_dtype": "float16",
                "norm_before_fc": self.norm_before_fc, "norm_before_residual": self.norm_before_residual,
                "eagle_aux_hidden_state_layer_ids": ids,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True,
                                 "norm_before_fc": self.norm_before_fc},
                **({"specnb": {**self.meta, "target": target}} if self.meta or target else {})}


class MidLayer(nn.Module):
    """EAGLE-3's one decoder layer: attention over ``[norm(embedding) ; norm(g)]``, residual g."""

    def __init__(self, config: Eagle3Config):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

        lcfg, d = config.llama_config(), config.hidden_size
        self.input_layernorm = LlamaRMSNorm(d, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(d, eps=config.rms_norm_eps)
        self.self_attn = LlamaAttention(lcfg, layer_idx=0)
        width = config.head_dim
        self.self_attn.q_proj = nn.Linear(2 * d, config.num_attention_heads * width, bias=False)
        self.self_attn.k_proj = nn.Linear(2 * d, config.num_key_value_heads * width, bias=False)
        self.self_attn.v_proj = nn.Linear(2 * d, config.num_key_value_heads * width, bias=False)
        self.post_attention_layernorm = LlamaRMSNorm(d, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(lcfg)
        self.norm_before_residual = config.norm_before_residual

    def forward(self, embeds, g, mask, position_embeddings, cache) -> torch.Tensor:
        """embeds, g [B, T, d] -> the pre-norm state [B, T, d]."""
        normed = self.hidden_norm(g)
        residual = normed if self.norm_before_residual else g
        x = torch.cat([self.input_layernorm(embeds), normed], dim=-1)  # [B, T, 2d]
        attn, _ = self.self_attn(x, position_embeddings=position_embeddings, attention_mask=mask, cache=cache)
        h = residual + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(nn.Module):
    """fc(verifier layers) -> one 2d-input decoder layer (own KV cache) -> pre-norm state; own lm_head."""

    draft_kind = "eagle"

    def __init__(self, config: Eagle3Config):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        self.config = config
        d, wide = config.hidden_size, config.target_hidden_size * len(config.aux_layer_ids)
        if config.own_embeddings:
            self.embed_tokens = nn.Embedding(config.vocab_size, d)
        if config.norm_before_fc:
            self.input_norm = LlamaRMSNorm(wide, eps=config.rms_norm_eps)
        self.fc = nn.Linear(wide, d, bias=False)
        self.midlayer = MidLayer(config)
        self.norm = LlamaRMSNorm(d, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(d, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))  # [N]
        self.register_buffer("t2d", torch.ones(config.vocab_size, dtype=torch.bool))  # [V]
        # token id of each column [N] (arange + d2t), kept because every draft step maps its argmax through it
        self.register_buffer("ids", torch.arange(config.draft_vocab_size), persistent=False)
        self.rotary = LlamaRotaryEmbedding(config.llama_config())
        self.embed_weight: torch.Tensor | None = None  # [V, d]: own, or the verifier's (attach)
        self.teacher_weight: torch.Tensor | None = None  # [N, d]: the verifier's lm_head rows (training)

    # ------------------------------------------------------------------ vocabulary
    @property
    def head_ids(self) -> torch.Tensor | None:
        """Token id of each draft column [N], None when the head scores the whole vocabulary."""
        return self.ids if self.config.head_tokens else None

    def set_vocabulary(self, head_ids: torch.Tensor) -> None:
        """Draft column i proposes token ``head_ids[i]`` (sorted ids [N]): fills d2t and t2d."""
        head_ids = head_ids.long().to(self.d2t.device)
        self.ids.copy_(head_ids)
        self.d2t.copy_(head_ids - torch.arange(len(head_ids), device=head_ids.device))
        self.t2d.zero_()
        self.t2d[head_ids] = True
        self._head_index = None

    def to_head_index(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> column in the head, -1 where the head cannot propose the token."""
        ids = self.head_ids
        if ids is None:
            return token_ids
        table = getattr(self, "_head_index", None)
        if table is None or table.device != token_ids.device:
            table = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=token_ids.device)
            table[ids.to(token_ids.device)] = torch.arange(len(ids), device=token_ids.device)
            self._head_index = table
        return table[token_ids]

    # ------------------------------------------------------------------ verifier tensors
    def attach(self, verifier) -> Eagle3Draft:
        """Borrow the verifier's embedding (unless the head has its own) and keep its lm_head rows for
        the head's columns as the training teacher."""
        own = getattr(self, "embed_tokens", None)
        self.embed_weight = own.weight if own is not None else verifier.get_input_embeddings().weight.detach()
        head = verifier.get_output_embeddings().weight.detach()
        ids = self.head_ids
        self.teacher_weight = head if ids is None else head[ids.to(head.device)].contiguous()
        return self

    def init_from_verifier(self, verifier, layer: int = 0) -> Eagle3Draft:
        """A starting point the verifier already knows: the decoder layer's weights from its ``layer``
        (q/k/v read half embedding, half feature), fc reading the highest fused layer, its final norm
        and its lm_head rows for the draft vocabulary."""
        src = verifier.model.layers[layer]
        d = self.config.hidden_size
        with torch.no_grad():
            for p in "qkv":
                w = getattr(src.self_attn, f"{p}_proj").weight  # [out, d]
                getattr(self.midlayer.self_attn, f"{p}_proj").weight.copy_(torch.cat([w, w], 1) * 0.5)
            self.midlayer.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight)
            self.midlayer.mlp.load_state_dict(src.mlp.state_dict())
            for norm in (self.midlayer.input_layernorm, self.midlayer.hidden_norm):
                norm.weight.copy_(src.input_layernorm.weight)
            self.midlayer.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
            self.norm.weight.copy_(verifier.model.norm.weight)
            self.fc.weight.zero_()
            self.fc.weight[:, -d:].copy_(torch.eye(d))
            head = verifier.get_output_embeddings().weight
            ids = self.head_ids
            self.lm_head.weight.copy_(head if ids is None else head[ids])
        self.config.meta["init_layer"] = layer
        return self.attach(verifier)

    # ------------------------------------------------------------------ forward
    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, cache=None,
                position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                embeds: torch.Tensor | None = None, lookup=None) -> torch.Tensor:
        """The pre-norm states [B, T, d] (the next step's g; ``logits`` scores them).

        features [B, T, k*d_t]: the verifier's layers (fused here by ``fc``), or [B, T, d]: the head's own
        previous output; input_ids [B, T]: the token after each position. ``cache``, ``position_ids``,
        ``attention_mask`` (None, a key mask [B, past+T] or a ready [B, 1, T, past+T] mask) and ``embeds``
        as for ``EagleDraft.forward``; ``lookup`` is accepted and unused (this head reads no match).
        """
        size = features.shape[-1]
        g = self.fused(features) if size != self.config.hidden_size else features.to(self.fc.weight.dtype)
        if embeds is None:
            embeds = nn.functional.embedding(input_ids, self.embed_weight)  # [B, T, d]
        position_ids, mask = positions_and_mask(g, cache, position_ids, attention_mask)
        cos_sin = self.rotary(g, position_ids)
        return self.midlayer(embeds.to(g.dtype), g, mask, cos_sin, cache)  # [B, T, d]

    def fused(self, layers: torch.Tensor) -> torch.Tensor:
        """The verifier's layers [..., k*d_t] -> g [..., d]."""
        x = layers.to(self.fc.weight.dtype)
        if self.config.norm_before_fc:
            x = self.input_norm(x)
        return self.fc(x)

    def feature_inputs(self, input_ids: torch.Tensor, generator=None) -> dict:
        """Random verifier features for ``input_ids`` [B, T], for timing probes."""
        size = self.config.target_hidden_size * len(self.config.aux_layer_ids)
        features = torch.randn(*input_ids.shape, size, generator=generator)
        return {"features": features.to(input_ids.device, self.fc.weight.dtype), "input_ids": input_ids}

    def logits(self, features: torch.Tensor, lookup=None) -> torch.Tensor:
        """Head logits [..., N] of pre-norm states [..., d] (column i is token ``head_ids[i]``)."""
        return self.lm_head(self.norm(features))

    def tokens(self, features: torch.Tensor, lookup=None) -> torch.Tensor:
        """Greedy token ids in the full vocabulary [...]."""
        idx = self.logits(features).argmax(-1)
        ids = self.head_ids
        return idx if ids is None else ids[idx]

    # ------------------------------------------------------------------ files
    def save(self, folder, dtype=torch.float16, meta: dict | None = None, target: str = "") -> None:
        """config.json + model.safetensors in the standard layout (floats in ``dtype``)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if meta is not None:
            self.config.meta = meta
        state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous()
                 for k, v in self.state_dict().items() if not k.startswith("rotary.")}
        save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
        (folder / CONFIG_FILE).write_text(json.dumps(self.config.to_json(target), indent=1))

    @classmethod
    def load(cls, folder, verifier=None, dtype=torch.float32) -> Eagle3Draft:
        """A head in the standard layout (this module's, SpecForge's or the EAGLE-3 reference's)."""
        from safetensors.torch import load_file

        folder = Path(folder)
        config = Eagle3Config.from_json(json.loads((folder / CONFIG_FILE).read_text()))
        state = {rename(k): v for k, v in load_file(str(folder / WEIGHTS_FILE)).items()}
        config.own_embeddings = "embed_tokens.weight" in state
        if "input_norm.weight" not in state:
            config.norm_before_fc = False
        model = cls(config)
        state.pop("t2d", None)
        if "d2t" not in state:  # a head over the whole vocabulary
            state["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)
        missing, unexpected = model.load_state_dict({k: (v.to(dtype) if v.is_floating_point() else v)
                                                     for k, v in state.items()}, strict=False)
        missing = [k for k in missing if k not in ("t2d",) and not k.startswith("rotary.")]
        if missing or unexpected:
            raise ModelNotFoundError(f"{str(folder)!r} is not an EAGLE-3 head in the standard layout: "
                                     f"missing {missing[:4]}, unexpected {unexpected[:4]}")
        model.set_vocabulary(torch.arange(len(model.d2t)) + model.d2t)  # the ids and t2d that its d2t says
        model.eval()
        return model.attach(verifier) if verifier is not None else model


def rename(name: str) -> str:
    """Published tensor names -> this module's: ``layers.0.`` / ``model.layers.0.`` is ``midlayer.``."""
    for prefix in ("model.layers.0.", "layers.0."):
        if name.startswith(prefix):
            return "midlayer." + name[len(prefix):]
    return name[len("model."):] if name.startswith("model.") else name


def is_eagle3(config: dict | None) -> bool:
    """Whether a config.json describes a standard EAGLE-3 head."""
    if not config:
        return False
    arch = " ".join(config.get("architectures") or [])
    return config.get("speculators_model_type") == "eagle3" or "Eagle3" in arch or \
        ("draft_vocab_size" in config and config.get("num_hidden_layers") == 1)
