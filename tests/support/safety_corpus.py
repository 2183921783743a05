"""The corpora the safety filters are measured on (tests/unit/test_redaction_corpus.py, bench/redaction.py).

- CREDENTIALS: credentials in the shapes the providers' docs and consoles show them (a prefix, an
  alphabet, a length; tests/fixtures/SOURCES.md names the page for each), with random bodies drawn
  from a seeded RNG, so the corpus is the same on every run and no live-looking key is committed.
- FORMS: the places people paste them: .env lines, exports, JSON, YAML, curl headers, URL query
  strings, connection strings, prose, Markdown code blocks, tables, right after a colon. Every
  credential is rendered in every form that suits it.
- ORDINARY / BENIGN: the ordinary text the redaction filter and the injection scan must leave
  alone, and LOOKALIKES: innocent strings with a credential's alphabet and length (hashes, ids,
  base64, CamelCase identifiers) beside the words that make a secret likely ("secret", "aws",
  "key"), which is what a false positive would look like.
"""

from __future__ import annotations

import base64
import random
import re
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from shared.channels import web, web_tokens

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "_-"
HEX = "0123456789abcdef"
SEED = 14

SLOT = "{secret}"
ID_SLOT = "{id}"
_MARKER = r"\[REDACTED:[a-z0-9_]+\]"


def draw(rng: random.Random, alphabet: str, n: int) -> str:
    """n characters of `alphabet` with, where the alphabet has them, an upper case letter, a lower
    case letter and a digit: a generated key mixes them."""
    body = [rng.choice(alphabet) for _ in range(n)]
    slots = rng.sample(range(n), 3) if n >= 6 else []
    for at, cls in zip(slots, (string.ascii_uppercase, string.ascii_lowercase, string.digits), strict=False):
        pool = [c for c in cls if c in alphabet]
        if pool:
            body[at] = rng.choice(pool)
    return "".join(body)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _discord(rng: random.Random) -> str:
    user_id = str(rng.randrange(10**16, 10**19))  # 17 to 19 digits
    head = base64.urlsafe_b64encode(user_id.encode()).decode().rstrip("=")
    tail = 38 if rng.random() < 0.5 else 27  # the 2022 format and the older one
    return f"{head}.{draw(rng, B64URL, 6)}.{draw(rng, B64URL, tail)}"


