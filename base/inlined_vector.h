// A vector whose first N elements live inside it: the per-work-request lists of the data path
// (pieces of memory, the windows that map them) hold one or two entries, and a heap allocation
// per access cost more than the copy of an 8-byte message.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace softverbs {

template <typename T, size_t N>
class InlinedVector {
 public:
  void push_back(T v) {
    if (spilled_.empty() && n_ < N) {
      fixed_[n_++] = std::move(v);
      return;
    }
    if (spilled_.empty()) {  // the N+1st: everything moves to the heap, kept contiguous
      spilled_.reserve(2 * N + 1);
      for (size_t i = 0; i < n_; ++i) spilled_.push_back(std::move(fixed_[i]));
    }
    spilled_.push_back(std::move(v));
  }
  void clear() {
    for (size_t i = 0; i < n_; ++i) fixed_[i] = T();
    n_ = 0;
    spilled_.clear();
  }
  T* data() { return spilled_.empty() ? fixed_ : spilled_.data(); }
  const T* data() const { return spilled_.empty() ? fixed_ : spilled_.data(); }
  size_t size() const { return spilled_.empty() ? n_ : spilled_.size(); }
  bool empty() const { return size() == 0; }
  T& back() { return data()[size() - 1]; }
  const T& back() const { return data()[size() - 1]; }
  T* begin() { return data(); }
  T* end() { return data() + size(); }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size(); }

 private:
  T fixed_[N]{};
  size_t n_ = 0;
  std::vector<T> spilled_;
};

}  // namespace softverbs
