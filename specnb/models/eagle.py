"""EAGLE-style feature draft for a Llama verifier (prototype for specnb's ``smollm2-eagle``).

References:
  * Li, Wei, Zhang, Zhang 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
    Uncertainty" (ICML 2024) -- the draft works on the verifier's last hidden state ("feature"):
    input at position t is ``fc([f_t ; embed(x_{t+1})])``, one decoder layer predicts f_{t+1},
    the verifier's frozen lm_head turns it into a token; trained with feature regression
    (smooth-L1) + token cross-entropy and uniform noise on the input features.
  * Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees"
    -- same draft, context-dependent trees from the draft's confidence.
  * Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
    Training-Time Test" -- the draft is trained on its own predicted inputs for steps 2+
    ("training-time test"), and uses a reduced draft vocabulary.
  * Zhao et al. 2025, "FR-Spec" -- frequency-ranked (trimmed) draft vocabulary.

Which feature: ``f_t`` is the verifier's *post-final-norm* hidden state at position t, i.e.
``verifier.model(...).last_hidden_state[:, t]`` -- exactly the tensor its ``lm_head`` consumes
(EAGLE-1 uses ``base_model.model(...)[0]``, which in HF Llama includes the final norm).

Decoding contract (chain draft, greedy):
  * after prefill (or a verification step) the verifier has features f_0..f_j and the next
    token x_{j+1} (bonus / correction). The draft cache must hold entries for positions
    0..j-1 computed from TRUE features; the draft then runs positions [j'..j] with true
    features and tokens x_{j'+1}..x_{j+1} (j' = first position not yet in its cache),
    predicts f^_{j+1} -> token d_{j+2} = argmax lm_head(f^_{j+1}); then keeps feeding its own
    prediction: input (f^_{j+1}, d_{j+2}) at position j+1 -> f^_{j+2} -> d_{j+3}, ...
  * after verification with n accepted drafts: crop the draft cache back to j+1 entries
    (positions 0..j: position j was computed from the true f_j and stays valid), and hand the
    draft the verifier's features of the verified chunk for positions j+1..j+n+1 at the next
    step (the entries computed from predicted features are replaced by true ones, as EAGLE does).

EAGLE-3 mode (``feature_layers``, Li et al. 2025): the true input feature is not the final one but
the outputs of a low, a middle and a high verifier layer, each RMS-normalised and fused by a linear
layer (``fused``); a predicted feature (the draft's own output, fed back for later steps) goes in as
it is. The draft is trained on its own predictions ("training-time test",
``specnb.models.training.head_losses.eagle3_loss``), token loss only.

Storage: ``config.json`` (``EagleConfig``) + ``weights.safetensors`` (fc, the fusion for EAGLE-3,
the decoder layer, the optional output norm and, for a trimmed head, ``head_ids`` [N] int64). The verifier's
embedding and lm_head are never stored: ``attach(verifier)`` borrows them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.safetensors"


@dataclass(kw_only=True)
class LayerShape:
    """The shapes of one decoder layer of the verifier, which a feature head copies (EAGLE's and EAGLE-3's)."""

    hidden_size: int = 576
    intermediate_size: int = 1536
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    max_position_embeddings: int = 8192
    vocab_size: int = 49152

    @staticmethod
    def fields_of(config) -> dict:
        """A verifier's HF config -> these fields."""
        rope = getattr(config, "rope_parameters", None) or {}
        return {"hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
                "num_attention_heads": config.num_attention_heads,
                "num_key_value_heads": config.num_key_value_heads,
                "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
                "rms_norm_eps": config.rms_norm_eps,
                "rope_theta": rope.get("rope_theta", getattr(config, "rope_theta", 1e4)),
                "max_position_embeddings": config.max_position_embeddings, "vocab_size": config.vocab_size}

    def llama_config(self):
        """A one-layer LlamaConfig of these shapes (the head's decoder layer, rotary embedding and caches)."""
        from transformers import LlamaConfig

        cfg = LlamaConfig(hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
                          num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
                          head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, num_hidden_layers=1,
                          max_position_embeddings=self.max_position_embeddings, vocab_size=1,
                          rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
                          pad_token_id=None, bos_token_id=None, eos_token_id=None)
        cfg._attn_implementation = "sdpa"
        return cfg


