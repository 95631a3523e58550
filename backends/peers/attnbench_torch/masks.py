"""The mask semantics of docs/semantics.md section 3 in plain Python.

A port of harness/model/mask_desc.hpp (mask_allowed, splitmix64,
block_sparse_keep): the flattened mask (`Mask`) that the torch code
(torch_mask.py) turns into integer ops, the scalar `Mask.allowed` it is checked
against, and the block_sparse keep table. Standard library only. The golden
vectors of tests/data/golden/masks.json, written by the C++ side
(tests/test_golden.cpp), are asserted against this module by tests/test_golden.py.
"""

from .protocol import RequestError, need

BLOCK = 128  # block_sparse block and BlockMask tile (docs/semantics.md sections 3 and 6)
MASK64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64 finaliser on a 64-bit unsigned int (harness/model/mask_desc.hpp)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def block_sparse_keep(seed, qb, kb, density):
    """Whether block (qb, kb) of block_sparse{density, seed} is kept (mask_desc.hpp):
    u = top 53 bits of splitmix64(seed ^ splitmix64(qb * 0x100000001B3 + kb)) / 2^53,
    kept iff u < density."""
    inner = splitmix64((qb * 0x100000001B3 + kb) & MASK64)
    h = splitmix64((seed ^ inner) & MASK64)
    u = (h >> 11) * (1.0 / 9007199254740992.0)  # 2^-53
    return u < density


def _tighten_upper(cur, v):
    return v if cur is None else min(cur, v)


def _doc_ids_from_lengths(lengths, seq_q, where):
    """doc_lengths [B][n] -> doc_ids [B][seq_q]: document d covers the next
    lengths[d] tokens, the rest of the row is padding (-1)."""
    ids = []
    for row in lengths:
        r = []
        for d, length in enumerate(row):
            r.extend([d] * int(length))
        if len(r) > seq_q:
            raise RequestError(f"{where}/doc_lengths: a row sums to {len(r)} > seq_q {seq_q}")
        r.extend([-1] * (seq_q - len(r)))
        ids.append(r)
    return ids


