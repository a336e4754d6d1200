"""Acceptance traces: what a draft would get right at every point of the verifier's own output.

``AcceptanceTrace`` says, for every token the verifier generates, how many of the following tokens
the draft would propose and have accepted if a step started there. Under greedy decoding
speculative output equals the verifier's own output, so a step that starts after token j proposes
the draft's greedy continuation of the verifier's text, and its position i is accepted exactly when
it matches the verifier's token j + i. One verifier-only generation plus the draft's ``trace``
(its kind's, ``specnb.decode.kinds``: a teacher-forced forward for a model draft, the lookups for
prompt lookup) give the whole trace, and ``replay`` turns it into the exact steps speculative decoding
takes at *any* γ and batch size (the same steps ``specnb.decode.generate`` takes, token for token;
tested).

Why the predictor replays traces instead of sampling from a per-position profile
(``specnb.measure.acceptance``): a profile measured at one γ does not transfer to another. At γ = 8
position 1 is reached mostly right after a rejection, that is inside text the draft finds hard; at
γ = 1 every other token is a position 1. Agreement comes in spans (boilerplate, copied text), so the
γ = 8 profile understates acceptance at γ = 1, and a prompt lookup that finds no match proposes
nothing and is verified with a 1-token forward, which a "k drafts every step" profile cannot
express. Traces keep both.

Confidence stopping (``specnb.decode.confidence``): a trace also records the draft's top probability
along the chain each step would draft, so ``pack`` turns any threshold into the depth where each
chain stops, and ``replay`` stops there as the engine does (and stops drafting once every row of a
batch has stopped).

Sampling (temperature > 0) is not covered: acceptance is then random, and traces assume greedy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.core.errors import ParameterError
from specnb.core.sequences import eos_ids, run_lengths
from specnb.decode.generate import generate
from specnb.decode.inputs import encode_prompts
from specnb.decode.settings import Decoding
from specnb.measure.acceptance import AcceptanceProfile, pooled_profile
from specnb.models.features import capture_hidden
from specnb.predict.drafts import draft_traits

LOOKUP_CAP = 16  # longest prompt-lookup proposal a trace records (γ beyond this is extrapolated)


# ---------------------------------------------------------------------------- traces


@dataclass(kw_only=True)
class AcceptanceTrace:
    """One prompt's generation seen from the draft. Index j = tokens already generated (j >= 1:
    the prefill emits token 0); a step starting there would have the draft propose ``proposed[j]``
    tokens (capped by γ) of which the first ``runs[j]`` are accepted. A model draft proposes as
    many tokens as it is asked for: ``proposed`` and ``cap`` are None. ``confidence[j]``: the draft's
    top probability at each position of that step's chain (up to the trace's cap; None: a draft
    without probabilities, which a threshold never stops)."""

    prompt_id: str
    runs: list[int]  # [L]
    proposed: list[int] | None  # [L]; None: always as many as asked (a model draft)
    cap: int | None  # proposals were looked up to this many tokens (None: unlimited)
    hit_budget: bool  # the verifier stopped at max_new_tokens, not at EOS (so it could go on)
    confidence: list[list[float]] | None = None  # [L][<= cap]

    def stops(self, threshold: float, never: int) -> list[int]:
        """Per start j: the tokens its chain drafts before a confidence ``threshold`` stops it (the
        position below the threshold included), ``never`` where it does not stop within the trace."""
        if threshold <= 0 or self.confidence is None:
            return [never] * self.length
        return [next((r + 1 for r, p in enumerate(chain) if p < threshold), never) for chain in self.confidence]

    @property
    def length(self) -> int:
        return len(self.runs)


def measure_traces(pair, drafts: dict, prompts: pd.DataFrame, max_new_tokens: int, cap: int = LOOKUP_CAP,
                   progress: bool = True) -> dict[str, list[AcceptanceTrace]]:
    """Traces of every draft on every prompt: one greedy verifier-only generation per prompt, then
    each draft's ``trace`` over its output."""
    from tqdm.auto import tqdm

    eos = eos_ids(pair.tokenizer.eos_token_id)
    traits = {name: draft_traits(draft, pair.vocab_size) for name, draft in drafts.items()}
    layer_sets = {t.feature_layers for t in traits.values() if t.needs_features}  # one forward per kind of feature
    traces: dict[str, list[AcceptanceTrace]] = {name: [] for name in drafts}
    for _, row in tqdm(list(prompts.iterrows()), desc="acceptance traces", unit="prompt", disable=not progress):
        ids, _ = encode_prompts(pair.tokenizer, [row["prompt"]])
        result = generate(pair.verifier, ids.to(pair.device),
                          decoding=Decoding(max_new_tokens=max_new_tokens, eos_token_id=pair.tokenizer.eos_token_id,
                                            vocab_size=pair.vocab_size))
        context, generated = ids[0].tolist(), result.tokens[0]
        budget = len(generated) >= max_new_tokens and generated[-1] not in eos
        feats = {layers: verifier_features(pair.verifier, context + generated[:-1], layers) for layers in layer_sets}
        for name, draft in traits.items():
            runs, proposed, confidence = draft.trace(context, generated, cap, feats.get(draft.feature_layers))
            traces[name].append(AcceptanceTrace(prompt_id=str(row["id"]), runs=runs, proposed=proposed,
                                                cap=None if proposed is None else cap, hit_budget=budget,
                                                confidence=rounded(confidence)))
    return traces


