"""Notebook 07's pieces on tiny models: fidelity with hand-worked answers, the bytes a step streams,
lower-precision copies, the GGUF export read back by llama.cpp, llama.cpp's speculation staying
lossless, the interleaved method runs and the verdict text."""

import copy
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import peaked_pair, tiny_model

from specnb.core.errors import ParameterError
from specnb.decode.settings import Decoding
from specnb.measure import alternatives, tax_split
from specnb.measure.alternatives import BASELINE_METHOD, LlamaRows
from specnb.measure.bandwidth import Bandwidth, step_bytes
from specnb.measure.fidelity import compare, fidelity
from specnb.models.lookup import PromptLookup
from specnb.models.precision import with_precision
from specnb.native import llama_cpp
from specnb.native.isolation import EngineCrashed

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 49152  # the shipped tokenizer's: a GGUF export copies its tokenizer


# ---------------------------------------------------------------- fidelity


def test_compare_finds_the_first_divergence():
    assert compare([1, 2, 3, 4], [1, 2, 3, 4]).first_divergence is None
    assert compare([1, 2, 3, 4], [1, 2, 9, 4]).first_divergence == 2
    assert compare([1, 2, 3, 4], [1, 2]).first_divergence == 2  # stopped early: diverges where it stops
    assert compare([1, 2], [1, 2, 3]).first_divergence is None  # ran past the reference: not a divergence
    assert compare([1, 2, 3, 4], [1, 2, 9, 4]).prefix_share == 0.5


def test_fidelity_weights_prompts_by_their_length():
    # prompt 1: 4 tokens, identical; prompt 2: 6 tokens, diverges at 3 -> (4 + 3) / 10 kept
    found = fidelity([([1, 2, 3, 4], [1, 2, 3, 4]), ([5, 6, 7, 8, 9, 10], [5, 6, 7, 0, 9, 10])])
    assert (found.prompts, found.identical, found.first_divergences) == (2, 1, [3])
    assert found.prefix_share == pytest.approx(0.7)
    assert found.median_first_divergence == 3


# ---------------------------------------------------------------- bytes and precision


def test_step_bytes_counts_a_tied_head_once_and_int8_weights_as_bytes():
    model = tiny_model("llama", vocab=200)
    fp32 = sum(p.numel() for p in model.parameters()) * 4 + sum(b.numel() * 4 for b in model.buffers())
    assert step_bytes(model) == fp32 - model.model.embed_tokens.weight.numel() * 4  # untied: the embedding is a lookup
    tied = tiny_model("llama", vocab=200)
    tied.lm_head.weight = tied.model.embed_tokens.weight
    assert step_bytes(tied) == fp32 - tied.model.embed_tokens.weight.numel() * 4  # the same tensor, counted once
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    int8 = sum(m.weight.numel() + m.out_features * 8 for m in linears)  # int8 values + per-channel scale, zero point
    others = fp32 - sum(m.weight.numel() * 4 for m in linears) - model.model.embed_tokens.weight.numel() * 4
    assert step_bytes(with_precision(model, "int8")) == int8 + others