class Mask:
    """The flattened mask of harness/model/mask_desc.hpp for a [batch, seq_q, seq_k]
    problem: upper_tl / upper_br / lower_br bounds on j - i (None = unbounded),
    prefix_len, doc_ids [B][Sq] (-1 = padding), seq_lens_q / seq_lens_k [B],
    block (density, seed); kinds lists the terms in order, causal_align and window
    what the causal and sliding_window terms said. Problem (problems.py) extends it.
    """

    def init_mask(self, terms, batch, seq_q, seq_k, where):
        """Flatten the problem file's mask terms (docs/semantics.md section 10).
        Raises RequestError naming `where`/mask/n and the value on a malformed term."""
        self.batch, self.seq_q, self.seq_k = batch, seq_q, seq_k
        self.upper_tl = self.upper_br = self.lower_br = None
        self.prefix_len = self.doc_ids = self.seq_lens_q = self.seq_lens_k = None
        self.block = self.causal_align = self.window = None
        self.kinds = []
        for n, term in enumerate(terms):
            p = f"{where}/mask/{n}"
            kind = need(term, "kind", "str", p)
            if kind in self.kinds:
                raise RequestError(f"{p}/kind: mask kind {kind!r} given twice")
            self.kinds.append(kind)
            handler = getattr(self, "_term_" + kind, None)
            if handler is None:
                raise RequestError(f"{p}/kind: unknown mask kind {kind!r}")
            handler(term, p)

    def _term_causal(self, term, p):
        align = term.get("align", "bottom_right")
        if align not in ("top_left", "bottom_right"):
            raise RequestError(f"{p}/align: expected top_left or bottom_right, got {align!r}")
        self.causal_align = align
        if align == "top_left":
            self.upper_tl = _tighten_upper(self.upper_tl, 0)
        else:
            self.upper_br = _tighten_upper(self.upper_br, 0)

    def _term_sliding_window(self, term, p):
        left = term.get("left", -1)
        right = term.get("right", -1)
        self.window = (left, right)
        if right >= 0:
            self.upper_br = _tighten_upper(self.upper_br, right)
        if left >= 0:
            self.lower_br = -left if self.lower_br is None else max(self.lower_br, -left)

    def _term_document(self, term, p):
        if "doc_ids" in term:
            ids = term["doc_ids"]
        elif "doc_lengths" in term:
            ids = _doc_ids_from_lengths(term["doc_lengths"], self.seq_q, p)
        else:
            raise RequestError(f"{p}: document mask needs doc_ids or doc_lengths")
        if len(ids) != self.batch or any(len(r) != self.seq_q for r in ids):
            raise RequestError(f"{p}/doc_ids: expected [{self.batch}][{self.seq_q}] ids")
        if self.seq_q != self.seq_k:
            raise RequestError(f"{p}: document masks need seq_q == seq_k")
        self.doc_ids = [[int(x) for x in r] for r in ids]

    def _term_prefix_lm(self, term, p):
        self.prefix_len = int(need(term, "prefix_len", "int", p))

    def _term_padding(self, term, p):
        self.seq_lens_q = [int(x) for x in need(term, "seq_lens_q", "list", p)]
        self.seq_lens_k = [int(x) for x in need(term, "seq_lens_k", "list", p)]
        if len(self.seq_lens_q) != self.batch or len(self.seq_lens_k) != self.batch:
            raise RequestError(f"{p}: padding lengths need {self.batch} entries")

    def _term_block_sparse(self, term, p):
        self.block = (float(term.get("density", 1.0)), int(term.get("seed", 0)) & MASK64)

    # -- sizes
    def valid_q(self, b):
        """Valid query length of batch row b."""
        return self.seq_lens_q[b] if self.seq_lens_q is not None else self.seq_q

    def valid_k(self, b):
        """Valid key length of batch row b."""
        return self.seq_lens_k[b] if self.seq_lens_k is not None else self.seq_k

    def has_mask(self):
        """True when some (b, i, j) may be masked out."""
        return any(x is not None for x in (self.upper_tl, self.upper_br, self.lower_br, self.prefix_len,
                                          self.doc_ids, self.seq_lens_q, self.block))

    def depends_on_batch(self):
        """True when the mask differs between batch rows."""
        return self.doc_ids is not None or self.seq_lens_q is not None

    def allowed(self, b, i, j):
        """mask(b, h, i, j) of docs/semantics.md section 3, scalar (port of mask_allowed())."""
        sq, sk = self.seq_q, self.seq_k
        if self.seq_lens_q is not None:
            sq, sk = self.seq_lens_q[b], self.seq_lens_k[b]
            if i >= sq or j >= sk:
                return False
        d = j - i
        off = sk - sq
        if self.upper_tl is not None and d > self.upper_tl:
            return False
        if self.upper_br is not None and d - off > self.upper_br:
            return False
        if self.lower_br is not None and d - off < self.lower_br:
            return False
        if self.prefix_len is not None and not (j < self.prefix_len or j <= i):
            return False
        if self.doc_ids is not None:
            di = self.doc_ids[b][i]
            if di < 0 or di != self.doc_ids[b][j]:
                return False
        if self.block is not None and not block_sparse_keep(self.block[1], i // BLOCK, j // BLOCK, self.block[0]):
            return False
        return True

    def rows(self):
        """The whole mask as '0'/'1' strings, one per (b, i) in batch-major order,
        character j = allowed(b, i, j) (the format of --dump-mask and masks.json)."""
        return ["".join("1" if self.allowed(b, i, j) else "0" for j in range(self.seq_k))
                for b in range(self.batch) for i in range(self.seq_q)]

    def keep_table(self):
        """block_sparse keep table [ceil(Sq/128)][ceil(Sk/128)] of bools, or None."""
        if self.block is None:
            return None
        density, seed = self.block
        nq = -(-self.seq_q // BLOCK)
        nk = -(-self.seq_k // BLOCK)
        return [[block_sparse_keep(seed, qb, kb, density) for kb in range(nk)] for qb in range(nq)]

    def document_runs(self):
        """Per row, the documents as (start, length) runs, or None when some id is
        not one contiguous run. Padding (-1) is skipped."""
        out = []
        for row in self.doc_ids:
            runs, seen = [], set()
            t = 0
            while t < len(row):
                d = row[t]
                e = t
                while e < len(row) and row[e] == d:
                    e += 1
                if d >= 0:
                    if d in seen:
                        return None
                    seen.add(d)
                    runs.append((t, e - t))
                t = e
            out.append(runs)
        return out