def rounded(confidence: list[list[float]] | None) -> list[list[float]] | None:
    """Confidences to 4 decimals (a profile stores them as JSON; a threshold is never finer)."""
    return None if confidence is None else [[round(p, 4) for p in chain] for chain in confidence]


def verifier_features(verifier, tokens: list[int], layers: tuple[int, ...] = ()):
    """The verifier's final hidden states [T, d] over ``tokens`` (with ``layers``: those layers' outputs
    [T, k*d]), teacher forced (what a feature draft reads; equal to the cached loop's but for float
    rounding)."""
    import torch

    ids = torch.tensor([tokens], device=next(verifier.parameters()).device)
    with torch.inference_mode(), capture_hidden(verifier, layers) as captured:
        verifier(input_ids=ids, logits_to_keep=1)
    return captured["features"][0]


# ---------------------------------------------------------------------------- replay


@dataclass(kw_only=True)
class PackedTraces:
    """Traces as padded arrays, fitted to one generation budget."""

    runs: np.ndarray  # [P, W]
    proposed: np.ndarray  # [P, W]
    lengths: np.ndarray  # [P] tokens each prompt generates within the budget
    extended: bool  # some trace was shorter than the budget without EOS and was repeated
    stops: np.ndarray | None = None  # [P, W] tokens a chain drafts before the confidence threshold stops it


def pack(traces: list[AcceptanceTrace], n_new: int, confidence: float = 0.0) -> PackedTraces:
    """Truncate each trace to ``n_new`` tokens; a trace that stopped at the budget (not EOS) and is
    shorter than ``n_new`` is continued by repeating its steps after the first token (flagged).
    ``confidence``: the threshold whose stops the replay takes (0: chains never stop early)."""
    if not traces:
        raise ParameterError("no acceptance traces to replay; calibrate the draft on at least one prompt")
    if not 0.0 <= confidence <= 1.0:
        raise ParameterError(f"confidence must be between 0 and 1, got {confidence}")
    runs, proposed, lengths, extended, stops = [], [], [], False, []
    for t in traces:
        index = np.arange(n_new)
        if t.length < n_new and t.hit_budget and t.length > 1:
            index = np.where(index < t.length, index, 1 + (index - 1) % (t.length - 1))
            length, extended = n_new, True
        else:
            index, length = index[:min(t.length, n_new)], min(t.length, n_new)
        runs.append(np.asarray(t.runs)[index])
        proposed.append(np.asarray(t.proposed)[index] if t.proposed is not None else np.full(len(index), n_new))
        stops.append(np.asarray(t.stops(confidence, n_new), dtype=int)[index])
        lengths.append(length)
    width = n_new + 1
    return PackedTraces(runs=np.stack([np.pad(r, (0, width - len(r))) for r in runs]),
                        proposed=np.stack([np.pad(p, (0, width - len(p))) for p in proposed]),
                        lengths=np.asarray(lengths), extended=extended,
                        stops=np.stack([np.pad(s, (0, width - len(s)), constant_values=n_new) for s in stops]))


def flat_traces(alpha: float, n_new: int, n_traces: int = 64, seed: int = 0) -> list[AcceptanceTrace]:
    """Synthetic traces of a draft whose every token is accepted independently with probability α
    (Leviathan et al.'s assumption), for what-if questions and hand-entered profiles."""
    uniforms = np.random.default_rng(seed).random((n_traces, n_new))
    return [AcceptanceTrace(prompt_id="flat", runs=r.tolist(), proposed=None, cap=None, hit_budget=True)
            for r in run_lengths(uniforms < alpha, n_new)]


def flat_packed(alphas, n_new: int, n_traces: int = 32, seed: int = 0) -> PackedTraces:
    """Flat-α traces for every α in ``alphas`` with common random numbers (block a holds α_a's
    ``n_traces`` traces, all thresholding the same uniforms), so a replay is monotone in α."""
    uniforms = np.random.default_rng(seed).random((n_traces, n_new))
    matches = np.concatenate([uniforms < a for a in alphas])  # [A·T, n_new]
    runs = np.pad(run_lengths(matches, n_new), ((0, 0), (0, 1)))
    return PackedTraces(runs=runs, proposed=np.full_like(runs, n_new), lengths=np.full(len(runs), n_new),
                        extended=False)


