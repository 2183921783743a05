"""What a message costs in AWS calls, and what each function costs to import. Run by `make bench`.

(a) AWS calls per accepted webhook event: the real webhook handler, in this process, on moto in
    server mode (the resources `sigil dev --aws` creates), counted by a botocore `before-call`
    hook on boto3's default session, from which shared.adapters.aws.clients builds every client.
    Goal: exactly one call on a warm invocation, the SendMessage.
(b) DynamoDB round trips per agent turn (the model calls no tools): the real agent handler fed
    the queued events one record per batch by the aws mode's poller, with the fake OpenAI server
    of tests/support as the model. Goal: at most 3. Every call is listed, so the excess shows.
    The same again for a second workspace with a budget (limits per workspace and per user), whose
    counters are read with the session and charged after the commit, on the session's counter
    shard (docs/budgets.md).
(c) Cold import time of each handler module against a bare powertools handler
    (bench/bare_handler.py), each in a fresh interpreter that sees only the Lambda layer's
    packages; N rounds, each importing every module once in turn, and "x bare" the median of the
    rounds' ratios (the machine's load moves between rounds, less within one). Goals: webhook and
    agent <= 1.5x.
(d) A cold agent container's first turn: in a fresh interpreter with the function's environment
    (moto, osmem-server and the fake model of (b)), the handler's import and then its first turn
    (one queued web message of a new session), each timed, median of N. What an import defers to
    the first turn shows here: the goal is (c)'s ratio without a slower import + first turn.
(e) What a platform channel's reply adds to a cold container's first turn, which (d)'s web
    message does not show: after the handler's import and the model provider's construction (as
    the first turn makes it), the senders built and the platforms' HTTP client made, timed, per
    tree (with --baseline, the checkout before the change too). httpx and that client are made at
    the first platform call now, on the provider's TLS context (shared.tls); the import no
    longer loads httpx, and no second CA bundle is read.

A benchmark, not a test: it prints a table and fails only if something does not work at all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# functions/ and tests/ are not in the installed package; the bench runs from a plain clone.
sys.path.insert(0, str(ROOT))

WORKSPACE = "default"
BUDGETED = "budgeted"  # a workspace with limits for itself and each user
SESSION = "bench"
HANDLERS = {
    "functions.webhook.handler": 1.5,  # module -> goal as a multiple of the bare handler (or None)
    "functions.agent.handler": 1.5,
    "functions.consolidate.handler": None,
}
BARE = "bare_handler"
AGENT = "functions.agent.handler"


# ---------------------------------------------------------------- counting AWS calls


@dataclass(frozen=True)
class Call:
    name: str  # "service.Operation(table)"
    where: str  # the adapter method that made it, and the step of the turn or webhook that asked


@dataclass
class CallLog:
    """Every AWS API call made through boto3's default session, with who made it."""

    calls: list[Call] = field(default_factory=list)

    def __call__(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        name = f"{model.service_model.service_name}.{model.name}{_target(params)}"
        self.calls.append(Call(name, _caller(sys._getframe(1))))

    @contextmanager
    def window(self) -> Iterator[list[Call]]:
        """The calls made inside the block."""
        start = len(self.calls)
        seen: list[Call] = []
        try:
            yield seen
        finally:
            seen.extend(self.calls[start:])


# A call is attributed to the outermost adapter frame (the port's method, not its helpers) and to
# the innermost frame of the code that drives the adapters.
_ADAPTERS = f"{os.sep}shared{os.sep}adapters{os.sep}aws{os.sep}"
# The steps a call is attributed to: the turn's modules, the ingress and the composition root.
_DRIVERS = (f"shared{os.sep}agent{os.sep}", f"shared{os.sep}ingress{os.sep}", f"shared{os.sep}cloud.py")


def _caller(frame: FrameType | None) -> str:
    adapter = step = None
    while frame is not None:
        path, code = frame.f_code.co_filename, frame.f_code
        if _ADAPTERS in path:
            adapter = code.co_qualname
        elif step is None and any(driver in path for driver in _DRIVERS):
            module = Path(path)
            name = module.parent.name if module.name == "__init__.py" else module.stem
            step = f"{name}.{code.co_qualname}"
        frame = frame.f_back
    return " <- ".join(part for part in (adapter, step) if part) or "?"


def _target(request: dict[str, Any]) -> str:
    """The table a DynamoDB call names (the request body is JSON for every service used here)."""
    try:
        body = json.loads(request.get("body") or b"{}")
    except (ValueError, TypeError):
        return ""
    table = body.get("TableName")
    if isinstance(table, str):
        return f"({table.removeprefix('sigil-local-')})"
    items = body.get("TransactItems")
    if isinstance(items, list):
        kinds = Counter(
            f"{kind}:{action['TableName'].removeprefix('sigil-local-')}"
            for item in items
            for kind, action in item.items()
        )
        return "(" + ", ".join(f"{n}x {k}" if n > 1 else k for k, n in kinds.items()) + ")"
    requested = body.get("RequestItems")
    if isinstance(requested, dict):
        keys = Counter({t.removeprefix("sigil-local-"): len(r.get("Keys", [])) for t, r in requested.items()})
        return "(" + ", ".join(f"{n} keys:{t}" for t, n in keys.items()) + ")"
    return ""


def _summary(calls: list[Call]) -> str:
    counts = Counter(c.name for c in calls)
    return ", ".join(f"{n}x {c}" if n > 1 else c for c, n in counts.items()) or "-"


@dataclass
class Row:
    label: str
    samples: list[list[Call]]

    def counts(self, service: str | None = None) -> list[int]:
        return [
            sum(1 for c in s if service is None or c.name.startswith(service + ".")) for s in self.samples
        ]

    def typical(self) -> list[Call]:
        """The most common call sequence of the sample (they are all alike when the code is)."""
        shapes = Counter(tuple(s) for s in self.samples)
        return list(shapes.most_common(1)[0][0])


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    median = statistics.median(values)
    text = f"{median:g}"
    return text if lo == hi else f"{text} [{lo}-{hi}]"


SIGNING_SECRET = "bench-signing-secret"  # noqa: S105 - a throwaway secret on moto


def _context(name: str) -> Any:
    from shared.local.lambda_runtime import InvocationContext

    return InvocationContext(
        function_name=name,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
        memory_limit_in_mb=512,
        aws_request_id=f"bench-{time.monotonic_ns()}",
        deadline=time.monotonic() + 60,
    )


def _stand_ins(stack: ExitStack) -> tuple[Any, Any]:
    """moto (server mode), osmem-server and the fake model, with the resources `sigil dev --aws`
    creates, and the functions' environment set in this process: (resources, fake model)."""
    from shared.channels import web
    from shared.config import Settings
    from shared.local import aws_mode
    from tests.support.fake_openai import FakeOpenAI

    stack.enter_context(aws_mode.fifo_redelivery_in_order())
    moto = aws_mode.start_moto("127.0.0.1")
    stack.callback(moto.stop)
    host, port = moto.get_host_and_port()
    osmem = aws_mode.start_osmem()
    stack.callback(osmem.close)
    fake = stack.enter_context(FakeOpenAI())
    # Patching one server instance's method, which mypy reads as rebinding the class's
    # (self-taking) method: there is no subclass to override, FakeOpenAI builds its own server.
    fake._server.handle_error = _quiet_resets(fake._server.handle_error)  # type: ignore[method-assign,assignment]
    settings = Settings()
    resources = aws_mode.provision(
        f"http://{host}:{port}",
        aws_mode.DEFAULT_REGION,
        opensearch_endpoint=osmem.url,
        secrets_prefix=settings.secrets_prefix,
        max_receive_count=settings.lane_max_attempts,
        visibility_timeout_s=30,
    )
    secrets = aws_mode.aws_client("secretsmanager", resources.endpoint, resources.region)
    for workspace in (WORKSPACE, BUDGETED):
        secrets.create_secret(
            Name=resources.secrets_prefix + web.secret_name(workspace), SecretString=SIGNING_SECRET
        )
    _configure_budget(resources)
    # The functions' environment as `sigil dev --aws` sets it (the agent's is the webhook's plus
    # the backend's), in this process, so the handlers run here and the hook sees their calls.
    os.environ.update(aws_mode.function_env(resources, "agent", settings))
    os.environ.update(
        {
            "SIGIL_MODEL": "openai/fake-model",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "sk-bench",
            # The handlers' INFO lines would bury the table; warnings and errors still show.
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )
    return resources, fake


def _configure_budget(resources: Any) -> None:
    """BUDGETED's config: daily and monthly limits for the workspace and for each user; and
    WORKSPACE's with budgets off (`budget: null`), since a workspace with no stored config now
    gets the default budget (shared.models.DEFAULT_BUDGET)."""
    from shared.adapters.aws.dynamodb import DynamoWorkspaceStore
    from shared.local import aws_mode
    from shared.models import BudgetLimits, ScopeLimits, WorkspaceConfig

    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=10_000_000, usd_per_month="100"),
        user=ScopeLimits(tokens_per_day=1_000_000, tool_calls_per_day=500),
    )
    client = aws_mode.aws_client("dynamodb", resources.endpoint, resources.region)
    store = DynamoWorkspaceStore(resources.memory_table, client=client)
    store.put(WorkspaceConfig(id=BUDGETED, budget=limits))
    store.put(WorkspaceConfig(id=WORKSPACE, budget=None))


