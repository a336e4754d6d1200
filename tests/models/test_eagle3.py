"""The standard EAGLE-3 layout (``specnb.models.eagle3``): a head written by the published recipe (SpecForge's
names, ``midlayer.*``, a reduced vocabulary with d2t/t2d) loads by folder, computes what vLLM's and llama.cpp's
EAGLE-3 graphs compute, drafts losslessly, and round-trips through ``save``."""

import json

import pytest
import torch
from safetensors.torch import save_file

from specnb.core.errors import IncompatibleModelsError
from specnb.decode.generate import generate
from specnb.decode.pairs import load_pair
from specnb.decode.settings import Decoding
from specnb.models import registry
from specnb.models.eagle3 import Eagle3Config, Eagle3Draft
from specnb.models.heads import head_kind

pytestmark = pytest.mark.usefixtures("one_thread")

D, HEADS, KV, HEAD_DIM, FF = 64, 4, 2, 16, 128


def published_head(folder, vocab: int, draft_vocab: int, layer_ids=(1, 1, 2), seed: int = 5, prefix="midlayer."):
    """A random head in the published layout, written without specnb's classes: config.json as SpecForge
    writes it, weights named as the EAGLE-3 reference names them."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.08):
        return torch.randn(*shape, generator=gen) * scale

    keep = torch.sort(torch.randperm(vocab, generator=gen)[:draft_vocab]).values  # the draft's token ids
    tensors = {
        "fc.weight": rand(D, 3 * D), "norm.weight": 1 + rand(D), "lm_head.weight": rand(draft_vocab, D, scale=0.5),
        "d2t": keep - torch.arange(draft_vocab), "t2d": torch.zeros(vocab, dtype=torch.bool).index_fill(0, keep, True),
        f"{prefix}input_layernorm.weight": 1 + rand(D), f"{prefix}hidden_norm.weight": 1 + rand(D),
        f"{prefix}post_attention_layernorm.weight": 1 + rand(D),
        f"{prefix}self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, 2 * D),
        f"{prefix}self_attn.k_proj.weight": rand(KV * HEAD_DIM, 2 * D),
        f"{prefix}self_attn.v_proj.weight": rand(KV * HEAD_DIM, 2 * D),
        f"{prefix}self_attn.o_proj.weight": rand(D, HEADS * HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": rand(FF, D), f"{prefix}mlp.up_proj.weight": rand(FF, D),
        f"{prefix}mlp.down_proj.weight": rand(D, FF)}
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu", "hidden_size": D,
        "intermediate_size": FF, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM,
        "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
        "vocab_size": vocab, "draft_vocab_size": draft_vocab, "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids), "use_aux_hidden_state": True}}))
    return tensors


def rms(x, w, eps=1e-6):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, positions, theta=10000.0):
    """[T, H, hd] rotated the Llama way (halves)."""
    half = x.shape[-1] // 2
    freqs = positions[:, None].float() / theta ** (torch.arange(half).float() / half)  # [T, half]
    cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


def engine_forward(t, embeds, layers):
    """The engines' EAGLE-3 step, written out: g = fc(layers); pre-norm = g + attn([n(e) ; n(g)]) + mlp(...).
    embeds [T, D], layers [T, 3D] -> (pre-norm states [T, D], logits [T, N]); causal, positions 0..T-1."""
    p = "midlayer."
    g = layers @ t["fc.weight"].T
    x = torch.cat([rms(embeds, t[p + "input_layernorm.weight"]), rms(g, t[p + "hidden_norm.weight"])], -1)
    width = len(embeds)
    q = (x @ t[p + "self_attn.q_proj.weight"].T).view(width, HEADS, HEAD_DIM)
    k = (x @ t[p + "self_attn.k_proj.weight"].T).view(width, KV, HEAD_DIM)
    v = (x @ t[p + "self_attn.v_proj.weight"].T).view(width, KV, HEAD_DIM)
    pos = torch.arange(width)
    q, k = rope(q, pos), rope(k, pos)
    k, v = k.repeat_interleave(HEADS // KV, 1), v.repeat_interleave(HEADS // KV, 1)
    scores = torch.einsum("thd,shd->hts", q, k) / HEAD_DIM ** 0.5
    scores = scores.masked_fill(~torch.ones(width, width, dtype=torch.bool).tril(), float("-inf"))
    attn = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(width, -1) @ t[p + "self_attn.o_proj.weight"].T
    h = g + attn
    y = rms(h, t[p + "post_attention_layernorm.weight"])
    mlp = (torch.nn.functional.silu(y @ t[p + "mlp.gate_proj.weight"].T) * (y @ t[p + "mlp.up_proj.weight"].T))
    pre = h + mlp @ t[p + "mlp.down_proj.weight"].T
    return pre, rms(pre, t["norm.weight"]) @ t["lm_head.weight"].T


def test_a_published_eagle3_head_loads_computes_the_engines_graph_and_drafts_losslessly(verifier_folder, tmp_path):
    verifier = load_pair(str(verifier_folder), None, device="cpu").verifier
    vocab = verifier.config.vocab_size
    tensors = published_head(tmp_path / "head", vocab, draft_vocab=40)
    assert head_kind(tmp_path / "head") == "eagle"
    assert registry.resolve_draft(str(tmp_path / "head")).kind == "eagle"
    pair = load_pair(str(verifier_folder), str(tmp_path / "head"), device="cpu")
    head = pair.draft
    assert isinstance(head, Eagle3Draft) and head.config.feature_layers == (0, 0, 1)  # ids 1, 1, 2: layer inputs
    assert torch.equal(head.head_ids, torch.nonzero(tensors["t2d"])[:, 0])

    ids = torch.randint(3, vocab, (1, 6))
    layers = torch.randn(1, 6, 3 * D)
    with torch.no_grad():
        pre, logits = engine_forward(tensors, verifier.get_input_embeddings().weight[ids[0]], layers[0])
        ours = head(layers, ids)
        torch.testing.assert_close(ours[0], pre, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(head.logits(ours)[0], logits, rtol=1e-4, atol=1e-5)
        assert torch.equal(head.tokens(ours)[0], head.head_ids[logits.argmax(-1)])

    prompt = torch.randint(3, 60, (2, 7))
    expected = generate(verifier, prompt, decoding=Decoding(max_new_tokens=12)).tokens
    for gamma in (1, 3):
        assert generate(pair.verifier, prompt, draft=head,
                        decoding=Decoding(gamma=gamma, max_new_tokens=12)).tokens == expected


def test_the_layers_0_prefix_and_a_full_vocabulary_head_load_too(verifier_folder, tmp_path):
    verifier = load_pair(str(verifier_folder), None, device="cpu").verifier
    vocab = verifier.config.vocab_size
    published_head(tmp_path / "head", vocab, draft_vocab=vocab, prefix="layers.0.")
    head = load_pair(str(verifier_folder), str(tmp_path / "head"), device="cpu").draft
    assert head.head_ids is None and head.to_head_index(torch.tensor([5])).item() == 5


def test_save_round_trips_exactly_in_the_standard_names(verifier_folder, tmp_path):
    verifier = load_pair(str(verifier_folder), None, device="cpu").verifier
    config = Eagle3Config.from_verifier(verifier.config, draft_vocab_size=30, aux_layer_ids=(1, 2, 2))
    original = Eagle3Draft(config)
    original.set_vocabulary(torch.arange(30) * 2)
    original.init_from_verifier(verifier, 0)
    original.save(tmp_path / "mine", dtype=torch.float32)
    written = json.loads((tmp_path / "mine" / "config.json").read_text())
    assert written["architectures"] == ["LlamaForCausalLMEagle3"] and written["draft_vocab_size"] == 30
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 2]
    loaded = load_pair(str(verifier_folder), str(tmp_path / "mine"), device="cpu").draft
    feats, ids = torch.randn(1, 5, 3 * D), torch.randint(0, 60, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded(feats, ids), original(feats, ids), rtol=0, atol=0)
    assert torch.equal(loaded.t2d, original.t2d) and torch.equal(loaded.d2t, original.d2t)


def test_a_head_reading_layers_the_verifier_lacks_is_one_line(verifier_folder, tmp_path):
    verifier = load_pair(str(verifier_folder), None, device="cpu").verifier
    published_head(tmp_path / "deep", verifier.config.vocab_size, draft_vocab=20, layer_ids=(2, 15, 27))
    with pytest.raises(IncompatibleModelsError, match=r"verifier layers \[2, 15, 27\] vs the verifier's 2"):
        load_pair(str(verifier_folder), str(tmp_path / "deep"), device="cpu")


def test_the_embedded_eagle3_head_is_in_the_standard_layout_and_reads_the_engines_layers():
    from specnb.models.heads import read_config
    from specnb.models.registry import draft_folder

    folder = draft_folder("smollm2-eagle3")
    config = read_config(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 4096
    assert config["eagle_aux_hidden_state_layer_ids"] == config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] \
        == [2, 15, 27]  # the inputs of those layers: specnb's feature layers 1, 14 and 26
    head = Eagle3Draft.load(folder)
    assert head.config.feature_layers == (1, 14, 26) and len(set(head.head_ids.tolist())) == 4096
