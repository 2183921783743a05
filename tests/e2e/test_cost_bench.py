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
    # One SendMessage per webhook event to the lanes, one TurnCommitted per turn to the extraction
    # queue (a standard queue's requests, per-turn extraction's share); the pollers received and
    # deleted them
    extraction = cost.usage_of(run, cost.EXTRACTION_STAGES, TURNS)
    assert usage.calls["sqs.SendMessage"] == 2 * TURNS
    assert extraction.calls["sqs.SendMessage"] == TURNS
    assert extraction.calls["sqs.ReceiveMessage"] >= 1 and extraction.calls["sqs.DeleteMessageBatch"] >= 1
    assert len(extraction.sqs_standard_payloads) == sum(
        extraction.calls[c] for c in extraction.calls if c.startswith("sqs.")
    )
    assert extraction.sqs_payloads == []
    # Every TurnCommitted reached the consolidate function: the last round's extracted, with the
    # consolidation model's tokens counted, and no event was left in the queue
    assert sum(run.extractions.values()) == TURNS
    assert run.extractions["done"] >= SESSIONS
    assert set(run.extractions) <= {"done", "superseded"}
    assert [i.function for i in extraction.invocations] == ["consolidate"] * len(extraction.invocations)
    assert extraction.model_chars_in > 0 and extraction.model_chars_out > 0
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

    # Priced: both waits, the longer one dearer by the model calls alone: the agent's chat calls and
    # the consolidate function's calls of the consolidation model (per-turn extraction's)
    short, long = report.per_thousand(3.0), report.per_thousand(15.0)
    assert all(x.usd >= 0 for x in short + long)
    extra = sum(b.usd - a.usd for a, b in zip(short, long, strict=True))
    expected = 0.0
    for name, config in report.functions.items():
        calls = sum(i.model_calls for i in usage.invocations if i.function == name)
        rate = report.prices[f"lambda_gb_s_{config.architecture}"]["usd"]
        expected += calls * 12 * config.memory_mb / 1024 * rate * 1000 / TURNS
    consolidation_calls = sum(i.model_calls for i in extraction.invocations)
    assert consolidation_calls >= run.extractions["done"]
    assert sum(i.model_calls for i in usage.invocations if i.function == "agent") == run.chat_calls
    assert abs(extra - expected) < 1e-6 * expected + 1e-9
    # The floor follows the dev stage's template: one t3.small.search data node, no masters
    (floor,) = report.floors().values()
    items = {x.item: x for x in floor}
    assert items["OpenSearch data nodes"].unit == "x t3.small.search"
    assert "OpenSearch masters" not in items
    # Extraction's share is part of the total, and is priced on its own
    share = sum(x.usd for x in report.per_thousand(3.0, cost.EXTRACTION_STAGES))
    assert 0 < share < sum(x.usd for x in short)
    text = report.render()
    assert "total without per-turn extraction" in text
    for heading in ("(a) $ per 1,000 turns", "(b) the same turns' memory", "(c) each stage's monthly floor"):
        assert heading in text


def test_a_delegated_tasks_model_calls_are_priced_at_each_model_class() -> None:
    table = cost.delegation_cost()
    rows = {line.split("  ")[1].strip(): line for line in table.splitlines() if "the task, " in line}
    assert set(rows) == {f"the task, {c} class" for c in cost.CLASS_MODELS}
    # the task's own tokens, counted by its budget, priced dearer for a dearer class
    prices = [
        float(rows[f"the task, {c} class"].split("$")[1].split()[0]) for c in ("frontier", "fast", "cheap")
    ]
    assert prices[0] > prices[1] > prices[2] > 0
    assert "the outcome's turn (the agent's model)" in table
