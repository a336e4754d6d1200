"""``gamma="auto"``: the predictor's best γ for the batch size at hand, on this machine.

``AutoGamma(profile=..., draft=...)`` is the choice the engine asks (``specnb.decode.gamma.GammaChoice``):
``choose(batch_size)`` predicts γ = 1..8 for that batch size with the run's confidence threshold
(``specnb.predict.predictor.predict``) and returns the best γ and why. The engine never imports the
predictor: it takes any object with ``choose``, and this layer builds it; a run records the γ chosen
and the reason (``GenerationResult.gamma_reason``, the ``gamma_reason`` column of run records).

Where the profile comes from (``auto_gamma``): the one passed in, else the one cached for this
machine (``$SPECNB_CACHE/profiles``, keyed by verifier and a digest of ``describe_machine``), else a
short calibration now (``ensure_calibrated``), cached for the next time. A cached profile whose
models were priced on other kernel paths than the loaded ones run (``kernels``: ``Pair.kernels``;
``costs.path_mismatches``), or one of an older format, is measured afresh: the predictor must price
what ``generate`` runs. A user who asks for this
machine's best γ wants this machine's numbers, and calibrating is a one-time cost per machine,
verifier and draft: 197 s for smollm2-135m with smollm2-eagle (3 prompts, 48 tokens, one torch
thread on a Xeon shared with other jobs), about 1.5 s per batch size for the prediction after it.
``ProfileSource(calibrate=False)`` takes ``FALLBACK_GAMMA`` instead of measuring and says so in the reason.

The best γ is the argmax of the predicted speedup even when its band does not clear 1.0x (when
``predict`` would not recommend speculating): the caller asked to speculate, so the reason says
that it may not pay here rather than silently refusing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from specnb.core.devices import describe_machine, resolve_device
from specnb.core.errors import ParameterError
from specnb.core.intervals import interval_text
from specnb.models.cache import cache_dir
from specnb.predict.calibrate import SHORT_CALIBRATION, ensure_calibrated
from specnb.predict.costs import HardwareProfile, load_profile, path_mismatches, save_profile
from specnb.predict.predictor import Bootstrap, Prediction, Workload, predict

FALLBACK_GAMMA = 4  # without a profile: the engine's default γ
GAMMAS = tuple(range(1, 9))  # the γ ``choose`` picks among


@dataclass(kw_only=True)
class AutoGamma:
    """The predictor's γ per batch size for one draft (a ``GammaChoice``); ``profile=None`` falls back
    to ``FALLBACK_GAMMA``."""

    profile: HardwareProfile | None
    draft: str
    confidence: float = 0.0
    max_new_tokens: int | None = None
    chosen: dict[int, tuple[int, str]] = field(default_factory=dict, repr=False)

    def choose(self, batch_size: int) -> tuple[int, str]:
        if batch_size not in self.chosen:
            self.chosen[batch_size] = self.pick(batch_size)
        return self.chosen[batch_size]

    def pick(self, batch_size: int) -> tuple[int, str]:
        if self.profile is None:
            return FALLBACK_GAMMA, (f"auto: no profile of this machine covers {self.draft}; γ={FALLBACK_GAMMA}, the "
                                    "default (calibrate with `specnb calibrate` to choose by prediction)")
        workload = Workload(batch_size=batch_size, max_new_tokens=self.max_new_tokens, confidence=self.confidence)
        prediction = predict(self.profile, self.draft, GAMMAS, workload, bootstrap=Bootstrap(n_boot=100))
        return prediction.best_gamma, reason(prediction, self.profile)


def reason(prediction: Prediction, profile: HardwareProfile) -> str:
    """Why ``prediction.best_gamma``: its predicted speedup and band at this batch size, on which profile."""
    p = prediction
    stop = f", chains stopping below confidence {p.confidence:g}" if p.confidence else ""
    text = (f"auto: γ={p.best_gamma} predicts {p.predicted_speedup:.2f}x "
            f"(band {interval_text(p.speedup_lo, p.speedup_hi)}) "
            f"at batch {p.batch_size}{stop}, best of γ={GAMMAS[0]}..{GAMMAS[-1]} on {profile.device} "
            f"(profile of {profile.created_utc})")
    if p.recommended_gamma is None:
        text += "; its band does not clear 1.0x, so speculating may not pay here"
    return text


# ---------------------------------------------------------------------------- this machine's profile


def profile_path(verifier: str, device) -> Path:
    """Where this machine's profile of ``verifier`` on ``device`` is cached."""
    machine = json.dumps(describe_machine(resolve_device(str(device))), sort_keys=True)
    digest = hashlib.sha256(machine.encode()).hexdigest()[:12]
    return cache_dir() / "profiles" / f"{verifier.replace('/', '--')}-{digest}.json"


def cached_profile(verifier: str, device="auto", kernels: dict | None = None) -> HardwareProfile | None:
    """This machine's cached profile, or None: none cached, unreadable or of an older format (it is
    then calibrated afresh), or priced on other kernel paths than ``kernels`` (``Pair.kernels``) run."""
    path = profile_path(verifier, device)
    try:
        profile = load_profile(path) if path.exists() else None
    except ParameterError:
        return None
    if profile is not None and kernels and path_mismatches(profile, kernels):
        return None
    return profile


@dataclass(frozen=True, kw_only=True)
class ProfileSource:
    """Where ``auto_gamma`` finds a profile: this machine's cached one for ``device`` if it priced the
    kernel paths the loaded models run (``kernels``: ``Pair.kernels``; None: any), else one calibrated
    now and cached (``calibrate=False``: the fallback γ instead), showing its progress or not."""

    device: object = "auto"
    kernels: dict | None = None
    calibrate: bool = True
    progress: bool = True


def auto_gamma(verifier: str, draft: str, *, profile: HardwareProfile | None = None, confidence: float = 0.0,
               max_new_tokens: int | None = None, source: ProfileSource = ProfileSource()) -> AutoGamma:
    """``gamma="auto"`` for ``draft`` with ``verifier`` (their names, as ``load_pair`` takes them): pass
    the result as ``generate(..., gamma=...)``. The profile: ``profile``, else the one ``source`` finds."""
    profile = profile or cached_profile(verifier, source.device, source.kernels)
    covered = profile is not None and draft in profile.drafts and draft in profile.traces
    if not covered and source.calibrate:
        settings = replace(SHORT_CALIBRATION, device=source.device, progress=source.progress)
        profile = ensure_calibrated(verifier, draft, profile, settings=settings)
        save_profile(profile, profile_path(verifier, profile.device))
    elif not covered:
        profile = None
    return AutoGamma(profile=profile, draft=draft, confidence=confidence, max_new_tokens=max_new_tokens)


def chooser(verifier: str, **settings):
    """A function (draft name, confidence) -> ``AutoGamma``, for ``make_candidates(..., auto=...)``; the
    ``settings`` go to ``auto_gamma``."""
    return lambda draft, confidence=0.0: auto_gamma(verifier, draft, confidence=confidence, **settings)
