"""Decorator-time validation: every problem names endpoint, field, value and allowed range;
what a definition may say of its lanes (Route.lanes) and of recycling (fw.Recycle), and what
it is told when it is wrong."""

from __future__ import annotations

import pytest

import floodway as fw
from floodway.config import MAX_RSS_MIB, MIN_RSS_MIB, queue_shares
from floodway.errors import ConfigError

MODEL = fw.HFModel("org/model", revision="a" * 40)


def define(**kw):
    app = fw.App("t")
    kw.setdefault("model", MODEL)

    @app.endpoint(**kw)
    def embed(model, texts: list[str]) -> list[list[float]]:
        return [[0.0] for _ in texts]

    return app, embed


def problems(**kw) -> list[str]:
    with pytest.raises(fw.ConfigError) as info:
        define(**kw)
    return [p.describe(info.value.endpoint) for p in info.value.problems]


def test_valid_definition_records_endpoint_and_input_type():
    app, ep = define(warm=fw.WarmPool(min_containers=1, buffer_containers=1))
    assert app["embed"] is ep
    assert ep.input_type is str
    assert ep([None], ["a", "b"]) == [[0.0], [0.0]]
    assert ep.warm.min_containers == 1


def test_message_names_endpoint_field_value_and_range():
    assert problems(route=fw.Route(timeout_s=-1.0)) == [
        "endpoint 'embed': route.timeout_s = -1.0 is not allowed; allowed: a number in (0, 3600]"
    ]
    assert problems(warm=fw.WarmPool(scaledown_window_s=1)) == [
        "endpoint 'embed': warm.scaledown_window_s = 1 is not allowed; "
        "allowed: a number in [2, 3600]"
    ]
    assert problems(batching=fw.Batching(max_batch_rows=0)) == [
        "endpoint 'embed': batching.max_batch_rows = 0 is not allowed; "
        "allowed: an integer in [1, 1000]"
    ]


def test_several_problems_reported_at_once():
    with pytest.raises(fw.ConfigError) as info:
        define(route=fw.Route(timeout_s=0, max_queue=-1, spill=("cold", "nowhere")),
               warm=fw.WarmPool(min_containers=-2, buffer_containers=True),
               gpu="Z80")
    fields = [p.field for p in info.value.problems]
    assert fields == ["warm.min_containers", "warm.buffer_containers", "route.max_queue",
                      "route.timeout_s", "route.spill", "gpu"]
    text = str(info.value)
    assert text.startswith("6 problem(s) in the definition of endpoint 'embed':")
    assert "gpu = 'Z80'" in text and "one of T4, L4" in text


def test_spill_accepts_the_targets_in_any_order_once_each():
    for spill in [("async", "cold"), ("cold", "async"), ("async",), (), ["cold"]]:
        _, ep = define(route=fw.Route(spill=spill))
        assert ep.route.spill == tuple(spill)
    for bad in [("cold", "cold"), ("warm",), "cold"]:
        (msg,) = problems(route=fw.Route(spill=bad))
        assert "route.spill" in msg and "('cold', 'async')" in msg


def test_bool_is_not_an_int():
    (msg,) = problems(warm=fw.WarmPool(buffer_containers=True))
    assert "warm.buffer_containers = True" in msg


def test_model_revision_must_be_a_pinned_sha():
    (msg,) = problems(model=fw.HFModel("org/model", revision="main"))
    assert "model.revision = 'main'" in msg and "40-character" in msg


def test_local_model_path_must_exist(tmp_path):
    (msg,) = problems(model=fw.LocalModel(tmp_path / "nope"))
    assert "model.path" in msg and "existing folder" in msg


def test_wrong_config_type_is_named():
    (msg,) = problems(route={"timeout_s": 1})
    assert "route = {'timeout_s': 1}" in msg and "fw.Route(...)" in msg


def test_window_cron_timezone_and_cap():
    msgs = problems(warm=fw.WarmPool(max_containers=2, windows=[
        fw.Window(cron="61 * * * *", duration_s=60, min_containers=3, timezone="Mars/Base")]))
    joined = "\n".join(msgs)
    assert "warm.windows[0].cron = '61 * * * *'" in joined
    assert "warm.windows[0].timezone = 'Mars/Base'" in joined
    assert "warm.windows[0].min_containers = 3" in joined and "max_containers (2)" in joined


