#include "harness/model/problem.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "harness/model/budget.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"

namespace attnbench {

using nlohmann::json;
using jsonu::child_path;
using jsonu::show;

double Problem::softmax_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int64_t Problem::valid_q(int64_t b) const {
  if (auto* pad = find_mask<PaddingTerm>()) return pad->seq_lens_q.at(static_cast<size_t>(b));
  return seq_q;
}
int64_t Problem::valid_k(int64_t b) const {
  if (auto* pad = find_mask<PaddingTerm>()) return pad->seq_lens_k.at(static_cast<size_t>(b));
  return seq_k;
}

int64_t Problem::bias_numel() const {
  switch (score_mod.kind) {
    case ScoreMod::Kind::rel_bias: return heads_q * (2 * score_mod.max_distance + 1);
    case ScoreMod::Kind::offset_bias: return score_mod.size;
    default: return 0;
  }
}
int64_t Problem::offset_numel() const {
  return score_mod.kind == ScoreMod::Kind::offset_bias ? seq_k : 0;
}

int dtype_bytes(DType t) { return t == DType::fp32 ? 4 : 2; }

const char* to_string(DType t) {
  switch (t) {
    case DType::fp32: return "fp32";
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "?";
}
const char* to_string(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::thd: return "thd";
  }
  return "?";
}
const char* to_string(CausalAlign a) {
  return a == CausalAlign::top_left ? "top_left" : "bottom_right";
}
const char* to_string(ScoreMod::Kind k) {
  switch (k) {
    case ScoreMod::Kind::none: return "none";
    case ScoreMod::Kind::softcap: return "softcap";
    case ScoreMod::Kind::alibi: return "alibi";
    case ScoreMod::Kind::rel_bias: return "rel_bias";
    case ScoreMod::Kind::offset_bias: return "offset_bias";
  }
  return "?";
}

const char* mask_kind_name(const MaskTerm& t) {
  struct V {
    const char* operator()(const CausalTerm&) const { return "causal"; }
    const char* operator()(const SlidingWindowTerm&) const { return "sliding_window"; }
    const char* operator()(const DocumentTerm&) const { return "document"; }
    const char* operator()(const PrefixLmTerm&) const { return "prefix_lm"; }
    const char* operator()(const PaddingTerm&) const { return "padding"; }
    const char* operator()(const BlockSparseTerm&) const { return "block_sparse"; }
  };
  return std::visit(V{}, t);
}

std::vector<int32_t> doc_ids_from_lengths(const std::vector<int64_t>& lengths, int64_t seq) {
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(seq));
  int32_t id = 0;
  for (int64_t len : lengths) {
    if (len < 0) throw std::invalid_argument("negative document length");
    for (int64_t t = 0; t < len; ++t) ids.push_back(id);
    ++id;
  }
  if (static_cast<int64_t>(ids.size()) > seq)
    throw std::invalid_argument("document lengths exceed the sequence length");
  ids.resize(static_cast<size_t>(seq), -1);
  return ids;
}

DocumentTerm document_term_from_lengths(const std::vector<std::vector<int64_t>>& lengths, int64_t seq) {
  DocumentTerm d;
  d.doc_lengths = lengths;
  for (const auto& row : lengths) d.doc_ids.push_back(doc_ids_from_lengths(row, seq));
  return d;
}

// ------------------------------------------------------------------ parsing

