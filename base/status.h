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
  Status(int code, std::string rule) : rep_(new Rep{code, std::move(rule)}) {}
  Status(const Status& o) : rep_(o.rep_ ? new Rep(*o.rep_) : nullptr) {}
  Status(Status&& o) noexcept : rep_(std::exchange(o.rep_, nullptr)) {}
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status& operator=(Status&& o) noexcept {
    std::swap(rep_, o.rep_);
    return *this;
  }
  ~Status() {
    if (rep_ != nullptr) delete rep_;
  }

  static Status Ok() { return Status(); }

  // Success is a null pointer (Abseil's layout): the success path, every verb and every work
  // request, makes, moves and drops Statuses that are one word and own nothing.
  bool ok() const { return rep_ == nullptr || rep_->code == 0; }
  int code() const { return rep_ ? rep_->code : 0; }  // an errno value; 0 on success
  const std::string& rule() const {                 // the rule broken, for the log line
    static const std::string kNone;
    return rep_ ? rep_->rule : kNone;
  }

 private:
  struct Rep {
    int code;
    std::string rule;
  };
  Rep* rep_ = nullptr;
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
  // The refusal in place of what was held (not a variant move-assignment from a temporary
  // Result: GCC's -O1 sanitizer builds saw a maybe-uninitialized T in that).
  Result& operator=(Status status) {
    v_.template emplace<1>(std::move(status));
    return *this;
  }
  Result& operator=(Result&&) = default;
  Result(Result&&) = default;
  Result& operator=(const Result&) = default;
  Result(const Result&) = default;

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
