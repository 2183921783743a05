"""A stand-in for the Lambda context a handler receives: the attributes powertools' logger reads,
and the time left, which the consolidate handler turns into its deadline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LambdaContext:
    function_name: str = "sigil-test"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:sigil-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    remaining_ms: int = 15 * 60 * 1000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def context_for(function: str) -> LambdaContext:
    """The context of the function named `function` (its ARN says so too)."""
    return LambdaContext(
        function_name=function,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{function}",
    )