namespace {

void validate_dims(const Problem& p, const std::string& file, const std::string& path);

DType parse_dtype(const json& j, const std::string& file, const std::string& path) {
  std::string s = jsonu::get_string(j, file, path);
  if (s == "fp32" || s == "float32") return DType::fp32;
  if (s == "fp16" || s == "float16") return DType::fp16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw InputError(file, path, "unknown dtype " + show(j) + " (expected fp32, fp16 or bf16)");
}

Layout parse_layout(const json& j, const std::string& file, const std::string& path) {
  std::string s = jsonu::get_string(j, file, path);
  if (s == "bshd") return Layout::bshd;
  if (s == "bhsd") return Layout::bhsd;
  if (s == "thd") return Layout::thd;
  throw InputError(file, path, "unknown layout " + show(j) + " (expected bshd, bhsd or thd)");
}

std::vector<std::vector<int64_t>> get_int_matrix(const json& j, const std::string& file,
                                                 const std::string& path) {
  if (!j.is_array()) throw InputError(file, path, "expected an array of arrays, got " + show(j));
  std::vector<std::vector<int64_t>> out;
  for (size_t r = 0; r < j.size(); ++r)
    out.push_back(jsonu::get_int_array(j[r], file, child_path(path, r)));
  return out;
}

}  // namespace

MaskTerm mask_term_from_json(const json& j, const std::string& file, const std::string& path) {
  jsonu::require_object(j, file, path);
  std::string kind = jsonu::get_string(jsonu::require(j, "kind", file, path), file,
                                       child_path(path, "kind"));
  if (kind == "causal") {
    jsonu::reject_unknown_keys(j, {"kind", "align"}, file, path);
    CausalTerm t;
    std::string a = jsonu::opt_string(j, "align", "bottom_right", file, path);
    if (a == "top_left") t.align = CausalAlign::top_left;
    else if (a == "bottom_right") t.align = CausalAlign::bottom_right;
    else
      throw InputError(file, child_path(path, "align"),
                       "unknown causal alignment \"" + a + "\" (expected top_left or bottom_right)");
    return t;
  }
  if (kind == "sliding_window") {
    jsonu::reject_unknown_keys(j, {"kind", "left", "right"}, file, path);
    SlidingWindowTerm t;
    t.left = jsonu::opt_int(j, "left", -1, file, path);
    t.right = jsonu::opt_int(j, "right", -1, file, path);
    if (t.left < -1)
      throw InputError(file, child_path(path, "left"),
                       "window bound must be >= -1 (-1 = unbounded), got " + std::to_string(t.left));
    if (t.right < -1)
      throw InputError(file, child_path(path, "right"),
                       "window bound must be >= -1 (-1 = unbounded), got " + std::to_string(t.right));
    return t;
  }
  if (kind == "document") {
    jsonu::reject_unknown_keys(j, {"kind", "doc_ids", "doc_lengths"}, file, path);
    DocumentTerm t;
    bool has_ids = j.contains("doc_ids"), has_len = j.contains("doc_lengths");
    if (has_ids == has_len)
      throw InputError(file, path, "document mask needs exactly one of doc_ids or doc_lengths");
    if (has_ids) {
      auto m = get_int_matrix(j["doc_ids"], file, child_path(path, "doc_ids"));
      for (size_t r = 0; r < m.size(); ++r) {
        std::vector<int32_t> row;
        for (size_t c = 0; c < m[r].size(); ++c) {
          int64_t v = m[r][c];
          if (v < -1 || v > INT32_MAX)
            throw InputError(file, child_path(child_path(child_path(path, "doc_ids"), r), c),
                             "document id must be >= -1 (-1 = padding), got " + std::to_string(v));
          row.push_back(static_cast<int32_t>(v));
        }
        t.doc_ids.push_back(std::move(row));
      }
    } else {
      t.doc_lengths = get_int_matrix(j["doc_lengths"], file, child_path(path, "doc_lengths"));
      for (size_t r = 0; r < t.doc_lengths.size(); ++r)
        for (size_t c = 0; c < t.doc_lengths[r].size(); ++c)
          if (t.doc_lengths[r][c] < 0)
            throw InputError(file,
                             child_path(child_path(child_path(path, "doc_lengths"), r), c),
                             "document length must be >= 0, got " +
                                 std::to_string(t.doc_lengths[r][c]));
      // doc_ids are filled in problem_from_json once seq_q is known.
    }
    return t;
  }
  if (kind == "prefix_lm") {
    jsonu::reject_unknown_keys(j, {"kind", "prefix_len"}, file, path);
    PrefixLmTerm t;
    t.prefix_len = jsonu::get_int(jsonu::require(j, "prefix_len", file, path), file,
                                  child_path(path, "prefix_len"));
    if (t.prefix_len < 0)
      throw InputError(file, child_path(path, "prefix_len"),
                       "prefix_len must be >= 0, got " + std::to_string(t.prefix_len));
    return t;
  }
  if (kind == "padding") {
    jsonu::reject_unknown_keys(j, {"kind", "seq_lens_q", "seq_lens_k"}, file, path);
    PaddingTerm t;
    t.seq_lens_q = jsonu::get_int_array(jsonu::require(j, "seq_lens_q", file, path), file,
                                        child_path(path, "seq_lens_q"));
    t.seq_lens_k = jsonu::get_int_array(jsonu::require(j, "seq_lens_k", file, path), file,
                                        child_path(path, "seq_lens_k"));
    return t;
  }
  if (kind == "block_sparse") {
    jsonu::reject_unknown_keys(j, {"kind", "density", "seed"}, file, path);
    BlockSparseTerm t;
    t.density = jsonu::get_number(jsonu::require(j, "density", file, path), file,
                                  child_path(path, "density"));
    int64_t seed = jsonu::opt_int(j, "seed", 0, file, path);
    if (seed < 0)
      throw InputError(file, child_path(path, "seed"), "seed must be >= 0, got " + std::to_string(seed));
    t.seed = static_cast<uint64_t>(seed);
    return t;
  }
  throw InputError(file, child_path(path, "kind"),
                   "unknown mask kind " + show(j["kind"]) +
                       " (expected causal, sliding_window, document, prefix_lm, padding or "
                       "block_sparse)");
}

