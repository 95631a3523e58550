"""The worker's command line (modes and exit codes: the package docstring)."""

import argparse
import json
import os
import sys

from .protocol import PEERS, RequestError, load_json


def _parser():
    ap = argparse.ArgumentParser(prog="attnbench_torch",
                                 description="attnbench peer worker for PyTorch attention backends "
                                             "(protocol: docs/peers.md)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--request", metavar="REQUEST_JSON", help="run one request (writes result.json next to it)")
    g.add_argument("--serve", action="store_true",
                   help="persistent: request.json paths on stdin, one JSON answer line each on stdout")
    g.add_argument("--probe", action="store_true", help="print availability as JSON; exit 0 if usable")
    g.add_argument("--self-test", action="store_true", help="check every peer against float64 on tiny problems")
    g.add_argument("--dump-mask", nargs="+", metavar="PROBLEM_JSON",
                   help="print each problem's mask as one JSON line (stdlib only)")
    g.add_argument("--support", nargs="+", metavar="PEER_OR_all PROBLEM_JSON",
                   help="PEER|all PROBLEM_JSON...: print the static support verdicts, one JSON line per "
                        "problem (stdlib only)")
    ap.add_argument("--peers", help="self-test: comma-separated peers (default: all)")
    ap.add_argument("--quick", action="store_true", help="self-test: fewer cases")
    ap.add_argument("--keep", action="store_true", help="self-test: keep the work files")
    return ap


def _dump_mask(paths):
    from .problems import Problem
    for path in paths:
        p = Problem(load_json(path, "problem"), path)
        print(json.dumps({"problem": path, "batch": p.batch, "seq_q": p.seq_q, "seq_k": p.seq_k,
                          "rows": p.rows()}))
    return 0


def _support(ap, argv):
    from .problems import Problem
    from .support import static_support
    if len(argv) < 2:
        ap.error("--support needs PEER (or all) and at least one PROBLEM_JSON")
    peers = PEERS if argv[0] == "all" else (argv[0],)
    for path in argv[1:]:
        p = Problem(load_json(path, "problem"), path)
        verdicts = {}
        for name in peers:
            ok, reason = static_support(name, p)
            verdicts[name] = {"ok": ok, "reason": reason}
        print(json.dumps({"problem": path, "verdicts": verdicts}))
    return 0


def main(argv=None):
    """Parse argv (default sys.argv[1:]) and run the chosen mode. Returns the exit
    code; a RequestError (unreadable problem or request) prints its message and
    returns 2."""
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        if args.request:
            if not os.path.isdir(os.path.dirname(os.path.abspath(args.request))):
                print(f"attnbench_torch: no such directory for {args.request}", file=sys.stderr)
                return 2
            from .request import run_request
            return run_request(args.request)
        if args.serve:
            from .serve import serve
            return serve()
        if args.probe:
            from .probe import probe
            ok, rep = probe()
            print(json.dumps(rep))
            return 0 if ok else 1
        if args.self_test:
            from .selftest import self_test
            return self_test(args)
        if args.dump_mask:
            return _dump_mask(args.dump_mask)
        if args.support:
            return _support(ap, args.support)
    except RequestError as e:
        print(f"attnbench_torch: {e}", file=sys.stderr)
        return 2
    return 2
