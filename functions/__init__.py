"""The Lambda functions: one folder each, deployed as its folder with `shared/` beside it.

On Lambda a handler is the top-level module `handler`, so handlers import only from `shared`,
never from `functions` or from each other.
"""
