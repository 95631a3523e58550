"""Entry point of the worker: `python3 backends/peers/attnbench_torch ARGS` (the
path attnbench runs, resolve_launch_config in peer_config.cpp) or `python3 -m attnbench_torch ARGS` with
backends/peers on the path."""

import os
import sys

if __package__ in (None, ""):
    # Run as a directory or a file: Python put this folder first on the path; put
    # its parent there instead, so the modules are imported as the package's only
    # (a module here never shadows another top-level name).
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [x for x in sys.path if os.path.abspath(x or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))
    from attnbench_torch.cli import main
else:
    from .cli import main

if __name__ == "__main__":
    sys.exit(main())
