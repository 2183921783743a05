"""`sigil skill`: a workspace's skills (docs/skills.md), on the embedded data dir or the stack's
skills bucket, as SIGIL_BACKEND says.

    sigil skill list [-w WS]
    sigil skill install PATH|URL|INDEX [-w WS] [--skill NAME ...] [--all] [--force]
                        [--sha256 HEX | --no-digest] [--allow-http]
    sigil skill copy NAME --from WS --to WS [--force]
    sigil skill link NAME --from WS --to WS
    sigil skill remove NAME [-w WS]
    sigil skill validate PATH|NAME [-w WS]
    sigil skill search QUERY --index URL [--allow-http]
    sigil skill drafts [-w WS] [--session SID]
    sigil skill install-draft NAME [-w WS] [--session SID] [--force]

Every command reads its settings from `skill_settings` alone, so pointing the group at another
target (a deployed stack) is one change there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    app,
    require_known_workspace,
    said_in_one_line,
    target_settings_and_file,
)

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.config import Settings
    from shared.configuration import SigilFile
    from shared.ports import SkillStore

skill_app = typer.Typer(help="A workspace's skills (agentskills.io SKILL.md folders).", no_args_is_help=True)
app.add_typer(skill_app, name="skill")

SkillWorkspace = Annotated[
    str | None, typer.Option("--workspace", "-w", help="workspace id (default: $SIGIL_DEFAULT_WORKSPACE)")
]
From = Annotated[str, typer.Option("--from", help="the workspace that has the skill")]
To = Annotated[str, typer.Option("--to", help="the workspace to add it to")]
Force = Annotated[bool, typer.Option("--force", help="replace a skill of the same name")]
AllowHttp = Annotated[
    bool,
    typer.Option(
        "--allow-http",
        help="accept plain http:// for the index and its files (anyone on the way could change them)",
    ),
]


def skill_settings(data_dir: Path | None, stack: str | None = None, region: str | None = None) -> Settings:
    """The settings every `sigil skill` command works with: the local data dir, or a deployed
    stack's (--stack; its SkillsBucket output names the bucket)."""
    return _target(data_dir, stack, region)[0]


def _target(
    data_dir: Path | None, stack: str | None = None, region: str | None = None
) -> tuple[Settings, SigilFile | None]:
    return target_settings_and_file(data_dir, stack, region)


def skill_store(settings: Settings) -> SkillStore:
    """The store SIGIL_BACKEND names; the cloud one needs only the skills bucket."""
    if settings.backend == "embedded":
        from shared.adapters.embedded.skills import FileSkillStore

        return FileSkillStore(settings.data_dir)
    from shared.adapters.aws.skills import S3SkillStore

    if not settings.skills_bucket:
        _fail("the aws backend's skills need SIGIL_SKILLS_BUCKET (the stack's SkillsBucket output)")
    assert settings.skills_bucket
    return S3SkillStore(settings.skills_bucket, region=settings.aws_region)


def _open(
    data_dir: Path | None,
    workspace: str | None = None,
    stack: str | None = None,
    region: str | None = None,
    *,
    option: str = "--workspace",
    new: bool = False,
) -> tuple[SkillStore, str]:
    """The store and the workspace: one the target knows (require_known_workspace; its skills
    count), or with `new` (a command that adds a skill) any valid id, as installing a skill
    before the workspace's configuration is applied is how a workspace gets one."""
    from shared.errors import SigilError
    from shared.skills import check_workspace

    settings, file = _target(data_dir, stack, region)
    ws = workspace or settings.default_workspace
    try:
        check_workspace(ws)
    except SigilError as exc:
        _fail(exc.message)
    store = skill_store(settings)
    if not new:
        with _errors():
            require_known_workspace(
                ws,
                settings,
                file,
                lambda: _backend(settings),
                holds=lambda w: bool(store.list_skills(w)),
                option=option,
            )
    return store, ws


@contextmanager
def _backend(settings: Settings) -> Iterator[Backend]:
    from shared.adapters import build_backend

    with said_in_one_line():
        backend = build_backend(settings)
        try:
            yield backend
        finally:
            backend.close()


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(1)


@contextmanager
def _errors() -> Iterator[None]:
    """A refused command prints why and exits 1: never a traceback for bad input."""
    from shared.errors import SigilError
    from shared.skills import SkillError

    try:
        yield
    except SigilError as exc:
        _fail(exc.message)
    except SkillError as exc:
        _fail(str(exc))


@skill_app.command("list")
def skill_list(
    workspace: SkillWorkspace = None, data_dir: DataDir = None, stack: Stack = None, region: Region = None
) -> None:
    """The workspace's skills: name, trigger, where a link reads from, description."""
    from shared.skills import SkillError, read_skill

    store, ws = _open(data_dir, workspace, stack, region)
    with _errors():
        names = store.list_skills(ws)
        if not names:
            typer.echo(f"no skills in {ws}")
            return
        for name in names:
            link = store.link_of(ws, name)
            via = f"  (link to {link.workspace_id}/{link.name})" if link else ""
            try:
                found = read_skill(store, ws, name)
            except SkillError as exc:
                typer.echo(f"{name}  BROKEN{via}: {exc}")
                continue
            typer.echo(f"{name}  [{found.trigger}]{via}  {found.description}")


