"""A fake Modal control plane for the tests: the real ``modal`` client talks to it on loopback.

It is an in-memory gRPC server (grpclib, as the client uses) implementing the ``ModalClient``
service of ``modal_proto.api_grpc.ModalClientBase`` (the proto that ships in the ``modal``
wheel, 1.6.4), for what deploying, calling, spawning, polling, Dicts, Volumes, Secrets,
function stats and autoscaler updates need. Every other RPC answers
``UNIMPLEMENTED "<Rpc> not in the fake"`` and is recorded in ``state.unimplemented``.
The client is pointed here through Modal's own configuration: ``MODAL_SERVER_URL`` and a
``MODAL_TOKEN_ID``/``MODAL_TOKEN_SECRET`` pair the server issued (`FakeModalServer.env`);
as on Modal, a request with any other credentials answers UNAUTHENTICATED (`auth`).

Using it (``tests/modal/conftest.py`` has the ``fake_modal`` fixture doing all of this,
including resetting the client Modal caches in ``modal.client._Client._client_from_env``):

    from tests.modal_fake import FakeModalServer, Timing

    server = FakeModalServer().start()          # background thread, free loopback ports
    os.environ.update(server.env())
    server.state.add_secret("floodway-router-keys", {"FLOODWAY_API_KEYS": "..."})
    server.handle("Embed.predict", lambda rows: [[0.0] * 384 for _ in rows])  # batched
    server.set_timing("Embed", Timing(service_s=0.05, cold_start_s=0.2))
    app.deploy()                                # the real client, e.g. modal_app.app
    server.state.function("Embed.*").definition   # api_pb2.Function as received
    server.state.updates_for("Embed.*")           # autoscaler updates, in order
    server.state.function("Embed.*").handle       # what the client was told (web_url...)
    server.stop()

Modules, one concern each:

- `server`: `FakeModal` (the servicer: the parts below over ``ModalClientBase``) and
  `FakeModalServer` (start/stop on loopback, ``env()``, ``handle``, ``set_timing``,
  ``run(coro)`` on the server loop; a small HTTP server for blob uploads/downloads).
- `auth`: `Tokens`, the token pairs the server issued, checked before every RPC (a
  container's requests carry none).
- `state`: `State`, everything received, readable by tests (apps, functions with their
  definitions, classes, images, mounts, secrets, volumes, Dicts, autoscaler updates, calls
  with their inputs and outputs).
- `deploy`: apps, images (answered as built at once), mounts, functions, classes, lookups.
- `calls`: FunctionMap / FunctionPutInputs / FunctionGetOutputs / FunctionCallFromId /
  FunctionCallCancel, FunctionGetCurrentStats, FunctionUpdateSchedulingParams; runs the
  registered handlers (``"<Class>.<method>"`` or a function tag; batched handlers get lists).
- `generators`: generator calls (``remote_gen``): a generator handler's items on the call's
  ``data_out`` stream (FunctionCallGetDataOut), GeneratorDone as its output; a cancel stops
  a running generator.
- `pools`: the container model per function: ``max_containers``, ``min_containers``, input
  concurrency (``max_concurrent_inputs``, 1 when undeclared), ``@modal.batched`` grouping,
  a fixed service time per batch and a cold-start delay per new container, optionally one
  device per container that its concurrent batches take turns on (`Timing`).
- `objects`: Secrets (missing name -> NOT_FOUND), Volumes, Dicts (real key/value semantics
  over modal's serialized bytes), blobs.
- `container`: the container-side RPCs (inputs, outputs, heartbeats) that Modal's
  container entrypoint uses, as the mixin `ContainerSide` (it also answers the
  container-only VolumeCommit / ContainerReloadVolumes: define them nowhere else).
- `entrypoint`: Modal's real container entrypoint (``python -m modal._container_entrypoint``)
  in a subprocess against the fake, built from what a deploy sent (`Container.deployed`).

Extending it: add an ``@unary``-decorated method named after the RPC to the part it belongs
to (``async def Rpc(self, request) -> response``; `stubs.unary`), keep what it receives in
`State`, and answer errors as the real server does (``GRPCError(Status.NOT_FOUND, ...)``:
the client maps statuses to ``modal.exception`` types). Streaming RPCs take the grpclib
``stream`` directly (see ``ImageJoinStreaming``). A part reads ``self.state`` and the other
attributes `FakeModal` sets.
"""

from tests.modal_fake.pools import Timing
from tests.modal_fake.server import FakeModal, FakeModalServer
from tests.modal_fake.state import State

__all__ = ["FakeModal", "FakeModalServer", "State", "Timing"]
