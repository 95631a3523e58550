"""Checks of this package's pure-Python semantics against the golden vectors that
the C++ side writes (tests/test_golden.cpp -> tests/data/golden/*.json):

  masks.json      Mask.allowed on sample problems of every mask kind, splitmix64,
                  block_sparse_keep
  generator.json  counter_uniform, counter_normal, round_to, make_inputs' first values
  stopping.json   the stopping rule's stop reason, sample count and wall time on
                  fixed sample sequences with a fake clock; next_hold_ms

Values are compared exactly (the same IEEE operations in the same order on both
sides). Standard library only; used by tests/test_golden.py and --self-test.
"""

import json
import os

from . import rng
from .masks import block_sparse_keep, splitmix64
from .problems import Problem
from .stopping import Policy, next_hold_ms, sample_until_stable

GOLDEN_FILES = ("masks.json", "generator.json", "stopping.json")


def default_golden_dir():
    """tests/data/golden of the source tree this package lives in."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "tests", "data", "golden"))


def _load(golden_dir, name):
    with open(os.path.join(golden_dir, name), encoding="utf-8") as f:
        return json.load(f)


def _first_difference(got, want):
    """Index and values of the first difference of two sequences (or the lengths)."""
    if len(got) != len(want):
        return f"length {len(got)} != {len(want)}"
    for n, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"[{n}] {a!r} != {b!r}"
    return None


def check_masks(doc):
    """Failures (strings) of masks.json: mask rows, splitmix64, block_sparse_keep."""
    failures = []
    for entry in doc["problems"]:
        p = Problem(entry["problem"], entry["name"])
        diff = _first_difference(p.rows(), entry["rows"])
        if diff:
            failures.append(f"masks.json {entry['name']}: mask row {diff}")
    for x, want in doc["splitmix64"]:
        if splitmix64(x) != want:
            failures.append(f"masks.json splitmix64({x}) = {splitmix64(x)}, C++ gives {want}")
    for e in doc["block_sparse_keep"]:
        bits = "".join("1" if block_sparse_keep(e["seed"], e["qb"], kb, e["density"]) else "0"
                       for kb in range(len(e["kb_bits"])))
        if bits != e["kb_bits"]:
            failures.append(f"masks.json block_sparse_keep(seed {e['seed']}, qb {e['qb']}, density "
                            f"{e['density']}) = {bits}, C++ gives {e['kb_bits']}")
    return failures


def check_generator(doc):
    """Failures (strings) of generator.json: streams, round_to, make_inputs heads."""
    failures = []
    for s in doc["streams"]:
        seed, stream = s["seed"], s["stream"]
        tag = f"generator.json seed {seed} stream {stream}"
        n = len(s["uniform"])
        checks = [("uniform", [rng.counter_uniform(seed, stream, i) for i in range(n)], s["uniform"]),
                  ("normal", [rng.counter_normal(seed, stream, i) for i in range(n)], s["normal"])]
        for dtype, want in s["rounded"].items():
            checks.append((f"rounded {dtype}", [rng.round_to(dtype, rng.counter_normal(seed, stream, i))
                                                for i in range(len(want))], want))
        for what, got, want in checks:
            diff = _first_difference(got, want)
            if diff:
                failures.append(f"{tag} {what}: {diff}")
    for e in doc["round_to"]:
        for dtype in ("fp32", "fp16", "bf16"):
            if rng.round_to(dtype, e["x"]) != e[dtype]:
                failures.append(f"generator.json round_to({dtype}, {e['x']!r}) = {rng.round_to(dtype, e['x'])!r}, "
                                f"C++ gives {e[dtype]!r}")
    for e in doc["make_inputs"]:
        p = Problem(e["problem"], "generator.json/make_inputs")
        for name in ("q", "k", "v", "do", "bias", "offset"):
            diff = _first_difference(rng.make_inputs_head(p, name, len(e[name])), e[name])
            if diff:
                failures.append(f"generator.json make_inputs seed {p.seed} {name}: {diff}")
    return failures


def check_stopping(doc):
    """Failures (strings) of stopping.json: (n, stop reason, wall seconds) per
    trace, and next_hold_ms."""
    failures = []
    for c in doc["cases"]:
        samples = c["samples"]
        state = {"next": 0, "clock": 0.0}

        def take():
            x = samples[state["next"] % len(samples)]
            state["next"] += 1
            state["clock"] += x * 1e-3
            return x

        got, reason, wall = sample_until_stable(Policy(c["policy"]), take, now=lambda: state["clock"])
        mine = (len(got), reason, wall)
        want = (c["n"], c["stop_reason"], c["wall_seconds"])
        if mine != want:
            failures.append(f"stopping.json {c['name']!r}: (n, stop_reason, wall_seconds) = {mine}, C++ gives {want}")
    for hold_ms, host_ms, want in doc["next_hold_ms"]:
        if next_hold_ms(hold_ms, host_ms) != want:
            failures.append(f"stopping.json next_hold_ms({hold_ms}, {host_ms}) = {next_hold_ms(hold_ms, host_ms)}, "
                            f"C++ gives {want}")
    return failures


def check_golden(golden_dir=None):
    """Every failure (strings) of the three golden files in golden_dir (default:
    default_golden_dir()). Raises OSError / ValueError when a file is missing or
    malformed."""
    golden_dir = golden_dir or default_golden_dir()
    failures = []
    for name, check in zip(GOLDEN_FILES, (check_masks, check_generator, check_stopping)):
        failures += check(_load(golden_dir, name))
    return failures
