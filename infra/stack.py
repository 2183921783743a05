"""The Sigil stack: composes the constructs, then wires configuration and grants in one place.

Each function gets the SIGIL_* settings shared.config.Settings reads, and exactly the grants its
work needs: CDK's grant_* where it has one, and, where it has none, a statement naming one
resource, made by a construct's own grant method (Memory.grant_embedding_model and
infra.constructs.bedrock.grant_chat_model for Bedrock models, Memory.grant_outbox_read for the
webhook's outbox partitions). The constructs acknowledge their own cdk-nag findings
(docs/cdk-nag.md lists them).
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import AppContext
from infra.constructs.agent import TIMEOUT as AGENT_TIMEOUT
from infra.constructs.agent import Agent
from infra.constructs.bedrock import grant_chat_model
from infra.constructs.consolidation import Consolidation
from infra.constructs.dashboard import Dashboard
from infra.constructs.function import DependencyLayer
from infra.constructs.ingress import Ingress
from infra.constructs.lanes import MAX_RECEIVE_COUNT, Lanes
from infra.constructs.media import Media
from infra.constructs.memory import Memory
from infra.constructs.observability import Observability
from infra.constructs.sandbox_cache import SandboxCache
from infra.constructs.schedules import Schedules
from infra.constructs.secrets import Secrets, llm_keys
from infra.constructs.skills import Skills
from infra.constructs.websocket import WebSocket
from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, TOOL_KEYS


class SigilStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, context: AppContext, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        stage = context.stage
        name_prefix = f"sigil-{stage.name}"

        observability = Observability(
            self,
            "Observability",
            retention=stage.log_retention,
            removal_policy=stage.removal_policy,
            alarm_email=context.alarm_email,
            essential_only=stage.alarms == "essential",
            topic_key=stage.alarm_topic_key,
        )
        secrets = Secrets(
            self,
            "Secrets",
            web_workspaces=context.web_workspaces,
            removal_policy=stage.removal_policy,
            prefix=context.secrets_prefix,
            # The LLM keys the functions are granted; the others are never read (_grant_models).
            created=None if stage.all_secrets else llm_keys(context.agent_providers()),
        )
        layer = DependencyLayer(self, "Dependencies", layer_dir=context.layer_dir).layer
        memory = Memory(self, "Memory", stage=stage, domain_name=name_prefix, observability=observability)
        caps = context.caps
        lanes = Lanes(
            self, "Lanes", name_prefix=name_prefix, consumer_timeout=AGENT_TIMEOUT, shards=caps.lanes
        )
        self.dead_letters_alarm = observability.alarm_on_dead_letters(lanes.dead_letters)
        consolidation = Consolidation(
            self,
            "Consolidation",
            name_prefix=name_prefix,
            layer=layer,
            log_group=observability.log_group("ConsolidateLogs"),
            reserved_concurrency=caps.consolidate_reserved,
        )
        self._alarm_on_extraction(observability, consolidation)
        agent = Agent(
            self,
            "Agent",
            turns=lanes.queues,
            layer=layer,
            log_group=observability.log_group("AgentLogs"),
            max_concurrency=caps.agent_concurrency,
            reserved_concurrency=caps.agent_reserved,
            paused_from=caps.lanes_paused_from,
        )
        ingress = Ingress(
            self,
            "Ingress",
            layer=layer,
            log_group=observability.log_group("WebhookLogs"),
            access_log_group=(access_logs := observability.log_group("ApiAccessLogs")),
            reserved_concurrency=caps.webhook_reserved,
            api_throttle=caps.api,
            turn_throttle=caps.turn_routes,
            cors_origin=context.web_origin,
        )
        # The web channel's WebSocket API: its messages may each become a turn, so its stage is
        # throttled as the turn routes are.
        self.websocket = WebSocket(
            self,
            "WebSocket",
            layer=layer,
            log_group=observability.log_group("WsLogs"),
            access_log_group=observability.log_group("WsAccessLogs"),
            reserved_concurrency=None,
            throttle=caps.turn_routes,
        )
        skills = Skills(self, "Skills")
        webhook, turn_runner, consolidate = ingress.function, agent.function, consolidation.function
        self.memory, self.lanes, self.secrets, self.skills = memory, lanes, secrets, skills
        self.ingress, self.agent, self.consolidation = ingress, agent, consolidation
        self.dashboard, self.media = (
            self._watch(observability, context, access_logs),
            self._attached_files(context, agent.function),
        )

        common = {"SIGIL_BACKEND": "aws", "SIGIL_SECRETS_PREFIX": secrets.prefix}
        # The webhook builds only its ingress (shared.cloud.ingress): the lanes and the outbox.
        webhook_env = {
            **common,
            "SIGIL_QUEUE_URL": lanes.turns.queue_url,
            "SIGIL_SESSIONS_TABLE": memory.sessions.table_name,
            # Sharded lanes only: the queue of each session is chosen by a hash over these.
            **({"SIGIL_LANE_QUEUE_URLS": lanes.queue_urls()} if len(lanes.queues) > 1 else {}),
        }
        # The agent and the consolidator build the whole backend (build_aws_backend), which needs
        # all five resource names; what each may do with them is decided by the grants below.
        backend_env = {
            **webhook_env,
            "SIGIL_MEMORY_TABLE": memory.memory.table_name,
            "SIGIL_EVENT_BUS_NAME": consolidation.bus.event_bus_name,
            "SIGIL_OPENSEARCH_ENDPOINT": memory.domain.domain_endpoint,
            **caps.memory_env(),
        }
        if context.model:
            backend_env["SIGIL_MODEL"] = context.model
        backend_env["SIGIL_EMBEDDING_MODEL"] = context.embedding_model
        # SIGIL_PROVIDERS: the providers each function is granted (_grant_models); it reads only
        # their keys, and refuses a model of any other with a message naming the missing grant.
        # SIGIL_LANE_MAX_ATTEMPTS: the agent apologises on a turn's last delivery, so it must know
        # when SQS gives up.
        agent_env = {
            **backend_env,
            "SIGIL_LANE_MAX_ATTEMPTS": str(MAX_RECEIVE_COUNT),
            "SIGIL_PROVIDERS": ",".join(sorted(context.agent_providers())),
            "SIGIL_SKILLS_BUCKET": skills.bucket.bucket_name,
            # Per-turn extraction: each TurnCommitted waits there for its debounce.
            "SIGIL_EXTRACTION_QUEUE_URL": consolidation.extraction.queue_url,
        }
        consolidate_env = {**backend_env, "SIGIL_PROVIDERS": ",".join(sorted(context.model_providers()))}
        for function, environment in (
            (webhook, webhook_env),
            (turn_runner, agent_env),
            (consolidate, consolidate_env),
        ):
            for name, value in environment.items():
                function.add_environment(name, value)

        # webhook: verify with the channel secrets, queue the turn, serve the web outbox.
        secrets.grant_read(webhook, [s.key for s in INGRESS_SECRETS] + list(secrets.web_keys))
        # Named channel routes: each bot's ingress secrets, and its route read by key.
        secrets.grant_read_routes(webhook, [s.key for s in INGRESS_SECRETS])
        memory.grant_route_read(webhook)
        # The lanes take turns from the webhook; from the agent, a delegated task's steps, question
        # and outcome (docs/delegation.md); from the consolidator, the outcome of a task the hourly
        # sweep timed out (shared.tasks.sweep).
        for sender in (webhook, turn_runner, consolidate):
            lanes.grant_send_messages(sender)
        memory.grant_outbox_read(webhook, context.web_workspaces)
        self._serve_browsers(context, webhook_env)
        # agent: sessions, outbox and memory tiers, the index, CompactionDue, replies and the LLM.
        memory.sessions.grant_read_write_data(turn_runner)
        memory.grant_memory_read_write(turn_runner)
        memory.grant_index_read_write(turn_runner)
        consolidation.bus.grant_put_events_to(turn_runner)
        consolidation.extraction.grant_send_messages(turn_runner)
        secrets.grant_read(turn_runner, [s.key for s in (*CHANNEL_TOKENS, *TOOL_KEYS)])
        skills.grant_read(turn_runner)  # skills/ only (infra/constructs/skills.py)
        self.sandbox_cache = self._compile_sandbox_once(observability, layer, turn_runner)
        secrets.grant_read_routes(turn_runner, [s.key for s in CHANNEL_TOKENS])
        self.schedules = self._things_done_later(name_prefix, lanes, turn_runner)
        # consolidate: rewrites memory tiers and the index, calls the LLM; in the sessions table it
        # reads sessions and saves their rolling summaries, keeps its leases and checkpoints and
        # charges the budget counters, and nothing else (Memory.grant_consolidator_sessions).
        memory.grant_memory_read_write(consolidate)
        memory.grant_consolidator_sessions(consolidate)
        memory.grant_index_read_write(consolidate)
        self._grant_models(context, turn_runner, consolidate)

        self._outputs()

    def _compile_sandbox_once(
        self, observability: Observability, layer: lambda_.ILayerVersion, agent: lambda_.Function
    ) -> SandboxCache:
        """run_python's compiled runtime, compiled once per deploy (docs/sandbox.md): the agent
        reads it and asks the precompile function when it is missing, never writes it."""
        cache = SandboxCache(
            self, "SandboxCache", layer=layer, log_group=observability.log_group("SandboxLogs")
        )
        cache.grant_read(agent)
        return cache

    @staticmethod
    def _alarm_on_extraction(observability: Observability, consolidation: Consolidation) -> None:
        """Per-turn extraction is never lost silently: its dead letters, and a backlog that would
        outlive the queue's retention (docs/operations.md)."""
        observability.alarm_on_extraction_dead_letters(consolidation.extraction_dead_letters)
        observability.alarm_on_extraction_backlog(consolidation.extraction)

    def _attached_files(self, context: AppContext, agent: lambda_.Function) -> Media:
        """The media bucket (docs/media.md): the agent fetches what senders attach into it, and
        alone reads and writes it, under media/ only (infra/constructs/media.py)."""
        media = Media(self, "Media", retention_days=context.media_retention_days)
        agent.add_environment("SIGIL_MEDIA_BUCKET", media.bucket.bucket_name)
        media.grant_read_write(agent)
        return media

    def _take_uploads(self, context: AppContext, ws_env: dict[str, str]) -> None:
        """The chat page's uploads (shared.media.upload, docs/web-channel.md#attachments): the
        webhook signs presigned POSTs to the media bucket and records what was posted, with the
        workspace's limits, the sender's identity and the day's total; the ws function checks that
        a `send`'s files are the sender's own."""
        webhook, ws, media, memory = self.ingress.function, self.websocket.function, self.media, self.memory
        bucket = media.bucket.bucket_name
        webhook.add_environment("SIGIL_MEDIA_BUCKET", bucket)
        webhook.add_environment("SIGIL_MEMORY_TABLE", memory.memory.table_name)
        ws_env["SIGIL_MEDIA_BUCKET"] = bucket
        media.grant_uploads(webhook)
        media.grant_read(ws)
        memory.grant_media_usage(webhook, context.web_workspaces)
        self.websocket.grant_admission(
            webhook, memory=memory.memory, sessions=memory.sessions, workspaces=context.web_workspaces
        )
        origins = [self.ingress.api.api_endpoint] + ([context.web_origin] if context.web_origin else [])
        media.admit_uploads_from(origins)

    def _things_done_later(self, name_prefix: str, lanes: Lanes, agent: lambda_.Function) -> Schedules:
        """EventBridge Scheduler's group and role (docs/schedules.md): the agent makes schedules
        aimed at the turns queue, and is told the group, the role they send as and their target."""
        schedules = Schedules(self, "Schedules", name_prefix=name_prefix, lanes=lanes.queues)
        agent.add_environment("SIGIL_SCHEDULE_GROUP", schedules.group_name)
        agent.add_environment("SIGIL_SCHEDULE_ROLE_ARN", schedules.role.role_arn)
        agent.add_environment("SIGIL_QUEUE_ARN", lanes.turns.queue_arn)
        schedules.grant_manage(agent)
        # `sigil schedules --stack` builds the same adapter from these (shared.cli._app).
        CfnOutput(self, "ScheduleGroup", value=schedules.group_name)
        CfnOutput(self, "ScheduleRoleArn", value=schedules.role.role_arn)
        CfnOutput(self, "TurnsQueueArn", value=lanes.turns.queue_arn)
        return schedules

    def _outputs(self) -> None:
        """What the operator's tools find the stack by (`sigil --stack`, shared.cli._app)."""
        CfnOutput(self, "ApiUrl", value=self.ingress.stage.url, description="Base URL of the webhooks")
        CfnOutput(self, "TurnsQueueUrl", value=self.lanes.turns.queue_url)
        CfnOutput(self, "DeadLettersQueueUrl", value=self.lanes.dead_letters.queue_url)
        if len(self.lanes.queues) > 1:
            CfnOutput(self, "LaneQueueUrls", value=self.lanes.queue_urls())
        # The agent's SIGIL_EXTRACTION_QUEUE_URL, for an env.json of `sam local invoke` (docs/deploy.md).
        CfnOutput(self, "ExtractionQueueUrl", value=self.consolidation.extraction.queue_url)
        CfnOutput(self, "EventBusName", value=self.consolidation.bus.event_bus_name)
        CfnOutput(self, "SessionsTable", value=self.memory.sessions.table_name)
        CfnOutput(self, "MemoryTable", value=self.memory.memory.table_name)
        CfnOutput(self, "SearchEndpoint", value=self.memory.domain.domain_endpoint)
        # `sigil secret --stack` (shared.cli._app.target_settings) finds the stack's secrets by it.
        CfnOutput(self, "SecretsPrefix", value=self.secrets.prefix)
        CfnOutput(
            self, "SkillsBucket", value=self.skills.bucket.bucket_name, description="sigil skill's store"
        )
        # The agent's SIGIL_SANDBOX_* (run_python's compiled-runtime cache; docs/sandbox.md).
        CfnOutput(self, "SandboxCacheBucket", value=self.sandbox_cache.bucket.bucket_name)
        CfnOutput(self, "SandboxPrecompileFunction", value=self.sandbox_cache.function.function_name)
        # `sigil` erasure removes a user's files from it (shared.cli._app.OPTIONAL_STACK_OUTPUTS).
        CfnOutput(self, "MediaBucket", value=self.media.bucket.bucket_name, description="attached files")

    def _serve_browsers(self, context: AppContext, webhook_env: dict[str, str]) -> None:
        """The WebSocket API's settings, grants and URL."""
        ws, websocket, memory = self.websocket.function, self.websocket, self.memory
        # The agent streams web replies to the WebSocket API's connections (shared.cloud.turn_deps).
        self.agent.function.add_environment("SIGIL_WS_ENDPOINT", websocket.management_endpoint)
        ws_env = {
            **webhook_env,
            "SIGIL_WS_ENDPOINT": websocket.management_endpoint,
            # The check before queueing reads workspace configs and identities (shared.cloud.admission).
            "SIGIL_MEMORY_TABLE": memory.memory.table_name,
        }
        if context.web_origin:
            # The chat page's origins alone may open a WebSocket: the one named, which alone passes
            # CORS, and the HTTP API's own, which serves the page (shared.channels.web_page).
            ws_env["SIGIL_WEB_ORIGINS"] = json.dumps([context.web_origin, self.ingress.api.api_endpoint])
        # The page served by the webhook learns its socket from /config.json.
        self.ingress.function.add_environment("SIGIL_WS_URL", websocket.stage.url)
        self._take_uploads(context, ws_env)
        for name, value in ws_env.items():
            ws.add_environment(name, value)
        # ws: verify browser tokens with the web secrets, queue `send` frames, replay the outbox on
        # `resume`, keep its connection items, post frames (WebSocket.__init__ grants the posts).
        self.secrets.grant_read(ws, list(self.secrets.web_keys))
        self.lanes.grant_send_messages(ws)
        self.memory.grant_outbox_read(ws, context.web_workspaces)
        self.websocket.grant_connections(ws, self.memory.sessions)
        self.websocket.grant_admission(
            ws, memory=self.memory.memory, sessions=self.memory.sessions, workspaces=context.web_workspaces
        )
        # agent: posts deltas and replies to the connections of this API alone.
        self.websocket.grant_post_to_connections(self.agent.function)
        CfnOutput(self, "WebSocketUrl", value=self.websocket.stage.url, description="wss:// URL of the chat")
        # SIGIL_WS_ENDPOINT of the agent and the ws function, for an env.json of `sam local invoke`.
        CfnOutput(
            self,
            "WebSocketManagementEndpoint",
            value=websocket.management_endpoint,
            description="https:// endpoint that posts to the chat's connections",
        )

    def _watch(
        self, observability: Observability, context: AppContext, access_logs: logs.ILogGroup
    ) -> Dashboard | None:
        """The alarms (each notifying the stage's topic) and the dashboard (docs/operations.md),
        if the stage has one."""
        functions = {
            "Webhook": self.ingress.function,
            "Agent": self.agent.function,
            "Consolidate": self.consolidation.function,
            "Ws": self.websocket.function,
        }
        observability.alarm_on_functions(functions)
        observability.alarm_on_api(self.ingress.api)
        observability.alarm_on_lane(self.lanes.queues)
        observability.alarm_on_turns()
        search = context.stage.search
        observability.alarm_on_search(
            self.memory.domain, data_nodes=search.data_nodes, volume_gib=search.volume_gib
        )
        CfnOutput(self, "AlarmTopicArn", value=observability.topic.topic_arn)
        if not context.stage.dashboard:
            return None
        return Dashboard(
            self,
            "Dashboard",
            stage=context.stage.name,
            api=self.ingress.api,
            access_logs=access_logs,
            functions=functions,
            turns=self.lanes.turns,
            dead_letters=self.lanes.dead_letters,
            extraction_dead_letters=self.consolidation.extraction_dead_letters,
            domain=self.memory.domain,
            alarms=observability.alarms,
        )

    def _grant_models(
        self, context: AppContext, turn_runner: lambda_.Function, consolidate: lambda_.Function
    ) -> None:
        """What reaching the models takes: the LLM keys of each function's providers only (the
        agent's include those the `providers` context adds for workspaces with a model of their
        own; the consolidator summarises with SIGIL_MODEL, never a workspace's model), and the
        Bedrock grants of the configured Bedrock models."""
        self.secrets.grant_read(turn_runner, llm_keys(context.agent_providers()))
        self.secrets.grant_read(consolidate, llm_keys(context.model_providers()))
        # agent and consolidate: embed memories and queries with the Bedrock embedding model, if
        # that is the one configured (an OpenAI one uses the OpenAI key, granted above).
        provider, _, embedding_model_id = context.embedding_model.partition("/")
        if provider == "bedrock" and embedding_model_id:
            self.memory.grant_embedding_model(turn_runner, embedding_model_id)
            self.memory.grant_embedding_model(consolidate, embedding_model_id)
        # agent and consolidate: stream from the chat model when it is a Bedrock one (the
        # consolidator uses SIGIL_MODEL too: the stack sets no SIGIL_CONSOLIDATION_MODEL). An
        # OpenAI or Anthropic model needs no Bedrock grant: its key is granted above.
        chat_provider, _, chat_model_id = (context.model or "").partition("/")
        if chat_provider == "bedrock" and chat_model_id:
            grant_chat_model(turn_runner, chat_model_id)
            grant_chat_model(consolidate, chat_model_id)
