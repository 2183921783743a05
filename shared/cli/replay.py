"""`sigil replay`: recorded conversations run again against a change, in a sandbox copy of the
workspace (shared.replay, docs/replay.md); the report as JSON, markdown or HTML."""

from __future__ import annotations

from contextlib import nullcontext
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    Workspace,
    app,
    require_known_workspace,
    said_in_one_line,
    target_settings_and_file,
)
from shared.cli._sessions import stored_session

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.config import Settings


class ReportFormat(StrEnum):
    json = "json"
    markdown = "markdown"
    html = "html"


class Recall(StrEnum):
    personal = "personal"
    workspace = "workspace"
    conversation = "conversation"


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [n for n in (p.strip() for p in value.split(",")) if n]


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(2)


@app.command("replay")
def replay_command(
    workspace: Workspace,
    session: Annotated[
        list[str] | None,
        typer.Option("--session", "-s", help="a session to replay (repeat for more; default: every session)"),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="the model to try, provider/model")] = None,
    system_prompt_file: Annotated[
        Path | None, typer.Option("--system-prompt-file", help="a file holding the system prompt to try")
    ] = None,
    skills: Annotated[
        str | None,
        typer.Option("--skills", help="the skills the turns may use, comma-separated ('' for none)"),
    ] = None,
    allow_tools: Annotated[
        str | None, typer.Option("--allow-tools", help="the only tools the model may run, comma-separated")
    ] = None,
    deny_tools: Annotated[
        str | None, typer.Option("--deny-tools", help="tools the model may not run, comma-separated")
    ] = None,
    memory_recall: Annotated[
        Recall | None, typer.Option("--memory-recall", help="the memory policy's recall to try")
    ] = None,
    context_mode: Annotated[
        str | None,
        typer.Option("--context-mode", help="the context pipeline's mode to try: off, pointers or inject"),
    ] = None,
    context_budget: Annotated[
        int | None, typer.Option("--context-budget", help="the inject mode's token budget (100-8000)")
    ] = None,
    compare_context: Annotated[
        bool,
        typer.Option(
            "--compare-context",
            help="replay under the context modes off, pointers and inject, and show each turn's prompt "
            "and tokens side by side (a text table; html with --format html)",
        ),
    ] = False,
    runs: Annotated[int, typer.Option("--runs", help="replay this many times, for pass^k consistency")] = 1,
    report_format: Annotated[
        ReportFormat, typer.Option("--format", help="json, markdown or html")
    ] = ReportFormat.markdown,
    out: Annotated[Path | None, typer.Option("--out", help="write the report here (default: stdout)")] = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Replay recorded turns of a workspace against a change (model, system prompt, skills, tool
    permissions, memory recall) in a sandbox copy; the original is only read."""
    from pydantic import ValidationError

    from shared.adapters import build_backend
    from shared.errors import SigilError
    from shared.models import ContextConfig, MemoryConfig
    from shared.replay import ReplayChange, change_problems, render_html, render_markdown, replay

    settings, file = target_settings_and_file(data_dir, stack, region)
    try:
        prompt = system_prompt_file.read_text(encoding="utf-8") if system_prompt_file else None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot read --system-prompt-file {system_prompt_file}: {exc}") from None
    try:
        change = ReplayChange(
            model=model,
            system_prompt=prompt,
            skills=_names(skills),
            tools_allow=_names(allow_tools),
            tools_deny=_names(deny_tools),
            memory=None if memory_recall is None else MemoryConfig(recall=memory_recall.value),
            context=None
            if context_mode is None and context_budget is None
            else ContextConfig.model_validate(
                {"mode": context_mode or "inject", "budget_tokens": context_budget or 2000}
            ),
        )
    except ValidationError as exc:
        raise _fail(f"bad change: {change_problems(exc)}") from None
    if settings.backend == "embedded" and not (settings.data_dir / "sigil.db").is_file():
        # Opening the backend would create an empty data dir: say there is nothing instead.
        raise _fail(f"nothing recorded: no Sigil data in {settings.data_dir}")
    source = build_backend(settings)
    try:
        # A workspace the target knows (require_known_workspace): the ones with recorded
        # sessions are among them, so a typo is named as one rather than as nothing recorded.
        with said_in_one_line():
            require_known_workspace(workspace, settings, file, lambda: nullcontext(source))
        # The names as typed: `demo` for the `web.demo` that `sigil send --session demo` made.
        sessions = [stored_session(source.sessions, workspace, s) for s in session or ()]
        if compare_context:
            _write(_compared(source, settings, workspace, sessions, context_budget, report_format), out)
            return
        report = replay(source, settings, workspace, change, sessions=sessions, runs=runs)
    except SigilError as exc:
        raise _fail(exc.message) from None
    finally:
        source.close()
    match report_format:
        case ReportFormat.json:
            text = report.model_dump_json(indent=2)
        case ReportFormat.markdown:
            text = render_markdown(report)
        case ReportFormat.html:
            text = render_html(report)
    _write(text, out, f"{len(report.turns)} turns, {report.changed_turns} changed")


def _compared(
    source: Backend,
    settings: Settings,
    workspace: str,
    sessions: list[str],
    budget: int | None,
    report_format: ReportFormat,
) -> str:
    """The context modes side by side (shared.replay.context_modes), as the format asks."""
    from shared.replay.context_modes import compare_context_modes, render_context_html, render_context_text

    if budget is not None and not 100 <= budget <= 8000:
        raise _fail("bad change: budget_tokens: must be between 100 and 8000")
    compared = compare_context_modes(
        source, settings, workspace, budget_tokens=budget or 1000, sessions=sessions
    )
    match report_format:
        case ReportFormat.json:
            return compared.model_dump_json(indent=2)
        case ReportFormat.html:
            return render_context_html(compared)
        case ReportFormat.markdown:
            return render_context_text(compared)


def _write(text: str, out: Path | None, what: str = "") -> None:
    if out is None:
        typer.echo(text)
        return
    out.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    typer.echo(f"wrote {out}" + (f": {what}" if what else ""), err=True)
