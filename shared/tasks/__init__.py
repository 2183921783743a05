"""Delegated tasks (spec 001, docs/delegation.md): the delegate tool, the task agents' roles, the
runner of a task's steps on its own lane, and the outcome told in the parent's conversation."""
