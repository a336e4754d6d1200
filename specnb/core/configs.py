"""A transformers config for a model name, with no network whenever possible.

``resolve_config`` tries, in order: a local folder or config.json, the configs shipped in
``specnb/data/configs/`` (Qwen2.5 0.5B–7B, SmolLM2-135M), the committed drafts in
``specnb/data/drafts/``, the Hugging Face cache, and only then the hub, after a quick reachability
check (``specnb.core.hub``) so an offline machine gets a one-line error instead of a hang.
"""

from __future__ import annotations

import json
from pathlib import Path

from specnb.core import hub, paths
from specnb.core.errors import ConfigError, ModelNotFoundError

ALIASES = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def shipped_models() -> list[str]:
    """Hub ids whose config.json ships inside the package (usable with no network)."""
    return sorted(p.stem.replace("--", "/", 1) for p in paths.CONFIGS_DIR.glob("*.json"))


def load_config_json(path: Path):
    """A transformers config from one config.json file (ConfigError if it is not one)."""
    from transformers import AutoConfig

    try:
        data = json.loads(Path(path).read_text())
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    except KeyError:
        raise ConfigError(f"{path} has no 'model_type'; it must be a transformers config.json") from None
    except Exception as err:  # noqa: BLE001  (json, OS and transformers' own validation errors)
        reason = " ".join(str(err).split())[:200]
        raise ConfigError(f"{path} is not a usable transformers config.json ({reason}); check the file") from None


def _shipped_file(name: str) -> Path | None:
    name = ALIASES.get(name.lower(), name)
    wanted = name.lower()
    for path in paths.CONFIGS_DIR.glob("*.json"):
        hub_id = path.stem.replace("--", "/", 1).lower()
        if wanted in (hub_id, hub_id.split("/", 1)[-1]):
            return path
    return None


def _from_hub(name: str):
    """(config, None) from the HF cache or the hub, or (None, reason) — never a long network hang."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name, local_files_only=True), None
    except Exception:  # noqa: BLE001  (any hub/cache failure means "not cached")
        pass
    if hub.hub_offline():
        return None, "not in the Hugging Face cache and HF_HUB_OFFLINE is set"
    if not hub.hub_reachable():
        return None, "not in the Hugging Face cache and the hub is unreachable (offline?)"
    try:
        return AutoConfig.from_pretrained(name), None
    except Exception as err:  # noqa: BLE001
        if hub.gated_note(name, err):
            raise ModelNotFoundError(hub.gated_note(name, err)) from None
        return None, f"the hub could not provide it ({str(err).splitlines()[0][:160]})"


def resolve_config(name_or_path):
    """A transformers config for a local folder/config.json, a shipped or embedded name, or a hub id."""
    if hasattr(name_or_path, "to_dict") and hasattr(name_or_path, "model_type"):
        return name_or_path
    name = str(name_or_path).strip()
    if not name:
        raise ModelNotFoundError("empty model name; pass a Hugging Face id or a folder with config.json")
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return load_config_json(path / "config.json")
        raise ModelNotFoundError(f"folder {path} has no config.json; point at the model folder itself")
    if path.is_file():
        return load_config_json(path)
    shipped = _shipped_file(name)
    if shipped:
        return load_config_json(shipped)
    if (paths.DRAFTS_DIR / name / "config.json").is_file():
        return load_config_json(paths.DRAFTS_DIR / name / "config.json")
    if name.startswith("exit:"):
        raise ModelNotFoundError(f"{name!r} is an early-exit draft; those are resolved by specnb.models from a "
                                 "verifier")
    config, reason = _from_hub(name)
    if config is not None:
        return config
    raise ModelNotFoundError(
        f"model {name!r} not found: not a local folder, not a shipped config ({', '.join(shipped_models())}), "
        f"not an embedded draft, and {reason}; pass a local folder with config.json, or go online"
    )
