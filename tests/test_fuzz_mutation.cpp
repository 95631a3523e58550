// Deterministic, seeded mutation testing of every input parser (the entries of
// tests/fuzz/fuzz_entries.hpp, which the libFuzzer targets of ci/fuzz.sh share):
// valid inputs from the repository (scenarios, packing data, an example report,
// .npy files) are mutated byte-wise with a fixed seed, and every mutant must
// either parse or throw attnbench::InputError; any other exception fails the
// test, a crash or hang fails the suite. Regression inputs found by fuzzing are
// listed below and always run.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/model/npy.hpp"
#include "tests/fuzz/fuzz_entries.hpp"
#include "tests/schema_skip.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;

namespace {

using Entry = std::function<void(const uint8_t*, size_t)>;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Splitmix64: a fixed, platform-independent sequence (std::mt19937's
/// distributions differ between standard libraries).
struct Mutator {
  uint64_t state;
  explicit Mutator(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

  /// One to four edits: flip a bit, set an interesting byte, insert or delete a
  /// run, duplicate a chunk, or replace a digit run by an extreme number.
  std::string mutate(std::string s) {
    static const char* kNumbers[] = {"9223372036854775807", "-9223372036854775808", "18446744073709551616",
                                     "1e400", "-1", "0", "1099511627776", "4294967296", "1.5", "nan"};
    static const char kBytes[] = {'\0', '"', '\\', '{', '}', '[', ']', ',', ':', '\x1b', '\xff', '\x93', 'e', '-'};
    const size_t edits = 1 + below(4);
    for (size_t e = 0; e < edits; ++e) {
      const size_t pos = below(s.size() + 1);
      switch (below(7)) {
        case 0:
          if (!s.empty()) s[pos % s.size()] ^= static_cast<char>(1u << below(8));
          break;
        case 1:
          if (!s.empty()) s[pos % s.size()] = kBytes[below(sizeof kBytes)];
          break;
        case 2: s.insert(pos, std::string(1 + below(3), kBytes[below(sizeof kBytes)])); break;
        case 3: s.erase(pos, 1 + below(16)); break;
        case 4: {
          const size_t from = below(s.size() + 1), len = below(64);
          s.insert(pos, s.substr(from, len));
          break;
        }
        default: {  // a number field gets an extreme value
          size_t d = s.find_first_of("0123456789", pos);
          if (d == std::string::npos) d = s.find_first_of("0123456789");
          if (d == std::string::npos) break;
          size_t end = s.find_first_not_of("0123456789.", d);
          s.replace(d, (end == std::string::npos ? s.size() : end) - d, kNumbers[below(std::size(kNumbers))]);
        }
      }
    }
    return s;
  }
};

/// Run `entry` on every seed and on `per_seed` mutants of each. An exception other
/// than InputError (which the entries swallow) escapes and fails the test with the
/// mutant's seed index.
void mutate_all(const Entry& entry, const std::vector<std::string>& seeds, int per_seed, uint64_t seed) {
  Mutator m(seed);
  for (size_t s = 0; s < seeds.size(); ++s) {
    CAPTURE(s);
    REQUIRE_NOTHROW(entry(reinterpret_cast<const uint8_t*>(seeds[s].data()), seeds[s].size()));
    for (int i = 0; i < per_seed; ++i) {
      const std::string mutant = m.mutate(seeds[s]);
      CAPTURE(i);
      REQUIRE_NOTHROW(entry(reinterpret_cast<const uint8_t*>(mutant.data()), mutant.size()));
    }
  }
}

const std::string kSource = ATTNBENCH_SOURCE_DIR;

}  // namespace

TEST_CASE("mutation: scenario and problem files parse or throw InputError") {
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(kSource + "/scenarios"))
    if (e.path().extension() == ".json") seeds.push_back(slurp(e.path().string()));
  seeds.push_back(R"({"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 40, "seq_k": 30, "head_dim": 16,
    "mask": [{"kind": "causal", "align": "top_left"}, {"kind": "sliding_window", "left": 8, "right": 0}],
    "score_mod": {"kind": "rel_bias", "max_distance": 6}})");
  seeds.push_back(R"({"batch": 2, "heads_q": 1, "seq_q": 12, "head_dim": 8,
    "mask": {"kind": "document", "doc_lengths": [[4, 8], [12]]}})");
  seeds.push_back(R"({"batch": 1, "heads_q": 1, "seq_q": 6, "head_dim": 8,
    "mask": [{"kind": "document", "doc_ids": [[0, 0, 1, -1, 2, 2]]}, {"kind": "block_sparse", "density": 0.5}]})");
  seeds.push_back(R"({"base": {"batch": 2, "heads_q": 4, "head_dim": 16, "seq": 256},
    "axes": {"packing": [{"source": {"kind": "uniform", "min": 8, "max": 64}, "strategy": "ffd"},
                         {"source": {"kind": "tokens", "eos_id": 0, "rows": [[1, 0, 2, 2, 0, 3]]}}]}})");
  REQUIRE(seeds.size() >= 8);
  mutate_all(fuzz::scenario, seeds, 300, 20261124);
}

