// Document packing: real document-length distributions packed into fixed-size
// training sequences, the workload that document masks and varlen kernels exist for.
//
// A packing turns a stream of documents into `num_packs` rows ("packs") of at most
// `capacity` real tokens each, padded to a common length; the result becomes a
// DocumentTerm (doc ids per token, -1 for padding) that is ANDed with the case's
// other masks (typically causal: the block-causal mask of packed training).
//
// Pipeline (every step seeded and reproducible; see docs/scenarios.md):
//   1. source    -> document lengths: fixed{length}, uniform{min,max},
//                   lognormal{mu,sigma,min,max}, empirical{file} (a list of real
//                   lengths), or tokens{eos_id, ...} (documents = spans ending at
//                   each EOS token, as PyTorch's varlen tutorial builds cu_seqlens).
//   2. shuffle   -> finite sources (empirical, tokens) are shuffled: "seeded"
//                   (default, attnbench's counter generator), "python" (bit-exact
//                   Python random.seed(seed); random.shuffle(list)), or "none".
//                   Finite sources are cycled in that order when exhausted.
//   3. strategy  -> "greedy": documents in stream order; a document that does not
//                   fit the current pack closes it and opens the next one; stops when
//                   all packs are closed. "ffd": first-fit-decreasing over a pool of
//                   documents (sorted by length, each into the first pack with room;
//                   documents that fit nowhere are dropped and counted).
//   4. capacity  = max(1, floor(fill * max_seq_len)); a document longer than the
//                   capacity is truncated to it (counted in truncated_docs).
//   5. padding   -> every pack padded to max_seq_len ("max_seq_len") or to the
//                   longest pack of the batch ("longest").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/problem.hpp"

namespace attnbench {

/// Packing outcome of one case built from a document-length source.
/// All token counts are summed over the packs (the batch).
struct PackingStats {
  std::string source;       ///< e.g. "empirical:codealpaca", "lognormal(6,1,[16,2048])"
  std::string strategy;     ///< "greedy", "ffd" or "given" (token rows used as packs)
  std::string pad_to;       ///< "max_seq_len" or "longest"
  double target_fill = 1.0; ///< the spec's fill; capacity = max(1, floor(fill * max_seq_len))
  int64_t real_tokens = 0;     ///< tokens belonging to documents
  int64_t padded_tokens = 0;   ///< B * padded sequence length
  double packing_ratio = 0.0;  ///< real_tokens / padded_tokens
  std::vector<int64_t> docs_per_pack;
  int64_t truncated_docs = 0;  ///< documents longer than the capacity, cut to fit
  // ---- additive fields (scenario/packing engineer)
  std::string shuffle;         ///< "none", "seeded" or "python"
  uint64_t seed = 0;           ///< seed of the shuffle / generator
  int64_t max_seq_len = 0;     ///< the spec's maximum pack length
  int64_t capacity = 0;        ///< real-token capacity of one pack
  int64_t seq_len = 0;         ///< padded length of every pack (Sq = Sk of the case)
  std::vector<int64_t> pack_tokens;  ///< real tokens per pack [B]
  int64_t docs = 0;            ///< documents placed, all packs
  int64_t dropped_docs = 0;    ///< ffd: pool documents that fit in no pack
  int64_t max_doc_len = 0;     ///< longest placed document (after truncation)
};

/// Serialise PackingStats (every field) for reports and `describe --json`.
nlohmann::json to_json(const PackingStats& s);

/// Where document lengths come from.
struct LengthSource {
  enum class Kind { fixed, uniform, lognormal, empirical, tokens };
  Kind kind = Kind::fixed;
  int64_t length = 0;            ///< fixed: every document has this many tokens (>= 1)
  int64_t min = 1, max = 1;      ///< uniform / lognormal: inclusive bounds (>= 1)
  double mu = 0.0, sigma = 1.0;  ///< lognormal: length = round(exp(mu + sigma * z)), z ~ N(0,1), clamped to [min, max]
  std::string file;              ///< empirical: resolved path of the lengths file
  std::string name;              ///< empirical: data-set name (the file's "name", else its stem)
  std::vector<int64_t> lengths;  ///< empirical: the file's lengths; tokens: documents of the flat stream
  // tokens
  int64_t eos_id = 0;                         ///< token id that ends a document
  std::vector<std::vector<int64_t>> rows;     ///< tokens: given [B][S] rows, used as the packs themselves
  bool generated = false;                     ///< tokens: the flat stream was generated
  int64_t num_tokens = 0, vocab_size = 0;     ///< tokens (generated): stream length and vocabulary
  double eos_prob = 0.0;                      ///< tokens (generated): probability that a token is EOS
  /// Short description for PackingStats::source.
  std::string describe() const;
  /// True when the source is a finite list (empirical, tokens) rather than an iid generator.
  bool finite() const { return kind == Kind::empirical || kind == Kind::tokens; }
};

/// A packing specification (the scenario's "packing" object, parsed).
struct PackingSpec {
  enum class Strategy { greedy, ffd, given };
  enum class Shuffle { none, seeded, python };
  enum class PadTo { max_seq_len, longest };
  LengthSource source;
  Strategy strategy = Strategy::greedy;
  Shuffle shuffle = Shuffle::seeded;
  std::optional<uint64_t> seed;  ///< nullopt: the case's seed
  int64_t max_seq_len = 0;       ///< pack length before the fill ratio (> 0)
  int64_t num_packs = 0;         ///< B (> 0)
  double fill = 1.0;             ///< target fill ratio in (0, 1]
  PadTo pad_to = PadTo::max_seq_len;
  int64_t pool_docs = 0;         ///< ffd pool size; 0 = draw until the pool holds num_packs * capacity tokens
  std::string name;              ///< optional label for case ids