@dataclass(kw_only=True)
class EagleConfig(LayerShape):
    """Shapes of the draft (the verifier's layer shapes) and its options."""

    head_tokens: int = 0  # 0: the verifier's full lm_head; N: a trimmed head over N token ids
    out_norm: bool = True  # RMSNorm on the layer output (init: the verifier's final norm)
    input_norm: bool = True  # keep the decoder layer's input_layernorm (EAGLE-1 drops it)
    init_layer: int = -1  # verifier layer the decoder layer was initialised from (metadata)
    lookup_ngram: int = 0  # >0: also read the prompt-lookup match of each input token (n-gram <= this)
    copy_bias: bool = False  # a learned logit bonus on that match's token (a pointer; needs lookup_ngram)
    feature_layers: tuple[int, ...] = ()  # (): reads the final-norm feature; else these layers' outputs, fused

    def __post_init__(self):
        self.feature_layers = tuple(self.feature_layers)  # config.json stores a list
        if len(self.feature_layers) == 1:  # a fused input must be wider than a predicted one ([d])
            raise ValueError("feature_layers names no layer or at least two (repeat one to read it alone)")

    @classmethod
    def from_verifier(cls, config, **kw) -> EagleConfig:
        return cls(**cls.fields_of(config), **kw)


def causal_mask(batch: int, query: int, past: int, key_mask: torch.Tensor | None = None,
                device=None) -> torch.Tensor:
    """Boolean attention mask [B, 1, T, past+T]: query i sees keys <= past+i (and ``key_mask`` [B, past+T])."""
    q = torch.arange(query, device=device)[:, None] + past  # [T, 1]
    k = torch.arange(past + query, device=device)[None, :]  # [1, past+T]
    mask = (k <= q)[None, None].expand(batch, 1, query, past + query)  # [B, 1, T, past+T]
    if key_mask is not None:
        mask = mask & key_mask.bool()[:, None, None, :]
    return mask


def positions_and_mask(x: torch.Tensor, cache, position_ids, attention_mask):
    """A head forward's positions [B, T] (default: past .. past+T-1) and attention mask: None (one causal
    token), the causal mask with ``attention_mask`` [B, past+T] as key mask, or a ready 4D mask as it is."""
    batch, width = x.shape[:2]
    past = cache.get_seq_length() if cache is not None else 0
    if position_ids is None:
        position_ids = torch.arange(past, past + width, device=x.device)[None].expand(batch, -1)  # [B, T]
    if attention_mask is not None and attention_mask.dim() != 2:
        return position_ids, attention_mask
    needed = width > 1 or attention_mask is not None
    return position_ids, causal_mask(batch, width, past, attention_mask, x.device) if needed else None