def _post_events(
    logs: CallLog, events: int, workspace: str = WORKSPACE, session: str = SESSION
) -> list[list[Call]]:
    """(a) One signed POST per event through the webhook handler: each one's AWS calls."""
    from functions.webhook import handler as webhook
    from shared.channels import web
    from shared.local import aws_mode

    posts: list[list[Call]] = []
    for i in range(events):
        body = json.dumps(
            {"event_id": f"evt-{session}-{i:04d}", "session": session, "user": "u1", "text": f"message {i}"}
        ).encode()
        headers = [("content-type", "application/json"), ("host", "127.0.0.1")]
        headers += list(web.signed_headers(SIGNING_SECRET, body).items())
        event = aws_mode.http_api_event(
            route_key=aws_mode.POST_WEB,
            method="POST",
            raw_path=f"/webhooks/web/{workspace}",
            raw_query="",
            headers=headers,
            body=body,
            path_parameters={"workspace": workspace},
        )
        with logs.window() as seen:
            answer = webhook.lambda_handler(event, _context("sigil-local-webhook"))
        if answer["statusCode"] != 202:
            raise SystemExit(f"the webhook refused the bench's event: {answer}")
        posts.append(seen)
    return posts


def _run_turns(logs: CallLog, resources: Any) -> list[list[Call]]:
    """(b) Every queued event as its own batch, in order, through the aws mode's poller."""
    from functions.agent import handler as agent
    from shared.local import aws_mode

    turns: list[list[Call]] = []

    def invoke(batch: dict[str, Any]) -> Any:
        with logs.window() as seen:
            result = agent.lambda_handler(batch, _context("sigil-local-agent"))
        turns.append(seen)
        return result

    poller = aws_mode.FifoPoller(
        aws_mode.aws_client("sqs", resources.endpoint, resources.region),
        queue_url=resources.queue_url,
        queue_arn=resources.queue_arn,
        region=resources.region,
        invoke=invoke,
        batch_size=1,
    )
    while poller.poll_once():
        pass
    return turns