ScoreMod score_mod_from_json(const json& j, const std::string& file, const std::string& path) {
  ScoreMod s;
  if (j.is_null()) return s;
  if (j.is_string()) {  // shorthand: "none" / "alibi"
    std::string k = j.get<std::string>();
    if (k == "none") return s;
    if (k == "alibi") { s.kind = ScoreMod::Kind::alibi; return s; }
    throw InputError(file, path, "score_mod " + show(j) + " needs parameters; write it as an object");
  }
  jsonu::require_object(j, file, path);
  std::string kind = jsonu::get_string(jsonu::require(j, "kind", file, path), file,
                                       child_path(path, "kind"));
  if (kind == "none") {
    jsonu::reject_unknown_keys(j, {"kind"}, file, path);
  } else if (kind == "softcap") {
    jsonu::reject_unknown_keys(j, {"kind", "cap"}, file, path);
    s.kind = ScoreMod::Kind::softcap;
    s.cap = jsonu::get_number(jsonu::require(j, "cap", file, path), file, child_path(path, "cap"));
    if (!(s.cap > 0))
      throw InputError(file, child_path(path, "cap"), "softcap cap must be > 0, got " + show(j["cap"]));
  } else if (kind == "alibi") {
    jsonu::reject_unknown_keys(j, {"kind"}, file, path);
    s.kind = ScoreMod::Kind::alibi;
  } else if (kind == "rel_bias") {
    jsonu::reject_unknown_keys(j, {"kind", "max_distance"}, file, path);
    s.kind = ScoreMod::Kind::rel_bias;
    s.max_distance = jsonu::get_int(jsonu::require(j, "max_distance", file, path), file,
                                    child_path(path, "max_distance"));
    if (s.max_distance < 0)
      throw InputError(file, child_path(path, "max_distance"),
                       "max_distance must be >= 0, got " + show(j["max_distance"]));
  } else if (kind == "offset_bias") {
    jsonu::reject_unknown_keys(j, {"kind", "size"}, file, path);
    s.kind = ScoreMod::Kind::offset_bias;
    s.size = jsonu::get_int(jsonu::require(j, "size", file, path), file, child_path(path, "size"));
    if (s.size < 1)
      throw InputError(file, child_path(path, "size"), "offset_bias size must be >= 1, got " + show(j["size"]));
  } else {
    throw InputError(file, child_path(path, "kind"),
                     "unknown score_mod kind " + show(j["kind"]) +
                         " (expected none, softcap, alibi, rel_bias or offset_bias)");
  }
  return s;
}

