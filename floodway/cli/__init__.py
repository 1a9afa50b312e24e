"""The `floodway` command: build, serve, bench, deploy, simulate, hub-seed.

Each command is defined, with its help text, in the module of its concern: `builds` (build,
hub-seed), `serving` (serve), `floodway.bench.command` (bench), `on_modal` (deploy, and
build --on-modal), `simulation` (simulate); `common` holds what they share. The help texts
are each a summary (the command list shows it), then one paragraph per line (typer shows a
later paragraph's line breaks as they are written).
"""

from __future__ import annotations

import typer

from floodway.bench.command import BENCH_HELP, bench
from floodway.cli.builds import BUILD_HELP, build, hub_seed
from floodway.cli.on_modal import deploy
from floodway.cli.serving import SERVE_HELP, serve
from floodway.cli.simulation import SIMULATE_HELP, simulate

CLI_HELP = ("Serverless GPU model endpoints that survive traffic spikes: batched endpoints, "
            "streaming ones (SSE or NDJSON; text generation with continuous batching), async "
            "jobs and OpenAI-compatible routes.")

cli = typer.Typer(help=CLI_HELP, no_args_is_help=True, add_completion=False)
cli.command(help=BUILD_HELP)(build)
cli.command(help=SERVE_HELP)(serve)
cli.command(help=BENCH_HELP)(bench)
cli.command()(deploy)
cli.command(help=SIMULATE_HELP)(simulate)
cli.command("hub-seed")(hub_seed)


def main() -> None:
    cli()


__all__ = ["CLI_HELP", "bench", "build", "cli", "deploy", "hub_seed", "main", "serve", "simulate"]
