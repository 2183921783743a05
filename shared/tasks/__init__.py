"""Delegation (spec 001, issue 29, docs/delegation.md): task agents the agent the user talks to
hands work to, that run in their own invocations and report back through the session's lane.

`roles`: the built-in roles and a workspace's own, and the model each resolves to; `tools`: the
delegate tool and the task agents' own; `runner`: a task's steps on its own lane; `items`: its
lane items and the texts the parent's turn reads; `budget`: the check before each model call.
"""
