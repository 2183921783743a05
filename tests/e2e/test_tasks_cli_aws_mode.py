"""`sigil tasks` against a running `sigil dev --aws` (docs/delegation.md#control): run as a person
runs it in a second terminal, with the data dir alone, it reaches the mode's stores on moto (as
the other admin commands do) and shows the task the real agent handler delegated and ran.

The model is bench/chaos_tasks.py's script (an OpenAI-wire server the real SDK talks to): the
agent delegates one worker task, which stores three facts and finishes; the agent then tells the
user "outcome s00t0".
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx

from bench import chaos_tasks
from shared.channels import web
from tests.e2e.conftest import ROOT, DevGateway, gateway_env, wait_until
from tests.e2e.test_first_hour import CLI_TIMEOUT_S, SIGIL
from tests.support.fake_openai import FakeOpenAI


def sigil(gw: DevGateway, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SIGIL, *args, "--data-dir", str(gw.data_dir)],
        check=False,
        cwd=ROOT,
        env=gw.env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def outbox(gw: DevGateway) -> list[str]:
    target = "/sessions/default/cli/outbox?after=0"
    resp = httpx.get(gw.url + target, headers=web.signed_headers(gw.secret, target.encode()), timeout=30)
    resp.raise_for_status()
    return [str(r["text"]) for r in resp.json()["replies"]]


def test_sigil_tasks_reaches_the_stores_of_a_running_sigil_dev_aws(tmp_path: Path) -> None:
    with FakeOpenAI(chaos_tasks.script(1)) as model:
        config = tmp_path / "sigil.yaml"
        config.write_text("workspaces:\n  default:\n    budget: null\n")
        env = gateway_env(model) | {"SIGIL_CONFIG": str(config), "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "1"}
        gw = DevGateway(tmp_path / "state", env, extra_args=["--aws"]).start()
        try:
            # Given a conversation whose agent delegated a task that has ended and been told
            body = json.dumps({"event_id": "e1", "session": "cli", "user": "u1", "text": "s00 delegate 1"})
            posted = httpx.post(
                f"{gw.url}/webhooks/web/default",
                content=body.encode(),
                headers=web.signed_headers(gw.secret, body.encode()),
                timeout=60,
            )
            assert posted.status_code < 300, posted.text
            assert wait_until(lambda: "outcome s00t0" in outbox(gw), timeout=180), outbox(gw)

            # When the operator lists the workspace's tasks with the data dir alone
            listed = sigil(gw, "tasks", "list")
            # Then the mode's task is there, done, in its session
            assert listed.returncode == 0, listed.stderr
            found = re.search(r"^web\.cli  (tsk-\S+)  worker  done  ", listed.stdout, re.MULTILINE)
            assert found, listed.stdout
            task_id = found.group(1)
            # and its detail gives its usage and its spend beside its parent turn's
            shown = sigil(gw, "tasks", "show", task_id)
            assert shown.returncode == 0, shown.stderr
            assert f"Task {task_id}: worker, done" in shown.stdout
            assert re.search(r"Spend: task est\. \$\S+, parent turn t_\S+ est\. \$\S+", shown.stdout), (
                shown.stdout
            )
            assert "Result (90% confident): done s00t0" in shown.stdout
            # and a cancel of an ended task changes nothing
            cancelled = sigil(gw, "tasks", "cancel", task_id)
            assert cancelled.returncode == 0 and "has already ended (done)" in cancelled.stdout
        finally:
            gw.stop()
