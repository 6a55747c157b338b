// A vector whose first N elements live inside it: the per-work-request lists of the data path
// (pieces of memory, the pins that hold them, the windows that map them) hold one or two
// entries, and a heap allocation per access cost more than the copy of an 8-byte message. Only
// the elements held are constructed and destroyed: a list made and dropped per work request
// pays for what it holds, not for its capacity.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
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

  // By reference, moved or copied once into place (a KeyPin is 72 bytes).
  void push_back(T&& v) { Emplace(std::move(v)); }
  void push_back(const T& v) { Emplace(v); }
  void clear() {
    DestroyFixed();
    spilled_.clear();
    heap_ = false;
  }
  T* data() { return heap_ ? spilled_.data() : fixed(); }
  const T* data() const { return heap_ ? spilled_.data() : fixed(); }
  size_t size() const { return heap_ ? spilled_.size() : n_; }
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
  template <typename U>
  void Emplace(U&& v) {
    if (!heap_ && n_ < N) [[likely]] {
      new (fixed() + n_) T(std::forward<U>(v));
      ++n_;
      return;
    }
    PushSpilled(T(std::forward<U>(v)));
  }
  // The N+1st element: everything moves to the heap, kept contiguous (out of line: the inline
  // push is what the data path runs).
  [[gnu::noinline]] void PushSpilled(T v) {
    if (!heap_) {
      spilled_.reserve(2 * N + 1);
      for (size_t i = 0; i < n_; ++i) spilled_.push_back(std::move(fixed()[i]));
      DestroyFixed();
      heap_ = true;
    }
    spilled_.push_back(std::move(v));
  }
  // The inline elements, in reverse order of construction (as a vector's are destroyed).
  void DestroyFixed() {
    if constexpr (!std::is_trivially_destructible_v<T>)
      for (size_t i = n_; i > 0; --i) fixed()[i - 1].~T();
    n_ = 0;
  }

  alignas(T) unsigned char storage_[N * sizeof(T)];
  size_t n_ = 0;       // inline elements constructed (0 once spilled)
  bool heap_ = false;  // the elements are in spilled_
  std::vector<T> spilled_;
};

}  // namespace softverbs
