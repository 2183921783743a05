"""Consolidation (docs/consolidation.md): what turns a session's rolled-out messages into memory.

- compaction (shared.consolidation.compaction): each complete batch of Tier-1 messages becomes a
  Tier-2 summary, Tier-3 facts (shared.consolidation.extraction) and the session's rolling
  summary, under a lease per session and with a checkpoint after every batch;
- the catch-up and the maintenance of the hourly run (shared.consolidation.maintenance).

Emergency compaction of a turn's window, when the model reports a context overflow, lives beside
the turn it serves, in the agent package: consolidation sits below the agent and imports none of it.

Every run is bounded by a Deadline (shared.consolidation.deadline) and stops cleanly between
units of work, so a Lambda cut off by its timeout continues where it stopped next time.
"""
