"""The peer protocol's constants, errors and JSON plumbing (docs/peers.md).

Standard library only: everything here runs without torch.
"""

import json
import math
import os
import traceback

PROTOCOL = 1
PEERS = ("torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa-efficient", "torch-flex", "torch-varlen")
SDPA_PEERS = PEERS[:3]
PASSES = ("fwd", "bwd", "fwd_bwd")


class Unsupported(Exception):
    """The peer cannot run this problem; the message is the reason (status unsupported)."""


class RequestError(Exception):
    """The request or the problem file is malformed (status error, exit code 2)."""


def need(obj, key, kind, where):
    """obj[key], checked to be of `kind` ("int", "num", "str" or "list"; anything
    else: any value). Raises RequestError naming `where`/key and the value."""
    if not isinstance(obj, dict) or key not in obj:
        raise RequestError(f"{where}: missing field \"{key}\"")
    v = obj[key]
    if kind == "int" and (isinstance(v, bool) or not isinstance(v, int)):
        raise RequestError(f"{where}/{key}: expected an integer, got {v!r}")
    if kind == "num" and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise RequestError(f"{where}/{key}: expected a number, got {v!r}")
    if kind == "str" and not isinstance(v, str):
        raise RequestError(f"{where}/{key}: expected a string, got {v!r}")
    if kind == "list" and not isinstance(v, list):
        raise RequestError(f"{where}/{key}: expected a list, got {v!r}")
    return v


def load_json(path, what):
    """Parse the JSON file `path` (`what` labels errors: "request", "problem").
    Raises RequestError when it cannot be read or parsed."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise RequestError(f"cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise RequestError(f"{path}: malformed JSON ({e})") from None


def jsonable(x):
    """A copy that strict JSON can carry: non-finite floats become strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def write_json_atomic(path, obj):
    """Write strict JSON (no NaN literals) to path via a temporary file and rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(jsonable(obj), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def traceback_summary(exc, limit=6):
    """One line: exception type, message and the last `limit` frames (innermost first)."""
    frames = traceback.extract_tb(exc.__traceback__)[-limit:]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}: {exc}" + (f" [at {where}]" if where else "")
