// A vector whose first N elements live inside it: the per-work-request lists of the data path
// (pieces of memory, the pins that hold them, the windows that map them) hold one or two
// entries, and a heap allocation per access cost more than the copy of an 8-byte message. Only
// the elements held are constructed and destroyed: a list made and dropped per work request
// pays for what it holds, not for its capacity.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace softverbs {

template <typename T, size_t N>
class InlinedVector {
 public:
  InlinedVector() = default;
  InlinedVector(const InlinedVector&) = delete;
  InlinedVector& operator=(const InlinedVector&) = delete;
  ~InlinedVector() { DestroyFixed(); }

  void push_back(T v) {
    if (spilled_.empty() && n_ < N) {
      new (fixed() + n_) T(std::move(v));
      ++n_;
      return;
    }
    if (spilled_.empty()) {  // the N+1st: everything moves to the heap, kept contiguous
      spilled_.reserve(2 * N + 1);
      for (size_t i = 0; i < n_; ++i) spilled_.push_back(std::move(fixed()[i]));
      DestroyFixed();
    }
    spilled_.push_back(std::move(v));
  }
  void clear() {
    DestroyFixed();
    spilled_.clear();
  }
  T* data() { return spilled_.empty() ? fixed() : spilled_.data(); }
  const T* data() const { return spilled_.empty() ? fixed() : spilled_.data(); }
  size_t size() const { return spilled_.empty() ? n_ : spilled_.size(); }
  bool empty() const { return size() == 0; }
  T& back() { return data()[size() - 1]; }
  const T& back() const { return data()[size() - 1]; }
  T* begin() { return data(); }
  T* end() { return data() + size(); }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size(); }

 private:
  T* fixed() { return std::launder(reinterpret_cast<T*>(storage_)); }
  const T* fixed() const { return std::launder(reinterpret_cast<const T*>(storage_)); }
  // The inline elements, in reverse order of construction (as a vector's are destroyed).
  void DestroyFixed() {
    for (size_t i = n_; i > 0; --i) fixed()[i - 1].~T();
    n_ = 0;
  }

  alignas(T) unsigned char storage_[N * sizeof(T)];
  size_t n_ = 0;  // inline elements constructed (0 once spilled)
  std::vector<T> spilled_;
};

}  // namespace softverbs
