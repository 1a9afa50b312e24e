"""The timed fixture endpoint scaled to zero: no container until a request comes."""

import floodway as fw
from tests.e2e import timed_app

app = fw.App("zero")
embed = app.endpoint(
    model=timed_app.app["embed"].model,
    build=timed_app.app["embed"].build,
    warm=fw.WarmPool(min_containers=0, max_containers=1, scaledown_window_s=60),
    route=fw.Route(timeout_s=20.0),
    cache=False,
)(timed_app.app["embed"].fn)