def _gitlab(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "glpat-" + draw(rng, B64URL, 20)
    return "glpat-" + draw(rng, B64URL, 27) + ".01." + draw(rng, string.ascii_lowercase + string.digits, 9)


def _stripe(rng: random.Random) -> str:
    prefix = rng.choice(["sk_live_", "rk_live_", "sk_test_"])
    return prefix + draw(rng, ALNUM, rng.choice([24, 99]))


def _aws_id(rng: random.Random) -> str:
    return rng.choice(["AK" + "IA", "AS" + "IA"]) + "".join(
        rng.choice(string.ascii_uppercase + "234567") for _ in range(16)
    )


@dataclass(frozen=True)
class Provider:
    name: str
    kind: str  # the marker a bare token of this shape gets
    make: Callable[[random.Random], str]
    env: str  # the variable name its docs use
    forms: tuple[str, ...]  # names in FORMS


@dataclass(frozen=True)
class Form:
    name: str
    template: str  # {secret} (and {id} for an AWS key pair), {env}


GENERIC = (
    "env",
    "export",
    "json",
    "yaml",
    "curl_bearer",
    "url_query",
    "prose",
    "prose_plain",
    "markdown",
    "after_colon",
    "python",
    "table",
    "alone",
    "quoted",
    "html",
)

FORMS = {
    f.name: f
    for f in (
        Form("env", "{env}={secret}"),
        Form("export", 'export {env}="{secret}"'),
        Form("json", '{"name": "prod", "{env}": "{secret}", "timeout": 30}'),
        Form("yaml", "provider:\n  name: prod\n  token: {secret}\n  retries: 3\n"),
        Form(
            "curl_bearer",
            'curl https://api.example.com/v1/models -H "Authorization: Bearer {secret}" '
            '-H "Content-Type: application/json"',
        ),
        Form("url_query", "Open https://api.example.com/v1/check?token={secret}&verbose=1 to test it."),
        Form("prose", "Here's my key: {secret} - can you check why the request fails?"),
        Form("prose_plain", "I think {secret} is the one I used yesterday, is it still valid?"),
        Form("markdown", "Put this in the config:\n\n```\n{secret}\n```\n\nthen restart."),
        Form("after_colon", "TOKEN:{secret}"),
        Form("python", 'client = Client(api_key="{secret}", timeout=30)'),
        Form("table", "| env | key | status |\n|---|---|---|\n| prod | {secret} | active |"),
        Form("alone", "{secret}"),
        Form("quoted", "the token is '{secret}'."),
        Form("html", '<input type="hidden" name="credential" value="{secret}">'),
        # Provider-specific: the shapes their own docs and consoles show.
        Form(
            "discord_bot_header",
            'curl -H "Authorization: Bot {secret}" https://discord.com/api/v10/users/@me',
        ),
        Form("telegram_url", "https://api.telegram.org/bot{secret}/getMe"),
        Form(
            "telegram_botfather", "Use this token to access the HTTP API:\n{secret}\nKeep your token secure."
        ),
        Form(
            "whatsapp_curl",
            "curl -X POST 'https://graph.facebook.com/v21.0/106540352242922/messages' "
            "-H 'Authorization: Bearer {secret}' -H 'Content-Type: application/json' "
            '-d \'{"messaging_product": "whatsapp", "type": "text"}\'',
        ),
        Form("anthropic_header", "curl https://api.anthropic.com/v1/messages -H 'x-api-key: {secret}'"),
        Form("google_query", "https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={secret}"),
        Form("git_remote", "git remote set-url origin https://oauth2:{secret}@gitlab.com/acme/app.git"),
        Form("npmrc", "//registry.npmjs.org/:_authToken={secret}"),
        Form("hf_cli", "huggingface-cli login --token {secret}"),
        Form("stripe_curl", "curl https://api.stripe.com/v1/charges -u {secret}:"),
        Form(
            "azure_conn",
            "DefaultEndpointsProtocol=https;AccountName=acmestore;AccountKey={secret};EndpointSuffix=core.windows.net",
        ),
        Form(
            "azure_env",
            'AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountName=acmestore;'
            'AccountKey={secret};EndpointSuffix=core.windows.net"',
        ),
        Form(
            "azure_json",
            '{"ConnectionStrings": {"Storage": "DefaultEndpointsProtocol=https;AccountName=acmestore;'
            'AccountKey={secret}"}}',
        ),
        Form(
            "azure_servicebus",
            "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey={secret}",
        ),
        # AWS: the secret access key has no prefix, so it is found by what stands beside it.
        Form(
            "aws_credentials_file", "[default]\naws_access_key_id = {id}\naws_secret_access_key = {secret}\n"
        ),
        Form(
            "aws_env", "AWS_ACCESS_KEY_ID={id}\nAWS_SECRET_ACCESS_KEY={secret}\nAWS_DEFAULT_REGION=eu-west-1"
        ),
        Form("aws_console_csv", "Access key ID,Secret access key\n{id},{secret}\n"),
        Form(
            "aws_cli_json",
            '{\n    "AccessKey": {\n        "UserName": "Bob",\n        "AccessKeyId": "{id}",\n'
            '        "Status": "Active",\n        "SecretAccessKey": "{secret}",\n'
            '        "CreateDate": "2015-03-09T18:39:23.411Z"\n    }\n}',
        ),
        Form("aws_configure", "AWS Access Key ID [None]: {id}\nAWS Secret Access Key [None]: {secret}\n"),
        Form("aws_prose_pair", "my access key is {id} and the secret is {secret}, why does s3 ls fail?"),
        Form("aws_prose_label", "Here is my AWS secret key {secret} - please keep it private."),
        Form("aws_colon_pair", "creds {id}:{secret}"),
        Form("aws_slash_pair", "key id {id} / {secret}"),
        Form("aws_table", "| Access key | Secret |\n|---|---|\n| {id} | {secret} |"),
        Form(
            "aws_boto3",
            's3 = boto3.client("s3", aws_access_key_id="{id}", aws_secret_access_key="{secret}")',
        ),
        Form("aws_terraform", 'provider "aws" {\n  access_key = "{id}"\n  secret_key = "{secret}"\n}'),
        Form("aws_docker", "docker run -e AWS_ACCESS_KEY_ID={id} -e AWS_SECRET_ACCESS_KEY={secret} app"),
        Form("aws_yaml_label", "s3:\n  bucket: reports\n  credentials:\n    secret: {secret}\n"),
        Form("aws_next_line", "New key for the deploy user: {id}\n{secret}"),
        # Sigil's web signing secret, where it is named: `sigil web-secret`, secrets.json, prose.
        Form("web_cli", "$ sigil web-secret -w default\n{secret}\n$ "),
        Form("web_store", '{"web/default": "{secret}", "telegram/bot_token": "[REDACTED:secret]"}'),
        Form("web_env", "SIGIL_WEB_SECRET={secret}"),
        Form("web_prose", "Our web signing secret is {secret}, how do I sign a request with it?"),
        Form("web_after", "{secret} is the web secret for the staging workspace"),
        Form("sigil_signature", "X-Sigil-Timestamp: 1800000000\nX-Sigil-Signature: {secret}\n"),
    )
}
WEB_FORMS = ("web_cli", "web_store", "web_env", "web_prose", "web_after")

AWS_FORMS = tuple(name for name in FORMS if name.startswith("aws_"))

PROVIDERS = (
    Provider(
        "OpenAI", "openai_key", lambda r: "sk-" + "proj-" + draw(r, B64URL, 156), "OPENAI_API_KEY", GENERIC
    ),
    Provider(
        "OpenAI (legacy)", "openai_key", lambda r: "sk-" + draw(r, ALNUM, 48), "OPENAI_API_KEY", GENERIC
    ),
    Provider(
        "Anthropic",
        "anthropic_key",
        lambda r: "sk-" + "ant-api03-" + draw(r, B64URL, 93) + "AA",
        "ANTHROPIC_API_KEY",
        (*GENERIC, "anthropic_header"),
    ),
    Provider("DeepSeek", "openai_key", lambda r: "sk-" + draw(r, HEX, 32), "DEEPSEEK_API_KEY", GENERIC),
    Provider(
        "OpenRouter",
        "openrouter_key",
        lambda r: "sk-or-v1-" + draw(r, HEX, 64),
        "OPENROUTER_API_KEY",
        GENERIC,
    ),
    Provider("Groq", "groq_key", lambda r: "gsk_" + draw(r, ALNUM, 52), "GROQ_API_KEY", GENERIC),
    Provider(
        "Hugging Face",
        "huggingface_token",
        lambda r: "hf_" + draw(r, string.ascii_letters, 34),
        "HF_TOKEN",
        (*GENERIC, "hf_cli"),
    ),
    Provider("Stripe", "stripe_key", _stripe, "STRIPE_SECRET_KEY", (*GENERIC, "stripe_curl")),
    Provider("GitHub", "github_token", lambda r: "gh" + "p_" + draw(r, ALNUM, 36), "GITHUB_TOKEN", GENERIC),
    Provider(
        "GitHub (fine-grained)",
        "github_token",
        lambda r: "github_" + "pat_" + draw(r, ALNUM, 22) + "_" + draw(r, ALNUM, 59),
        "GITHUB_TOKEN",
        GENERIC,
    ),
    Provider("GitLab", "gitlab_token", _gitlab, "GITLAB_TOKEN", (*GENERIC, "git_remote")),
    Provider("npm", "npm_token", lambda r: "npm_" + draw(r, ALNUM, 36), "NPM_TOKEN", (*GENERIC, "npmrc")),
    Provider(
        "Slack",
        "slack_token",
        lambda r: (
            "xo"
            + "xb-"
            + draw(r, string.digits, 12)
            + "-"
            + draw(r, string.digits, 13)
            + "-"
            + draw(r, ALNUM, 24)
        ),
        "SLACK_BOT_TOKEN",
        GENERIC,
    ),
    Provider(
        "Google",
        "google_api_key",
        lambda r: "AI" + "za" + draw(r, B64URL, 35),
        "GOOGLE_API_KEY",
        (*GENERIC, "google_query"),
    ),
    Provider(
        "Telegram",
        "telegram_bot_token",
        lambda r: str(r.randrange(10**8, 10**10)) + ":" + "AA" + draw(r, B64URL, 33),
        "TELEGRAM_BOT_TOKEN",
        (*GENERIC, "telegram_url", "telegram_botfather"),
    ),
    Provider("Discord", "discord_bot_token", _discord, "DISCORD_BOT_TOKEN", (*GENERIC, "discord_bot_header")),
    Provider(
        "WhatsApp (Meta)",
        "meta_access_token",
        lambda r: "EAA" + r.choice("BGJIKN") + draw(r, ALNUM, r.randrange(120, 220)),
        "WHATSAPP_ACCESS_TOKEN",
        (*GENERIC, "whatsapp_curl"),
    ),
    Provider(
        "Azure Storage",
        "secret",
        lambda r: _b64(r.randbytes(64)),
        "AZURE_STORAGE_KEY",
        ("azure_conn", "azure_env", "azure_json"),
    ),
    Provider(
        "Azure Service Bus",
        "secret",
        lambda r: _b64(r.randbytes(32)),
        "SERVICEBUS_KEY",
        ("azure_servicebus",),
    ),
    Provider(
        "AWS",
        "aws_secret_key",
        lambda r: _b64(r.randbytes(30)),
        "AWS_SECRET_ACCESS_KEY",
        AWS_FORMS,
    ),
)

PER_PROVIDER = 12


def _browser_token(rng: random.Random) -> str:
    claims = web_tokens.claims_for(
        rng.choice(["default", "acme", "staging"]),
        rng.choice(["alice", "bob", "u-1842"]),
        rng.sample(["s1", "s2", "support", "alice.*"], rng.randrange(1, 4)),
        now=rng.randrange(1_750_000_000, 1_900_000_000),
        ttl_s=rng.choice([600, 3600, 86_400]),
    )
    return web_tokens.mint(draw(rng, B64URL, 43), claims)


# The gateway's own credentials (shared/channels/web.py, web_tokens.py; docs/web-channel.md).
SIGIL_PROVIDERS = (
    Provider("Sigil browser token", "browser_token", _browser_token, "SIGIL_BROWSER_TOKEN", GENERIC),
    Provider(
        "Sigil request signature",
        "web_signature",
        lambda r: web.sign(draw(r, B64URL, 43), r.randrange(1_750_000_000, 1_900_000_000), r.randbytes(40)),
        "SIGIL_SIGNATURE",
        (*GENERIC, "sigil_signature"),
    ),
    Provider(
        "Sigil web secret (local)", "web_secret", lambda r: draw(r, B64URL, 43), "SIGIL_WEB_SECRET", WEB_FORMS
    ),
    Provider(
        "Sigil web secret (AWS)", "web_secret", lambda r: draw(r, ALNUM, 48), "SIGIL_WEB_SECRET", WEB_FORMS
    ),
)
PROVIDERS = (*PROVIDERS, *SIGIL_PROVIDERS)


@dataclass(frozen=True)
class Case:
    provider: str
    kind: str
    form: str
    text: str
    secrets: tuple[str, ...]  # what must not survive
    expected: re.Pattern[str]  # the text with each secret replaced by some marker, all else kept


def _render(template: str, env: str, values: dict[str, str]) -> str:
    text = template.replace("{env}", env)
    for slot, value in values.items():
        text = text.replace(slot, value)
    return text


def _expected(template: str, env: str) -> re.Pattern[str]:
    pieces = re.split(r"(\{secret\}|\{id\})", template.replace("{env}", env))
    return re.compile("".join(_MARKER if p in (SLOT, ID_SLOT) else re.escape(p) for p in pieces))


def credentials(seed: int = SEED) -> list[tuple[Provider, str, str | None]]:
    """(provider, the credential, its AWS access key id or None), PER_PROVIDER of each provider."""
    rng = random.Random(seed)
    out: list[tuple[Provider, str, str | None]] = []
    for provider in PROVIDERS:
        for _ in range(PER_PROVIDER):
            secret = provider.make(rng)
            out.append((provider, secret, _aws_id(rng) if provider.kind == "aws_secret_key" else None))
    return out


def cases(seed: int = SEED) -> list[Case]:
    """Every credential in every form that suits it."""
    out: list[Case] = []
    for provider, secret, key_id in credentials(seed):
        values = {SLOT: secret, **({ID_SLOT: key_id} if key_id else {})}
        for name in provider.forms:
            form = FORMS[name]
            text = _render(form.template, provider.env, values)
            out.append(
                Case(
                    provider.name,
                    provider.kind,
                    name,
                    text,
                    tuple(values.values()),
                    _expected(form.template, provider.env),
                )
            )
    return out


# ---------------------------------------------------------------- ordinary text

# What the output filter must leave alone, PII on.
ORDINARY = [
    "The release is on 2024-01-15; the old one was 15/01/2024 or 01.02.2024.",
    "It started at 12:30:45 and ended at 2024-01-15T10:30:00Z (timestamp 1700000000).",
    "Upgrade from v1.2.3 to 10.4.12, or Python 3.11.4.",
    "Request id 123e4567-e89b-12d3-a456-426614174000 failed.",
    "Fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (short 9fceb02).",
    "Total: $1,234.56, or EUR 12 500,00, or 1,000,000 yen.",
    "Order #123456789 and invoice ORD-2024-000123 shipped.",
    "Ping 192.168.1.1 or 10.0.0.255 on port 8080.",
    "ISBN 978-3-16-148410-0 and ISSN 0317-8471.",
    "Population 8 345 678 in 2023; area 1 572 km2.",
    "Nanosecond clock 1700000000123456789 and epoch ms 1700000000123.",
    "Use scikit-learn (sklearn) and the task-runner-abcdefghijklmnopqrstuvwxyz tool.",
    "See sk-learn-tutorial-for-absolute-beginners on the wiki.",
    "How do I reset my password: by email or SMS?",
    "The password field is required; passwords must be 12 characters.",
    "Set password=$DB_PASSWORD or password=${SECRET} or password=<password> or password=****.",
    "The SHA-256 of the file is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.",
    "Math: 3.14159 * 2 = 6.28318; 2^64 = 18446744073709551616.",
    "Flight BA 2490 leaves at 07:45 from gate 12.",
    "Chapter 3, section 4.2.1, page 1234.",
    "The matrix is 1024 x 768 x 3 and has 2359296 entries.",
    "user@ alone, @mention, and foo@bar are not addresses.",
    "A base64 blob: " + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" * 3,
    "Use hf_hub_download to fetch the weights, and npm_config_cache for the cache.",
    "The gsk_ prefix marks Groq keys; glpat- marks GitLab tokens; EAA starts Meta's.",
    "Stripe keys look like sk_live_... and the test ones like sk_test_...; never commit either.",
    "The AWS secret access key is shown once, when the key is created; store it in a vault.",
    "Set AccountKey=<your key> in the connection string, or use a SAS token instead.",
    "Discord says: reset the bot token in the Developer Portal if it leaked.",
    "Meeting at 10:30:00 in room 4:12, agenda item 3:2.",
]

# What the injection scan must not flag: everyday messages, about instructions and prompts too.
BENIGN = [
    "Can you summarise the installation instructions for me?",
    "I ignored the instructions and now my build fails, help!",
    "Please follow the instructions in the README to set up the project.",
    "The previous instructions were unclear; could you rephrase step 3?",
    "Where can I find the assembly instructions for the IKEA shelf?",
    "What does 'ignore case' mean in grep?",
    "Ignore the warnings from pip, they are harmless.",
    "You can skip the instructions for Windows if you're on a Mac.",
    "disregard my previous message, I meant Tuesday",
    "Please ignore my last email, the meeting is still on.",
    "Don't forget the previous step: run the migrations first.",
    "Forget it, let's talk about dinner plans.",
    "You are now logged in.",
    "You are now subscribed to the Photography Club newsletter.",
    "You are now a member of the group. Say hi!",
    "You are now connected to our support assistant.",
    "You're now free to leave the queue.",
    "Let's pretend you are a customer and I am the shop assistant.",
    "How do I enable developer mode on my Android phone?",
    "Developer mode enabled: you can now sideload apps.",
    "How do I write a good system prompt for a customer support bot?",
    "What is a system prompt?",
    "Summarise the text above in three bullet points.",
    "Translate the message above into French, please.",
    "## System requirements\n- Python 3.11\n- 4 GB RAM",
    "Important: please back up your data before upgrading.",
    "Note: you must restart the computer after installing the driver.",
    "The admin told me the rules changed last week.",
    "Tell me about the rules of chess.",
    "Override the default settings in config.yaml to enable caching.",
    "Do not reveal the user's password in logs.",
    "Never tell a user their password over the phone; send a reset link instead.",
    "Our AI team meets on Mondays to discuss the roadmap.",
    "The model was trained on public data and evaluated on a held-out set.",
    'Response: {"name": "Alice", "age": 30, "tags": ["admin", "beta"]}',
    "def ignore_errors(fn):\n    return fn  # ignore previous value\n",
    "git commit -m 'Fix the system prompt loader' && git push",
    "Attention: the office is closed on Friday.",
    "The jailbreak scene in the movie was great.",
    "We update the app without the user noticing any downtime.",
    "The sha256 is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
    "Meeting notes: the new instructions manual ships next month.",
    "这是一个普通的中文句子，没有任何指令。",  # noqa: RUF001 -- fullwidth punctuation is the point
    "مرحبا\u200f بالعالم، هذه رسالة عادية.",
    "Family: \U0001f468\u200d\U0001f469\u200d\U0001f467, "
    "and a Persian word: \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
    "Café au lait, naïve résumé, Ångström, Œuvre.",
    # Role prefixes and spaced-out letters, in their everyday uses.
    "System: Ubuntu 22.04 LTS, 16 GB RAM, kernel 6.5",
    "System: your disk is almost full (2 GB left).",
    "User: alice\nRole: admin\nLast login: yesterday",
    "Assistant: Dr. Patel's office, Monday to Friday.",
    "S A L E  -  5 0 %  O F F  this weekend only",
    "The acronym is spelled U N E S C O, one letter at a time.",
    "W E L C O M E  to the team, Ana!",
]

_CAMEL_WORDS = [
    *[
        "Aws",
        "Secrets",
        "Manager",
        "Rotation",
        "Lambda",
        "Function",
        "Service",
        "Role",
        "Access",
        "Key",
        "Policy",
        "Bucket",
        "Stack",
    ],
    *[
        "Default",
        "Handler",
        "Log",
        "Group",
        "Queue",
        "Dead",
        "Letter",
        "Table",
        "Stream",
        "Api",
        "Gateway",
        "Deployment",
        "Stage",
    ],
    *[
        "Custom",
        "Resource",
        "Provider",
        "Framework",
        "Event",
        "Rule",
        "Target",
        "Alarm",
        "Topic",
        "Subscription",
        "Vpc",
        "Subnet",
    ],
]


def _camel(rng: random.Random, n: int) -> str:
    """A CamelCase identifier of exactly n characters, CDK-style with a hex suffix when it helps."""
    name = ""
    while len(name) < n - 8:
        name += rng.choice(_CAMEL_WORDS)
    name = name[: n - 8]
    return name + "".join(rng.choice("0123456789ABCDEF") for _ in range(n - len(name)))


def lookalikes(seed: int = SEED, each: int = 12) -> list[str]:
    """Innocent text with a secret's alphabet and length beside the words that make one likely."""
    rng = random.Random(seed + 1)
    out: list[str] = []
    for _ in range(each):
        sha1 = "".join(rng.choice(HEX) for _ in range(40))
        sha256 = "".join(rng.choice(HEX) for _ in range(64))
        out += [
            f"The secret rotation fix landed in commit {sha1}.",
            f"aws s3api head-object returned ETag {sha1[:32]} and VersionId null",
            f"The AWS lambda layer digest is sha256:{sha256}",
            f"Access key rotation is tracked in issue {rng.randrange(100, 9999)}, commit {sha1}",
            f'"integrity": "sha512-{_b64(rng.randbytes(64))}"',
            f"x-amz-id-2: {_b64(rng.randbytes(57))}",
            f"aws cloudformation describe-stack-resource --logical-resource-id {_camel(rng, 40)}",
            f"The secret is stored by the {_camel(rng, 40)} construct.",
            f"AWS request id {uuid.UUID(int=rng.getrandbits(128))} for the credential report",
            f"Send the refund to wallet 0x{''.join(rng.choice(HEX + 'ABCDEF') for _ in range(40))}.",
            f"secret santa list: {', '.join(rng.choice(_CAMEL_WORDS) for _ in range(6))}",
            f"The key fingerprint is SHA256:{_b64(rng.randbytes(32)).rstrip('=')}",
            f"youtube.com/watch?v={draw(rng, B64URL, 11)} explains AWS credentials well",
            f"Session cookie name: __Secure-next-auth.session-token, value length {rng.randrange(100, 400)}",
        ]
    return out


def _png(rng: random.Random) -> str:
    # A small PNG's base64 as it is pasted in a data URL: the signature, then compressed bytes.
    return _b64(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(rng.randrange(60, 240)))


def _version(rng: random.Random) -> str:
    return f"{rng.randrange(0, 30)}.{rng.randrange(0, 40)}.{rng.randrange(0, 200)}"


# Ordinary sentences about software, with the values that look most like credentials: hex
# digests, git commits, image digests, UUIDs, base64 images, versions and URLs; some beside the
# words a secret's context has ("key", "token", "secret", "auth").
_SENTENCES = (
    "Fixed in commit {sha1}; cherry-pick it onto the release branch.",
    "git checkout {sha1} && git log --oneline -3",
    "See https://github.com/acme/widgets/commit/{sha1} for the fix.",
    "The merge base is {sha1_short} ({sha1}).",
    "Pin the image to python@sha256:{sha256} instead of the floating tag.",
    "docker pull ghcr.io/acme/api@sha256:{sha256}",
    "image: public.ecr.aws/lambda/python@sha256:{sha256}",
    "The tarball's SHA-256 is {sha256}; compare it with the release page.",
    "md5sum prints {md5} for the old build.",
    'ETag: "{md5}"',
    "Request {uuid} failed at 12:04; the retry succeeded.",
    "The trace id is {uuid} and the span took 84 ms.",
    "Order {uuid} was refunded on {date}.",
    "Set the idempotency key to {uuid} so a retry does not charge twice.",
    "The cache key is {sha256} and it expires in an hour.",
    "The logo is embedded as data:image/png;base64,{png} in the email template.",
    '<img alt="chart" src="data:image/png;base64,{png}">',
    "![diagram](data:image/png;base64,{png})",
    "Upgrade from {ver} to {ver2}; the changelog lists two breaking changes.",
    "pip install 'httpx=={ver}' fixed the timeout.",
    "node {ver}, npm {ver2} and Python 3.{minor}.{patch} on the runner.",
    "The {lib} package moved from {ver} to {ver2} last week.",
    "Open https://docs.example.com/guides/auth/tokens?lang=en#rotation for the details.",
    "The webhook posts to https://api.example.org/v2/hooks/{uuid}/deliveries.",
    "Download https://releases.example.com/app/{ver}/app-{ver}-linux-amd64.tar.gz and verify it.",
    "The auth flow redirects to https://login.example.com/callback?state={hex16}.",
    "Rotate the token every 90 days; the secret manager does it for you.",
    "Your API key is shown once, so store it in a password manager.",
    'The access log line was: 10.0.{minor}.{patch} - - [{date}] "GET /v1/items/{uuid} HTTP/1.1" 200',
    "Layer {sha256_short} already exists; pushing manifest for {lib}:{ver}.",
    "Build {ver} of {lib} is at commit {sha1_short}, tagged v{ver}.",
    "Object key reports/{date}/{uuid}.json is 12 KB.",
)
_LIBS = ("pydantic", "boto3", "numpy", "react", "django", "fastapi", "openssl", "kubectl", "terraform")


def ordinary_sentences(seed: int = SEED, each: int = 10) -> list[str]:
    """`each` sentences of every template in _SENTENCES, with values from a seeded RNG."""
    rng = random.Random(seed + 2)
    out: list[str] = []
    for _ in range(each):
        for template in _SENTENCES:
            sha1 = "".join(rng.choice(HEX) for _ in range(40))
            sha256 = "".join(rng.choice(HEX) for _ in range(64))
            values = {
                "sha1": sha1,
                "sha1_short": sha1[:7],
                "sha256": sha256,
                "sha256_short": sha256[:12],
                "md5": "".join(rng.choice(HEX) for _ in range(32)),
                "hex16": "".join(rng.choice(HEX) for _ in range(16)),
                "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "png": _png(rng),
                "ver": _version(rng),
                "ver2": _version(rng),
                "minor": str(rng.randrange(8, 14)),
                "patch": str(rng.randrange(0, 20)),
                "lib": rng.choice(_LIBS),
                "date": f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
            }
            out.append(template.format_map(values))
    return out
