"""What every `sigil` command shares: the app, the common options, the settings they read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.models import Identity
    from shared.ports import IdentityStore

import typer

from shared.config import Settings

app = typer.Typer(help="Sigil: an event-driven AI agent gateway.", no_args_is_help=True)

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="state directory (default: $SIGIL_DATA_DIR or .sigil)")
]
Workspace = Annotated[str, typer.Option("--workspace", "-w", help="workspace id")]
ChannelWorkspace = Annotated[
    str | None,
    typer.Option("--workspace", "-w", help="workspace id (default: the one platform channels deliver into)"),
]
Url = Annotated[str | None, typer.Option("--url", help="gateway base URL (default: from settings)")]


def settings_for(data_dir: Path | None, **overrides: object) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir
    return Settings(**values)  # type: ignore[arg-type]


@contextmanager
def open_identities(data_dir: Path | None, workspace: str | None) -> Iterator[tuple[IdentityStore, str]]:
    """The identity store SIGIL_BACKEND names (embedded: only the data dir's sigil.db is opened),
    and the workspace."""
    from shared.adapters.embedded import Database, SqliteIdentityStore, open_data_dir

    settings = settings_for(data_dir)
    if settings.backend != "embedded":
        from shared.adapters import build_backend

        backend = build_backend(settings)
        try:
            yield backend.identities, workspace or settings.resolved_channel_workspace()
        finally:
            backend.close()
        return
    db = Database(open_data_dir(settings.data_dir) / "sigil.db")
    try:
        yield SqliteIdentityStore(db), workspace or settings.resolved_channel_workspace()
    finally:
        db.close()


def describe(identity: Identity) -> str:
    name = f"  {identity.display_name}" if identity.display_name else ""
    return f"{identity.channel}:{identity.channel_user_id}  as {identity.user_id}{name}"


def admin(action: Callable[[], Identity]) -> Identity:
    from shared.errors import SigilError

    try:
        return action()
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from exc


@contextmanager
def open_backend(data_dir: Path | None, workspace: str | None) -> Iterator[tuple[Backend, str]]:
    """The backend the settings name (the embedded data dir by default), and the workspace."""
    from shared.adapters import build_backend

    settings = settings_for(data_dir)
    backend = build_backend(settings)
    try:
        yield backend, workspace or settings.default_workspace
    finally:
        backend.close()
