"""Safety for the agent turn: an injection scan for untrusted input and an output filter.

- shared.safety.injection: `scan` user input and tool results; `quote_untrusted` passes flagged
  text to the model as quoted data from a named source, never as instructions.
- shared.safety.redact: `redact` secrets always and PII per workspace policy, before anything is
  sent to a channel or stored; `redact_partial` / `StreamRedactor` for a reply still streaming.
- shared.safety.guard: `guard_untrusted`, the two together in the order untrusted text needs.
- shared.safety.fold: the text normalisation the scan matches against.
- shared.safety.ruleset: gitleaks' default secret rules (rules/gitleaks.toml, vendored data),
  matched with RE2; `redact` applies them after Sigil's own rules.

Pure: no configuration and nothing read at import time. The one file read is the vendored rule
set, on the first redaction in a process; the one dependency is google-re2, for it. Nothing is
re-exported here, so `shared.safety.redact` stays the module, not the function of that name.
"""
