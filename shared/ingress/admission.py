"""Whether a browser's message would be refused before it is queued (a refused sender, an
exhausted budget), so the page can say so at once: the same check for the local WebSocket
(shared.ingress.browser) and the cloud's (shared.ingress.ws). The turn checks both again, as for
every channel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.budgets import PriceTable, TurnBudget
from shared.channels.web_frames import BudgetExhausted, SenderRefused
from shared.clock import utcnow
from shared.identity import derived_user_id, resolve_sender
from shared.models import InboundMessage, new_workspace
from shared.ports import BudgetStore, IdentityStore, WorkspaceStore


@dataclass
class Admission:
    """What a `send` is refused for before anything is queued, so the page can say so at once: a
    refused sender and an exhausted budget. The turn checks both again, as for every channel.

    Read-only: a first contact under the pairing policy is left to the turn, which creates the
    pending identity and answers with its code (resolve_sender writes only in that case).
    """

    workspaces: WorkspaceStore
    identities: IdentityStore
    budgets: BudgetStore
    prices: PriceTable
    now: Callable[[], datetime] = utcnow

    def check(self, inbound: InboundMessage) -> None:
        ws = inbound.workspace_id
        workspace = self.workspaces.get(ws) or new_workspace(ws)
        policy = workspace.unknown_sender_policy
        if self.identities.get(ws, inbound.channel, inbound.sender.id) is None and policy != "allow_list":
            if policy != "allow":
                return  # a first contact the turn pairs: it creates the identity, not this check
            user_id = derived_user_id(inbound.channel, inbound.sender.id)
        else:
            verdict = resolve_sender(self.identities, workspace, inbound, now=self.now())
            if verdict.admission == "sender_refused":
                raise SenderRefused("this workspace does not accept messages from you")
            if verdict.admission != "admitted":
                return  # pending: the turn answers with the pairing code
            user_id = verdict.user_id
        budget = TurnBudget(self.budgets, ws, user_id, workspace.budget, self.prices, self.now)
        decision = budget.check()
        if decision.exhausted is not None:
            raise BudgetExhausted(decision.exhausted.message(decision.at))
