"""What each stage costs a month with nothing running, priced by bench/cost.py from the stage's
synthesised template at bench/prices.json's list prices (docs/cost.md#the-floors)."""

from __future__ import annotations

import pytest

from bench import cost
from tests.infra.helpers import Synth

pytestmark = pytest.mark.slow


def _floor(synth: Synth) -> dict[str, float]:
    lines = cost.floor_lines(synth.raw, cost.load_prices(), None, cost.function_configs(synth.raw))
    return {line.item: line.usd for line in lines}


def test_the_dev_floor_is_at_most_30_dollars_a_month(dev: Synth) -> None:
    floor = _floor(dev)

    assert sum(floor.values()) <= 30
    # The node and its volume are most of it; what else a stage pays for idle is a dollar or two.
    assert floor["OpenSearch data nodes"] + floor["OpenSearch storage"] > 0.9 * sum(floor.values())
    assert floor["CloudWatch dashboards"] == floor["KMS keys"] == 0


def test_the_team_floor_is_under_half_of_prods_and_keeps_prods_monitoring(team: Synth, prod: Synth) -> None:
    team_floor, prod_floor = _floor(team), _floor(prod)

    assert sum(team_floor.values()) < sum(prod_floor.values()) / 2
    for item in ("Secrets Manager secrets", "CloudWatch alarms", "CloudWatch dashboards", "KMS keys"):
        assert team_floor[item] == prod_floor[item], item
