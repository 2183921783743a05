"""A fired schedule goes to its session's own lane queue when the lanes are sharded, so it queues
behind that session's messages (docs/schedules.md, docs/scale.md#sharded-lanes)."""

from __future__ import annotations

from shared.adapters.aws import _lane_queue_arns
from shared.adapters.aws.sqs import SqsLanes

ARN = "arn:aws:sqs:eu-west-1:123456789012:sigil-dev-turns.fifo"
URLS = tuple(
    f"https://sqs.eu-west-1.amazonaws.com/123456789012/sigil-dev-turns{s}.fifo" for s in ("", "-1", "-2")
)


def test_one_queue_is_its_arn() -> None:
    assert _lane_queue_arns(ARN, URLS[:1]) == ARN
    assert _lane_queue_arns(ARN, ()) == ARN


def test_each_session_is_sent_to_the_queue_its_messages_go_to() -> None:
    target = _lane_queue_arns(ARN, URLS)
    assert callable(target)
    lanes = SqsLanes(URLS, client=object())  # type: ignore[arg-type]  # routing only: no call is made
    sessions = [f"ws1|web.user{n}.main" for n in range(60)]
    for group in sessions:
        url = lanes.queue_of(group)
        assert target(group) == f"arn:aws:sqs:eu-west-1:123456789012:{url.rsplit('/', 1)[1]}"
    assert {target(g) for g in sessions} == {
        f"arn:aws:sqs:eu-west-1:123456789012:{u.rsplit('/', 1)[1]}" for u in URLS
    }
