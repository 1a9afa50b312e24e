"""What every `floodway` command shares: the console, the APP argument and --store option,
an error as one line (exit code 2), and the environment a local command sets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True, soft_wrap=True)

AppArg = Annotated[str, typer.Argument(
    help="FILE.py or module, optionally ::ENDPOINT (e.g. modal_app.py::embed)")]
StoreOpt = Annotated[Path | None, typer.Option(
    help="artifact store root (default: $FLOODWAY_STORE or the user cache)")]


def no_modal() -> None:
    """build/serve never use the Modal objects an app file makes: skip importing Modal."""
    from floodway.modal.extra import NO_MODAL_ENV

    os.environ.setdefault(NO_MODAL_ENV, "1")


def no_hub_progress_bars() -> None:
    """No Hugging Face progress bars (downloads, transformers loading weights) under
    floodway's own: the hub and transformers read this at import, workers inherit it; a
    value the user set wins."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def fail(e: Exception) -> typer.Exit:
    """Print `e` as one error line (its text as written, never read as markup) -> the Exit
    to raise (code 2)."""
    console.print(f"[bold red]error:[/] {escape(str(e))}")
    return typer.Exit(code=2)


__all__ = ["AppArg", "StoreOpt", "console", "fail", "no_hub_progress_bars", "no_modal"]
