#include "fabric/wire/fault_spec.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace softverbs::fabric::wire {
namespace {

constexpr const char* kKnown = "loss, dup, reorder, corrupt (percent), delay, reorder_max (duration), "
                               "reorder_after (count), seed";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Decimal or 0x-hex unsigned integer, all of `s`.
std::optional<uint64_t> ParseUnsigned(std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseDecimal(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::fixed);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !(v >= 0)) return std::nullopt;
  return v;
}

// "5%", "0.1%" -> 0.05, 0.001. The '%' is required so that "loss=5" cannot mean 5 or 500%.
Result<double> ParsePercent(std::string_view v) {
  if (v.empty() || v.back() != '%') return Invalid("a probability is a percentage such as 5% or 0.1%");
  std::optional<double> p = ParseDecimal(v.substr(0, v.size() - 1));
  if (!p || *p > 100) return Invalid("a probability is a percentage from 0% to 100%");
  return *p / 100;
}

// "200us", "1.5ms", "2s", "500ns" -> nanoseconds. The unit is required.
Result<uint64_t> ParseDuration(std::string_view v) {
  static constexpr struct { std::string_view unit; double ns; } kUnits[] = {
      {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  for (const auto& u : kUnits) {
    if (v.size() <= u.unit.size() || v.substr(v.size() - u.unit.size()) != u.unit) continue;
    std::string_view num = v.substr(0, v.size() - u.unit.size());
    if (!num.empty() && (num.back() < '0' || num.back() > '9') && num.back() != '.') continue;  // "1ms" vs "s"
    std::optional<double> d = ParseDecimal(num);
    if (!d || *d * u.ns > 60e9) return Invalid("a duration is a number with ns, us, ms or s, at most 60s");
    return static_cast<uint64_t>(*d * u.ns + 0.5);
  }
  return Invalid("a duration needs a unit: ns, us, ms or s (e.g. 200us)");
}

Status ParseScope(std::string_view scope, FaultRule& rule) {
  if (scope == "tx" || scope == "rx") {
    if (rule.dir) return Invalid("a direction is given twice");
    rule.dir = scope == "tx" ? Direction::kTx : Direction::kRx;
    return Status::Ok();
  }
  if (scope.substr(0, 3) == "qp=") {
    if (rule.qp) return Invalid("a QP is given twice");
    std::optional<uint64_t> qp = ParseUnsigned(scope.substr(3));
    if (!qp || *qp > 0xffffff) return Invalid("a QP number is 24 bits, e.g. qp=0x123");
    rule.qp = static_cast<uint32_t>(*qp);
    return Status::Ok();
  }
  return Invalid("unknown scope '" + std::string(scope) + "' (known: tx:, rx:, qp=<number>:)");
}

Status ParseSetting(std::string_view key, std::string_view value, FaultRule& rule) {
  static constexpr struct { std::string_view name; FaultKey key; } kKeys[] = {
      {"loss", FaultKey::kLoss},       {"dup", FaultKey::kDup},
      {"reorder", FaultKey::kReorder}, {"corrupt", FaultKey::kCorrupt},
      {"delay", FaultKey::kDelay},     {"reorder_after", FaultKey::kReorderAfter},
      {"reorder_max", FaultKey::kReorderMax}};
  for (const auto& k : kKeys) {
    if (k.name != key) continue;
    rule.key = k.key;
    if (k.key == FaultKey::kDelay || k.key == FaultKey::kReorderMax) {
      Result<uint64_t> ns = ParseDuration(value);
      if (!ns.ok()) return ns.status();
      rule.amount = *ns;
    } else if (k.key == FaultKey::kReorderAfter) {
      std::optional<uint64_t> n = ParseUnsigned(value);
      if (!n || *n < 1 || *n > 1000) return Invalid("reorder_after is a count from 1 to 1000");
      rule.amount = *n;
    } else {
      Result<double> p = ParsePercent(value);
      if (!p.ok()) return p.status();
      rule.probability = *p;
    }
    return Status::Ok();
  }
  return Invalid("unknown setting '" + std::string(key) + "' (known: " + kKnown + ")");
}

bool SameTarget(const FaultRule& a, const FaultRule& b) {
  return a.key == b.key && a.dir == b.dir && a.qp == b.qp;
}

}  // namespace

Result<FaultSpec> FaultSpec::Parse(const std::string& text) {
  FaultSpec spec;
  bool seeded = false;
  std::string_view rest = text;
  for (int index = 1;; ++index) {
    const size_t comma = rest.find(',');
    const std::string_view raw = rest.substr(0, comma);
    std::string_view item = Trim(raw);
    auto fail = [&](const Status& why) {
      return Invalid("fault spec item " + std::to_string(index) + " '" + std::string(item) + "': " + why.rule());
    };
    if (item.empty()) {
      if (comma == std::string_view::npos && index == 1) return spec;  // "" = no faults
      return fail(Invalid("empty item (items are separated by single commas)"));
    }
    FaultRule rule;
    for (size_t colon; (colon = item.find(':')) != std::string_view::npos; item.remove_prefix(colon + 1)) {
      Status s = ParseScope(Trim(item.substr(0, colon)), rule);
      if (!s.ok()) return fail(s);
    }
    item = Trim(item);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fail(Invalid("expected <setting>=<value>"));
    const std::string_view key = Trim(item.substr(0, eq)), value = Trim(item.substr(eq + 1));
    if (key == "seed") {
      std::optional<uint64_t> seed = ParseUnsigned(value);
      if (rule.dir || rule.qp) return fail(Invalid("seed applies to the whole spec; it takes no scope"));
      if (seeded) return fail(Invalid("seed is given twice"));
      if (!seed) return fail(Invalid("seed is an unsigned 64-bit number"));
      spec.seed_ = *seed;
      seeded = true;
    } else {
      Status s = ParseSetting(key, value, rule);
      if (!s.ok()) return fail(s);
      for (const FaultRule& r : spec.rules_)
        if (SameTarget(r, rule)) return fail(Invalid("this setting is given twice for the same scope"));
      spec.rules_.push_back(rule);
    }
    if (comma == std::string_view::npos) return spec;
    rest.remove_prefix(comma + 1);
  }
}

Result<std::optional<FaultSpec>> FaultSpec::FromEnvironment() {
  const char* env = getenv("SOFTVERBS_FAULTS");
  if (env == nullptr || *env == '\0') return std::optional<FaultSpec>();
  Result<FaultSpec> spec = Parse(env);
  if (!spec.ok()) return Status(spec.status().code(), "SOFTVERBS_FAULTS: " + spec.status().rule());
  return std::optional<FaultSpec>(std::move(spec.value()));
}

FaultSettings FaultSpec::Resolve(Direction dir, std::optional<uint32_t> qp) const {
  FaultSettings s;
  int best[7] = {-1, -1, -1, -1, -1, -1, -1};  // per key: the specificity of the rule applied
  for (const FaultRule& r : rules_) {
    if ((r.dir && *r.dir != dir) || (r.qp && r.qp != qp)) continue;
    const int rank = (r.qp ? 2 : 0) + (r.dir ? 1 : 0);
    int& b = best[static_cast<int>(r.key)];
    if (rank <= b) continue;
    b = rank;
    switch (r.key) {
      case FaultKey::kLoss: s.loss = r.probability; break;
      case FaultKey::kDup: s.dup = r.probability; break;
      case FaultKey::kReorder: s.reorder = r.probability; break;
      case FaultKey::kCorrupt: s.corrupt = r.probability; break;
      case FaultKey::kDelay: s.delay_ns = r.amount; break;
      case FaultKey::kReorderAfter: s.reorder_after = static_cast<uint32_t>(r.amount); break;
      case FaultKey::kReorderMax: s.reorder_max_ns = r.amount; break;
    }
  }
  return s;
}

bool FaultSpec::Affects(Direction dir) const {
  for (const FaultRule& r : rules_) {
    if (r.dir && *r.dir != dir) continue;
    if (r.probability > 0 || (r.key == FaultKey::kDelay && r.amount > 0)) return true;
  }
  return false;
}

}  // namespace softverbs::fabric::wire