@skill_app.command("install")
def skill_install(
    source: Annotated[
        str, typer.Argument(help="a skill folder, a SKILL.md or archive (path or URL), or an index URL")
    ],
    workspace: SkillWorkspace = None,
    skill: Annotated[
        list[str] | None, typer.Option("--skill", help="from an index: the skill(s) to install")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="from an index: install every skill it lists")] = False,
    force: Force = False,
    sha256: Annotated[
        str | None,
        typer.Option(
            "--sha256", help="a SKILL.md or archive (path or URL): its sha256, checked before install"
        ),
    ] = None,
    no_digest: Annotated[
        bool,
        typer.Option(
            "--no-digest", help="a SKILL.md's or archive's URL: install it without checking a sha256"
        ),
    ] = False,
    allow_http: AllowHttp = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Install a skill, checked against the agentskills.io rules and, fetched, against a sha256
    (an index's, or --sha256's for a file's own URL)."""
    from shared.skills import install

    store, ws = _open(data_dir, workspace, stack, region, new=True)
    with _errors():
        kind = install.source_kind(source)
        if sha256 is not None and kind in ("folder", "index"):
            _fail("--sha256 checks one file: a SKILL.md or an archive (its path or URL)")
        if kind == "index":
            _install_from_index(
                store,
                ws,
                install.index_url(source),
                skill or [],
                every=every,
                force=force,
                allow_http=allow_http,
            )
            return
        if kind == "folder":
            folder = Path(source).expanduser().resolve()
            files = install.read_folder(folder)
            found = install.validate_files(files, folder.name, str(folder))
        elif kind in ("skill-md-file", "archive-file"):
            found, files = install.from_file(Path(source).expanduser(), sha256=sha256)
        else:
            found, files = install.from_url(source, sha256=sha256, no_digest=no_digest, allow_http=allow_http)
        _put(store, ws, found.name, files, force=force)


def _install_from_index(
    store: SkillStore, ws: str, url: str, wanted: list[str], *, every: bool, force: bool, allow_http: bool
) -> None:
    from shared.skills import install

    index = install.load_index(url, allow_http=allow_http)
    listed = {e.name: e for e in index.skills}
    if not wanted and not every:
        names = ", ".join(sorted(listed)) or "none"
        _fail(f"{url} lists {len(listed)} skills ({names}); name them with --skill NAME, or give --all")
    unknown = sorted(set(wanted) - set(listed))
    if unknown:
        _fail(f"{url} lists no skill {', '.join(unknown)}; it lists: {', '.join(sorted(listed))}")
    # Every artifact is fetched and verified before the first is stored: one bad digest installs none.
    chosen = [listed[n] for n in (sorted(listed) if every else wanted)]
    verified = [install.from_index_entry(url, entry, allow_http=allow_http) for entry in chosen]
    for found, files in verified:
        _put(store, ws, found.name, files, force=force)


def _put(store: SkillStore, ws: str, name: str, files: dict[str, bytes], *, force: bool) -> None:
    if name in store.list_skills(ws) and not force:
        _fail(f"{ws} already has a skill named {name!r}; give --force to replace it")
    store.put_skill(ws, name, files)
    typer.echo(f"installed {name} in {ws} ({len(files)} files)")


@skill_app.command("copy")
def skill_copy(
    name: str,
    from_: From,
    to: To,
    force: Force = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Copy a skill into another workspace: the copy is its own, later edits do not reach it."""
    store, source = _open(data_dir, from_, stack, region, option="--from")
    _, target = _open(data_dir, to, stack, region, new=True)
    with _errors():
        paths = store.list_files(source, name)
        if not paths:
            _fail(f"no skill {name!r} in {source}")
        files = {p: store.read_file(source, name, p) or b"" for p in paths}
        _put(store, target, name, files, force=force)


@skill_app.command("link")
def skill_link(
    name: str, from_: From, to: To, data_dir: DataDir = None, stack: Stack = None, region: Region = None
) -> None:
    """Share a skill with another workspace: one stored copy, so an edit shows in both."""
    from shared.ports import SkillLink

    store, source = _open(data_dir, from_, stack, region, option="--from")
    _, target = _open(data_dir, to, stack, region, new=True)
    with _errors():
        store.link_skill(target, name, SkillLink(workspace_id=source, name=name))
        typer.echo(f"linked {target}/{name} to {source}/{name}")


@skill_app.command("remove")
def skill_remove(
    name: str,
    workspace: SkillWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Remove a skill or a link (a skill other workspaces link to is kept until they unlink)."""
    store, ws = _open(data_dir, workspace, stack, region)
    with _errors():
        if not store.remove_skill(ws, name):
            _fail(f"no skill {name!r} in {ws}")
        typer.echo(f"removed {name} from {ws}")


@skill_app.command("validate")
def skill_validate(
    target: Annotated[str, typer.Argument(help="a skill folder, or the name of an installed skill")],
    workspace: SkillWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Check a skill against the agentskills.io rules; errors name the file and line."""
    from shared.skills import SKILL_FILE, install, name_problem

    with _errors():
        path = Path(target).expanduser()
        if path.is_file() and path.name == SKILL_FILE:
            path = path.parent  # the skill's own file named: its folder is the skill
        if path.is_dir():
            folder = path.resolve()
            found = install.validate_files(install.read_folder(folder), folder.name, str(folder))
        elif path.exists() or name_problem(target) is not None:
            # Not a name a skill could have: the user meant a path, so say what is wrong with it.
            _fail(f"{target}: no such folder" if not path.exists() else f"{target}: not a folder")
        else:
            store, ws = _open(data_dir, workspace, stack, region)
            paths = store.list_files(ws, target)
            if not paths:
                _fail(f"{target}: neither a folder nor a skill installed in {ws}")
            files = {p: store.read_file(ws, target, p) or b"" for p in paths}
            found = install.validate_files(files, target, f"{ws}/{target}")
        typer.echo(f"ok: {found.name} [{found.trigger}] {found.description}")


Session = Annotated[
    str | None,
    typer.Option(
        "--session", "-s", help="the session whose scratchpad holds the draft (default: look in each)"
    ),
]


def _drafts(backend: Backend, ws: str, session: str | None) -> list[tuple[str, str]]:
    """(session, draft name) of the workspace's skill drafts (shared.skills.drafts): in one
    session's scratchpad, or in each of its sessions' (at most 1,000 sessions read)."""
    from shared.skills import drafts

    pad = backend.scratchpad
    if pad is None:
        _fail("this backend has no scratchpad, so no skill drafts")
    assert pad is not None
    sessions = [session] if session else [s.id for s in backend.sessions.list_sessions(ws, limit=1000)]
    return [(sid, name) for sid in sessions for name in drafts.names(pad, ws, sid)]


@skill_app.command("drafts")
def skill_drafts(
    workspace: SkillWorkspace = None,
    session: Session = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """The skills the Skill Composer drafted and an operator has not installed: session, name,
    description (docs/delegation.md)."""
    from shared.skills import drafts

    _, ws = _open(data_dir, workspace, stack, region)
    with _errors(), _backend(skill_settings(data_dir, stack, region)) as backend:
        found = _drafts(backend, ws, session)
        if not found:
            typer.echo(f"no skill drafts in {ws}" + (f" session {session}" if session else ""))
            return
        assert backend.scratchpad is not None
        for sid, name in found:
            draft = drafts.load(backend.scratchpad, ws, sid, name)
            typer.echo(f"{sid}  {name}  ({len(draft.files)} files)  {draft.description}")


@skill_app.command("install-draft")
def skill_install_draft(
    name: Annotated[str, typer.Argument(help="the draft's skill name, as `sigil skill drafts` shows it")],
    workspace: SkillWorkspace = None,
    session: Session = None,
    force: Force = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Install a skill the Skill Composer drafted, checked again against the agentskills.io rules;
    the draft is then marked installed in the session's scratchpad and no longer listed."""
    from shared.skills import drafts

    store, ws = _open(data_dir, workspace, stack, region)
    with _errors(), _backend(skill_settings(data_dir, stack, region)) as backend:
        found = [sid for sid, n in _drafts(backend, ws, session) if n == name]
        if not found:
            _fail(f"no skill draft {name!r} in {ws}" + (f" session {session}" if session else ""))
        if len(found) > 1:
            _fail(f"sessions {', '.join(found)} each hold a draft {name!r}: name one with --session")
        assert backend.scratchpad is not None
        draft = drafts.load(backend.scratchpad, ws, found[0], name)
        skill = drafts.install(store, ws, draft, force=force)
        drafts.mark_installed(backend.scratchpad, ws, found[0], draft)
        typer.echo(
            f"installed {skill.name} in {ws} ({len(draft.files)} files) from session {found[0]}'s draft"
        )


@skill_app.command("search")
def skill_search(
    query: str,
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            envvar="SIGIL_SKILL_INDEX",
            help="the index to search: https://host (its /.well-known/agent-skills/index.json) or the "
            "index's URL (default: $SIGIL_SKILL_INDEX)",
        ),
    ] = None,
    allow_http: AllowHttp = False,
) -> None:
    """Skills of an index whose name or description holds every word of QUERY."""
    from shared.skills import install

    if not index:
        _fail(
            "no index to search: pass --index https://host (its /.well-known/agent-skills/index.json) "
            "or set SIGIL_SKILL_INDEX"
        )
    assert index
    index = install.index_url(index)
    with _errors():
        hits = install.search(install.load_index(index, allow_http=allow_http), query)
        if not hits:
            typer.echo(f"no skill in {index} matches {query!r}")
            return
        for entry in hits:
            typer.echo(f"{entry.name}  [{entry.type}]  {entry.description}")