TEST_CASE("mutation: packing data files parse or throw InputError") {
  std::vector<std::string> seeds = {slurp(kSource + "/scenarios/data/codealpaca.json").substr(0, 4000),
                                    R"({"name": "x", "lengths": [3, 1, 4, 1, 5, 9, 2, 6], "count": 8})",
                                    R"({"lengths": [1]})"};
  // The truncated data file is itself invalid JSON: it must throw InputError, not crash.
  mutate_all(fuzz::packing_data, seeds, 600, 7);
}

TEST_CASE("mutation: report files (compare, merge, report) parse or throw InputError") {
  // The report readers rely on the schema (valijson) to refuse malformed rows.
  if (!test::schema_validation_or_loud_skip("malformed reports")) return;
  std::vector<std::string> seeds = {slurp(kSource + "/ci/baselines/example-h100.json")};
  nlohmann::json small = nlohmann::json::parse(seeds[0]);
  small["results"] = nlohmann::json::array({small["results"][0], small["results"][1]});
  small["results"][1]["status"] = "unchecked";
  small["results"][1]["check"] = {{"mode", "off"}, {"nonfinite", {{"O", 1}}}};
  seeds.push_back(small.dump(1));
  mutate_all(fuzz::report, seeds, 120, 99);
}

TEST_CASE("mutation: .npy files parse or throw InputError") {
  const double d[6] = {0, 1, 2, 3, 4, 5};
  const int32_t i4[5] = {1, 2, 3, 4, 5};
  const float f = 1.5f;
  std::vector<std::string> seeds = {npy::serialize(npy::Dtype::f8, {2, 3}, d),
                                    npy::serialize(npy::Dtype::i4, {5}, i4),
                                    npy::serialize(npy::Dtype::f4, {}, &f)};
  mutate_all(fuzz::npy_file, seeds, 1000, 3);
}

TEST_CASE("fuzz regressions: inputs the fuzzer found, each now an InputError") {
  // ci/fuzz.sh, packing_data: a length of 1.31111e+57 (a float far outside int64)
  // reached an undefined double -> int64 cast in jsonu::get_int (UBSan).
  const std::string huge_float = R"({"name": "codealpaca", "lengths": [12, 1311110000000000000000000000000000000000000000000000000000.0, 7]})";
  CHECK_THROWS_AS((void)empirical_lengths_from_json(jsonu::parse_text(huge_float, "l.json"), "l.json"), InputError);
  REQUIRE_NOTHROW(fuzz::packing_data(reinterpret_cast<const uint8_t*>(huge_float.data()), huge_float.size()));
  // An unsigned integer above INT64_MAX wrapped to a negative int64 (-1 = an
  // unbounded window) instead of being refused.
  const std::string wrapped = R"({"batch": 1, "heads_q": 1, "seq_q": 64, "head_dim": 8,
    "mask": {"kind": "sliding_window", "left": 18446744073709551615, "right": 0}})";
  try {
    (void)problem_from_json(jsonu::parse_text(wrapped, "p.json"), "p.json");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("p.json: /mask/left: integer out of range (at most 2^63 - 1), got 18446744073709551615") == 0);
  }
  // -2^63 as a float is representable and in range; 2^63 is not.
  CHECK(jsonu::get_int(nlohmann::json(-9223372036854775808.0), "f", "/x") == INT64_MIN);
  CHECK_THROWS_AS((void)jsonu::get_int(nlohmann::json(9223372036854775808.0), "f", "/x"), InputError);
  CHECK(jsonu::get_int(nlohmann::json(uint64_t{9223372036854775807ULL}), "f", "/x") == INT64_MAX);
  // ci/fuzz.sh, scenario (session 11): a causal mask entry of a mask axis whose
  // "align" is not a string made the case label throw nlohmann's type_error
  // (std::terminate in the fuzzer) instead of the problem's InputError.
  const std::string bad_align = R"({"name": "m", "base": {"batch": 1, "heads_q": 1, "head_dim": 8, "seq": 16},
    "axes": {"mask": [[{"kind": "causal", "align": [384, 130]}]]}})";
  try {
    (void)scenario_from_json(jsonu::parse_text(bad_align, "s.json"), "s.json");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("s.json") == 0);
    CHECK(std::string(e.what()).find("align") != std::string::npos);
  }
  REQUIRE_NOTHROW(fuzz::scenario(reinterpret_cast<const uint8_t*>(bad_align.data()), bad_align.size()));
}
