// Status and Result: how the core reports a refusal.
//
// A Status carries an errno value (the code the verb's man page prescribes) and the rule that was
// broken, in words. abi/ turns it into the C convention of the verb in exactly one place per
// convention (abi/common/errno_convention.h) and logs the rule there.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace softverbs {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(int code, std::string rule) : code_(code), rule_(std::move(rule)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == 0; }
  int code() const { return code_; }            // an errno value; 0 on success
  const std::string& rule() const { return rule_; }  // the rule broken, for the log line

 private:
  int code_ = 0;
  std::string rule_;
};

// Shorthands that read like the man pages: return Invalid("...") where the spec says EINVAL.
inline Status Invalid(std::string rule) { return Status(EINVAL, std::move(rule)); }
inline Status NotSupported(std::string rule) { return Status(EOPNOTSUPP, std::move(rule)); }
inline Status Busy(std::string rule) { return Status(EBUSY, std::move(rule)); }
inline Status NoMemory(std::string rule) { return Status(ENOMEM, std::move(rule)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be ok()

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  T& operator*() { return std::get<0>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace softverbs

// Early return of a failed Status.
#define SV_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::softverbs::Status sv_status_ = (expr); \
    if (!sv_status_.ok()) return sv_status_; \
  } while (0)