# A cold agent's import and first turn, in a fresh interpreter: the SQS event on stdin, the two
# times (ms) and the batch's failures on stdout. The context is a plain object, so that nothing
# of shared.local is imported before the handler.
_FIRST_TURN = """
import json, sys, time
sys.path[:0] = [{root!r}]
event = json.loads(sys.stdin.read())
started = time.perf_counter()
import functions.agent.handler as agent
imported = time.perf_counter()

class Context:
    function_name = "sigil-local-agent"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sigil-local-agent"
    memory_limit_in_mb = 1024
    aws_request_id = "bench-first-turn"
    function_version = "$LATEST"
    log_group_name = log_stream_name = ""
    deadline = time.monotonic() + 60

    def get_remaining_time_in_millis(self):
        return max(0, int((self.deadline - time.monotonic()) * 1000))

answer = agent.lambda_handler(event, Context())
done = time.perf_counter()
print(json.dumps({{"import_ms": (imported - started) * 1000, "turn_ms": (done - imported) * 1000,
                  "failures": answer.get("batchItemFailures", [])}}))
"""


@dataclass(frozen=True)
class FirstTurn:
    import_ms: float
    turn_ms: float
    bare_ms: float  # the bare handler's import, in a fresh interpreter just before


def first_turns(
    logs: CallLog, resources: Any, runs: int, trees: Sequence[Path] = (ROOT,)
) -> dict[Path, list[FirstTurn]]:
    """(d) `runs` cold containers per source tree, each importing the agent handler and running one
    turn: a web message of a new session, queued by the webhook and received here as its event
    source would. With two trees (--baseline), each round runs one container of each, in turn, on
    the same stand-ins."""
    from shared.local import aws_mode

    sqs = aws_mode.aws_client("sqs", resources.endpoint, resources.region)
    samples: dict[Path, list[FirstTurn]] = {tree: [] for tree in trees}
    for i in range(runs + 1):
        for n, tree in enumerate(trees):
            _post_events(logs, 1, session=f"cold-{i}-{n}")
            received = sqs.receive_message(
                QueueUrl=resources.queue_url,
                MaxNumberOfMessages=1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=5,
            ).get("Messages", [])
            if len(received) != 1:
                raise SystemExit(f"the first turn's message was not queued: {received}")
            event = aws_mode.sqs_event(received, queue_arn=resources.queue_arn, region=resources.region)
            bare = import_once(BARE)
            out = subprocess.run(  # noqa: S603 - this interpreter, running the fixed code above
                [sys.executable, "-c", LAYER_ONLY + _FIRST_TURN.format(root=str(tree))],
                input=json.dumps(event),
                # The rounds after the first read the bytecode caches it wrote, as (c)'s do, even
                # where the caller's environment says not to write them.
                env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                cwd=tree,
                capture_output=True,
                text=True,
                check=False,
            )
            sqs.delete_message(QueueUrl=resources.queue_url, ReceiptHandle=received[0]["ReceiptHandle"])
            if out.returncode != 0:
                raise SystemExit(f"the cold agent's first turn failed:\n{out.stderr[-4000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["failures"]:
                raise SystemExit(f"the cold agent's first turn failed its record: {out.stderr[-4000:]}")
            if i:  # the first run writes the bytecode caches of a fresh clone
                samples[tree].append(FirstTurn(result["import_ms"], result["turn_ms"], bare))
    return samples


def measure_calls(
    events: int, runs: int = 0, trees: Sequence[Path] = (ROOT,)
) -> tuple[list[Row], list[Row], list[Row], dict[Path, list[FirstTurn]]]:
    import boto3

    from shared import cloud
    from shared.adapters.aws import clients

    with ExitStack() as stack:
        resources, fake = _stand_ins(stack)
        logs = CallLog()
        boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        # Registered before any handler builds a client: a client copies the session's hooks.
        boto3.DEFAULT_SESSION.events.register("before-call", logs)
        clients.reset()
        cloud.reset()
        posts = _post_events(logs, events)
        turns = _run_turns(logs, resources)
        if len(turns) != events or len(fake.requests) != events:
            raise SystemExit(f"{events} events queued: {len(turns)} turns, {len(fake.requests)} model calls")
        # Then the budgeted workspace's turns, after the others: the container is warm, the
        # workspace and its sender are not (its first turn reads their config and identity).
        _post_events(logs, events, BUDGETED)
        budgeted = _run_turns(logs, resources)
        if len(budgeted) != events or len(fake.requests) != 2 * events:
            raise SystemExit(f"{events} budgeted events queued: {len(budgeted)} turns")
        cold = first_turns(logs, resources, runs, trees) if runs else {}

    webhook_rows = [Row("cold (first invocation)", posts[:1]), Row(f"warm (n={len(posts) - 1})", posts[1:])]
    # The window holds 20 messages, two a turn: from the 11th turn on, every commit rolls the
    # oldest two messages out to Tier 1 (DynamoDB) and the index (OpenSearch, not an AWS SDK call).
    filling, rolling = turns[1:10], turns[10:]
    agent_rows = [
        Row("cold (first turn of the container)", turns[:1]),
        Row(f"warm, window filling (n={len(filling)})", filling),
        Row(f"warm, window full: rolls 2 out (n={len(rolling)})", rolling),
    ]
    budget_rows = [
        Row("first turn of the workspace", budgeted[:1]),
        Row(f"warm, window filling (n={len(budgeted[1:10])})", budgeted[1:10]),
        Row(f"warm, window full: rolls 2 out (n={len(budgeted[10:])})", budgeted[10:]),
    ]
    return webhook_rows, agent_rows, budget_rows, cold


def _quiet_resets(handle_error: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """The fake model server's error report, minus clients dropping a kept-alive connection.

    The openai SDK's pool sometimes resets an idle connection; socketserver prints a traceback for
    each, which would bury the table and says nothing about the calls measured.
    """

    def report(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionResetError):
            handle_error(request, client_address)

    return report


# ---------------------------------------------------------------- cold imports


# What the layer does not hold is not importable in the measured interpreters, as in Lambda: the
# development environment has more (click, rich and pygments, which httpx imports for its command
# line when they are there, and the Lambda layer leaves out; layers/requirements.lock is the list).
LAYER_LOCK = ROOT / "layers" / "requirements.lock"
LAYER_ONLY = """
import importlib.abc, importlib.metadata, re, sys
def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
_locked = {_norm(line.split("==")[0]) for line in open(LOCK) if "==" in line and line[:1].isalnum()}
_outside = {top for top, dists in importlib.metadata.packages_distributions().items()
            if not any(_norm(d) in _locked for d in dists)}
class _NotInLayer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _outside:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the Lambda layer)", name=name)
        return None
sys.meta_path.insert(0, _NotInLayer())
""".replace("LOCK", repr(str(LAYER_LOCK)))


def import_once(module: str, tree: Path = ROOT) -> float:
    """Milliseconds to import `module` of the source tree `tree` in a fresh interpreter."""
    code = (
        LAYER_ONLY + "import sys, time\n"
        f"sys.path[:0] = [{str(tree)!r}, {str(ROOT / 'bench')!r}]\n"
        "t = time.perf_counter()\n"
        f"import {module}\n"
        "print((time.perf_counter() - t) * 1000)\n"
    )
    # The same minimal environment for every module: nothing of the caller's SIGIL_* or AWS_*.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["AWS_REGION"] = "us-east-1"
    out = subprocess.run(  # noqa: S603 - this interpreter, running the fixed code above
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"importing {module} of {tree} failed:\n{out.stderr}")
    return float(out.stdout.strip().splitlines()[-1])


def import_ms(modules: list[tuple[str, Path]], runs: int) -> dict[tuple[str, Path], list[float]]:
    """Each (module, source tree)'s import times, `runs` rounds after an unmeasured one (it writes
    the bytecode caches of a fresh clone). A round imports every module once, one after another,
    so that a machine whose load changes during the run weighs on all of them alike."""
    samples: dict[tuple[str, Path], list[float]] = {m: [] for m in modules}
    for i in range(runs + 1):
        for module, tree in modules:
            ms = import_once(module, tree)
            if i:
                samples[module, tree].append(ms)
    return samples


def ratio(samples: dict[tuple[str, Path], list[float]], key: tuple[str, Path]) -> float:
    """The median, over rounds, of the module's import time over the bare handler's in the same round."""
    bare = samples[BARE, ROOT]
    return statistics.median(m / b for m, b in zip(samples[key], bare, strict=True))


# ---------------------------------------------------------------- report


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*row) for row in rows]
    return "\n".join("  " + row.rstrip() for row in out)


