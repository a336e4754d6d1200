"""The distilled drafts' shape: a small Llama body on the verifier's frozen embedding.

A ``DraftSpec`` names a draft's width, depth and heads (``DRAFT_SPECS``: the committed family).
Its trainable body has no embedding of its own: it reads the verifier's embedding (projected to its
width when narrower, by the principal directions of that embedding) and scores tokens with the
same matrix, so only the body is committed (fp16, ``draft_state_dict``). ``specnb.models.embedded``
puts a committed body back together with the verifier's embedding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specnb.core.errors import ParameterError
from specnb.models.cache import publish_atomically

_SKIP_KEYS = ("model.embed_tokens.weight", "lm_head.weight")
# the trainable body has no embedding of its own, so no vocabulary and no special ids
_NO_VOCAB = {"vocab_size": 1, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


@dataclass(frozen=True, kw_only=True)
class DraftSpec:
    """Shape of one draft; ``init_layers`` copies those verifier layers (width must match)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    init_layers: tuple[int, ...] = ()
    lr: float = 1e-3


DRAFT_SPECS = {
    "smollm2-draft-xs": DraftSpec(name="smollm2-draft-xs", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=1,
                                  intermediate_size=768, init_layers=(), lr=3e-3),
    "smollm2-draft-s": DraftSpec(name="smollm2-draft-s", hidden_size=576, num_layers=1, num_heads=9, num_kv_heads=3,
                                 intermediate_size=1536, init_layers=(0,), lr=3e-3),
    "smollm2-draft-m": DraftSpec(name="smollm2-draft-m", hidden_size=576, num_layers=3, num_heads=9, num_kv_heads=3,
                                 intermediate_size=1536, init_layers=(0, 1, 2), lr=2e-3),
}


def llama_config(spec: DraftSpec, verifier_config) -> dict:
    """LlamaConfig dict for ``spec``: verifier's vocab, special ids and rope; draft's own shape."""
    base = verifier_config.to_dict()
    keep = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "rope_parameters",
            "max_position_embeddings", "rms_norm_eps", "hidden_act", "attention_bias", "mlp_bias",
            "initializer_range", "model_type")
    config = {k: base[k] for k in keep if k in base}
    config.update(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_layers,
                  num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                  head_dim=spec.hidden_size // spec.num_heads, intermediate_size=spec.intermediate_size,
                  tie_word_embeddings=True, architectures=["LlamaForCausalLM"], dtype="float16")
    return config


def _make_student(spec: DraftSpec, verifier):
    """(body, proj): a LlamaModel without its own embedding, and the [d, D] projection or None."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(**{**llama_config(spec, verifier.config), **_NO_VOCAB, "dtype": "float32"})
    body = LlamaModel(config).float()
    del body.embed_tokens  # the embedding is the frozen verifier's (projected when narrower)
    body.embed_tokens = None
    width = verifier.config.hidden_size
    if spec.init_layers:
        if spec.hidden_size != width:
            raise ParameterError(f"{spec.name}: init_layers needs hidden_size {width}, got {spec.hidden_size}")
        for mine, theirs in zip(body.layers, spec.init_layers):
            mine.load_state_dict(verifier.model.layers[theirs].state_dict())
        body.norm.load_state_dict(verifier.model.norm.state_dict())
    proj = None
    if spec.hidden_size != width:
        # principal directions of the verifier embedding: the best rank-d view of its vocabulary
        emb = verifier.get_input_embeddings().weight.detach().float()  # [V, D]
        _, _, vh = torch.linalg.svd(emb.T @ emb)  # vh: [D, D]
        proj = torch.nn.Linear(width, spec.hidden_size, bias=False)
        proj.weight.data.copy_(vh[: spec.hidden_size])  # [d, D]
    return body, proj


@dataclass(frozen=True, kw_only=True)
class Student:
    """A draft in training: its ``body`` (a LlamaModel without an embedding), the projection ``proj``
    [d, D] to its width (None when as wide as the verifier), and the frozen verifier embedding ``emb``
    [V, D] it reads its inputs from and scores tokens with."""

    body: Any
    proj: Any
    emb: Any


def _student_logits(student: Student, ids, mask, rows, cols, vocab=None):
    """Draft logits at the selected positions only (the lm_head is the costly part).

    With ``vocab`` (sorted token ids) the softmax runs over those tokens only: training uses the
    batch's own tokens plus every teacher top-k candidate in it, a sampled softmax (Jean et al.
    2015) that cuts the 49k-row lm_head to a few thousand rows, about 5x less work per step on CPU.
    """
    import torch

    emb, proj = student.emb, student.proj

    def embed(token_ids):  # [n] -> [n, d]: the frozen verifier embedding, projected when narrower
        return emb[token_ids] if proj is None else proj(emb[token_ids])

    if vocab is None:
        table = embed(torch.arange(len(emb)))  # [V, d]
        inputs = table[ids]
    else:
        seen, where = torch.unique(ids, return_inverse=True)  # input tokens need not be in ``vocab``
        inputs, table = embed(seen)[where], embed(vocab)  # [B, S, d], [U, d]
    hidden = student.body(inputs_embeds=inputs, attention_mask=mask).last_hidden_state  # [B, S, d]
    return hidden[rows, cols] @ table.T  # [N, V] or [N, U]


def draft_state_dict(body, proj) -> dict:
    """fp16 tensors named as in LlamaForCausalLM, without the verifier's embedding / lm_head."""
    state = {f"model.{k}": v.detach().half().contiguous() for k, v in body.state_dict().items()}
    if proj is not None:
        state["embed_proj.weight"] = proj.weight.detach().half().contiguous()
    return {k: v for k, v in state.items() if k not in _SKIP_KEYS and "rotary_emb" not in k}


def count_params(spec: DraftSpec, verifier_config) -> tuple[int, int]:
    """(non-embedding, total as assembled) parameter counts; the tied lm_head is counted once."""
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(**{**llama_config(spec, verifier_config), **_NO_VOCAB})
    body = sum(p.numel() for n, p in LlamaModel(config).named_parameters() if "embed_tokens" not in n)
    return body, body + verifier_config.vocab_size * spec.hidden_size


def save_draft(folder: Path, config: dict, state: dict, meta: dict, head: list[int] | None = None) -> Path:
    """Write the files (``head_tokens.json`` too for a trimmed head) into a temporary sibling
    folder, then rename: never a partial draft."""
    from safetensors.torch import save_file

    from specnb.models.trimmed_head import HEAD_FILE  # deferred: loads torch

    def write(tmp: Path) -> None:
        (tmp / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
        save_file(state, str(tmp / "weights.safetensors"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if head is not None:
            (tmp / HEAD_FILE).write_text(json.dumps([int(i) for i in head]))
        for path in [tmp, *tmp.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # mkdtemp makes it private; these get committed

    return publish_atomically(write, folder, manifest=False)
