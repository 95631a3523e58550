// The total-size budget (harness/model/budget.hpp): overflow-safe arithmetic, the
// sizes of a problem, and check_budget()'s messages; printable() (terminal escaping).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "harness/model/budget.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/printable.hpp"
#include "harness/model/problem.hpp"

using namespace attnbench;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

/// The what() of the BudgetError check_budget(p) throws ("" if none).
std::string budget_error(const Problem& p) {
  try {
    check_budget(p, "p.json", "");
  } catch (const BudgetError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& text) {
  try {
    (void)problem_from_json(jsonu::parse_text(text, "p.json"), "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checked arithmetic: exact results, nullopt on overflow") {
  CHECK(checked_mul(1 << 20, 1 << 20) == (INT64_C(1) << 40));
  CHECK(checked_mul(-3, 7) == -21);
  CHECK_FALSE(checked_mul(INT64_C(1) << 32, INT64_C(1) << 31).has_value());
  CHECK(checked_mul(INT64_C(1) << 31, INT64_C(1) << 31) == (INT64_C(1) << 62));
  CHECK_FALSE(checked_mul(kMax, 2).has_value());
  CHECK(checked_add(kMax - 1, 1) == kMax);
  CHECK_FALSE(checked_add(kMax, 1).has_value());
  CHECK(checked_product({2, 3, 5, 7}) == 210);
  // 2^45 heads x 2^17 rows x 64 wraps to 0 in plain int64 arithmetic.
  CHECK_FALSE(checked_product({1, INT64_C(1) << 45, INT64_C(1) << 17, 64}).has_value());
  CHECK(checked_sum({1, 2, 3}) == 6);
  CHECK_FALSE(checked_sum({kMax / 2 + 1, kMax / 2 + 1}).has_value());
  CHECK(checked_sum({}) == 0);
}

TEST_CASE("problem_sizes counts elements, pairs and bytes exactly") {
  Problem p;
  p.batch = 2, p.heads_q = 8, p.heads_kv = 2, p.seq_q = 100, p.seq_k = 300, p.head_dim = 64, p.head_dim_v = 32;
  p.dtype = DType::bf16;
  const ProblemSizes s = problem_sizes(p);
  CHECK(s.q == 2 * 8 * 100 * 64);
  CHECK(s.k == 2 * 2 * 300 * 64);
  CHECK(s.v == 2 * 2 * 300 * 32);
  CHECK(s.o == 2 * 8 * 100 * 32);
  CHECK(s.lse == 2 * 8 * 100);
  CHECK(s.bias == 0);
  CHECK(s.pairs == 2 * 8 * 100 * 300);
  const int64_t q = 102400, k = 76800, v = 38400, o = 51200, lse = 1600;
  CHECK(s.host_bytes == 8 * (q + k + v + o) + 24 * (o + lse + q + k + v));
  CHECK(s.device_bytes == 2 * (q + k + v + o + o + q + k + v) + 8 * lse + 4 * q);
  p.score_mod.kind = ScoreMod::Kind::rel_bias;
  p.score_mod.max_distance = 10;
  CHECK(problem_sizes(p).bias == 8 * 21);
  p.score_mod.max_distance = kMax;  // 2m + 1 overflows
  CHECK_FALSE(problem_sizes(p).bias.has_value());
}

TEST_CASE("check_budget names the largest field, the amount and the limit") {
  Problem p;
  p.heads_q = p.heads_kv = 32;
  p.seq_q = p.seq_k = INT64_C(1) << 40;
  p.head_dim = p.head_dim_v = 64;
  std::string m = budget_error(p);
  CHECK(m.find("p.json: /seq_q: Q would need 2^") == std::string::npos);  // the amount is printed exactly
  CHECK(m.find("p.json: /seq_q: Q would need 2251799813685248 elements") == 0);
  CHECK(m.find("more than the budget of 2^34") != std::string::npos);
  CHECK(m.find("(value 1099511627776)") != std::string::npos);
  // heads 2^45 x seq 2^17: the product wraps in int64; the message says so.
  p.heads_q = p.heads_kv = INT64_C(1) << 45;
  p.seq_q = p.seq_k = INT64_C(1) << 17;
  m = budget_error(p);
  CHECK(m.find("/heads_q: Q would need more than 2^63 elements") != std::string::npos);
  // Pairs alone: few elements (D = 1) but Sq x Sk beyond 2^50.
  Problem w;
  w.heads_q = w.heads_kv = 1;
  w.head_dim = w.head_dim_v = 1;
  w.seq_q = w.seq_k = INT64_C(1) << 26;
  m = budget_error(w);
  CHECK(m.find("the (i, j) pairs would need 4503599627370496 pairs") != std::string::npos);
  CHECK(m.find("2^50") != std::string::npos);
  // Host bytes: every tensor within 2^34 elements, the float64 copies beyond 2 TiB.
  Problem h;
  h.dtype = DType::fp32;
  h.heads_q = h.heads_kv = 16;
  h.seq_q = h.seq_k = INT64_C(1) << 22;
  h.head_dim = h.head_dim_v = 256;  // 2^34 elements per tensor
  m = budget_error(h);
  CHECK(m.find("p.json: /seq_q: the host would need") == 0);
  CHECK(m.find("more than the budget of 2^41") != std::string::npos);
  // Device bytes: 7 x 2^31 elements per tensor fit the host budget, not 256 GiB of device memory.
  Problem d;
  d.batch = 7;
  d.heads_q = d.heads_kv = 16;
  d.seq_q = d.seq_k = INT64_C(1) << 20;
  d.head_dim = d.head_dim_v = 128;
  m = budget_error(d);
  CHECK(m.find("p.json: /seq_q: a device would need") == 0);
  CHECK(m.find("more than the budget of 2^38") != std::string::npos);
  // The learnable bias.
  Problem b;
  b.score_mod.kind = ScoreMod::Kind::offset_bias;
  b.score_mod.size = INT64_C(1) << 40;
  CHECK(budget_error(b).find("p.json: /score_mod: the learnable bias would need 1099511627776 elements") == 0);
  // Within the budget: nothing thrown.
  Problem ok;
  ok.batch = 8, ok.heads_q = 32, ok.heads_kv = 8, ok.seq_q = ok.seq_k = 32768, ok.head_dim = ok.head_dim_v = 128;
  CHECK(budget_error(ok).empty());
}

TEST_CASE("problem files: wrapped document-length sums and huge sizes fail before any allocation") {
  // Two lengths near INT64_MAX whose sum wraps to 2 = seq_q.
  const std::string wrap =
      R"({"batch": 1, "heads_q": 1, "seq_q": 2, "head_dim": 8,
          "mask": {"kind": "document", "doc_lengths": [[9223372036854775807, 9223372036854775805]]}})";
  const std::string m = parse_error(wrap);
  CHECK(m.find("p.json: /mask/doc_lengths/0: document lengths sum to more than 2^63") == 0);
  CHECK(parse_error(R"({"batch": 1, "heads_q": 1, "seq_q": 1099511627776, "head_dim": 64})")
            .find("p.json: /seq_q: Q would need 70368744177664 elements") == 0);
  // validate() applies the budget too.
  Problem p;
  p.seq_q = p.seq_k = INT64_C(1) << 40;
  CHECK_THROWS_AS(validate(p), BudgetError);
}

TEST_CASE("printable escapes control characters and keeps the rest") {
  CHECK(printable("plain text, 100% ok") == "plain text, 100% ok");
  CHECK(printable("a\x1b[31mred\x1b[0m") == "a\\e[31mred\\e[0m");
  CHECK(printable("line1\nline2\r\t") == "line1\\nline2\\r\\t");
  CHECK(printable("line1\nline2", true) == "line1\nline2");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("bs\x08\x7f") == "bs\\x08\\x7f");
  CHECK(printable("\xc2\x9b" "2J") == "\\u009b2J");  // C1 CSI in UTF-8
  CHECK(printable("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 text unchanged
  CHECK(printable("") == "");
}
