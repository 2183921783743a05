"""The metric catalogue against the code: every metric emitted is catalogued, and every catalogued one
is emitted (tests/infra/test_observability.py holds the dashboard and the alarms to the same list).

The source is read, not run: every `add_metric(`, `record(` and `per_workspace(` call in shared/ and
functions/ must name a catalogue constant. The one call that takes its names from data (the
consolidate function's `publish`) is checked through the reports it publishes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from shared import metric_catalogue
from shared.consolidation.compaction import CompactionResult
from shared.consolidation.maintenance import MaintenanceReport
from shared.consolidation.runner import HourlyReport, WorkspaceReport, compaction_metrics
from shared.consolidation.trigger import TRIGGER_METRICS
from shared.metric_catalogue import CATALOGUE, OUTCOME_NAMES, OUTCOMES, Metric
from shared.models import AuditRecord

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "shared").rglob("*.py"), *(ROOT / "functions").rglob("*.py")])
CONSTANTS = {name: value for name, value in vars(metric_catalogue).items() if isinstance(value, Metric)}
# Calls whose metric is a parameter typed Metric (the helpers that publish a catalogue constant),
# or a name taken from a report (trigger.publish: checked below through the reports).
GENERIC = {
    ("shared/observability.py", "_add"),
    ("shared/observability.py", "per_workspace"),
    # The locked pass-through to powertools' add_metric (the agent's sessions add from threads).
    ("shared/observability.py", "add_metric"),
    ("shared/consolidation/trigger.py", "publish"),
}


def _constants(node: ast.expr, local: dict[str, ast.expr]) -> set[str]:
    """The catalogue constants an expression names (`X`, `X.name`, `X.unit`, `OUTCOMES[...]`, `A if
    c else B`, or a local variable assigned one of those); empty when it names anything else."""
    if isinstance(node, ast.Attribute) and node.attr in ("name", "unit"):
        node = node.value
    if isinstance(node, ast.IfExp):
        body, orelse = _constants(node.body, local), _constants(node.orelse, local)
        return body | orelse if body and orelse else set()
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "OUTCOMES":
        return {"OUTCOMES"}
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return {node.id}
        if node.id in local:
            return _constants(local[node.id], {})
    return set()


def _callee(call: ast.Call) -> str:
    """`add_metric` as a method (powertools'), `record` and `per_workspace` as the functions
    imported from the catalogue and shared.observability (a ledger's `.record(...)` is no metric)."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr if call.func.attr == "add_metric" else ""
    return call.func.id if isinstance(call.func, ast.Name) else ""


def _metric_calls() -> list[tuple[str, str, ast.Call, dict[str, ast.expr]]]:
    """(file, enclosing function, call, the function's local assignments) of every metric call."""
    calls = []
    for path in SOURCES:
        relative = path.relative_to(ROOT).as_posix()
        if relative == "shared/metric_catalogue.py":
            continue
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            local = {
                node.targets[0].id: node.value
                for node in ast.walk(function)
                if isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            }
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and _callee(node) in ("add_metric", "record", "per_workspace"):
                    calls.append((relative, function.name, node, local))
    return calls


def _named_by(call: ast.Call, local: dict[str, ast.expr]) -> set[str]:
    callee = _callee(call)
    if callee == "add_metric":
        keywords = {k.arg: k.value for k in call.keywords}
        if "name" not in keywords or "unit" not in keywords:
            return set()
        names, units = _constants(keywords["name"], local), _constants(keywords["unit"], local)
        return names if names == units else set()
    if callee == "record":
        return _constants(call.args[0], local) if call.args else set()
    # per_workspace(workspace_id, {CONSTANT: value, ...})
    values = call.args[1] if len(call.args) > 1 else None
    if not isinstance(values, ast.Dict):
        return set()
    names = [_constants(k, local) if k is not None else set() for k in values.keys]
    return set().union(*names) if all(names) else set()


def _published_by_reports() -> set[str]:
    """Every name the consolidate function publishes: the trigger's count, and each report's."""
    compaction = CompactionResult(workspace_id="w", session_id="s", run_id="r", status="done")
    maintenance = MaintenanceReport(workspace_id="w", run_id="r")
    hourly = HourlyReport(
        run_id="r", status="partial", workspaces=[WorkspaceReport(workspace_id="w", maintenance=maintenance)]
    )
    workspace = WorkspaceReport(workspace_id="w", maintenance=maintenance)
    return (
        set(TRIGGER_METRICS.values())
        | set(compaction_metrics(compaction))
        | set(workspace.metrics())
        | set(hourly.metrics())
    )


def test_every_metric_call_names_a_catalogue_constant() -> None:
    calls = _metric_calls()
    unnamed = [
        f"{file}:{call.lineno} in {function}"
        for file, function, call, local in calls
        if (file, function) not in GENERIC and not _named_by(call, local)
    ]

    assert len(calls) > 20
    assert unnamed == []


def test_the_generic_calls_are_still_where_this_test_expects_them() -> None:
    # A generic call moved or renamed would otherwise escape both checks.
    assert {(f, fn) for f, fn, _, _ in _metric_calls()} >= GENERIC


def test_what_the_consolidation_reports_publish_is_catalogued_with_the_unit_publish_gives() -> None:
    published = _published_by_reports()

    assert published - CATALOGUE.keys() == set()
    # trigger.publish derives the unit from the name; the catalogue must say the same.
    for name in published:
        assert CATALOGUE[name].unit == ("Milliseconds" if name.endswith("Ms") else "Count"), name


def test_every_catalogued_metric_is_emitted_somewhere() -> None:
    emitted = set().union(*(_named_by(call, local) for _, _, call, local in _metric_calls()))
    by_constant = {CONSTANTS[c].name for c in emitted if c in CONSTANTS}
    if "OUTCOMES" in emitted:
        by_constant |= {m.name for m in OUTCOMES.values()}

    assert set(CATALOGUE) - by_constant - _published_by_reports() == set()


def test_the_outcome_counts_are_the_audit_records_outcomes() -> None:
    outcome = AuditRecord.model_fields["outcome"].annotation
    assert set(OUTCOME_NAMES) == set(get_args(outcome))


def test_names_are_unique_and_units_are_powertools_units() -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    constants = [*CONSTANTS.values(), *OUTCOMES.values()]
    assert len({m.name for m in constants}) == len(CATALOGUE)
    assert {m.unit for m in constants} <= {u.value for u in MetricUnit}


@pytest.mark.parametrize("metric", sorted(CATALOGUE.values(), key=lambda m: m.name), ids=lambda m: m.name)
def test_every_metric_is_in_the_operations_guide(metric: Metric) -> None:
    # The outcomes are listed once, as Outcome_<outcome> with the outcomes after it.
    name = metric.name.removeprefix("Outcome_")
    assert f"`{name}`" in (ROOT / "docs" / "operations.md").read_text()