def test_lower_precision_copies_leave_the_original_and_stay_close():
    model, _ = peaked_pair("llama")
    before = copy.deepcopy(model.state_dict())
    ids = torch.randint(3, 200, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = model(input_ids=ids).logits
        for precision in ("int8", "bf16"):
            logits = with_precision(model, precision)(input_ids=ids).logits.float()
            assert not torch.equal(logits, reference)  # it really is another computation
            assert (logits.argmax(-1) == reference.argmax(-1)).float().mean() > 0.8
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert with_precision(model, "fp32") is model
    with pytest.raises(ParameterError, match="unknown precision 'int4'"):
        with_precision(model, "int4")


# ---------------------------------------------------------------- GGUF and llama.cpp

needs_llama = pytest.mark.skipif(llama_cpp.missing_note() is not None, reason="llama-cpp-python missing (make setup)")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A peaked tiny Llama with the shipped tokenizer's vocabulary, saved and exported to an F32 GGUF."""
    from specnb.models.gguf import export_gguf

    model, draft = peaked_pair("llama", vocab=VOCAB)
    folder = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(folder / "hf")
    draft.save_pretrained(folder / "draft")
    return model, export_gguf(folder / "hf", folder / "tiny.gguf"), export_gguf(folder / "draft", folder / "draft.gguf")


@needs_llama
def test_llama_cpp_reads_the_export_as_transformers_computes_it(exported):
    model, path, _ = exported
    engine = llama_cpp.LlamaCpp(path, threads=1, n_ctx=64)
    ids = torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    logits = np.array(engine.forward(ids, all_logits=True))  # [12, V]
    with torch.inference_mode():
        expected = model(input_ids=torch.tensor([ids])).logits[0].numpy()
    assert np.abs(logits - expected).max() < 1e-3 * np.abs(expected).max()  # q/k permuted right, head untied
    engine.truncate(5)  # rolled back, a different continuation is computed on the first 5 tokens only
    again = np.array(engine.forward(ids[5:8], all_logits=True))
    assert np.abs(again - expected[5:8]).max() < 1e-3 * np.abs(expected).max()


@needs_llama
def test_llama_cpp_speculation_is_lossless_and_takes_fewer_forwards(exported):
    model, path, draft_path = exported
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]  # repetitive, so prompt lookup finds matches
    plain = llama_cpp.LlamaCpp(path, threads=1, n_ctx=128).generate(prompt, 24)
    from specnb.decode.generate import generate
    from specnb.decode.settings import Decoding

    torch_tokens = generate(model, torch.tensor([prompt]), decoding=Decoding(max_new_tokens=24)).tokens[0]
    assert plain.tokens == torch_tokens and plain.verifier_forwards == 24
    lookup = llama_cpp.LlamaCpp(path, threads=1, n_ctx=128, draft=llama_cpp.lookup_draft(4)).generate(prompt, 24)
    drafted = llama_cpp.LlamaCpp(path, threads=1, n_ctx=128,
                                 draft=llama_cpp.gguf_draft(draft_path, 3, threads=1, n_ctx=128)).generate(prompt, 24)
    assert lookup.tokens == plain.tokens and drafted.tokens == plain.tokens
    assert drafted.verifier_forwards < 24  # the near-copy draft is accepted: fewer verifier forwards than tokens


def test_export_refuses_what_it_cannot_write(tmp_path):
    from specnb.models.gguf import embedded_gguf, export_gguf

    tiny_model("qwen2").save_pretrained(tmp_path / "qwen")
    with pytest.raises(ParameterError, match="supports Llama checkpoints"):
        export_gguf(tmp_path / "qwen", tmp_path / "x.gguf")
    with pytest.raises(ParameterError, match="writes f32 or f16"):
        export_gguf(tmp_path / "qwen", tmp_path / "x.gguf", "q4_1")
    with pytest.raises(ParameterError, match="no GGUF export for 'prompt-lookup'"):
        embedded_gguf("prompt-lookup", "f32")