Problem problem_from_json(const json& j, const std::string& file, const std::string& path) {
  jsonu::require_object(j, file, path);
  jsonu::reject_unknown_keys(j,
                             {"batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim",
                              "head_dim_v", "dtype", "scale", "layout", "mask", "score_mod", "seed"},
                             file, path);
  Problem p;
  p.batch = jsonu::get_int(jsonu::require(j, "batch", file, path), file, child_path(path, "batch"));
  p.heads_q = jsonu::get_int(jsonu::require(j, "heads_q", file, path), file, child_path(path, "heads_q"));
  p.heads_kv = jsonu::opt_int(j, "heads_kv", p.heads_q, file, path);
  p.seq_q = jsonu::get_int(jsonu::require(j, "seq_q", file, path), file, child_path(path, "seq_q"));
  p.seq_k = jsonu::opt_int(j, "seq_k", p.seq_q, file, path);
  p.head_dim = jsonu::get_int(jsonu::require(j, "head_dim", file, path), file, child_path(path, "head_dim"));
  p.head_dim_v = jsonu::opt_int(j, "head_dim_v", p.head_dim, file, path);
  if (j.contains("dtype")) p.dtype = parse_dtype(j["dtype"], file, child_path(path, "dtype"));
  if (j.contains("layout")) p.layout = parse_layout(j["layout"], file, child_path(path, "layout"));
  if (j.contains("scale") && !j["scale"].is_null()) {
    p.scale = jsonu::get_number(j["scale"], file, child_path(path, "scale"));
    if (!(*p.scale > 0) || !std::isfinite(*p.scale))
      throw InputError(file, child_path(path, "scale"), "scale must be a positive finite number or null, got " + show(j["scale"]));
  }
  if (j.contains("seed")) {
    int64_t s = jsonu::get_int(j["seed"], file, child_path(path, "seed"));
    if (s < 0) throw InputError(file, child_path(path, "seed"), "seed must be >= 0, got " + show(j["seed"]));
    p.seed = static_cast<uint64_t>(s);
  }
  if (j.contains("mask") && !j["mask"].is_null()) {
    const json& m = j["mask"];
    std::string mp = child_path(path, "mask");
    if (m.is_object()) {
      p.mask.push_back(mask_term_from_json(m, file, mp));
    } else if (m.is_array()) {
      for (size_t i = 0; i < m.size(); ++i)
        p.mask.push_back(mask_term_from_json(m[i], file, child_path(mp, i)));
    } else {
      throw InputError(file, mp, "expected a mask object or a list of them, got " + show(m));
    }
  }
  if (j.contains("score_mod"))
    p.score_mod = score_mod_from_json(j["score_mod"], file, child_path(path, "score_mod"));

  // Sizes first, with checked arithmetic: nothing below allocates or counts by them
  // before they are known to fit the budget (harness/model/budget.hpp).
  validate_dims(p, file, path);
  try {
    check_budget(p, file, path);
  } catch (const BudgetError& e) {
    // A single mask object (not a list) has no "/0" in its pointer.
    const std::string m0 = child_path(child_path(path, "mask"), 0);
    if (j["mask"].is_object() && e.json_path().rfind(m0, 0) == 0) {
      const std::string rest = e.json_path().substr(m0.size());
      const std::string what = e.what();
      const std::string prefix = InputError::format(e.file(), e.json_path(), "");
      throw BudgetError(file, child_path(path, "mask") + rest, what.substr(std::min(prefix.size(), what.size())));
    }
    throw;
  }
  // Document lengths from a file must fill every row exactly (docs/semantics.md section 10).
  for (size_t i = 0; i < p.mask.size(); ++i) {
    auto* d = std::get_if<DocumentTerm>(&p.mask[i]);
    if (!d || d->doc_lengths.empty()) continue;
    std::string dp = child_path(child_path(child_path(path, "mask"), i), "doc_lengths");
    if (static_cast<int64_t>(d->doc_lengths.size()) != p.batch)
      throw InputError(file, dp, "expected " + std::to_string(p.batch) + " rows (batch), got " +
                                     std::to_string(d->doc_lengths.size()));
    for (size_t r = 0; r < d->doc_lengths.size(); ++r) {
      int64_t sum = 0;
      for (int64_t l : d->doc_lengths[r]) sum += l;
      if (sum != p.seq_q)
        throw InputError(file, child_path(dp, r),
                         "document lengths sum to " + std::to_string(sum) + ", expected seq_q = " +
                             std::to_string(p.seq_q) + " (value " + show(j["mask"].is_array() ? j["mask"][i]["doc_lengths"][r] : j["mask"]["doc_lengths"][r]) + ")");
      d->doc_ids.push_back(doc_ids_from_lengths(d->doc_lengths[r], p.seq_q));
    }
  }
  validate(p, file, path);
  return p;
}

