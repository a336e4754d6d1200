"""registry: draft names, the verifier a draft was made for, γ by default."""



from specnb.models import registry


def test_default_gamma_is_the_drafts_own_else_four():
    assert registry.default_gamma("smollm2-eagle") == 2
    assert registry.default_gamma("smollm2-medusa") == registry.default_gamma(None) == registry.DEFAULT_GAMMA == 4
    assert registry.default_gamma("smollm2-eagle", tree="dynamic") == 4  # a tree's depth is not the chain's γ


def test_git_keeps_every_embedded_drafts_weights():
    """Each embedded draft folder's weights (specnb's ``weights.safetensors``, the standard layout's
    ``model.safetensors``) are files git tracks, not ignored: a clone has what this checkout has."""
    import shutil
    import subprocess

    import pytest

    from specnb.core import paths

    if shutil.which("git") is None or not (paths.REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    folders = sorted(p for p in paths.DRAFTS_DIR.iterdir() if (p / "config.json").is_file())
    weights = [f"{p.name}/{f.name}" for p in folders for f in p.glob("*.safetensors")]
    assert {w.split("/")[0] for w in weights} == {p.name for p in folders}  # every folder has its weights here
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *weights], cwd=paths.DRAFTS_DIR,
                             capture_output=True, text=True).stdout.split()
    assert ignored == []