@dataclass(kw_only=True)
class Replay:
    """The steps of S simulated batches of B rows; arrays over steps T (``live`` False once a batch is done)."""

    k: np.ndarray  # [T, S] chain positions drafted (γ, shrunk near the budget, cut once every row stopped)
    verify_tokens: np.ndarray  # [T, S] tokens per row in the verification forward
    draft_width: np.ndarray  # [T, S] tokens in the draft's first (catch-up) forward (``catch_up``: see ``replay``)
    live: np.ndarray  # [T, S]
    active: np.ndarray  # [T, S, B] rows still generating
    accepted: np.ndarray  # [T, S, B] accepted draft tokens per row (0 for finished rows)
    drafted: np.ndarray  # [T, S, B]
    lengths: np.ndarray  # [S] the longest row: verifier-only takes lengths − 1 forwards after prefill

    @property
    def steps(self) -> np.ndarray:
        return self.live.sum(0)


def replay(packed: PackedTraces, rows: np.ndarray, gamma: int, n_new: int, catch_up: str = "tokens") -> Replay:
    """Speculative decoding of batches ``rows`` [S, B] (indices into the traces), step by step as
    ``specnb.decode.generate.decode_speculative`` does it: k = min(γ, max remaining budget − 1) drafts,
    fewer when every row's chain stops earlier (confidence, ``pack``); row i drafts min(proposed, k,
    its stop), accepts min(run, drafted) and emits that + 1; the verifier checks the longest proposal
    + 1 tokens; a batch runs until every row has its tokens."""
    runs, proposed, lengths = packed.runs[rows], packed.proposed[rows], packed.lengths[rows]  # [S,B,W] [S,B,W] [S,B]
    stops = packed.stops[rows] if packed.stops is not None else np.full_like(proposed, n_new)  # [S, B, W]
    pos = np.ones_like(lengths)  # tokens emitted per row: the prefill's first
    width = np.ones(len(rows))
    out = {key: [] for key in ("k", "verify_tokens", "draft_width", "live", "active", "accepted", "drafted")}
    for _ in range(n_new):
        active = pos < lengths  # [S, B]
        live = active.any(1)  # [S]
        if not live.any():
            break
        k = np.clip(np.minimum(gamma, np.where(active, n_new - pos, 0).max(1) - 1), 0, None)  # [S]
        at = np.minimum(pos, runs.shape[2] - 1)[..., None]
        stop = np.take_along_axis(stops, at, 2)[..., 0]  # [S, B]
        k = np.minimum(k, np.where(active, stop, 0).max(1))  # the chain ends once every live row stopped
        drafted = np.where(active, np.minimum(np.take_along_axis(proposed, at, 2)[..., 0],
                                              np.minimum(k[:, None], stop)), 0)
        accepted = np.minimum(np.take_along_axis(runs, at, 2)[..., 0], drafted)  # [S, B]
        for key, value in (("k", k), ("verify_tokens", drafted.max(1) + 1), ("draft_width", width),
                           ("live", live), ("active", active), ("accepted", accepted), ("drafted", drafted)):
            out[key].append(value)
        pos = np.where(active, np.minimum(pos + accepted + 1, lengths), pos)
        if catch_up == "features":  # every position the step verified: the widest row's accepted + 1
            width = np.where(k > 0, np.where(active, accepted, -1).max(1) + 1.0, width + 1.0)
        else:
            width = np.where(((accepted == k[:, None]) & (k[:, None] > 0) & active).any(1), 2.0, 1.0)
    per_row = ("active", "accepted", "drafted")  # [T, S, B]; the others are [T, S]
    arrays = {key: np.stack(v) if v else np.zeros((0, *rows.shape[:2 if key in per_row else 1]),
                                                  dtype=bool if key in ("live", "active") else int)
              for key, v in out.items()}
    return Replay(**arrays, lengths=lengths.max(1))


def emitted_per_step(accepted_steps, length: int) -> list[int]:
    """Tokens each step of one row emits: accepted + 1, cut at the row's end (``length`` tokens,
    the prefill's included). The engine also counts drafts accepted past the end (EOS or budget),
    which emit nothing and which a trace cannot see, so steps are compared by what they emit."""
    out, pos = [], 1
    for n in accepted_steps:
        out.append(int(min(n + 1, length - pos)))
        pos += out[-1]
    return out


def profile_from_traces(traces: list[AcceptanceTrace], gamma: int, n_new: int) -> AcceptanceProfile:
    """The per-position profile a batch-1 run at ``gamma`` would report (replayed, per prompt)."""
    packed = pack(traces, n_new)
    got = replay(packed, np.arange(len(traces))[:, None], gamma, n_new)
    positions = np.arange(1, gamma + 1)[None, None, :]  # [1, 1, γ]
    acc, drafted = got.accepted[:, :, 0, None], got.drafted[:, :, 0, None]  # [T, P, 1]
    reached = ((drafted >= positions) & (acc >= positions - 1)).sum(0)  # [P, γ]
    accepted = (acc >= positions).sum(0)
    per_prompt = [{"prompt_id": t.prompt_id, "reached": r.tolist(), "accepted": a.tolist()}
                  for t, r, a in zip(traces, reached, accepted)]
    return pooled_profile(gamma, per_prompt)