// ------------------------------------------------------------------ validation

namespace {

/// Positive sizes and Hq % Hkv == 0: what check_budget() relies on.
void validate_dims(const Problem& p, const std::string& file, const std::string& path) {
  auto positive = [&](int64_t v, const char* name) {
    if (v < 1)
      throw InputError(file, child_path(path, name), std::string(name) + " must be >= 1, got " + std::to_string(v));
  };
  positive(p.batch, "batch");
  positive(p.heads_q, "heads_q");
  positive(p.heads_kv, "heads_kv");
  positive(p.seq_q, "seq_q");
  positive(p.seq_k, "seq_k");
  positive(p.head_dim, "head_dim");
  positive(p.head_dim_v, "head_dim_v");
  if (p.heads_q % p.heads_kv != 0)
    throw InputError(file, child_path(path, "heads_kv"),
                     "heads_q (" + std::to_string(p.heads_q) + ") must be a multiple of heads_kv (" +
                         std::to_string(p.heads_kv) + ")");
}

}  // namespace

void validate(const Problem& p, const std::string& file, const std::string& path) {
  validate_dims(p, file, path);
  check_budget(p, file, path);
  if (p.score_mod.kind == ScoreMod::Kind::softcap && !(p.score_mod.cap > 0))
    throw InputError(file, child_path(path, "score_mod"), "softcap cap must be > 0");
  if (p.score_mod.kind == ScoreMod::Kind::offset_bias && p.score_mod.size < 1)
    throw InputError(file, child_path(path, "score_mod"), "offset_bias size must be >= 1");
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias && p.score_mod.max_distance < 0)
    throw InputError(file, child_path(path, "score_mod"), "rel_bias max_distance must be >= 0");

  std::vector<std::string> seen;
  for (size_t i = 0; i < p.mask.size(); ++i) {
    std::string mp = child_path(child_path(path, "mask"), i);
    std::string kind = mask_kind_name(p.mask[i]);
    for (const auto& s : seen)
      if (s == kind)
        throw InputError(file, mp, "mask kind \"" + kind + "\" appears more than once; the list is an AND of distinct kinds");
    seen.push_back(kind);
    if (auto* w = std::get_if<SlidingWindowTerm>(&p.mask[i])) {
      if (w->left < -1) throw InputError(file, child_path(mp, "left"), "window bound must be >= -1, got " + std::to_string(w->left));
      if (w->right < -1) throw InputError(file, child_path(mp, "right"), "window bound must be >= -1, got " + std::to_string(w->right));
    } else if (auto* d = std::get_if<DocumentTerm>(&p.mask[i])) {
      if (p.seq_q != p.seq_k)
        throw InputError(file, mp, "document mask is self-attention only: seq_q (" + std::to_string(p.seq_q) +
                                       ") must equal seq_k (" + std::to_string(p.seq_k) + ")");
      if (static_cast<int64_t>(d->doc_ids.size()) != p.batch)
        throw InputError(file, child_path(mp, "doc_ids"), "expected " + std::to_string(p.batch) +
                                                              " rows (batch), got " + std::to_string(d->doc_ids.size()));
      for (size_t r = 0; r < d->doc_ids.size(); ++r) {
        if (static_cast<int64_t>(d->doc_ids[r].size()) != p.seq_q)
          throw InputError(file, child_path(child_path(mp, "doc_ids"), r),
                           "expected " + std::to_string(p.seq_q) + " ids (seq_q), got " + std::to_string(d->doc_ids[r].size()));
        for (int32_t id : d->doc_ids[r])
          if (id < -1) throw InputError(file, child_path(child_path(mp, "doc_ids"), r), "document id must be >= -1, got " + std::to_string(id));
      }
      if (!d->doc_lengths.empty()) {
        if (static_cast<int64_t>(d->doc_lengths.size()) != p.batch)
          throw InputError(file, child_path(mp, "doc_lengths"), "expected " + std::to_string(p.batch) + " rows (batch)");
        for (size_t r = 0; r < d->doc_lengths.size(); ++r) {
          int64_t sum = 0;
          for (int64_t l : d->doc_lengths[r]) {
            if (l < 0) throw InputError(file, child_path(child_path(mp, "doc_lengths"), r), "document length must be >= 0, got " + std::to_string(l));
            sum += l;
          }
          if (sum > p.seq_q)
            throw InputError(file, child_path(child_path(mp, "doc_lengths"), r),
                             "document lengths sum to " + std::to_string(sum) + ", more than seq_q = " + std::to_string(p.seq_q));
        }
      }
    } else if (auto* pl = std::get_if<PrefixLmTerm>(&p.mask[i])) {
      if (pl->prefix_len < 0) throw InputError(file, child_path(mp, "prefix_len"), "prefix_len must be >= 0, got " + std::to_string(pl->prefix_len));
    } else if (auto* pad = std::get_if<PaddingTerm>(&p.mask[i])) {
      auto check = [&](const std::vector<int64_t>& lens, const char* name, int64_t max) {
        if (static_cast<int64_t>(lens.size()) != p.batch)
          throw InputError(file, child_path(mp, name), "expected " + std::to_string(p.batch) + " lengths (batch), got " + std::to_string(lens.size()));
        for (size_t b = 0; b < lens.size(); ++b)
          if (lens[b] < 0 || lens[b] > max)
            throw InputError(file, child_path(child_path(mp, name), b),
                             "length must be in [0, " + std::to_string(max) + "], got " + std::to_string(lens[b]));
      };
      check(pad->seq_lens_q, "seq_lens_q", p.seq_q);
      check(pad->seq_lens_k, "seq_lens_k", p.seq_k);
    } else if (auto* bs = std::get_if<BlockSparseTerm>(&p.mask[i])) {
      if (!(bs->density >= 0.0 && bs->density <= 1.0))
        throw InputError(file, child_path(mp, "density"), "density must be in [0, 1], got " + std::to_string(bs->density));
    }
  }
  if (p.find_mask<DocumentTerm>() && p.find_mask<PaddingTerm>())
    throw InputError(file, child_path(path, "mask"), "document and padding masks cannot be combined: mark padding with document id -1");
}

