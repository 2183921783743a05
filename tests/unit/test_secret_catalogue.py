"""The catalogue of secret names (shared.config) is what the channels and providers really read."""

from __future__ import annotations

from shared.channels import discord, slack, telegram, whatsapp
from shared.channels.out import slack as slack_out
from shared.channels.out import telegram as telegram_out
from shared.channels.out import whatsapp as whatsapp_out
from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEYS, OPTIONAL_SECRETS, PROVIDER_KEY_SECRETS


def test_the_catalogue_names_exactly_the_secrets_the_code_reads() -> None:
    read = {
        discord.SECRET,
        slack.SECRET,
        slack_out.TOKEN_SECRET,
        telegram.SECRET,
        telegram_out.TOKEN_SECRET,
        whatsapp.APP_SECRET,
        whatsapp.VERIFY_TOKEN,
        whatsapp_out.TOKEN_SECRET,
        whatsapp_out.PHONE_NUMBER_SECRET,
        *PROVIDER_KEY_SECRETS.values(),
    }
    catalogue = {spec.key for spec in (*INGRESS_SECRETS, *CHANNEL_TOKENS, *LLM_KEYS, *OPTIONAL_SECRETS)}
    assert read <= catalogue
    # The stack also makes a Discord bot token for the operator to fill; replies to interactions
    # authenticate with the interaction's own token, so nothing reads it yet.
    assert catalogue - read == {"discord/bot-token"}
