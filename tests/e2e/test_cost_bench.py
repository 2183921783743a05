"""A tiny run of bench/cost.py (a few turns through the real handlers on moto and osmem-server), so
the bench cannot rot between `make bench` runs: every count it prices is really made."""

from __future__ import annotations

from bench import cost

TURNS, SESSIONS = 6, 2


def test_a_few_turns_are_measured_counted_and_priced() -> None:
    report = cost.measure(TURNS, SESSIONS, stages=("dev",))
    usage, run = report.usage, report.run

    # Every turn was posted, reached the model, and its reply was read back
    assert run.replies == TURNS
    # One SendMessage per webhook event, and Lambda's poller received and deleted them
    assert usage.calls["sqs.SendMessage"] == TURNS
    assert usage.calls["sqs.ReceiveMessage"] >= 1 and usage.calls["sqs.DeleteMessageBatch"] >= 1
    # Each turn is a POST and an outbox GET through the webhook, billed as two HTTP API requests
    webhook = [i for i in usage.invocations if i.function == "webhook"]
    assert len(webhook) == len(usage.http_requests) == 2 * TURNS
    # The agent's invocations made every chat call, each turn at least one
    agent = [i for i in usage.invocations if i.function == "agent"]
    assert sum(i.model_calls for i in agent) == run.chat_calls >= TURNS
    assert all(i.own_ms > 0 for i in usage.invocations)
    # DynamoDB units from real item sizes: each turn commits its session in a transaction (2 WRU at least)
    assert usage.calls["dynamodb.TransactWriteItems"] >= TURNS
    assert usage.dynamodb_wru >= 2 * TURNS and usage.dynamodb_rru > 0
    assert usage.dynamodb_stored_bytes > 0
    # The webhook and the agent logged and emitted metrics; the signing and API-key secrets were read
    assert usage.log_bytes["webhook"] > 0 and usage.log_bytes["agent"] > 0
    assert usage.metric_values > 0 and usage.metric_series
    assert usage.secrets_calls >= 2
    assert usage.messages_stored == 2 * run.chat_calls
    # The scheduled run is the floor's, measured on its own
    assert [i.function for i in report.schedule.invocations] == ["consolidate"]

    # Priced: both waits, the longer one dearer by the agent's model calls alone
    short, long = report.per_thousand(3.0), report.per_thousand(15.0)
    assert all(x.usd >= 0 for x in short + long)
    extra = sum(b.usd - a.usd for a, b in zip(short, long, strict=True))
    agent_mb = report.functions["agent"].memory_mb
    rate = report.prices[f"lambda_gb_s_{report.functions['agent'].architecture}"]["usd"]
    expected = run.chat_calls * 12 * agent_mb / 1024 * rate * 1000 / TURNS
    assert abs(extra - expected) < 1e-6 * expected + 1e-9
    # The floor follows the dev stage's template: one t3.medium.search data node, no masters
    (floor,) = report.floors().values()
    items = {x.item: x for x in floor}
    assert items["OpenSearch data nodes"].unit == "x t3.medium.search"
    assert "OpenSearch masters" not in items
    text = report.render()
    for heading in ("(a) $ per 1,000 turns", "(b) the same turns' memory", "(c) each stage's monthly floor"):
        assert heading in text
