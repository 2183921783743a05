"""The Python that runs inside the WebAssembly instance before the script: the guest driver.

It is passed to the wasm CPython as `python -c DRIVER`. It starts the interpreter, imports the
exposed part of the standard library (the expensive part, done while the instance is pre-warmed),
then asks the host for the job over stdin and runs the script. Nothing here is a security
boundary: the script shares this interpreter and may undo anything the driver does. The boundary
is the wasm instance (no preopened directory, no socket, no environment, fuel, a memory cap, an
epoch deadline) and the host's side of the `sigil` calls, which takes its scope from the turn,
never from the request. The import allow-list only keeps honest scripts to what is supported.

The channel: a request is one write to fd 2 that starts with MAGIC followed by JSON; the host
answers on fd 0 with `<length>\\n<json>`. A script that forges a request gets exactly what the
`sigil` module would have given it: the same budget and audit apply.
"""

from __future__ import annotations

MAGIC = b"\x00SIGIL\x00"

# The part of the standard library a script may import: pure computation, no I/O.
ALLOWED_MODULES = (
    "json",
    "math",
    "cmath",
    "statistics",
    "collections",
    "itertools",
    "functools",
    "operator",
    "datetime",
    "re",
    "string",
    "textwrap",
    "decimal",
    "fractions",
    "random",
    "heapq",
    "bisect",
    "dataclasses",
    "typing",
    "enum",
    "csv",
    "io",
    "difflib",
    "unicodedata",
)

DRIVER = r'''
import builtins as _b, json as _json, os as _os, sys as _sys, traceback as _tb, types as _types
_MAGIC = __MAGIC__
_ALLOWED = frozenset(__ALLOWED__)
for _m in _ALLOWED:
    __import__(_m)

def _recv():
    head = b""
    while not head.endswith(b"\n"):
        c = _os.read(0, 1)
        if not c:
            raise SystemExit(0)
        head += c
    size, body = int(head), b""
    while len(body) < size:
        body += _os.read(0, size - len(body))
    return _json.loads(body)

def _call(op, **args):
    _os.write(2, _MAGIC + _json.dumps({"op": op, "args": args}).encode())
    reply = _recv()
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["result"]

class _Sigil:
    """The host module: read-only memory under the calling turn's scope (docs/sandbox.md)."""
    _call = staticmethod(_call)
    def facts(self, after=None, limit=500):
        """Facts visible to this turn, in id order after `after`: dicts with id, subject,
        predicate, object, category, created_at (ISO)."""
        return _call("facts", after=after, limit=limit)
    def search(self, query, k=10):
        """The best matching messages and facts for `query`: dicts with text, tier, created_at."""
        return _call("search", query=query, k=k)
    def scratchpad(self, key):
        """The text of this conversation's scratchpad entry `key` (None: no such entry)."""
        return _call("scratchpad", key=key)
    def scratchpad_keys(self, prefix=""):
        """The keys of this conversation's scratchpad entries (delegated tasks' output), sorted."""
        return _call("scratchpad_keys", prefix=prefix)

_real_import = _b.__import__
def _import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.split(".")[0] not in _ALLOWED and name != "sigil":
        raise ImportError(f"module {name!r} is not available in the sandbox")
    if name == "sigil":
        return sigil
    return _real_import(name, globals, locals, fromlist, level)

sigil = _Sigil()
_job = _recv()
_b.__import__ = _import
_scope = {"__name__": "__main__", "sigil": sigil, "inputs": _types.MappingProxyType(_job["inputs"])}
del _b, _m
_code = 0
try:
    exec(compile(_job["script"], "<script>", "exec"), _scope)
except SystemExit as _e:
    _code = _e.code if isinstance(_e.code, int) else 0
except BaseException:
    _tb.print_exc()
    _code = 1
# Leave without finalising the interpreter: tearing down every module costs ~100 million fuel
# units the script did not spend.
_sys.stdout.flush()
_sys.stderr.flush()
_os._exit(_code)
'''


def driver_source() -> str:
    return DRIVER.replace("__MAGIC__", repr(MAGIC)).replace("__ALLOWED__", repr(ALLOWED_MODULES))