def _listing(title: str, calls: list[Call]) -> str:
    width = max((len(c.name) for c in calls), default=0)
    lines = [f"  {title}:"] + [f"    {i}. {c.name:<{width}}  {c.where}" for i, c in enumerate(calls, 1)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=20, help="webhook events, each then one turn")
    parser.add_argument("--runs", type=int, default=9, help="fresh interpreters per module import")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git worktree add /tmp/base main`) whose agent's import and "
        "first turn (c, d) are measured in the same rounds, for a before and after on one machine",
    )
    args = parser.parse_args(argv)
    if args.events < 12:
        parser.error("--events must be at least 12, for turns with a full window")

    started = time.monotonic()
    trees = (ROOT,) if args.baseline is None else (ROOT, args.baseline.resolve())
    webhook_rows, agent_rows, budget_rows, cold = measure_calls(args.events, args.runs, trees)
    modules = [(m, ROOT) for m in (BARE, *HANDLERS)] + [(AGENT, tree) for tree in trees[1:]]
    samples = import_ms(modules, args.runs)
    imports = {key: statistics.median(times) for key, times in samples.items()}

    print("\nSigil on moto: AWS calls per message, and cold imports (bench/aws_calls.py)\n")
    print("(a) AWS calls per accepted webhook event (goal: 1 when warm, the SendMessage)")
    print(
        table(
            ["invocation", "AWS calls", "calls"],
            [[r.label, _spread(r.counts()), _summary(r.typical())] for r in webhook_rows],
        )
    )
    print(_listing("the cold invocation's calls", webhook_rows[0].typical()))
    print("\n(b) DynamoDB round trips per agent turn, no tools (goal: <= 3)")
    print(
        table(
            ["workspace", "turn", "DynamoDB", "other AWS"],
            [
                [
                    workspace,
                    r.label,
                    _spread(r.counts("dynamodb")),
                    _spread([a - d for a, d in zip(r.counts(), r.counts("dynamodb"), strict=True)]),
                ]
                for workspace, rows in (("no budget", agent_rows), ("budgeted", budget_rows))
                for r in rows
            ],
        )
    )
    print(_listing("a warm turn's calls, in order (window full)", agent_rows[-1].typical()))
    print(_listing("a warm budgeted turn's calls, in order (window full)", budget_rows[-1].typical()))
    bare = imports[BARE, ROOT]
    goals = "goal: webhook and agent <= 1.5x bare"
    print(
        f"\n(c) cold import, median of {args.runs} rounds of fresh interpreters, x bare per round ({goals})"
    )
    rows = [["bench/bare_handler.py (powertools only)", f"{bare:.0f}", "1.00", ""]]
    for module, goal in HANDLERS.items():
        times = ratio(samples, (module, ROOT))
        verdict = "" if goal is None else ("meets goal" if times <= goal else f"over {goal}x")
        rows.append([module, f"{imports[module, ROOT]:.0f}", f"{times:.2f}", verdict])
    for tree in trees[1:]:
        rows.append(
            [f"{AGENT} of {tree}", f"{imports[AGENT, tree]:.0f}", f"{ratio(samples, (AGENT, tree)):.2f}", ""]
        )
    print(table(["module", "ms", "x bare", ""], rows))
    print(
        f"\n(d) a cold agent container, median of {args.runs} fresh interpreters: its import, then its "
        "first turn (a new web session's message)"
    )
    print(
        table(
            ["tree", "import ms", "first turn ms", "import + first turn ms", "import x bare"],
            [[str(tree), *_cold_row(cold[tree])] for tree in trees],
        )
    )
    clients = platform_client_ms(args.runs, trees)
    print(
        f"\n(e) a platform reply's HTTP client on a cold container, median of {args.runs}: what a Telegram, "
        "Slack, Discord or WhatsApp first turn adds that (d)'s web message does not"
    )
    print(
        table(
            ["tree", "senders + client ms", "import ms (c)", "sum ms"],
            [
                [
                    str(tree),
                    f"{statistics.median(clients[tree]):.0f}",
                    f"{imports[AGENT, tree]:.0f}",
                    f"{statistics.median(clients[tree]) + imports[AGENT, tree]:.0f}",
                ]
                for tree in trees
            ],
        )
    )
    print(f"\n({time.monotonic() - started:.0f} s; moto {_version('moto')}, Python {sys.version.split()[0]})")


# (e): a cold container's platform client, after the import and the provider the first turn makes.
# The senders' collaborators are not called while they are built; the client is taken as the first
# send takes it (ApiClient.http; a tree from before it had none kept the client in _http).
_PLATFORM_CLIENT = """
import sys, time, json
sys.path[:0] = [{root!r}]
import functions.agent.handler
from shared.providers.openai import OpenAIProvider
OpenAIProvider(api_key="sk-bench", base_url="http://127.0.0.1:9/v1")
started = time.perf_counter()
from shared.channels.out import build_senders
api = build_senders(None, None).get("telegram").api._client
client = getattr(api, "http", None) or api._http
print(json.dumps({{"ms": (time.perf_counter() - started) * 1000}}))
"""


def platform_client_ms(runs: int, trees: Sequence[Path]) -> dict[Path, list[float]]:
    """(e) per tree: the senders and the platforms' client on a cold container, `runs` rounds."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["AWS_REGION"] = "us-east-1"
    samples: dict[Path, list[float]] = {tree: [] for tree in trees}
    for i in range(runs + 1):
        for tree in trees:
            out = subprocess.run(  # noqa: S603 - this interpreter, running the fixed code above
                [sys.executable, "-c", LAYER_ONLY + _PLATFORM_CLIENT.format(root=str(tree))],
                env=env,
                cwd=tree,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise SystemExit(f"the platform client of {tree} failed:\n{out.stderr[-3000:]}")
            if i:
                samples[tree].append(json.loads(out.stdout.strip().splitlines()[-1])["ms"])
    return samples


def _cold_row(cold: list[FirstTurn]) -> list[str]:
    """(d)'s figures for one tree: medians of the import, the first turn, their sum, and the import
    against the bare handler's just before each container's (as (c) does per round)."""
    return [
        f"{statistics.median(x.import_ms for x in cold):.0f}",
        f"{statistics.median(x.turn_ms for x in cold):.0f}",
        f"{statistics.median(x.import_ms + x.turn_ms for x in cold):.0f}",
        f"{statistics.median(x.import_ms / x.bare_ms for x in cold):.2f}",
    ]


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
