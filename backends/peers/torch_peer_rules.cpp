// Static support rules, mask plans and executed-pair estimates of the PyTorch
// peers (torch_peer_rules.hpp).
#include "backends/peers/torch_peer_rules.hpp"

#include <exception>
#include <map>
#include <set>
#include <utility>
#include <variant>
#include <vector>

#include "harness/model/block_mask.hpp"
#include "harness/model/mask.hpp"

namespace attnbench::peers {

namespace {

/// Per row, whether every document id >= 0 forms one contiguous run.
bool documents_contiguous(const DocumentTerm& d) {
  for (const auto& row : d.doc_ids) {
    std::set<int32_t> seen;
    int32_t prev = -2;
    for (int32_t id : row) {
      if (id != prev && id >= 0 && !seen.insert(id).second) return false;
      prev = id;
    }
  }
  return true;
}

/// True when the flattened mask restricts any (b, i, j) (mirrors Problem.has_mask()).
bool restricts(const Problem& p) {
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  return m.upper_tl != kNoBound || m.upper_br != kNoBound || m.lower_br != -kNoBound || m.prefix_len >= 0 ||
         m.doc_ids != nullptr || m.seq_lens_q != nullptr || m.block_density >= 0.0;
}

}  // namespace

Support torch_peer_supports(TorchPeer k, const Problem& p) {
  const std::string name = torch_peer_name(k);
  const bool flash = k == TorchPeer::sdpa_flash, cudnn = k == TorchPeer::sdpa_cudnn, varlen = k == TorchPeer::varlen;
  if (!varlen && p.layout == Layout::thd)
    return Support::no(name + " runs on padded [B, H, S, D] tensors; the thd layout is served by torch-varlen");
  if ((flash || cudnn || varlen) && p.dtype == DType::fp32)
    return Support::no(name + " supports fp16 and bf16 only (got fp32)");
  if (k != TorchPeer::flex && p.score_mod.kind != ScoreMod::Kind::none)
    return Support::no(std::string("score_mod ") + to_string(p.score_mod.kind) +
                       " needs torch-flex: F.scaled_dot_product_attention and varlen_attn take no score_mod");
  if ((flash || varlen) && p.head_dim != p.head_dim_v)
    return Support::no(name + " (FlashAttention) needs head_dim == head_dim_v (got " + std::to_string(p.head_dim) +
                       " and " + std::to_string(p.head_dim_v) + ")");
  const auto* causal = p.find_mask<CausalTerm>();
  if (flash) {
    std::string others;
    for (const auto& m : p.mask)
      if (!std::holds_alternative<CausalTerm>(m)) others += (others.empty() ? "" : ", ") + std::string(mask_kind_name(m));
    if (!others.empty())
      return Support::no("the flash backend of F.scaled_dot_product_attention takes no attn_mask, only is_causal (mask has " +
                         others + ")");
    if (causal && causal->align == CausalAlign::bottom_right && p.seq_q != p.seq_k)
      return Support::no("bottom-right causal with seq_q != seq_k: F.scaled_dot_product_attention's is_causal is "
                         "top-left and the flash backend takes no attn_mask");
  }
  if (varlen) {
    std::string bad;
    for (const auto& m : p.mask)
      if (std::holds_alternative<PrefixLmTerm>(m) || std::holds_alternative<BlockSparseTerm>(m))
        bad += (bad.empty() ? "" : ", ") + std::string(mask_kind_name(m));
    if (!bad.empty())
      return Support::no("varlen_attn supports causal, sliding_window, document and padding masks only (mask has " + bad + ")");
    const auto* doc = p.find_mask<DocumentTerm>();
    if (doc && p.find_mask<PaddingTerm>())
      return Support::no("varlen_attn: a document mask together with a padding mask is not supported");
    if (doc && !documents_contiguous(*doc))
      return Support::no("document ids are not contiguous runs: varlen_attn needs one sequence per document");
    if (causal && causal->align == CausalAlign::top_left && !doc)
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.valid_q(b) != p.valid_k(b))
          return Support::no("top-left causal with query length != key length: varlen_attn (FlashAttention) "
                             "aligns the causal diagonal bottom-right");
  }
  return Support::yes();
}

std::string torch_peer_mask_plan(TorchPeer k, const Problem& p) {
  if (k == TorchPeer::varlen) return "sequences";
  if (!restricts(p)) return "none";
  if (k == TorchPeer::flex) return "block_mask";
  const auto* causal = p.find_mask<CausalTerm>();
  if (p.mask.size() == 1 && causal && (p.seq_q == p.seq_k || causal->align == CausalAlign::top_left)) return "is_causal";
  return "dense";
}

int64_t torch_peer_executed_pairs(TorchPeer k, const Problem& p) {
  const int64_t dense = p.batch * p.heads_q * p.seq_q * p.seq_k;
  try {
    if (k == TorchPeer::varlen) {
      // Sequences as the worker (attnbench_torch/peers/varlen.py) builds them: documents, else rows of valid lengths.
      std::vector<std::pair<int64_t, int64_t>> seqs;
      if (const auto* doc = p.find_mask<DocumentTerm>()) {
        for (const auto& row : doc->doc_ids) {
          size_t t = 0;
          while (t < row.size()) {
            size_t e = t;
            while (e < row.size() && row[e] == row[t]) ++e;
            if (row[t] >= 0) seqs.emplace_back(static_cast<int64_t>(e - t), static_cast<int64_t>(e - t));
            t = e;
          }
        }
      } else {
        for (int64_t b = 0; b < p.batch; ++b)
          if (p.valid_q(b) > 0) seqs.emplace_back(p.valid_q(b), p.valid_k(b));
      }
      std::map<std::pair<int64_t, int64_t>, int64_t> memo;
      int64_t total = 0;
      for (const auto& s : seqs) {
        auto it = memo.find(s);
        if (it == memo.end()) {
          Problem q;
          q.batch = 1;
          q.heads_q = q.heads_kv = 1;
          q.seq_q = s.first;
          q.seq_k = s.second;
          q.head_dim = p.head_dim;
          q.head_dim_v = p.head_dim_v;
          if (p.find_mask<CausalTerm>()) q.mask.push_back(CausalTerm{CausalAlign::bottom_right});
          if (const auto* w = p.find_mask<SlidingWindowTerm>()) q.mask.push_back(*w);
          it = memo.emplace(s, build_block_mask(q, 128, 128).executed_pairs_per_head(1)).first;
        }
        total += it->second;
      }
      return total * p.heads_q;
    }
    if (torch_peer_mask_plan(k, p) == "dense") return dense;
    return build_block_mask(p, 128, 128).executed_pairs_per_head(p.batch) * p.heads_q;
  } catch (const std::exception&) {
    return dense;
  }
}

}  // namespace attnbench::peers
