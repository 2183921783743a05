"""What the model side of media costs per 1,000 messages of each kind (docs/media.md, "Costs"),
from the formulas the turn budgets by: a photo's prompt tokens (shared.providers.capabilities)
at each model's list price (shared.budgets.PriceTable), a voice note's minutes at the
transcription price (shared.providers.transcription), a document's extracted text as prompt
tokens (characters / 4, as shared.agent.context estimates). Storage and requests are AWS's and
are in the tables above. Arithmetic only: no workload runs.

    .venv/bin/python bench/cost.py --media-only
"""

from __future__ import annotations

from decimal import Decimal

from shared.budgets import PriceTable
from shared.providers.capabilities import image_tokens
from shared.providers.transcription import USD_PER_MIN

MODELS = (
    "openai/gpt-4.1-mini",
    "openai/gpt-4o",
    "anthropic/claude-sonnet-4-5",
    "bedrock/amazon.nova-lite-v1:0",
)
PHOTOS = {
    "phone photo 4032x3024": (4032, 3024),
    "screenshot 1170x2532": (1170, 2532),
    "chat image 1280x960": (1280, 960),
}
VOICE_SECONDS = 30  # a typical voice note
DOCUMENT_CHARS = 20_000  # ~10 pages of a report


def rows() -> list[tuple[str, str, int, Decimal]]:
    """(kind, model, prompt tokens or seconds, USD per 1,000 messages)."""
    prices = PriceTable()
    out = []
    for model in MODELS:
        price = prices.price(model)
        for name, (w, h) in PHOTOS.items():
            tokens = image_tokens(model, w, h)
            out.append((name, model, tokens, price.input_per_mtok * tokens / 1000))
        tokens = DOCUMENT_CHARS // 4
        out.append(
            (f"document {DOCUMENT_CHARS:,} chars", model, tokens, price.input_per_mtok * tokens / 1000)
        )
    for ref, rate in USD_PER_MIN.items():
        out.append((f"voice note {VOICE_SECONDS} s", ref, VOICE_SECONDS, rate * VOICE_SECONDS / 60 * 1000))
    return out


def render() -> str:
    lines = [
        "Media, model side, per 1,000 messages (tokens: prompt tokens each; voice: seconds each)",
        f"{'kind':<28} {'model':<36} {'tokens/s':>9} {'USD/1k':>9}",
    ]
    for kind, model, amount, usd in rows():
        lines.append(f"{kind:<28} {model:<36} {amount:>9,} {float(usd):>9.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
