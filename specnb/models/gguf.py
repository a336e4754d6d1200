"""GGUF files of the embedded models, for llama.cpp: the shipped Q4_1 verifier, an F32 (or F16)
export of the same fp32 checkpoint PyTorch runs, and the distilled drafts.

Why: llama.cpp is what a CPU or Mac user would run instead of speculating in PyTorch, and comparing
the two fairly needs the *same* weights at the *same* precision in both engines — otherwise a 4x
gap mixes what the engine buys with what 4-bit weights buy. The shipped file is Q4_1, so the fp32
checkpoint is exported (``export_gguf``) and cached; a Q4_1 draft is exported then quantized with
llama.cpp's own quantizer (``quantize_gguf``, through llama-cpp-python).

What makes a hand-written Llama GGUF correct:
- llama.cpp rotates *interleaved* q/k channel pairs, transformers the two halves (``rotate_half``),
  so q_proj and k_proj rows are permuted per head (``permute_qk``, as ``convert_hf_to_gguf.py``
  does); without it the file loads and produces garbage.
- A tied LM head is written once, as ``token_embd.weight``; llama.cpp reuses it as the output.
- Norm weights stay F32 whatever the precision; tokenizer keys are copied from the shipped GGUF,
  so token ids agree by construction.

A distilled draft's trimmed head (``head_tokens.json``) has no GGUF equivalent (no row subset, no
output bias for Llama): the draft is exported with its full tied head, so llama.cpp computes all
49,152 logits per draft token — the cost the trimmed head was made to avoid — and
``specnb.native.llama_cpp`` restricts the argmax to the head's tokens so its proposals stay the same.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from specnb.core import paths
from specnb.core.errors import ParameterError
from specnb.models.cache import build_lock, cache_dir, cache_is_valid, publish_atomically

PRECISIONS = ("f32", "f16", "q4_1")
GGUF_FILE = "model.gguf"


def permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """transformers' (rotate_half) row order -> llama.cpp's interleaved order; weight [n_head·head_dim, d]."""
    rows = weight.shape[0]
    return weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def tokenizer_fields(reference: Path) -> list[tuple]:
    """(key, value, type, element type) of every ``tokenizer.*`` field of a GGUF file."""
    import gguf

    fields = []
    for key, field in gguf.GGUFReader(str(reference)).fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            fields.append((key, value, kind, sub))
        elif kind == gguf.GGUFValueType.STRING:
            fields.append((key, bytes(field.parts[field.data[0]]).decode("utf-8"), kind, None))
        else:
            fields.append((key, field.parts[field.data[0]].tolist()[0], kind, None))
    return fields


def export_gguf(hf_dir: Path, out: Path, precision: str = "f32", reference: Path | None = None) -> Path:
    """Write the Llama checkpoint in ``hf_dir`` as a GGUF (``precision`` f32 or f16 for the matrices),
    with the tokenizer of ``reference`` (default: the shipped verifier's GGUF)."""
    import gguf
    from safetensors.numpy import load_file

    from specnb.models.embedded import find_embedded_gguf  # deferred: loads torch

    if precision not in ("f32", "f16"):
        raise ParameterError(f"export_gguf writes f32 or f16, got {precision!r} (quantize_gguf makes q4_1)")
    hf_dir = Path(hf_dir)
    config = json.loads((hf_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ParameterError(f"GGUF export supports Llama checkpoints, {hf_dir.name} is {config.get('model_type')!r}; "
                             "convert it with llama.cpp's convert_hf_to_gguf.py")
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise ParameterError(f"GGUF export supports plain RoPE, {hf_dir.name} uses {rope.get('rope_type')!r}")
    state = load_file(str(hf_dir / "model.safetensors"))
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(hf_dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if precision == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    for key, value, kind, _ in tokenizer_fields(Path(reference or find_embedded_gguf())):
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    matrix_type = np.float32 if precision == "f32" else np.float16

    def put(name: str, tensor: np.ndarray, matrix: bool = True) -> None:
        writer.add_tensor(name, np.ascontiguousarray(tensor.astype(matrix_type if matrix else np.float32)))

    put("token_embd.weight", state["model.embed_tokens.weight"])  # [V, d], also the tied head
    put("output_norm.weight", state["model.norm.weight"], matrix=False)
    if not config.get("tie_word_embeddings", False) and "lm_head.weight" in state:
        put("output.weight", state["lm_head.weight"])
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"], matrix=False)
        put(f"blk.{i}.attn_q.weight", permute_qk(state[p + "self_attn.q_proj.weight"], n_head))
        put(f"blk.{i}.attn_k.weight", permute_qk(state[p + "self_attn.k_proj.weight"], n_kv))
        put(f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"], matrix=False)
        put(f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)


def quantize_gguf(source: Path, out: Path, precision: str = "q4_1", threads: int = 2) -> Path:
    """Quantize a GGUF with llama.cpp's quantizer (llama-cpp-python's binding of
    ``llama_model_quantize``, no llama.cpp binaries needed). llama.cpp's rules apply: 1D tensors
    stay F32, a tied embedding gets a higher-precision type (Q8_0 next to Q4_1, as in the shipped file)."""
    import llama_cpp

    codes = {"q4_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1, "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16}
    if precision not in codes:
        raise ParameterError(f"quantize_gguf makes {', '.join(codes)}, got {precision!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = codes[precision], threads
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} to {precision}")
    return Path(out)


def gguf_bytes(path: Path) -> int:
    """Bytes of a GGUF's tensors: what one batch-1 decoding step streams (a tied head once)."""
    import gguf

    return int(sum(t.n_bytes for t in gguf.GGUFReader(str(path)).tensors))


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ParameterError(f"unknown GGUF precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision


def embedded_gguf(name: str, precision: str = "q4_1") -> Path:
    """A GGUF of an embedded model (the verifier or a distilled draft) at ``precision``: the shipped
    file for the verifier at Q4_1, otherwise exported once from the fp32 checkpoint and cached
    (F32 of the verifier: 538 MB, about half a minute)."""
    # deferred: loads torch
    from specnb.models.embedded import embedded_draft_path, embedded_verifier_path, find_embedded_gguf
    from specnb.models.registry import EMBEDDED_VERIFIER, embedded_draft_names

    check_precision(precision)
    if name == EMBEDDED_VERIFIER and precision == "q4_1":
        return find_embedded_gguf()
    from specnb.models.heads import head_kind  # deferred: loads torch

    distilled = name in embedded_draft_names() and not head_kind(paths.DRAFTS_DIR / name)
    if name != EMBEDDED_VERIFIER and not distilled:
        raise ParameterError(f"no GGUF export for {name!r}: only the embedded verifier and distilled drafts "
                             "(llama.cpp has no EAGLE or Medusa heads); for notebook 08 on llama-server pass a "
                             ".gguf file of your own as the verifier, -p verifier PATH.gguf")
    source = embedded_verifier_path() if name == EMBEDDED_VERIFIER else embedded_draft_path(name)
    target = cache_dir() / "gguf" / f"{name}-{precision}"
    if cache_is_valid(target, full_hash=False):
        return target / GGUF_FILE

    def build(tmp: Path) -> None:
        if precision == "q4_1":  # F32 first, then llama.cpp's quantizer
            export_gguf(source, tmp / "f32.gguf", "f32")
            quantize_gguf(tmp / "f32.gguf", tmp / GGUF_FILE, "q4_1")
            (tmp / "f32.gguf").unlink()
        else:
            export_gguf(source, tmp / GGUF_FILE, precision)

    with build_lock(target):
        if not cache_is_valid(target, full_hash=False):
            publish_atomically(build, target)
    return target / GGUF_FILE
