"""The commands that contact Modal: `floodway deploy`, and `floodway build --on-modal`'s
run of the app's build functions; the app's Modal objects, the credentials checked before
anything is sent, and Modal's client errors as one line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated

import typer

from floodway.cli.common import console, fail
from floodway.errors import FloodwayError


def modal_app(app: str, what: str):
    """The floodway App named by `app` and the one modal.App its module defines.

    Clears ``FLOODWAY_NO_MODAL`` first: left set in the shell, it would make `to_modal` skip
    building the Modal objects that deploying and building on Modal need."""
    from floodway.modal.extra import NO_MODAL_ENV, require_modal

    require_modal(what)
    import modal

    from floodway.functions.discover import import_target, load_app

    os.environ.pop(NO_MODAL_ENV, None)

    target = app.partition("::")[0]
    fw_app, _ = load_app(app)
    module = import_target(target.split(":")[0] if not target.endswith(".py") else target)
    apps = [v for v in vars(module).values() if isinstance(v, modal.App)]
    if len(apps) != 1:
        raise FloodwayError(f"{target} must define exactly one modal.App (e.g. "
                            f"`app = to_modal(endpoints)`) to {what}")
    return fw_app, apps[0]


@contextlib.contextmanager
def talking_to_modal(what: str) -> Iterator[None]:
    """Say that Modal is being contacted (an unreachable Modal is retried for about a minute
    before the client gives up), and turn the client's errors into one FloodwayError line
    instead of a traceback through the client."""
    import modal.exception

    console.print(f"contacting Modal to {what}...")
    try:
        yield
    except modal.exception.ConnectionError as e:
        raise FloodwayError(f"could not reach Modal to {what} ({e}); check the network, and "
                            f"MODAL_SERVER_URL if it is set") from None
    except modal.exception.AuthError as e:
        raise FloodwayError(f"Modal refused the credentials to {what}: {e} (run `modal "
                            f"token new`, or check the MODAL_TOKEN_* or MODAL_OAUTH_* "
                            f"variables)") from None
    except modal.exception.Error as e:
        raise FloodwayError(f"Modal refused to {what}: {type(e).__name__}: {e}") from None


def check_credentials() -> None:
    """Raise FloodwayError, before anything is sent to Modal, when the Modal credentials are
    missing or incomplete, or a JWT key's libraries are not installed (`credentials_problem`,
    looked up on `floodway.modal.deploy` as `deploy_and_apply` does)."""
    from floodway.modal import deploy as deployer

    problem = deployer.credentials_problem()
    if problem is not None:
        raise FloodwayError(problem)


def build_on_modal(app: str, force: bool) -> None:
    """Run the app's Modal build functions (one per GPU type) and print what they did.
    Raises FloodwayError, before contacting Modal, when no credentials are configured."""
    endpoint = app.partition("::")[2]
    fw_app, module_app = modal_app(app, "build on Modal")
    check_credentials()
    from floodway.modal.app.build import run_builds_on_modal

    with talking_to_modal("build"):
        results = run_builds_on_modal(module_app, fw_app, endpoint or None, force)
    for res in results:
        verdict = "unchanged (no-op)" if res["cached"] else "built"
        console.print(f"{res['endpoint']}: {verdict} {res['key']} on Modal in "
                      f"{res['seconds']:.1f}s; skipped: {res['skipped'] or 'nothing'}")


def deploy(app: Annotated[str, typer.Argument(
        help="FILE.py or module whose top level calls to_modal (e.g. modal_app.py)")]) -> None:
    """Deploy to Modal (as `modal deploy` does), then re-apply every endpoint's current warm
    target, which the deploy reset to the decorator's values (needs Modal credentials, and
    the router's keys Secret unless the router is public: checked before deploying)."""
    from floodway.modal import deploy as deployer
    from floodway.modal.warmers.apply import summary_line

    try:
        if "::" in app:
            raise FloodwayError("deploy takes the whole app: drop the ::ENDPOINT part")
        fw_app, module_app = modal_app(app, "deploy")
        check_credentials()
        with talking_to_modal("deploy"):
            applied = deployer.deploy_and_apply(module_app, fw_app)
    except FloodwayError as e:
        raise fail(e) from None
    console.print(f"deployed {module_app.name}; warm targets:")
    for a in applied:
        console.print(summary_line(a))
    if any(a.error for a in applied):
        raise typer.Exit(code=1)


__all__ = ["build_on_modal", "check_credentials", "deploy", "modal_app", "talking_to_modal"]
