"""Errors that specnb raises on bad input.

Every error says what was wrong and what to do about it. They subclass ValueError or
RuntimeError so callers that do not know specnb can still catch them; the CLI turns any
``SpecnbError`` into one line on stderr and exit code 2.
"""


class SpecnbError(Exception):
    """Base class: a problem the user can fix (bad input, missing model, missing device)."""


class ConfigError(SpecnbError, ValueError):
    """A model config is missing a field or has an impossible value."""


class ParameterError(SpecnbError, ValueError):
    """An argument is out of range (alpha outside [0, 1), gamma < 1, c < 0, ...)."""


class ModelNotFoundError(SpecnbError, ValueError):
    """A model id or folder could not be resolved (offline, typo, no config.json)."""


class DeviceError(SpecnbError, RuntimeError):
    """A device was requested that this machine does not have."""


class IncompatibleModelsError(SpecnbError, ValueError):
    """Draft and verifier cannot be paired (different vocabularies, tokenizers)."""


class ConversionError(SpecnbError, RuntimeError):
    """Another project's converter (llama.cpp's ``convert_hf_to_gguf.py``) is missing or failed."""


def last_line(text: str, empty: str = "no output") -> str:
    """The last non-empty line of another program's output or log, stripped: what a one-line error quotes
    (a converter's or a server's last word usually names the cause)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else empty