def test_worker_processes_skip_only_the_cron_and_timezone_checks(monkeypatch):
    # The pool sets VALIDATED_ENV for its workers: their router already checked the definition.
    from floodway.config import VALIDATED_ENV
    from floodway.runtime.pool import Pool

    monkeypatch.setenv(VALIDATED_ENV, "1")
    msgs = problems(warm=fw.WarmPool(max_containers=2, windows=[
        fw.Window(cron="61 * * * *", duration_s=60, min_containers=3, timezone="Mars/Base")]))
    joined = "\n".join(msgs)
    assert ".cron" not in joined and ".timezone" not in joined
    assert "warm.windows[0].min_containers = 3" in joined
    app, _ = define()
    assert Pool(app, "app.py", "store")._new("embed").env[VALIDATED_ENV] == "1"
    assert Pool(app, "app.py", "store").worker_env()[VALIDATED_ENV] == "1"


def test_min_above_max_containers():
    (msg,) = problems(warm=fw.WarmPool(min_containers=5, max_containers=2))
    assert "warm.min_containers = 5" in msg and "at most max_containers (2)" in msg


def test_batch_rows_bounded_by_built_graph():
    (msg,) = problems(build=fw.Build(max_batch_rows=8), batching=fw.Batching(max_batch_rows=16))
    assert "batching.max_batch_rows = 16" in msg and "build.max_batch_rows (8)" in msg


def test_tensorrt_needs_onnx():
    (msg,) = problems(build=fw.Build(onnx=False, tensorrt=True))
    assert "build.onnx = False" in msg


def test_function_shape_checked():
    app = fw.App("t")
    with pytest.raises(fw.ConfigError, match="exactly two parameters"):
        app.endpoint(model=MODEL)(lambda texts: texts)
    with pytest.raises(fw.ConfigError, match=r"function.texts = .*list\[T\]"):
        @app.endpoint(model=MODEL)
        def bad(model, texts: str) -> list:
            return []


def test_bad_name_and_duplicate():
    app = fw.App("t")
    with pytest.raises(fw.ConfigError, match="name = 'Bad Name'"):
        app.endpoint(model=MODEL, name="Bad Name")(lambda m, x: x)
    app.endpoint(model=MODEL, name="dup")(lambda m, x: x)
    with pytest.raises(fw.ConfigError, match="not already used"):
        app.endpoint(model=MODEL, name="dup")(lambda m, x: x)


def test_gpu_names_and_counts():
    assert define(gpu="H100:2")[1].gpu == "H100:2"
    assert define(gpu=None)[1].gpu is None
    (msg,) = problems(gpu="H100:9")
    assert "gpu = 'H100:9'" in msg


def test_configs_are_frozen():
    r = fw.Route()
    with pytest.raises(AttributeError):
        r.timeout_s = 3  # type: ignore[misc]
    assert fw.WarmPool(windows=[]).windows == ()


def test_unknown_endpoint_lookup_lists_known():
    app, _ = define()
    with pytest.raises(KeyError, match="has: embed"):
        app["nope"]


