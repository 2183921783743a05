"""One construct per concern; infra/stack.py composes them and wires the grants."""
