"""Which service model `floodway simulate` runs, and the line that says so.

    choose_service(given, app, endpoint, batch_times=, bench=, service_ms=) -> ServiceChoice

In order: ``--batch-times FILE``; ``--bench-run DIR`` (its batch_times.json); ``--service-ms``
(with ``--per-row-ms``); else the last bench run's measurements when it measured this
endpoint: the run in `LAST_RUN_DIR`, the folder `floodway bench` writes to by default
(``bench-out`` in the current directory), whose run.json names the same app file and
endpoint and which has a batch_times.json; else the prior every router starts from
(`floodway.core.priors.SERVICE_PRIOR`, 20 ms + 5 ms per row). `ServiceChoice.said` names
the source and its figures, e.g. ``service model: the prior, 20 ms + 5 ms/row (...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from floodway.errors import FloodwayError

if TYPE_CHECKING:
    from floodway.bench.runfile import BenchRun
    from floodway.sim.model import ServiceModel

# `floodway bench --out`'s default, relative to the current directory.
LAST_RUN_DIR = Path("bench-out")


@dataclass(frozen=True)
class ServiceChoice:
    """The service model to simulate with, where it came from (`source`: "--batch-times",
    "--bench-run", "--service-ms", "last bench run" or "prior") and the line saying so."""

    model: ServiceModel
    source: str
    said: str


def describe(model: ServiceModel) -> str:
    """A service model's figures: its fit (or its samples) and what else it holds."""
    if model.samples_s:
        s = model.samples_s
        text = f"{len(s)} sampled batch times, mean {sum(s) / len(s) * 1000:.1f} ms"
    else:
        f = model.fit
        text = f"{f.per_batch_s * 1000:.1f} ms + {f.per_row_s * 1000:.2f} ms/row"
        if f.per_token_s:
            text += f" + {f.per_token_s * 1e6:.2f} us/padded token"
    extra = [what for what, on in (("the times of the batch sizes measured", model.sized),
                                   ("contention by busy containers", model.contention),
                                   ("the load term", model.load.active)) if on]
    return text + (f"; with {', '.join(extra)}" if extra else "")


def app_file(spec: str | None) -> str | None:
    """The app of an APP[:VAR][::ENDPOINT] spec, resolved when it is a file."""
    if not spec:
        return None
    target = spec.partition("::")[0]
    if ":" in target and not Path(target).exists():
        target = target.rpartition(":")[0]
    p = Path(target)
    return str(p.resolve()) if p.exists() else target


def last_run(app: str, endpoint: str, folder: Path = LAST_RUN_DIR
             ) -> tuple[BenchRun | None, str]:
    """The bench run in `folder` when it measured `endpoint` of `app` (with batch times),
    else None and why not."""
    from floodway.bench.runfile import RUN_FILE, BenchRun

    if not (folder / RUN_FILE).is_file():
        return None, f"no bench run in {folder}/"
    try:
        run = BenchRun.read(folder)
    except FloodwayError:
        return None, f"{folder / RUN_FILE} is not a bench run's"
    d = run.doc
    ran = d.get("app_resolved") or app_file(d.get("app"))
    if d.get("endpoint") != endpoint or ran is None or ran != app_file(app):
        what = f"{d.get('url') or d.get('app')}, endpoint {d.get('endpoint')}"
        return None, f"the bench run in {folder}/ measured {what}"
    if not run.batch_times.is_file():
        return None, f"the bench run in {folder}/ saw no batches (no batch_times.json)"
    return run, ""


def choose_service(given: ServiceModel | None, app: str, endpoint: str, *,
                   batch_times: Path | None = None, bench: BenchRun | None = None,
                   service_ms: str | None = None, last_dir: Path = LAST_RUN_DIR
                   ) -> ServiceChoice:
    """The service model (module docstring). `given`: the model the options gave (read
    from `batch_times`, `bench`'s batch times or `service_ms`), None when they gave none.
    Raises FloodwayError when the last run's batch_times.json cannot be read."""
    from floodway.core.priors import SERVICE_PRIOR
    from floodway.sim.model import ServiceModel

    if given is not None:
        if bench is not None:
            return ServiceChoice(given, "--bench-run", f"service model: bench run "
                                 f"{bench.folder} (its batch_times.json: fit {describe(given)})")
        if batch_times is not None:
            return ServiceChoice(given, "--batch-times", f"service model: --batch-times "
                                 f"{batch_times} (fit {describe(given)})")
        return ServiceChoice(given, "--service-ms",
                             f"service model: --service-ms {service_ms} ({describe(given)})")
    run, why = last_run(app, endpoint, last_dir)
    if run is not None:
        try:
            model = ServiceModel.read_batch_times(run.batch_times)
        except FloodwayError as e:
            raise FloodwayError(f"{e}; read as the last bench run's batch times since no "
                                "--batch-times, --bench-run or --service-ms was given") from None
        return ServiceChoice(model, "last bench run", (
            f"service model: the last bench run of {endpoint}, {run.batch_times} (fit "
            f"{describe(model)}; bench's default --out; --batch-times, --bench-run or "
            "--service-ms choose another)"))
    model = ServiceModel(SERVICE_PRIOR)
    return ServiceChoice(model, "prior", (
        f"service model: the prior, {describe(model)} (no --batch-times, --bench-run or "
        f"--service-ms, and {why}: floodway bench measures it)"))


__all__ = ["LAST_RUN_DIR", "ServiceChoice", "app_file", "choose_service", "describe", "last_run"]
