"""attnbench_torch: PyTorch's attention backends behind attnbench's peer protocol.

attnbench (backends/peers/peer_protocol.cpp) writes a work directory with
problem.json, q/k/v/do.npy (float32, or float64 when a value is not a float32;
logical [B, H, S, D] layout, values already rounded to the problem dtype), bias/offset.npy for learnable score mods and
request.json, then runs

    python3 backends/peers/attnbench_torch --request DIR/request.json

This worker answers with o/lse/dq/dk/dv(/dbias).npy (float32, exact for its
bf16 / fp16 / fp32 results; float64 results stay float64; logical layout) and
result.json (status ok | unsupported | error, raw timing samples in ms, compile and
setup time, bitwise determinism, versions, notes). The protocol is specified in
docs/peers.md; backends/peers/README.md describes this worker.

Peers (one attnbench backend each):
  torch-sdpa-flash      F.scaled_dot_product_attention restricted to FLASH_ATTENTION
  torch-sdpa-cudnn      ... restricted to CUDNN_ATTENTION
  torch-sdpa-efficient  ... restricted to EFFICIENT_ATTENTION
  torch-flex            flex_attention under torch.compile(dynamic=False), BlockMask
                        from create_block_mask, score_mod for softcap/alibi/biases
  torch-varlen          torch.nn.attention.varlen.varlen_attn on packed sequences

Other modes:
  --serve                     persistent: one request.json path per stdin line, one
                              JSON answer line per request on stdout (docs/peers.md
                              "Persistent workers"); exits at EOF
  --probe                     availability as one JSON line (exit 0 usable, 1 not)
  --self-test [--peers a,b] [--quick] [--keep]
                              every peer on tiny problems against float64 (exit 0 = ok)
  --dump-mask PROBLEM.json... each mask as one JSON line of '0'/'1' rows (stdlib only)
  --support PEER|all PROBLEM.json...
                              static support verdicts, one JSON line per problem (stdlib only)

Exit codes: 0 result.json written (whatever its status) / probe usable / self-test
passed; 1 probe not usable / self-test failures; 2 bad usage or unreadable request;
3 internal error (result.json could not be written).

Modules. Standard library only (the semantics, testable without torch):
  protocol.py   constants, errors, JSON plumbing of the file protocol
  masks.py      the mask semantics (port of mask_allowed, splitmix64, block_sparse_keep)
  problems.py   the problem file; support.py the peers' static support rules
  rng.py        the seeded input generator (port of harness/model/tensors.hpp)
  stopping.py   the timing policy, the stopping rule, the hold length (port of harness/measure)
  golden.py     checks of the above against the C++ golden vectors (tests/data/golden)
  cli.py        the command line; __main__.py the entry point
Modules that use torch (imported when a request runs, through torch_env.TorchEnv):
  torch_env.py  torch / numpy / device, versions; torch_mask.py the mask as torch ops
  peers/        sdpa.py, flex.py, varlen.py (one module per PyTorch path), base.py
  timing.py     CUDA-event timing behind a stream hold
  request.py    one request: inputs, run, outputs, result.json
  serve.py, probe.py, selftest.py   the other modes
  cpu_check.py  the same worker on the CPU with stand-in kernels (tests without a GPU)
So --dump-mask, --support and --probe's failure path work on machines without torch.
"""

from .protocol import PEERS, PROTOCOL  # noqa: F401