def test_a_missing_binding_is_a_note_not_a_traceback(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import now raises ImportError
    assert llama_cpp.missing_note() == llama_cpp.INSTALL_HINT
    verifier, _ = peaked_pair("llama")
    pair = type("Pair", (), {"verifier": verifier, "tokenizer": type("T", (), {"eos_token_id": 2}),
                             "vocab_size": None, "verifier_name": "tiny"})
    methods, notes = alternatives.build_methods(pair, {}, [], precisions=(), kernels=(),
                                                llama=LlamaRows(precisions=("q4_1",)))
    assert [m.name for m in methods] == [BASELINE_METHOD] and notes == [llama_cpp.INSTALL_HINT]


def test_the_baseline_must_run_on_the_default_kernels():
    from specnb.models.kernels import use_kernels

    verifier, _ = peaked_pair("llama")
    pair = type("Pair", (), {"verifier": use_kernels(verifier, "onednn"), "tokenizer": None})
    with pytest.raises(ParameterError, match="load the pair with kernels='default'"):
        alternatives.build_methods(pair, {}, [], precisions=(), kernels=(), llama=LlamaRows(precisions=()))


# ---------------------------------------------------------------- runs, summaries, verdicts


def tiny_methods():
    verifier, _ = peaked_pair("llama")
    lossy = copy.deepcopy(verifier)
    with torch.no_grad():
        lossy.lm_head.weight.mul_(-1)  # a "method" whose greedy tokens surely differ
    eager = {"engine": "PyTorch eager", "precision": "fp32"}
    return [alternatives.torch_method(verifier, Decoding(gamma=4), name=BASELINE_METHOD, **eager),
            alternatives.torch_method(verifier, Decoding(gamma=4), name="lookup", **eager, draft=PromptLookup(),
                                      draft_name="prompt-lookup"),
            alternatives.torch_method(lossy, Decoding(gamma=4), name="other", engine="PyTorch eager", precision="x",
                                      lossless=False)]


def test_methods_run_interleaved_and_summaries_pair_them_with_the_baseline():
    methods = tiny_methods()
    prompts = pd.DataFrame({"id": ["a", "b", "c"], "category": ["x", "y", "x"]})
    ids = [[5, 6, 7, 5, 6, 7, 5], [9, 8, 7, 6], [11, 12, 11, 12, 11]]
    records = alternatives.run_methods(methods, prompts, ids, max_new_tokens=10, progress=False)
    assert len(records) == 9 and list(records["method"][:3]) == ["verifier-only · PyTorch eager · fp32", "lookup",
                                                                 "other"]
    assert list(records["method"][3:6]) == ["lookup", "other", alternatives.BASELINE_METHOD]  # rotated per prompt
    summary = alternatives.summarise_methods(records, methods).set_index("method")
    assert summary.loc[alternatives.BASELINE_METHOD, "speedup"] == 1.0
    assert summary.loc["lookup", "identical_prompts"] == 3  # speculation is lossless: measured, not assumed
    assert summary.loc["other", "identical_prompts"] < 3 and summary.loc["other", "prefix_share"] < 1
    assert summary.loc["lookup", "tokens_per_forward"] > 1  # it accepted drafts on the repetitive prompts
    with pytest.raises(ParameterError, match="first method must be the baseline"):
        alternatives.run_methods(methods[1:], prompts, ids, progress=False)


def test_a_method_whose_engine_crashes_is_left_out_with_a_note_and_the_others_run():
    methods = tiny_methods()
    calls = []

    def crash_on_second_call(prompt, max_new_tokens):
        calls.append(len(prompt))
        if len(calls) == 2:  # after the warm-up: its first measured run
            raise EngineCrashed("llama.cpp (model.gguf) died with SIGILL (illegal instruction) in libggml-cpu.so")
        return methods[0].run(prompt, max_new_tokens)

    methods.append(alternatives.Method(name="crashing", engine="llama.cpp", precision="Q4_1", speculation="",
                                       lossless=False, run=crash_on_second_call))
    prompts = pd.DataFrame({"id": ["a", "b"], "category": ["x", "y"]})
    records = alternatives.run_methods(methods, prompts, [[5, 6, 7, 5], [9, 8, 7, 6]], max_new_tokens=6,
                                       progress=False)
    assert "crashing" not in set(records["method"]) and len(records) == 6 and len(calls) == 2  # never called again
    assert alternatives.failures(methods) == ["crashing: left out, llama.cpp (model.gguf) died with SIGILL "
                                              "(illegal instruction) in libggml-cpu.so"]
    assert "crashing" not in set(alternatives.summarise_methods(records, methods)["method"])


def test_tax_split_fits_each_engine_and_prices_its_floor():
    model = tiny_model("llama")
    bw = Bandwidth(matvec_gbs=10.0, copy_gbs=10.0, threads=1, buffer_mib=1, matvec_samples=[10.0])
    grid, fits = tax_split.tax_split([tax_split.Engine("tiny", model, 2_000_000)], bw, (1, 2, 4), 16, 2)
    assert set(grid["n_tokens"]) == {1, 2, 4} and len(fits) == 1
    row = fits.iloc[0]
    assert row.floor_tok_s == pytest.approx(5000.0) and row.floor_ms == pytest.approx(0.2)  # 2 MB at 10 GB/s
    t = grid.set_index("n_tokens")["median_ms"]
    assert row.t2_over_t1 == pytest.approx(t[2] / t[1])


def test_tax_split_leaves_out_an_engine_that_crashes_and_times_the_rest():
    class Crashing:  # an isolated engine whose child died: its probe raises, it remembers why
        crash = "llama.cpp (model.gguf) died with SIGILL (illegal instruction)"

        def probe(self, n_tokens, context_len):
            probe = type("Probe", (), {"n_tokens": n_tokens, "batch_size": 1, "context_len": context_len})()
            probe.time_ms = lambda: (_ for _ in ()).throw(EngineCrashed(self.crash))
            return probe

    bw = Bandwidth(matvec_gbs=10.0, copy_gbs=10.0, threads=1, buffer_mib=1, matvec_samples=[10.0])
    engines = [tax_split.Engine("tiny", tiny_model("llama"), 2_000_000), tax_split.Engine("llama.cpp · Q4_1",
                                                                                        Crashing(), 1)]
    notes = []
    grid, fits = tax_split.tax_split(engines, bw, (1, 2), 16, 2, notes=notes)
    assert list(fits["engine"]) == ["tiny"] and set(grid["model"]) == {"tiny"}
    assert notes == ["tax split, llama.cpp · Q4_1: left out, llama.cpp (model.gguf) died with SIGILL "
                     "(illegal instruction)"]
