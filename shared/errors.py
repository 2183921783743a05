"""The domain's error hierarchy. Each boundary (HTTP, FIFO batch, tool result) maps these once."""

from __future__ import annotations


class SigilError(Exception):
    """Base of every error Sigil raises on purpose. `code` is stable and safe to show a client."""

    code = "sigil_error"
    http_status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BadRequest(SigilError):
    """The input cannot be understood: malformed JSON, a missing field, an oversized body."""

    code = "bad_request"
    http_status = 400


class Unauthorized(SigilError):
    """A signature is missing, wrong, or outside its timestamp window."""

    code = "unauthorized"
    http_status = 401


class Forbidden(SigilError):
    """The caller is known but not allowed (unknown sender under an allow list, a denied tool)."""

    code = "forbidden"
    http_status = 403


class NotFound(SigilError):
    code = "not_found"
    http_status = 404


class ConcurrencyConflict(SigilError):
    """An optimistic write lost the race: the stored version moved since it was read."""

    code = "conflict"
    http_status = 409


class ModelNotConfigured(SigilError):
    """No LLM provider is configured: the gateway says so instead of answering with a fake."""

    code = "model_not_configured"
    http_status = 503


class ProviderError(SigilError):
    """The model provider failed after its retries.

    `retryable` says whether the same call may succeed if made again (a 429, a 5xx, a timeout, a
    dropped connection); each provider sets it from its SDK's error, and ResilientProvider reads
    it. It defaults to False, so an error nobody classified is never retried blindly.
    `retry_after_s` is the wait the server asked for (Retry-After), when it gave one.
    """

    code = "provider_error"
    http_status = 502

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class ToolCallLimitExceeded(SigilError):
    code = "tool_call_limit"
    http_status = 429


class BudgetExceeded(SigilError):
    code = "budget_exceeded"
    http_status = 429


class EmbeddingError(ProviderError):
    """The embedding model failed: memory search falls back to BM25, and writes go text-only
    until the backfill embeds them."""

    code = "embedding_error"
    http_status = 502


class IndexUnavailable(SigilError):
    """The memory index could not answer: memory search falls back to the session's recent
    messages."""

    code = "index_unavailable"
    http_status = 503


class DeadlineExceeded(ProviderError):
    """A model call (its connect, every chunk of its stream, its retries and fallback) did not end
    by its deadline: the least of its own limit (SIGIL_PROVIDER_DEADLINE_S) and the turn's. The
    stream is cut when it passes. Or another call of the turn (an embedding, an index search, a
    store's read or write, a channel post) did not end by the turn's deadline. A failure of the
    turn like any other provider error: the lane retries the item, and apologises on its last
    delivery."""

    code = "deadline_exceeded"
    http_status = 504

    def __init__(self, message: str = "the model call did not finish by its deadline") -> None:
        # Retryable: a later delivery gets a fresh deadline. Within this one, nothing is retried
        # past the deadline (shared.providers.resilient checks the time left).
        super().__init__(message, retryable=True)


class TurnNotStarted(SigilError):
    """The agent function had too little time left to run this turn: the record goes back to the
    queue as a failure of that record alone (the batch's partial response) and runs later."""

    code = "turn_not_started"
    http_status = 503


class SandboxError(SigilError):
    """A run_python script was stopped or failed inside its WebAssembly sandbox (docs/sandbox.md).

    `limit` names what stopped it: fuel, memory, wall_time, output, host_calls, or script (the
    script raised). The host is never harmed; the message is safe to show the model.
    """

    code = "sandbox_error"
    http_status = 422

    def __init__(self, message: str, *, limit: str, used: dict[str, int | float] | None = None) -> None:
        super().__init__(message, code=f"sandbox_{limit}")
        self.limit = limit
        self.used = used or {}


class TaskCapReached(SigilError):
    """The session or the workspace already runs as many delegated tasks as its config allows."""

    code = "task_cap"
    http_status = 429


class StaleTask(SigilError):
    """A task record changed since it was read (another invocation or a cancel saved it first)."""

    code = "stale_task"
    http_status = 409


class MediaRefused(SigilError):
    """An attachment was not fetched: too large (declared or while streaming), too many, over the
    day's total, a kind the workspace does not take, or not this workspace's file."""

    code = "media_refused"
    http_status = 413
