#include "harness/workloads/packing.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/budget.hpp"
#include "harness/model/json_util.hpp"
#include "harness/workloads/scenario.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench {

using nlohmann::json;
using jsonu::child_path;
using jsonu::show;

namespace {

std::string fmt_num(double v) {
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

}  // namespace

// ------------------------------------------------------------------ names

const char* to_string(PackingSpec::Strategy s) {
  switch (s) {
    case PackingSpec::Strategy::greedy: return "greedy";
    case PackingSpec::Strategy::ffd: return "ffd";
    case PackingSpec::Strategy::given: return "given";
  }
  return "?";
}
const char* to_string(PackingSpec::Shuffle s) {
  switch (s) {
    case PackingSpec::Shuffle::none: return "none";
    case PackingSpec::Shuffle::seeded: return "seeded";
    case PackingSpec::Shuffle::python: return "python";
  }
  return "?";
}
const char* to_string(PackingSpec::PadTo p) {
  return p == PackingSpec::PadTo::longest ? "longest" : "max_seq_len";
}

std::string LengthSource::describe() const {
  switch (kind) {
    case Kind::fixed: return "fixed(" + std::to_string(length) + ")";
    case Kind::uniform: return "uniform(" + std::to_string(min) + "," + std::to_string(max) + ")";
    case Kind::lognormal:
      return "lognormal(" + fmt_num(mu) + "," + fmt_num(sigma) + ",[" + std::to_string(min) + "," +
             (max >= (INT64_C(1) << 40) ? std::string("inf") : std::to_string(max)) + "])";
    case Kind::empirical: return "empirical:" + name;
    case Kind::tokens:
      if (!rows.empty()) return "tokens(rows,eos=" + std::to_string(eos_id) + ")";
      if (generated)
        return "tokens(generated " + std::to_string(num_tokens) + ",eos=" + std::to_string(eos_id) +
               ",p=" + fmt_num(eos_prob) + ")";
      return "tokens(stream,eos=" + std::to_string(eos_id) + ")";
  }
  return "?";
}

int64_t PackingSpec::capacity() const {
  auto c = static_cast<int64_t>(std::floor(fill * static_cast<double>(max_seq_len)));
  return std::max<int64_t>(1, std::min(c, max_seq_len));
}

json to_json(const PackingStats& s) {
  json j;
  j["source"] = s.source;
  j["strategy"] = s.strategy;
  j["shuffle"] = s.shuffle;
  j["seed"] = s.seed;
  j["pad_to"] = s.pad_to;
  j["target_fill"] = s.target_fill;
  j["max_seq_len"] = s.max_seq_len;
  j["capacity"] = s.capacity;
  j["seq_len"] = s.seq_len;
  j["real_tokens"] = s.real_tokens;
  j["padded_tokens"] = s.padded_tokens;
  j["packing_ratio"] = s.packing_ratio;
  j["docs"] = s.docs;
  j["docs_per_pack"] = s.docs_per_pack;
  j["pack_tokens"] = s.pack_tokens;
  j["truncated_docs"] = s.truncated_docs;
  j["dropped_docs"] = s.dropped_docs;
  j["max_doc_len"] = s.max_doc_len;
  return j;
}

// ------------------------------------------------------------------ Python's MT19937

PyRandom::PyRandom(uint64_t seed) {
  // random.seed(int): key = |n| as 32-bit words, least significant first; [0] for 0.
  std::vector<uint32_t> key;
  if (seed == 0) key.push_back(0);
  while (seed) {
    key.push_back(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
    seed >>= 32;
  }
  // init_by_array (Matsumoto & Nishimura's 2002 reference initialisation).
  init_genrand(19650218u);
  int i = 1;
  size_t j = 0;
  const size_t klen = key.size();
  for (size_t k = std::max<size_t>(kN, klen); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= klen) j = 0;
  }
  for (int k = kN - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
}

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (mti_ = 1; mti_ < kN; ++mti_)
    mt_[mti_] = 1812433253u * (mt_[mti_ - 1] ^ (mt_[mti_ - 1] >> 30)) + static_cast<uint32_t>(mti_);
}

uint32_t PyRandom::genrand_uint32() {
  constexpr int kM = 397;
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrixA = 0x9908b0dfu;
  if (mti_ >= kN) {  // regenerate the whole block of kN words
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      uint32_t y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    for (; kk < kN - 1; ++kk) {
      uint32_t y = (mt_[kk] & kUpper) | (mt_[kk + 1] & kLower);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    uint32_t y = (mt_[kN - 1] & kUpper) | (mt_[0] & kLower);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  // Tempering.
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t PyRandom::getrandbits(int k) {
  if (k < 1 || k > 64) throw std::invalid_argument("getrandbits: k must be in [1, 64]");
  if (k <= 32) return genrand_uint32() >> (32 - k);
  uint64_t lo = genrand_uint32();
  uint64_t hi = genrand_uint32() >> (64 - k);
  return (hi << 32) | lo;
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0) throw std::invalid_argument("randbelow: n must be >= 1");
  int k = 0;
  for (uint64_t m = n; m; m >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

double PyRandom::random() {
  uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

void shuffle_seeded(std::vector<int64_t>& x, uint64_t seed) {
  for (size_t i = x.size(); i-- > 1;) {
    double u = counter_uniform(seed, kStreamShuffle, i);
    auto j = static_cast<size_t>(u * static_cast<double>(i + 1));
    if (j > i) j = i;
    std::swap(x[i], x[j]);
  }
}

// ------------------------------------------------------------------ token streams

std::vector<int64_t> documents_from_tokens(const std::vector<int64_t>& tokens, int64_t eos_id) {
  std::vector<int64_t> docs;
  int64_t start = 0;
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t t = 0; t < n; ++t)
    if (tokens[static_cast<size_t>(t)] == eos_id) {
      docs.push_back(t + 1 - start);
      start = t + 1;
    }
  if (start < n) docs.push_back(n - start);
  return docs;
}

VarlenMetadata varlen_metadata_from_tokens(const std::vector<std::vector<int64_t>>& rows,
                                           int64_t eos_id) {
  if (rows.empty()) throw std::invalid_argument("token batch has no rows");
  const size_t s = rows[0].size();
  if (s == 0) throw std::invalid_argument("token rows are empty");
  VarlenMetadata out;
  int64_t offset = 0;
  for (const auto& row : rows) {
    if (row.size() != s) throw std::invalid_argument("token rows differ in length");
    // [0, eos + 1 ..., S] with consecutive duplicates removed (only S can repeat).
    std::vector<int64_t> cu{0};
    for (size_t t = 0; t < s; ++t)
      if (row[t] == eos_id) cu.push_back(static_cast<int64_t>(t) + 1);
    if (cu.back() != static_cast<int64_t>(s)) cu.push_back(static_cast<int64_t>(s));
    std::vector<int64_t> lens;
    for (size_t k = 0; k + 1 < cu.size(); ++k) {
      lens.push_back(cu[k + 1] - cu[k]);
      out.max_seqlen = std::max(out.max_seqlen, cu[k + 1] - cu[k]);
      out.cu_seqlens.push_back(static_cast<int32_t>(cu[k] + offset));
    }
    out.doc_lengths.push_back(std::move(lens));
    offset += static_cast<int64_t>(s);
  }
  out.cu_seqlens.push_back(static_cast<int32_t>(offset));
  return out;
}

std::vector<int64_t> generate_tokens(const LengthSource& src, uint64_t seed) {
  std::vector<int64_t> out(static_cast<size_t>(src.num_tokens));
  for (size_t t = 0; t < out.size(); ++t) {
    if (counter_uniform(seed, kStreamTokens, 2 * t) < src.eos_prob) {
      out[t] = src.eos_id;
      continue;
    }
    // Uniform over the vocabulary [0, vocab_size) without the EOS id.
    auto tok = static_cast<int64_t>(counter_uniform(seed, kStreamTokens, 2 * t + 1) *
                                    static_cast<double>(src.vocab_size - 1));
    if (tok >= src.eos_id && src.eos_id >= 0 && src.eos_id < src.vocab_size) ++tok;
    out[t] = tok;
  }
  return out;
}

// ------------------------------------------------------------------ data files

std::string resolve_data_path(const std::string& rel, const std::string& scenario_file) {
  namespace fs = std::filesystem;
  fs::path p(rel);
  if (p.is_absolute()) return rel;
  fs::path first = fs::path(scenario_file).parent_path() / p;
  std::error_code ec;
  if (fs::is_regular_file(first, ec)) return first.string();
  fs::path second = fs::path(scenarios_dir()) / p;
  if (fs::is_regular_file(second, ec)) return second.string();
  return first.string();
}

LengthSource load_empirical_lengths(const std::string& path) {
  return empirical_lengths_from_json(jsonu::load_file(path), path);
}

LengthSource empirical_lengths_from_json(const json& j, const std::string& path) {
  jsonu::require_object(j, path, "");
  LengthSource s;
  s.kind = LengthSource::Kind::empirical;
  s.file = path;
  if (j.contains("name")) s.name = jsonu::get_string(j["name"], path, "/name");
  else s.name = std::filesystem::path(path).stem().string();
  const json& lens = jsonu::require(j, "lengths", path, "");
  s.lengths = jsonu::get_int_array(lens, path, "/lengths");
  if (s.lengths.empty()) throw InputError(path, "/lengths", "expected at least one document length, got []");
  for (size_t i = 0; i < s.lengths.size(); ++i)
    if (s.lengths[i] < 1)
      throw InputError(path, child_path("/lengths", i),
                       "document length must be >= 1, got " + std::to_string(s.lengths[i]));
  if (j.contains("count")) {
    int64_t c = jsonu::get_int(j["count"], path, "/count");
    if (c != static_cast<int64_t>(s.lengths.size()))
      throw InputError(path, "/count",
                       "count " + std::to_string(c) + " does not match the " +
                           std::to_string(s.lengths.size()) + " lengths listed");
  }
  return s;
}

// ------------------------------------------------------------------ spec parsing

namespace {

LengthSource source_from_json(const json& j, const std::string& file, const std::string& path) {
  jsonu::require_object(j, file, path);
  std::string kind = jsonu::get_string(jsonu::require(j, "kind", file, path), file, child_path(path, "kind"));
  LengthSource s;
  auto positive = [&](const char* key, int64_t fallback, bool required) {
    int64_t v = required ? jsonu::get_int(jsonu::require(j, key, file, path), file, child_path(path, key))
                         : jsonu::opt_int(j, key, fallback, file, path);
    if (v < 1)
      throw InputError(file, child_path(path, key),
                       std::string(key) + " must be >= 1, got " + show(j.contains(key) ? j[key] : json(v)));
    return v;
  };
  if (kind == "fixed") {
    jsonu::reject_unknown_keys(j, {"kind", "length"}, file, path);
    s.kind = LengthSource::Kind::fixed;
    s.length = positive("length", 0, true);
  } else if (kind == "uniform") {
    jsonu::reject_unknown_keys(j, {"kind", "min", "max"}, file, path);
    s.kind = LengthSource::Kind::uniform;
    s.min = positive("min", 0, true);
    s.max = positive("max", 0, true);
    if (s.max < s.min)
      throw InputError(file, child_path(path, "max"),
                       "max (" + std::to_string(s.max) + ") must be >= min (" + std::to_string(s.min) + ")");
  } else if (kind == "lognormal") {
    jsonu::reject_unknown_keys(j, {"kind", "mu", "sigma", "min", "max"}, file, path);
    s.kind = LengthSource::Kind::lognormal;
    s.mu = jsonu::get_number(jsonu::require(j, "mu", file, path), file, child_path(path, "mu"));
    s.sigma = jsonu::get_number(jsonu::require(j, "sigma", file, path), file, child_path(path, "sigma"));
    if (!std::isfinite(s.mu) || s.mu > 40)
      throw InputError(file, child_path(path, "mu"), "mu must be a finite number <= 40, got " + show(j["mu"]));
    if (!(s.sigma >= 0) || !std::isfinite(s.sigma) || s.sigma > 20)
      throw InputError(file, child_path(path, "sigma"), "sigma must be in [0, 20], got " + show(j["sigma"]));
    s.min = positive("min", 1, false);
    s.max = positive("max", INT64_C(1) << 40, false);
    if (s.max < s.min)
      throw InputError(file, child_path(path, "max"),
                       "max (" + std::to_string(s.max) + ") must be >= min (" + std::to_string(s.min) + ")");
  } else if (kind == "empirical") {
    jsonu::reject_unknown_keys(j, {"kind", "file"}, file, path);
    std::string rel = jsonu::get_string(jsonu::require(j, "file", file, path), file, child_path(path, "file"));
    std::string resolved = resolve_data_path(rel, file);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(resolved, ec))
      throw InputError(file, child_path(path, "file"),
                       "data file " + show(j["file"]) + " not found (looked next to the scenario file and in " +
                           scenarios_dir() + ")");
    s = load_empirical_lengths(resolved);
  } else if (kind == "tokens") {
    jsonu::reject_unknown_keys(j, {"kind", "eos_id", "tokens", "rows", "num_tokens", "vocab_size", "eos_prob"},
                               file, path);
    s.kind = LengthSource::Kind::tokens;
    s.eos_id = jsonu::get_int(jsonu::require(j, "eos_id", file, path), file, child_path(path, "eos_id"));
    int given = int(j.contains("tokens")) + int(j.contains("rows")) + int(j.contains("num_tokens"));
    if (given != 1)
      throw InputError(file, path,
                       "a tokens source needs exactly one of \"tokens\" (a flat stream), \"rows\" ([B][S] packs) "
                       "or \"num_tokens\" (generated), got " + show(j));
    if (j.contains("tokens")) {
      auto toks = jsonu::get_int_array(j["tokens"], file, child_path(path, "tokens"));
      s.lengths = documents_from_tokens(toks, s.eos_id);
      if (s.lengths.empty())
        throw InputError(file, child_path(path, "tokens"), "the token stream is empty, got []");
    } else if (j.contains("rows")) {
      const json& r = j["rows"];
      std::string rp = child_path(path, "rows");
      if (!r.is_array() || r.empty())
        throw InputError(file, rp, "expected a non-empty array of token rows, got " + show(r));
      for (size_t b = 0; b < r.size(); ++b) {
        s.rows.push_back(jsonu::get_int_array(r[b], file, child_path(rp, b)));
        if (s.rows.back().empty())
          throw InputError(file, child_path(rp, b), "token row is empty, got []");
        if (s.rows.back().size() != s.rows[0].size())
          throw InputError(file, child_path(rp, b),
                           "every token row must have the same length: row 0 has " +
                               std::to_string(s.rows[0].size()) + " tokens, this one " +
                               std::to_string(s.rows.back().size()));
      }
    } else {
      s.generated = true;
      s.num_tokens = positive("num_tokens", 0, true);
      if (s.num_tokens > (INT64_C(1) << 28))
        throw InputError(file, child_path(path, "num_tokens"), "num_tokens must be <= 2^28, got " + show(j["num_tokens"]));
      s.vocab_size = jsonu::get_int(jsonu::require(j, "vocab_size", file, path), file, child_path(path, "vocab_size"));
      if (s.vocab_size < 2)
        throw InputError(file, child_path(path, "vocab_size"), "vocab_size must be >= 2, got " + show(j["vocab_size"]));
      if (s.eos_id < 0 || s.eos_id >= s.vocab_size)
        throw InputError(file, child_path(path, "eos_id"),
                         "eos_id must be in [0, vocab_size), got " + show(j["eos_id"]));
      s.eos_prob = jsonu::get_number(jsonu::require(j, "eos_prob", file, path), file, child_path(path, "eos_prob"));
      if (!(s.eos_prob > 0 && s.eos_prob <= 1))
        throw InputError(file, child_path(path, "eos_prob"), "eos_prob must be in (0, 1], got " + show(j["eos_prob"]));
    }
  } else {
    throw InputError(file, child_path(path, "kind"),
                     "unknown document-length source " + show(j["kind"]) +
                         " (expected fixed, uniform, lognormal, empirical or tokens)");
  }
  return s;
}

}  // namespace

PackingSpec packing_spec_from_json(const json& j, const std::string& file, const std::string& path,
                                   int64_t default_max_seq_len, int64_t default_num_packs) {
  jsonu::require_object(j, file, path);
  jsonu::reject_unknown_keys(j,
                             {"name", "source", "strategy", "shuffle", "seed", "max_seq_len", "num_packs",
                              "fill", "pad_to", "pool_docs"},
                             file, path);
  PackingSpec s;
  if (j.contains("name")) s.name = jsonu::get_string(j["name"], file, child_path(path, "name"));
  s.source = source_from_json(jsonu::require(j, "source", file, path), file, child_path(path, "source"));
  const bool rows = !s.source.rows.empty();

  std::string strat = jsonu::opt_string(j, "strategy", rows ? "given" : "greedy", file, path);
  if (strat == "greedy") s.strategy = PackingSpec::Strategy::greedy;
  else if (strat == "ffd" || strat == "first_fit_decreasing") s.strategy = PackingSpec::Strategy::ffd;
  else if (strat == "given") s.strategy = PackingSpec::Strategy::given;
  else
    throw InputError(file, child_path(path, "strategy"),
                     "unknown packing strategy " + show(j["strategy"]) + " (expected greedy, ffd or given)");
  if ((s.strategy == PackingSpec::Strategy::given) != rows)
    throw InputError(file, child_path(path, "strategy"),
                     rows ? "token rows are used as given: strategy must be \"given\" or absent, got " + show(j["strategy"])
                          : std::string("strategy \"given\" needs a tokens source with \"rows\""));

  std::string sh = jsonu::opt_string(j, "shuffle", rows ? "none" : "seeded", file, path);
  if (sh == "none") s.shuffle = PackingSpec::Shuffle::none;
  else if (sh == "seeded") s.shuffle = PackingSpec::Shuffle::seeded;
  else if (sh == "python") s.shuffle = PackingSpec::Shuffle::python;
  else
    throw InputError(file, child_path(path, "shuffle"),
                     "unknown shuffle " + show(j["shuffle"]) + " (expected none, seeded or python)");
  if (rows && s.shuffle != PackingSpec::Shuffle::none)
    throw InputError(file, child_path(path, "shuffle"), "token rows are used as given: shuffle must be \"none\", got " + show(j["shuffle"]));

  if (j.contains("seed") && !j["seed"].is_null()) {
    int64_t v = jsonu::get_int(j["seed"], file, child_path(path, "seed"));
    if (v < 0) throw InputError(file, child_path(path, "seed"), "seed must be >= 0, got " + show(j["seed"]));
    s.seed = static_cast<uint64_t>(v);
  }

  if (rows) {
    auto n = static_cast<int64_t>(s.source.rows.size()), len = static_cast<int64_t>(s.source.rows[0].size());
    if (j.contains("num_packs") && jsonu::get_int(j["num_packs"], file, child_path(path, "num_packs")) != n)
      throw InputError(file, child_path(path, "num_packs"),
                       "num_packs " + show(j["num_packs"]) + " differs from the " + std::to_string(n) + " token rows");
    if (j.contains("max_seq_len") && jsonu::get_int(j["max_seq_len"], file, child_path(path, "max_seq_len")) != len)
      throw InputError(file, child_path(path, "max_seq_len"),
                       "max_seq_len " + show(j["max_seq_len"]) + " differs from the token row length " + std::to_string(len));
    s.num_packs = n;
    s.max_seq_len = len;
  } else {
    s.max_seq_len = jsonu::opt_int(j, "max_seq_len", default_max_seq_len, file, path);
    s.num_packs = jsonu::opt_int(j, "num_packs", default_num_packs, file, path);
    if (s.max_seq_len < 1)
      throw InputError(file, child_path(path, "max_seq_len"),
                       j.contains("max_seq_len") ? "max_seq_len must be >= 1, got " + show(j["max_seq_len"])
                                                 : std::string("missing max_seq_len (and the case has no seq_q)"));
    if (s.num_packs < 1)
      throw InputError(file, child_path(path, "num_packs"),
                       j.contains("num_packs") ? "num_packs must be >= 1, got " + show(j["num_packs"])
                                               : std::string("missing num_packs (and the case has no batch)"));
  }
  if (s.max_seq_len > (INT64_C(1) << 24))
    throw InputError(file, child_path(path, "max_seq_len"), "max_seq_len must be <= 2^24, got " + std::to_string(s.max_seq_len));
  if (s.num_packs > 65536)
    throw InputError(file, child_path(path, "num_packs"), "num_packs must be <= 65536, got " + std::to_string(s.num_packs));

  s.fill = jsonu::opt_number(j, "fill", 1.0, file, path);
  if (!(s.fill > 0.0 && s.fill <= 1.0))
    throw InputError(file, child_path(path, "fill"), "fill must be in (0, 1], got " + show(j["fill"]));
  if (rows && s.fill != 1.0)
    throw InputError(file, child_path(path, "fill"), "token rows are used as given: fill must be 1, got " + show(j["fill"]));

  std::string pad = jsonu::opt_string(j, "pad_to", "max_seq_len", file, path);
  if (pad == "max_seq_len") s.pad_to = PackingSpec::PadTo::max_seq_len;
  else if (pad == "longest") s.pad_to = PackingSpec::PadTo::longest;
  else
    throw InputError(file, child_path(path, "pad_to"),
                     "unknown pad_to " + show(j["pad_to"]) + " (expected max_seq_len or longest)");

  s.pool_docs = jsonu::opt_int(j, "pool_docs", 0, file, path);
  if (s.pool_docs < 0 || s.pool_docs > (INT64_C(1) << 24))
    throw InputError(file, child_path(path, "pool_docs"), "pool_docs must be in [0, 2^24], got " + show(j["pool_docs"]));
  if (s.pool_docs > 0 && s.strategy != PackingSpec::Strategy::ffd)
    throw InputError(file, child_path(path, "pool_docs"), "pool_docs applies to strategy \"ffd\" only");
  return s;
}

// ------------------------------------------------------------------ packing

namespace {

/// The document stream of a source: finite lists (shuffled once, then cycled) or
/// an iid generator indexed by document number.
class DocStream {
 public:
  DocStream(const PackingSpec& spec, uint64_t seed) : src_(spec.source), seed_(seed) {
    if (src_.kind == LengthSource::Kind::tokens && src_.generated)
      list_ = documents_from_tokens(generate_tokens(src_, seed), src_.eos_id);
    else if (src_.finite())
      list_ = src_.lengths;
    if (src_.finite()) {
      if (list_.empty()) throw std::invalid_argument("packing source has no documents");
      if (spec.shuffle == PackingSpec::Shuffle::python) PyRandom(seed).shuffle(list_);
      else if (spec.shuffle == PackingSpec::Shuffle::seeded) shuffle_seeded(list_, seed);
    }
  }
  int64_t next() {
    const uint64_t n = count_++;
    switch (src_.kind) {
      case LengthSource::Kind::fixed: return src_.length;
      case LengthSource::Kind::uniform: {
        double u = counter_uniform(seed_, kStreamLengths, n);
        int64_t span = src_.max - src_.min + 1;
        return std::min(src_.max, src_.min + static_cast<int64_t>(u * static_cast<double>(span)));
      }
      case LengthSource::Kind::lognormal: {
        double z = counter_normal(seed_, kStreamLengths, n);
        double v = std::exp(src_.mu + src_.sigma * z);
        if (!(v < 1e15)) v = 1e15;
        auto len = static_cast<int64_t>(std::llround(v));
        return std::clamp(len, src_.min, src_.max);
      }
      default: return list_[n % list_.size()];
    }
  }
  const std::vector<int64_t>& list() const { return list_; }

 private:
  const LengthSource& src_;
  uint64_t seed_;
  std::vector<int64_t> list_;
  uint64_t count_ = 0;
};

}  // namespace

namespace {

/// Most (document x pack) steps first-fit-decreasing may take (about a minute).
constexpr int64_t kMaxFfdSteps = INT64_C(1) << 36;

[[noreturn]] void throw_too_many_documents(int64_t n) {
  throw BudgetError("", "",
                    "packing would draw more than " + std::to_string(n - 1) +
                        " documents, the budget (2^24): use longer documents or fewer or shorter packs");
}

}  // namespace

PackResult pack_documents(const PackingSpec& spec, uint64_t seed_in) {
  if (spec.max_seq_len < 1) throw std::invalid_argument("packing: max_seq_len must be >= 1");
  if (spec.num_packs < 1) throw std::invalid_argument("packing: num_packs must be >= 1");
  if (!(spec.fill > 0.0 && spec.fill <= 1.0)) throw std::invalid_argument("packing: fill must be in (0, 1]");
  const uint64_t seed = spec.seed ? *spec.seed : seed_in;
  const int64_t P = spec.num_packs;
  const int64_t cap = spec.capacity();

  PackResult r;
  PackingStats& st = r.stats;
  st.source = spec.source.describe();
  st.strategy = to_string(spec.strategy);
  st.pad_to = to_string(spec.pad_to);
  st.shuffle = spec.source.finite() ? to_string(spec.shuffle) : "none";
  st.seed = seed;
  st.target_fill = spec.fill;
  st.max_seq_len = spec.max_seq_len;
  st.capacity = cap;
  r.doc_lengths.assign(static_cast<size_t>(P), {});

  if (spec.strategy == PackingSpec::Strategy::given) {
    if (spec.source.rows.empty()) throw std::invalid_argument("packing: strategy given needs token rows");
    VarlenMetadata m = varlen_metadata_from_tokens(spec.source.rows, spec.source.eos_id);
    r.doc_lengths = m.doc_lengths;
  } else if (spec.strategy == PackingSpec::Strategy::greedy) {
    // Documents in stream order; one that does not fit closes the current pack.
    DocStream docs(spec, seed);
    int64_t p = 0, used = 0, placed = 0;
    while (p < P) {
      if (++placed > budget_limits().max_documents) throw_too_many_documents(placed);
      int64_t len = docs.next();
      const bool cut = len > cap;
      if (cut) len = cap;
      if (used + len > cap) {
        if (++p == P) break;
        used = 0;
      }
      r.doc_lengths[static_cast<size_t>(p)].push_back(len);
      used += len;
      st.truncated_docs += cut;
    }
  } else {
    // First-fit-decreasing over a pool drawn in stream order.
    DocStream docs(spec, seed);
    std::vector<int64_t> pool;
    if (spec.pool_docs > 0) {
      for (int64_t k = 0; k < spec.pool_docs; ++k) pool.push_back(docs.next());
    } else {
      int64_t total = 0;
      while (total < P * cap) {
        if (static_cast<int64_t>(pool.size()) >= budget_limits().max_documents)
          throw_too_many_documents(static_cast<int64_t>(pool.size()) + 1);
        pool.push_back(docs.next());
        total += std::min(pool.back(), cap);
      }
    }
    // First fit scans the packs for every document: bound that work too.
    if (const auto steps = checked_mul(static_cast<int64_t>(pool.size()), P); !steps || *steps > kMaxFfdSteps)
      throw BudgetError("", "",
                        "first-fit-decreasing of " + std::to_string(pool.size()) + " documents into " +
                            std::to_string(P) + " packs would take more than 2^36 steps (fewer packs or documents, "
                            "or strategy greedy)");
    std::vector<size_t> order(pool.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pool[a] > pool[b]; });
    std::vector<int64_t> used(static_cast<size_t>(P), 0);
    for (size_t k : order) {
      const bool cut = pool[k] > cap;
      const int64_t len = cut ? cap : pool[k];
      bool placed = false;
      for (size_t p = 0; p < used.size() && !placed; ++p)
        if (used[p] + len <= cap) {
          used[p] += len;
          r.doc_lengths[p].push_back(len);
          placed = true;
        }
      if (placed) st.truncated_docs += cut;
      else ++st.dropped_docs;
    }
  }

  int64_t longest = 0;
  for (const auto& pack : r.doc_lengths) {
    int64_t sum = 0;
    for (int64_t l : pack) {
      sum += l;
      st.max_doc_len = std::max(st.max_doc_len, l);
    }
    st.pack_tokens.push_back(sum);
    st.docs_per_pack.push_back(static_cast<int64_t>(pack.size()));
    st.docs += static_cast<int64_t>(pack.size());
    st.real_tokens += sum;
    longest = std::max(longest, sum);
  }
  r.seq_len = spec.pad_to == PackingSpec::PadTo::longest ? std::max<int64_t>(1, longest) : spec.max_seq_len;
  if (spec.strategy == PackingSpec::Strategy::given) r.seq_len = spec.max_seq_len;
  st.seq_len = r.seq_len;
  st.padded_tokens = P * r.seq_len;
  st.packing_ratio = static_cast<double>(st.real_tokens) / static_cast<double>(st.padded_tokens);
  return r;
}

DocumentTerm PackResult::document_term() const { return document_term_from_lengths(doc_lengths, seq_len); }

std::vector<int32_t> PackResult::cu_seqlens() const {
  std::vector<int32_t> cu{0};
  int64_t total = 0;
  for (const auto& row : doc_lengths)
    for (int64_t l : row) {
      total += l;
      if (total > std::numeric_limits<int32_t>::max())
        throw std::overflow_error("cu_seqlens: more than 2^31 - 1 tokens");
      cu.push_back(static_cast<int32_t>(total));
    }
  return cu;
}

}  // namespace attnbench
