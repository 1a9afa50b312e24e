"""A fixture app with no model, so nothing to build but a manifest (`build`): endpoint
`upper`, one container always; the item "boom" makes it raise. For the tests of `floodway
serve` itself (its signals, its connections, its log), which need a real server but not a
real model."""

from pathlib import Path

import floodway as fw

app = fw.App("plain")


@app.endpoint(warm=fw.WarmPool(min_containers=1, max_containers=1), cache=False)
def upper(model, texts: list[str]) -> list[str]:
    if "boom" in texts:
        raise ValueError("boom is no word")
    return [t.upper() for t in texts]


def build(root: Path) -> Path:
    """An artifact store at `root` holding a build of `upper`."""
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    build_endpoint(app["upper"], ArtifactStore(root))
    return root