  /// max(1, floor(fill * max_seq_len)): real tokens one pack may hold.
  int64_t capacity() const;
};

/// The packed batch.
struct PackResult {
  std::vector<std::vector<int64_t>> doc_lengths;  ///< [B][docs] real document lengths per pack, in pack order
  int64_t seq_len = 0;                            ///< padded pack length (Sq = Sk)
  PackingStats stats;

  /// DocumentTerm with doc_ids [B][seq_len] (document k of a row has id k, padding -1)
  /// and doc_lengths [B][docs] (not including the padding).
  DocumentTerm document_term() const;
  /// THD prefix sums over the real tokens of every document of every pack, back to
  /// back (padding excluded): int32 [N + 1] with N = total documents.
  std::vector<int32_t> cu_seqlens() const;
};

/// Parse a "packing" object. `default_max_seq_len` / `default_num_packs` (the
/// case's seq_q and batch; 0 = none) fill absent fields. Relative empirical files
/// resolve against the directory of `file`, then against scenarios_dir().
/// Throws InputError naming file, JSON path and value.
PackingSpec packing_spec_from_json(const nlohmann::json& j, const std::string& file,
                                   const std::string& path, int64_t default_max_seq_len,
                                   int64_t default_num_packs);

/// Pack documents per `spec`; `seed` is used when spec.seed is unset. Throws
/// std::invalid_argument on an inconsistent spec (non-positive sizes, fill outside
/// (0, 1], an empty source), and BudgetError (no file or path; budget.hpp) before
/// drawing more than budget_limits().max_documents documents or when
/// first-fit-decreasing would take more than 2^36 (document x pack) steps.
PackResult pack_documents(const PackingSpec& spec, uint64_t seed);

/// Read an empirical length file: {"name": ..., "lengths": [ints >= 1], "count": n
/// (optional, must equal the number of lengths), provenance fields ignored}.
/// Throws InputError (file, JSON path, value).
LengthSource load_empirical_lengths(const std::string& path);
/// The same from an already-parsed document (jsonu::parse_text); `path` labels
/// errors and names the source. Throws InputError.
LengthSource empirical_lengths_from_json(const nlohmann::json& j, const std::string& path);

/// Resolve a data path written in a scenario file: absolute as is; else relative to
/// the scenario file's directory, then to scenarios_dir(). Returns the first that
/// exists, or the scenario-relative candidate when none does.
std::string resolve_data_path(const std::string& rel, const std::string& scenario_file);

/// Document lengths of a flat token stream: each document ends with (and includes)
/// an EOS token; a trailing span without EOS is a final document. No zero lengths.
std::vector<int64_t> documents_from_tokens(const std::vector<int64_t>& tokens, int64_t eos_id);

/// Varlen metadata of a [B][S] token batch, built exactly as PyTorch's
/// variable-length attention tutorial (create_varlen_metadata) builds it: per row,
/// unique_consecutive([0, eos_positions + 1, S]) offset by b * S, concatenated,
/// with B * S appended once. Every row's documents tile the row (no padding).
struct VarlenMetadata {
  std::vector<int32_t> cu_seqlens;                ///< [N + 1]
  int64_t max_seqlen = 0;                         ///< longest document
  std::vector<std::vector<int64_t>> doc_lengths;  ///< [B][docs]
};
/// Throws std::invalid_argument when rows differ in length or are empty.
VarlenMetadata varlen_metadata_from_tokens(const std::vector<std::vector<int64_t>>& rows,
                                           int64_t eos_id);

/// Generated token stream of `spec` (kind tokens, generated): token t is EOS with
/// probability eos_prob, else uniform over the vocabulary without EOS. Uses the
/// counter generator of tensors.hpp (stream kStreamTokens).
std::vector<int64_t> generate_tokens(const LengthSource& src, uint64_t seed);

/// Python's random module (CPython 3.x, Modules/_randommodule.c semantics),
/// ported for bit-exact reproduction of Python-side shuffles:
/// MT19937 (Matsumoto & Nishimura 1998) seeded as random.seed(n) for an int n >= 0
/// (init_by_array with n's 32-bit words, least significant first; [0] for n = 0).
class PyRandom {
 public:
  /// Equivalent of random.seed(seed).
  explicit PyRandom(uint64_t seed);
  /// One raw 32-bit MT19937 output (genrand_uint32).
  uint32_t genrand_uint32();
  /// random.getrandbits(k) for 1 <= k <= 64 (words least significant first; the
  /// last word keeps its top bits). Throws std::invalid_argument outside that range.
  uint64_t getrandbits(int k);
  /// random._randbelow(n) for n >= 1: k = n.bit_length(); r = getrandbits(k) until r < n.
  uint64_t randbelow(uint64_t n);
  /// random.random(): (a * 2^26 + b) / 2^53 with a = word >> 5, b = word >> 6.
  double random();
  /// random.shuffle(x): for i = n-1 down to 1, swap x[i] with x[randbelow(i + 1)].
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) {
      size_t j = static_cast<size_t>(randbelow(static_cast<uint64_t>(i) + 1));
      std::swap(x[i], x[j]);
    }
  }

 private:
  static constexpr int kN = 624;
  uint32_t mt_[kN];
  int mti_ = kN + 1;
  void init_genrand(uint32_t s);
};

/// Shuffle with attnbench's own generator: Fisher-Yates with
/// j = floor(counter_uniform(seed, kStreamShuffle, i) * (i + 1)) for i = n-1 .. 1.
/// Portable (no standard-library distribution involved).
void shuffle_seeded(std::vector<int64_t>& x, uint64_t seed);

/// Counter-generator stream ids used by packing (tensors.hpp counter_uniform).
constexpr uint64_t kStreamShuffle = 0x5348554646ULL;   // "SHUFF"
constexpr uint64_t kStreamLengths = 0x4C454E47ULL;     // "LENG"
constexpr uint64_t kStreamTokens = 0x544F4B454EULL;    // "TOKEN"

/// JSON names: "greedy" / "ffd" / "given"; "none" / "seeded" / "python";
/// "max_seq_len" / "longest".
const char* to_string(PackingSpec::Strategy s);
const char* to_string(PackingSpec::Shuffle s);
const char* to_string(PackingSpec::PadTo p);

}  // namespace attnbench