def test_public_surface_is_lazy_and_complete():
    import floodway

    assert set(floodway.__all__) - {"__version__"} == set(floodway._EXPORTS)
    for name in floodway.__all__:
        assert getattr(floodway, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        floodway.Nope  # noqa: B018


def test_route_tenant_rate_and_stuck_limits_are_checked():
    assert problems(route=fw.Route(tenant_rate_per_s=0, tenant_burst=0, stuck_after_s=-1)) == [
        "endpoint 'embed': route.tenant_rate_per_s = 0 is not allowed; "
        "allowed: a number in (0, 1e+06]",
        "endpoint 'embed': route.tenant_burst = 0 is not allowed; "
        "allowed: an integer in [1, 1000000]",
        "endpoint 'embed': route.stuck_after_s = -1 is not allowed; "
        "allowed: a number in (0, 86400]",
    ]
    assert define(route=fw.Route(tenant_rate_per_s=2.5, tenant_burst=5))[1].route.tenant_burst == 5


def test_model_task_is_checked_and_defaults_to_feature_extraction(tmp_path):
    assert MODEL.task == "feature-extraction"
    _, ep = define(model=fw.HFModel("org/model", revision="a" * 40, task="text-classification"))
    assert ep.model.task == "text-classification"
    (msg,) = problems(model=fw.LocalModel(tmp_path, task="summarization"))
    assert "model.task = 'summarization'" in msg and "token-classification" in msg
    assert fw.HFModel("org/model", revision="a" * 40, task="text-generation").problems("m") == []
    (msg,) = problems(model=fw.HFModel("org/model", revision="a" * 40, task="torch-module"))
    assert "fw.TorchModel" in msg


def test_an_endpoint_without_a_model_source_or_with_a_load_hook():
    app = fw.App("t")

    @app.endpoint()
    def plain(model, texts: list[str]) -> list[str]:
        return texts

    assert plain.model is None and plain.load is None and plain.own_runtime

    def load(artifacts):
        return {"ready": True}

    @app.endpoint(model=MODEL, load=load, batching=fw.Batching(max_batch_rows=128))
    def custom(state, texts: list[str]) -> list[str]:
        return texts

    # no graph is built for it, so Build.max_batch_rows does not bound its batches
    assert custom.load is load and custom.own_runtime and not define()[1].own_runtime


def test_load_hook_and_tensorrt_are_checked_for_own_runtime_endpoints():
    (msg,) = problems(load="not a function")
    assert "load = 'not a function'" in msg and "load(artifacts)" in msg
    (msg,) = problems(load=lambda artifacts, device: None)
    assert "endpoint 'embed': load = <function" in msg and "one positional parameter" in msg
    (msg,) = problems(model=None, build=fw.Build(tensorrt=True))
    assert "build.tensorrt = True" in msg and "no model source" in msg
    (msg,) = problems(load=lambda a: a, build=fw.Build(tensorrt=True))
    assert "a load= hook" in msg
    (msg,) = problems(model="org/model")
    assert "None, fw.HFModel(...), fw.LocalModel(...) or fw.TorchModel(...)" in msg
    assert define(load=lambda *args: None)[1].load is not None


def test_torch_model_source_is_checked(tmp_path):
    from floodway.config import TensorSpec, TorchModel

    image = TensorSpec("image", "float32", (None, 3, 224, 224))
    assert image.axes == ("batch", 3, 224, 224)
    assert TensorSpec("ids", "int64", ["batch", "seq"]).axes == ("batch", "seq")
    assert TensorSpec("x", shape=(None, None)).axes == ("batch", "x_1")
    ok = TorchModel("pkg.mod:make", inputs=[image], outputs=["logits"])
    assert define(model=ok)[1].model.task == "torch-module" and ok.weights_kind == "none"
    assert TorchModel("m:f", weights="org/w", revision="b" * 40).weights_kind == "hf"
    msgs = problems(model=TorchModel("pkg.mod.make", weights=tmp_path / "none.safetensors",
                                     inputs=[TensorSpec("a", "uint8", (4, 3)), image, image],
                                     outputs=[]))
    joined = "\n".join(msgs)
    assert "model.factory = 'pkg.mod.make'" in joined and "'package.module:function'" in joined
    assert "model.weights = " in joined and "revision=<40-hex commit sha>" in joined
    assert "model.inputs[0].dtype = 'uint8'" in joined
    assert "model.inputs[0].shape[0] = 4" in joined and "axis 0 holds one row" in joined
    assert "model.inputs = ['image']" in joined and "distinct names" in joined
    assert "model.outputs = ()" in joined
    (msg,) = problems(model=TorchModel("m:f", weights="org/w", revision="main", inputs=[image]))
    assert "model.revision = 'main'" in msg
    (msg,) = problems(model=TorchModel("m:f", weights=tmp_path, revision="a" * 40,
                                       inputs=[image]))
    assert "model.revision" in msg and "None unless weights name a Hub repo" in msg
    (msg,) = problems(model=TorchModel("m:f"))
    assert "model.inputs = ()" in msg and "fw.TensorSpec" in msg


def test_local_paths_are_not_checked_inside_a_modal_container(tmp_path, monkeypatch):
    """A Modal container imports the deploy file again but serves from the artifact Volume:
    the folder and weight files named at build time are not there, and must not stop it."""
    missing = tmp_path / "only-on-the-building-machine"
    with pytest.raises(fw.ConfigError, match="a path to an existing folder"):
        fw.App("here").endpoint(model=fw.LocalModel(missing), name="e")(lambda m, x: x)
    monkeypatch.setenv("MODAL_IS_REMOTE", "1")
    ep = fw.App("there").endpoint(model=fw.LocalModel(missing), name="e")(lambda m, x: x)
    assert ep.model.path == missing
    spec = fw.TensorSpec("x", "float32", (None, 4))
    fw.App("torch-there").endpoint(
        model=fw.TorchModel("pkg.mod:make", weights=str(missing / "w.safetensors"),
                            inputs=[spec]), name="t")(lambda m, x: x)


# ---------------------------------------------------------------- Build.precision

def test_build_precision_accepts_int8_on_cpu_and_fp16_on_gpu():
    _, ep = define(build=fw.Build(precision=["fp32", "int8"]))
    assert ep.build.precision == ("fp32", "int8")
    _, ep = define(build=fw.Build(precision=("fp32", "fp16", "int8")), gpu="L4")
    assert ep.build.precision == ("fp32", "fp16", "int8")
    assert fw.Build(precision="int8").precision == ("int8",)


def test_build_precision_values_and_tolerances_are_checked():
    (msg,) = problems(build=fw.Build(precision=("fp32", "fp8")))
    assert "build.precision = ('fp32', 'fp8')" in msg and "'int8'" in msg
    (msg,) = problems(build=fw.Build(precision=("int8", "int8")))
    assert "distinct" in msg
    msgs = problems(build=fw.Build(precision=("int8",), precision_min_cosine=1.5,
                                   precision_max_rel_err=0))
    assert any("build.precision_min_cosine = 1.5" in m and "(0, 1]" in m for m in msgs)
    assert any("build.precision_max_rel_err = 0" in m for m in msgs)


def test_build_precision_where_it_cannot_apply():
    (msg,) = problems(build=fw.Build(precision=("fp32", "fp16")))
    assert "no 'fp16' on a CPU endpoint (gpu=None)" in msg and "'int8'" in msg
    (msg,) = problems(build=fw.Build(precision=("fp32", "bf16")), gpu="L4")
    assert "tensorrt=True" in msg
    (msg,) = problems(build=fw.Build(precision=("fp16", "bf16"), tensorrt=True), gpu="L4")
    assert "'fp16' or 'bf16', not both" in msg
    (msg,) = problems(build=fw.Build(onnx=False, precision=("int8",)))
    assert "onnx=False" in msg
    (msg,) = problems(model=None, build=fw.Build(precision=("int8",)))
    assert "its own runtime" in msg
    torch_model = fw.TorchModel("pkg.mod:make", inputs=[fw.TensorSpec("x", "float32",
                                                                      (None, 4))])
    (msg,) = problems(model=torch_model, build=fw.Build(precision=("int8",)))
    assert "task 'torch-module'" in msg and "feature-extraction" in msg


def lane_fields(route: fw.Route) -> set[str]:
    return {p.field for p in route.problems("route")}


def test_two_lanes_with_a_bounded_first_and_an_open_last_are_fine():
    route = fw.Route(lanes=[fw.Lane("short", max_tokens=64), fw.Lane("long")])
    assert route.problems("route") == [] and isinstance(route.lanes, tuple)


@pytest.mark.parametrize(("lanes", "field"), [
    ((fw.Lane("only"),), "route.lanes"),
    ((fw.Lane("a"), fw.Lane("b")), "route.lanes[0]"),
    ((fw.Lane("a", max_rows=2), fw.Lane("b", max_tokens=9)), "route.lanes[1]"),
    ((fw.Lane("a", max_rows=2), fw.Lane("a")), "route.lanes"),
    ((fw.Lane("Short", max_rows=2), fw.Lane("b")), "route.lanes[0].name"),
    ((fw.Lane("a:b", max_rows=2), fw.Lane("b")), "route.lanes[0].name"),
    ((fw.Lane("a", max_tokens=0), fw.Lane("b")), "route.lanes[0].max_tokens"),
    ((fw.Lane("a", max_rows=1, queue_share=0.8), fw.Lane("b", queue_share=0.5)),
     "route.lanes.queue_share"),
    ((fw.Lane("a", max_rows=1, queue_share=0), fw.Lane("b")), "route.lanes[0].queue_share"),
    ((fw.Lane("a", max_rows=1, min_containers=3, max_containers=2), fw.Lane("b")),
     "route.lanes[0].min_containers"),
    (("short", "long"), "route.lanes"),
    ((fw.Lane("a", max_tokens=500), fw.Lane("b", max_tokens=64), fw.Lane("c")),
     "route.lanes[1]"),
    ((fw.Lane("a", max_tokens=64), fw.Lane("b", max_tokens=64, max_rows=2), fw.Lane("c")),
     "route.lanes[1]"),
])
def test_each_lane_mistake_names_its_field(lanes, field):
    assert field in lane_fields(fw.Route(lanes=lanes))


def test_the_decorator_names_the_endpoint_field_and_allowed_values():
    app = fw.App("t")
    with pytest.raises(ConfigError) as e:
        app.endpoint(route=fw.Route(lanes=(fw.Lane("a"), fw.Lane("b"))))(
            lambda model, texts: texts)
    text = str(e.value)
    assert "route.lanes[0]" in text and "max_tokens or max_rows" in text


def test_a_streaming_endpoint_takes_no_lanes_and_a_lane_floor_must_fit_its_ceiling():
    app = fw.App("t")
    lanes = (fw.Lane("short", max_tokens=8), fw.Lane("long"))

    async def gen(model, text: str):
        yield text

    with pytest.raises(ConfigError, match="route.lanes"):
        app.endpoint(route=fw.Route(lanes=lanes))(gen)
    with pytest.raises(ConfigError, match=r"route.lanes\[1\].min_containers"):
        app.endpoint(warm=fw.WarmPool(max_containers=1), route=fw.Route(
            lanes=(lanes[0], fw.Lane("long", min_containers=2))))(lambda model, t: t)


def test_queue_shares_split_what_the_set_ones_leave():
    lanes = (fw.Lane("a", max_rows=1, queue_share=0.5), fw.Lane("b", max_rows=9), fw.Lane("c"))
    assert queue_shares(lanes) == (0.5, 0.25, 0.25)
    assert queue_shares((fw.Lane("a", max_rows=1), fw.Lane("b"))) == (0.5, 0.5)


def test_tighter_lanes_first_is_fine():
    lanes = (fw.Lane("tiny", max_tokens=16, max_rows=1), fw.Lane("short", max_tokens=64),
             fw.Lane("rows", max_rows=4), fw.Lane("rest"))
    assert fw.Route(lanes=lanes).problems("route") == []


def recycle_fields(r: fw.Recycle) -> set[str]:
    return {p.field for p in r.problems("recycle")}


def test_either_limit_or_both_are_fine_and_the_config_is_frozen():
    for r in (fw.Recycle(max_rss_mib=2048), fw.Recycle(max_requests=1000),
              fw.Recycle(max_rss_mib=MIN_RSS_MIB, max_requests=1)):
        assert r.problems("recycle") == []
    r = fw.Recycle(max_rss_mib=512.5)
    with pytest.raises(AttributeError):
        r.max_rss_mib = 1.0  # type: ignore[misc]
    assert fw.Recycle is fw.config.Recycle


@pytest.mark.parametrize(("recycle", "field"), [
    (fw.Recycle(), "recycle"),
    (fw.Recycle(max_rss_mib=MIN_RSS_MIB - 1), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib=MAX_RSS_MIB * 2), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib=float("nan")), "recycle.max_rss_mib"),
    (fw.Recycle(max_rss_mib="1G"), "recycle.max_rss_mib"),  # type: ignore[arg-type]
    (fw.Recycle(max_requests=0), "recycle.max_requests"),
    (fw.Recycle(max_requests=2.5), "recycle.max_requests"),  # type: ignore[arg-type]
    (fw.Recycle(max_requests=True), "recycle.max_requests"),  # type: ignore[arg-type]
])
def test_each_recycle_mistake_names_its_field(recycle, field):
    assert recycle_fields(recycle) == {field}


