// normgate/core/uninit.h: a std::vector whose resize() leaves new elements
// of trivial types uninitialized.
//
// std::vector<T>::resize value-initializes (zero-fills) the new elements on
// the calling thread: for a large output that every element of is written
// anyway, by several OpenMP threads, that serial pass (and its page faults:
// the first touch of freshly mapped memory) can cost more than the parallel
// work. UninitVector<T>::resize default-initializes instead (nothing for
// trivial T), so a large allocation's pages are first touched where the
// elements are first written. resize(n, value), push_back, copies and the
// rest behave as for std::vector.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace normgate {

/// std::allocator whose construct() with no arguments default-initializes.
template <class T>
struct UninitAllocator : std::allocator<T> {
  using value_type = T;
  UninitAllocator() noexcept = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialization: no zero-fill for trivial U
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

template <class T, class U>
bool operator==(const UninitAllocator<T>&, const UninitAllocator<U>&) noexcept {
  return true;
}

/// A vector whose resize(n) does not initialize new elements of trivial T:
/// write every one before reading it.
template <class T>
using UninitVector = std::vector<T, UninitAllocator<T>>;

}  // namespace normgate