// ------------------------------------------------------------------ serialisation

json to_json(const MaskTerm& t, bool compact) {
  json j;
  j["kind"] = mask_kind_name(t);
  if (auto* c = std::get_if<CausalTerm>(&t)) {
    j["align"] = to_string(c->align);
  } else if (auto* w = std::get_if<SlidingWindowTerm>(&t)) {
    j["left"] = w->left;
    j["right"] = w->right;
  } else if (auto* d = std::get_if<DocumentTerm>(&t)) {
    bool lengths_fill = !d->doc_lengths.empty();
    for (size_t r = 0; lengths_fill && r < d->doc_lengths.size(); ++r) {
      int64_t sum = 0;
      for (auto l : d->doc_lengths[r]) sum += l;
      lengths_fill = sum == static_cast<int64_t>(d->doc_ids[r].size());
    }
    if (compact) {
      json docs = json::array(), pads = json::array();
      for (const auto& row : d->doc_ids) {
        int64_t pad = 0, n = 0;
        int32_t prev = -2;
        for (int32_t id : row) {
          if (id == -1) ++pad;
          else if (id != prev) ++n;
          prev = id;
        }
        docs.push_back(n);
        pads.push_back(pad);
      }
      j["docs_per_row"] = docs;
      j["padding_tokens"] = pads;
    } else if (lengths_fill) {
      j["doc_lengths"] = d->doc_lengths;
    } else {
      j["doc_ids"] = d->doc_ids;
    }
  } else if (auto* pl = std::get_if<PrefixLmTerm>(&t)) {
    j["prefix_len"] = pl->prefix_len;
  } else if (auto* pad = std::get_if<PaddingTerm>(&t)) {
    j["seq_lens_q"] = pad->seq_lens_q;
    j["seq_lens_k"] = pad->seq_lens_k;
  } else if (auto* bs = std::get_if<BlockSparseTerm>(&t)) {
    j["density"] = bs->density;
    j["seed"] = bs->seed;
  }
  return j;
}

