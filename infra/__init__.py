"""The CDK app: one stack composed of one construct per concern (see infra/stack.py)."""
