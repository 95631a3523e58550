#!/usr/bin/env python3
"""The PyTorch worker's pure-Python semantics (backends/peers/attnbench_torch: masks,
the seeded generator, the stopping rule) against the golden vectors that the C++
side writes (tests/test_golden.cpp -> tests/data/golden/*.json). Standard library
only (no torch); run by ctest as `golden_python` (label cpu):

    python3 tests/test_golden.py [-v]

The checks compare values exactly; test_detects_* make sure that a changed value
in a golden file is noticed, so this test can fail.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends", "peers"))

from attnbench_torch import golden  # noqa: E402

GOLDEN_DIR = os.path.join(ROOT, "tests", "data", "golden")


def load(name):
    with open(os.path.join(GOLDEN_DIR, name), encoding="utf-8") as f:
        return json.load(f)


class GoldenVectors(unittest.TestCase):
    """Each golden file is matched by the Python package, and a mutation is caught."""

    def test_masks(self):
        doc = load("masks.json")
        kinds = {t["kind"] for e in doc["problems"] for t in e["problem"]["mask"]}
        self.assertEqual(kinds, {"causal", "sliding_window", "document", "prefix_lm", "padding", "block_sparse"})
        self.assertGreaterEqual(len(doc["problems"]), 15)
        self.assertEqual(golden.check_masks(doc), [])

    def test_generator(self):
        doc = load("generator.json")
        self.assertEqual(golden.check_generator(doc), [])

    def test_stopping(self):
        doc = load("stopping.json")
        self.assertEqual({c["stop_reason"] for c in doc["cases"]}, {"converged", "max_samples", "time_cap"})
        self.assertEqual(golden.check_stopping(doc), [])

    def test_default_dir_is_the_source_tree(self):
        self.assertEqual(os.path.normpath(golden.default_golden_dir()), os.path.normpath(GOLDEN_DIR))
        self.assertEqual(golden.check_golden(), [])

    def test_entry_points_dump_the_golden_masks(self):
        """The worker as attnbench runs it (attnbench_torch/__main__.py), as a folder
        and as a module, without torch: --dump-mask gives the golden rows."""
        entry = os.path.join(ROOT, "backends", "peers", "attnbench_torch")
        doc = load("masks.json")
        picks = [e for e in doc["problems"] if e["name"] in ("causal-tl-sq>sk", "document-lengths", "padding+causal")]
        self.assertEqual(len(picks), 3)
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for n, e in enumerate(picks):
                paths.append(os.path.join(d, f"p{n}.json"))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    json.dump(e["problem"], f)
            plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            with_path = dict(plain, PYTHONPATH=os.path.join(ROOT, "backends", "peers"))
            for argv, env in (([sys.executable, os.path.join(entry, "__main__.py")], plain),
                              ([sys.executable, entry], plain),
                              ([sys.executable, "-m", "attnbench_torch"], with_path)):
                out = subprocess.run(argv + ["--dump-mask"] + paths, capture_output=True, text=True, env=env,
                                     cwd=d, timeout=120, check=False)
                self.assertEqual(out.returncode, 0, out.stderr)
                lines = [json.loads(x) for x in out.stdout.splitlines()]
                self.assertEqual([x["rows"] for x in lines], [e["rows"] for e in picks], argv)

    def test_detects_a_flipped_mask_bit(self):
        doc = copy.deepcopy(load("masks.json"))
        row = doc["problems"][1]["rows"][3]
        doc["problems"][1]["rows"][3] = ("0" if row[0] == "1" else "1") + row[1:]
        failures = golden.check_masks(doc)
        self.assertEqual(len(failures), 1)
        self.assertIn(doc["problems"][1]["name"], failures[0])
        doc = copy.deepcopy(load("masks.json"))
        doc["block_sparse_keep"][0]["kb_bits"] = doc["block_sparse_keep"][0]["kb_bits"][::-1] + "1"
        self.assertEqual(len(golden.check_masks(doc)), 1)

    def test_detects_a_changed_generator_value(self):
        doc = copy.deepcopy(load("generator.json"))
        doc["streams"][0]["normal"][5] = doc["streams"][0]["normal"][5] + 1e-12
        doc["make_inputs"][0]["offset"][0] += 1
        failures = golden.check_generator(doc)
        self.assertEqual(len(failures), 2, failures)

    def test_detects_a_changed_trace(self):
        doc = copy.deepcopy(load("stopping.json"))
        doc["cases"][0]["n"] += 1
        doc["cases"][1]["stop_reason"] = "time_cap"
        doc["next_hold_ms"][2][2] += 0.25
        self.assertEqual(len(golden.check_stopping(doc)), 3)


if __name__ == "__main__":
    unittest.main()