class EagleDraft(nn.Module):
    """fc([feature ; embedding]) -> one LlamaDecoderLayer (own KV cache) -> predicted next feature."""

    draft_kind = "eagle"  # how ``specnb.decode.drafters.make_drafter`` drafts with it

    def __init__(self, config: EagleConfig, head_ids: torch.Tensor | None = None):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

        self.config = config
        d = config.hidden_size
        lcfg = config.llama_config()
        self.fc = nn.Linear((3 if config.lookup_ngram else 2) * d, d, bias=True)  # [f ; e (; e(match))] -> d
        if config.feature_layers:  # EAGLE-3: the verifier's low/mid/high layer outputs [k*d] -> one feature [d]
            # each layer's output RMS-normalised first: the residual stream carries outliers in the hundreds
            self.fuse_norm = nn.Parameter(torch.ones(len(config.feature_layers), d))  # [k, d]
            self.fuse = nn.Linear(len(config.feature_layers) * d, d, bias=False)
        if config.lookup_ngram:
            self.match_embed = nn.Embedding(config.lookup_ngram + 1, d)  # by match length 0..n, added after fc
            nn.init.zeros_(self.match_embed.weight)
        if config.copy_bias:
            if not config.lookup_ngram:
                raise ValueError("copy_bias needs lookup_ngram > 0")
            self.copy_gate = nn.Linear(d, 1)  # bonus = softplus(copy_gate(f^) + copy_len[n])
            nn.init.zeros_(self.copy_gate.weight)
            nn.init.constant_(self.copy_gate.bias, -2.0)
            self.copy_len = nn.Embedding(config.lookup_ngram + 1, 1)
            nn.init.zeros_(self.copy_len.weight)
        self.layer = LlamaDecoderLayer(lcfg, layer_idx=0)
        if not config.input_norm:
            self.layer.input_layernorm = nn.Identity()
        self.norm = LlamaRMSNorm(d, eps=config.rms_norm_eps) if config.out_norm else nn.Identity()
        self.rotary = LlamaRotaryEmbedding(lcfg)
        if config.head_tokens:
            if head_ids is None:
                head_ids = torch.arange(config.head_tokens)
            assert len(head_ids) == config.head_tokens
            self.register_buffer("head_ids", head_ids.long().clone(), persistent=True)  # [N]
        else:
            self.head_ids = None
        # frozen, borrowed from the verifier by attach(); never saved
        self.embed_weight: torch.Tensor | None = None  # [V, d]
        self.head_weight: torch.Tensor | None = None  # [N or V, d]

    # ------------------------------------------------------------------ verifier tensors
    def attach(self, verifier) -> EagleDraft:
        """Borrow the verifier's (frozen) input embedding and lm_head (trimmed to ``head_ids``)."""
        self.embed_weight = verifier.get_input_embeddings().weight.detach()
        head = verifier.get_output_embeddings().weight.detach()
        self.head_weight = head if self.head_ids is None else head[self.head_ids].contiguous()
        return self

    @property
    def teacher_weight(self) -> torch.Tensor:
        """The verifier's lm_head rows this head scores (training's teacher): its own borrowed head."""
        return self.head_weight

    def init_from_verifier(self, verifier, layer: int = -1) -> EagleDraft:
        """Copy a verifier decoder layer (and its final norm) as the starting point; fc = [I, 0]."""
        src = verifier.model.layers[layer]
        own = self.layer.state_dict()
        self.layer.load_state_dict({k: v for k, v in src.state_dict().items() if k in own}, strict=False)
        if isinstance(self.norm, nn.Module) and hasattr(self.norm, "weight"):
            self.norm.weight.data.copy_(verifier.model.norm.weight.data)
        d = self.config.hidden_size
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[:, :d].copy_(torch.eye(d))  # starts as "next feature = this feature"
            self.fc.bias.zero_()
            if self.config.feature_layers:  # the fused feature starts as the highest layer, normed like the last
                self.fuse.weight.zero_()
                self.fuse.weight[:, -d:].copy_(torch.eye(d))
                self.fuse_norm[-1].copy_(verifier.model.norm.weight)
        self.config.init_layer = layer if layer >= 0 else len(verifier.model.layers) + layer
        return self

    # ------------------------------------------------------------------ forward
    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, cache=None,
                position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                embeds: torch.Tensor | None = None,
                lookup: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Predicted next features [B, T, d].

        features [B, T, d]: f_t (true or predicted), or for a draft with ``feature_layers`` the verifier's
        layer outputs [B, T, k*d] (true) or the draft's own output [B, T, d] (predicted);
        input_ids [B, T]: x_{t+1} (the token after t);
        cache: a ``transformers.DynamicCache`` (appended to) or None; position_ids [B, T] (default:
        past .. past+T-1); attention_mask: None (causal), [B, past+T] key mask (0 = hole/pad), or a
        ready boolean/additive mask [B, 1, T, past+T] used as is. ``embeds`` [B, T, d] may replace
        the embedding lookup. ``lookup`` (needed when ``config.lookup_ngram``): the prompt-lookup
        match of each input token x_{t+1} given the context up to it, as (candidate ids [B, T] (-1: none),
        match lengths [B, T]) from ``specnb.models.lookup.next_match`` / ``all_matches``.
        """
        batch, width, size = features.shape
        if size != self.config.hidden_size:  # the verifier's layers (EAGLE-3); a predicted feature is [d]
            features = self.fused(features)
        if embeds is None:
            embeds = nn.functional.embedding(input_ids, self.embed_weight)  # [B, T, d]
        parts = [features.to(embeds.dtype), embeds]
        if self.config.lookup_ngram:
            if lookup is None:
                raise ValueError("this draft also reads the prompt-lookup match: pass lookup=(candidates, lengths)")
            candidates, lengths = lookup
            matched = nn.functional.embedding(candidates.clamp_min(0), self.embed_weight)  # [B, T, d]
            parts.append(matched.to(embeds.dtype) * (candidates >= 0)[..., None])
        x = self.fc(torch.cat(parts, dim=-1))  # [B, T, d]
        if self.config.lookup_ngram:
            x = x + self.match_embed(lookup[1].clamp(0, self.config.lookup_ngram))
        position_ids, mask = positions_and_mask(x, cache, position_ids, attention_mask)
        cos_sin = self.rotary(x, position_ids)
        h = self.layer(x, attention_mask=mask, position_ids=position_ids, cache=cache,
                       use_cache=cache is not None, position_embeddings=cos_sin)  # [B, T, d]
        return self.norm(h)  # [B, T, d]

    def fused(self, layers: torch.Tensor) -> torch.Tensor:
        """The verifier's layer outputs [..., k*d] -> one input feature [..., d] (EAGLE-3's fc)."""
        k, d = self.fuse_norm.shape
        x = layers.to(self.fuse.weight.dtype).unflatten(-1, (k, d))  # [..., k, d]
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps) * self.fuse_norm
        return self.fuse(x.flatten(-2))  # [..., d]

    def feature_inputs(self, input_ids: torch.Tensor, generator=None) -> dict:
        """Random features for ``input_ids`` [B, T] (a forward's cost does not depend on their values),
        for timing probes (``specnb.measure.forward.ForwardProbe``)."""
        size = self.config.hidden_size * max(1, len(self.config.feature_layers))
        features = torch.randn(*input_ids.shape, size, generator=generator)
        inputs = {"features": features.to(input_ids.device, self.fc.weight.dtype), "input_ids": input_ids}
        if self.config.lookup_ngram:
            inputs["lookup"] = (input_ids, torch.ones_like(input_ids))
        return inputs

    def logits(self, features: torch.Tensor, lookup: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Head logits [..., N] (trimmed: column i is token ``head_ids[i]``) or [..., V] (full head).

        With ``config.copy_bias``, ``lookup`` is the match that was fed with the input token at that
        position (see ``forward``): its candidate guesses the token these logits predict, and gets a
        learned bonus, a pointer to the context (See et al. 2017, "Get To The Point").
        """
        logits = features @ self.head_weight.T
        if self.config.copy_bias and lookup is not None:
            candidates, lengths = lookup
            column = self.to_head_index(candidates.clamp_min(0))
            usable = (candidates >= 0) & (column >= 0)
            bonus = nn.functional.softplus(self.copy_gate(features)[..., 0]
                                           + self.copy_len(lengths.clamp(0, self.config.lookup_ngram))[..., 0])
            bonus = (bonus * usable)[..., None].to(logits.dtype)  # [..., 1]
            logits = logits.scatter_add(-1, column.clamp_min(0)[..., None], bonus)
        return logits

    def tokens(self, features: torch.Tensor, lookup=None) -> torch.Tensor:
        """Greedy token ids in the full vocabulary [...]."""
        idx = self.logits(features, lookup).argmax(-1)
        return idx if self.head_ids is None else self.head_ids[idx]

    def to_head_index(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> column in the (trimmed) head, -1 where the head cannot propose the token."""
        if self.head_ids is None:
            return token_ids
        table = getattr(self, "_head_index", None)
        if table is None or table.device != token_ids.device:
            table = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=token_ids.device)
            table[self.head_ids] = torch.arange(len(self.head_ids), device=token_ids.device)
            self._head_index = table
        return table[token_ids]

    @torch.inference_mode()
    def draft(self, features: torch.Tensor, input_ids: torch.Tensor, gamma: int, cache=None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Chain-draft ``gamma`` tokens [B, gamma] after catching up on (features, input_ids) [B, T]
        (a draft without ``lookup_ngram``: the decoding loop's ``EagleDrafter`` drafts every kind).

        The last column of the chunk is the newest verified position j with the bonus token
        x_{j+1}; the cache is left holding the chunk plus gamma-1 drafted positions (crop it
        after verification).
        """
        out = []
        if cache is None:
            from transformers import DynamicCache

            cache = DynamicCache()
        if position_ids is None:
            past = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(past, past + features.shape[1])[None].expand(features.shape[0], -1)
        h = self.forward(features, input_ids, cache=cache, position_ids=position_ids)[:, -1:]  # [B, 1, d]
        pos = position_ids[:, -1:]  # [B, 1]
        for step in range(gamma):
            tok = self.tokens(h)  # [B, 1]
            out.append(tok)
            if step + 1 < gamma:
                pos = pos + 1
                h = self.forward(h, tok, cache=cache, position_ids=pos)  # [B, 1, d]
        return torch.cat(out, dim=1)

    # ------------------------------------------------------------------ files
    def save(self, folder, dtype=torch.float16, meta: dict | None = None) -> None:
        save_head(self, "eagle", folder, dtype, meta)

    @classmethod
    def load(cls, folder, verifier=None, dtype=torch.float32) -> EagleDraft:
        return load_head(cls, EagleConfig, folder, verifier, dtype)


def save_head(model: nn.Module, kind: str, folder, dtype=torch.float16, meta: dict | None = None) -> None:
    """A head's folder in specnb's layout: its weights (floats in ``dtype``) and its config with ``kind``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps({"kind": kind, **asdict(model.config), "meta": meta or {}},
                                                 indent=1))


def load_head(cls, config_cls, folder, verifier=None, dtype=torch.float32):
    """The head ``save_head`` wrote (config keys this version does not know are ignored), attached to
    ``verifier`` when one is given."""
    from safetensors.torch import load_file

    folder = Path(folder)
    raw = json.loads((folder / CONFIG_FILE).read_text())
    config = config_cls(**{f.name: raw[f.name] for f in fields(config_cls) if f.name in raw})
    state = load_file(str(folder / WEIGHTS_FILE))
    model = cls(config, head_ids=state.get("head_ids"))
    model.load_state_dict({k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state.items()})
    model.eval()
    return model.attach(verifier) if verifier is not None else model
