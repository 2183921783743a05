"""The sandbox's precompile function: compiles run_python's runtime once per deploy (docs/sandbox.md)."""