def test_the_decorator_keeps_it_and_names_endpoint_field_value_and_range():
    app = fw.App("t")
    ep = app.endpoint(name="ok", recycle=fw.Recycle(max_rss_mib=1024, max_requests=50))(
        lambda model, texts: texts)
    assert ep.recycle == fw.Recycle(max_rss_mib=1024, max_requests=50)
    assert app.endpoint(name="plain")(lambda model, texts: texts).recycle is None
    with pytest.raises(ConfigError) as e:
        app.endpoint(name="leaky", recycle=fw.Recycle(max_rss_mib=8, max_requests=0))(
            lambda model, texts: texts)
    text = str(e.value)
    assert "'leaky'" in text and "recycle.max_rss_mib" in text and "8" in text
    assert f"[{MIN_RSS_MIB:g}, {MAX_RSS_MIB:g}]" in text
    assert "recycle.max_requests" in text and "[1, " in text
    with pytest.raises(ConfigError, match=r"recycle.*fw\.Recycle"):
        app.endpoint(name="wrong", recycle={"max_rss_mib": 100})(  # type: ignore[arg-type]
            lambda model, texts: texts)


def test_each_lane_of_an_endpoint_recycles_alike():
    from floodway.functions.lanes import served_units

    app = fw.App("t")
    app.endpoint(name="embed", recycle=fw.Recycle(max_requests=10),
                 route=fw.Route(lanes=(fw.Lane("short", max_rows=1), fw.Lane("long"))))(
        lambda model, texts: texts)
    units = served_units(app)
    assert set(units) == {"embed:short", "embed:long"}
    assert all(u.recycle == fw.Recycle(max_requests=10) for u in units.values())