json to_json(const ScoreMod& s) {
  json j;
  j["kind"] = to_string(s.kind);
  if (s.kind == ScoreMod::Kind::softcap) j["cap"] = s.cap;
  if (s.kind == ScoreMod::Kind::rel_bias) j["max_distance"] = s.max_distance;
  if (s.kind == ScoreMod::Kind::offset_bias) j["size"] = s.size;
  return j;
}

json to_json(const Problem& p, bool compact) {
  json j;
  j["batch"] = p.batch;
  j["heads_q"] = p.heads_q;
  j["heads_kv"] = p.heads_kv;
  j["seq_q"] = p.seq_q;
  j["seq_k"] = p.seq_k;
  j["head_dim"] = p.head_dim;
  j["head_dim_v"] = p.head_dim_v;
  j["dtype"] = to_string(p.dtype);
  j["scale"] = p.scale ? json(*p.scale) : json(nullptr);
  j["layout"] = to_string(p.layout);
  j["mask"] = json::array();
  for (const auto& m : p.mask) j["mask"].push_back(to_json(m, compact));
  j["score_mod"] = to_json(p.score_mod);
  j["seed"] = p.seed;
  return j;
}

std::string describe_mask(const Problem& p) {
  if (p.mask.empty()) return "full";
  std::ostringstream os;
  bool first = true;
  for (const auto& m : p.mask) {
    if (!first) os << "+";
    first = false;
    if (auto* c = std::get_if<CausalTerm>(&m)) os << "causal(" << (c->align == CausalAlign::top_left ? "tl" : "br") << ")";
    else if (auto* w = std::get_if<SlidingWindowTerm>(&m)) os << "window(" << w->left << "," << w->right << ")";
    else if (std::get_if<DocumentTerm>(&m)) os << "document";
    else if (auto* pl = std::get_if<PrefixLmTerm>(&m)) os << "prefix_lm(" << pl->prefix_len << ")";
    else if (std::get_if<PaddingTerm>(&m)) os << "padding";
    else if (auto* bs = std::get_if<BlockSparseTerm>(&m)) os << "block_sparse(" << bs->density << ")";
  }
  return os.str();
}

std::string describe_score_mod(const ScoreMod& s) {
  std::ostringstream os;
  os << to_string(s.kind);
  if (s.kind == ScoreMod::Kind::softcap) os << "(" << s.cap << ")";
  if (s.kind == ScoreMod::Kind::rel_bias) os << "(" << s.max_distance << ")";
  if (s.kind == ScoreMod::Kind::offset_bias) os << "(" << s.size << ")";
  return os.str();
}

}  // namespace attnbench
