// The caching allocator's bookkeeping, over host memory with a fixed
// capacity standing in for a device's: blocks come back from the cache,
// allocated and reserved count what they should, and running out releases
// the cache before reporting out of memory.
#include <doctest/doctest.h>

#include <ft/tensor/caching_allocator.hpp>

using namespace ft;

namespace {

// Host memory that refuses to hand out more than `capacity` bytes in all.
struct SmallDevice {
  static inline std::size_t capacity = 0, used = 0, calls = 0;
  static void* allocate(std::size_t bytes) {
    if (used + bytes > capacity) throw OutOfMemory("SmallDevice: out of memory", bytes);
    used += bytes;
    ++calls;
    return memory::Host::allocate(bytes);
  }
  static void deallocate(void* p, std::size_t bytes) {
    used -= bytes;
    memory::Host::deallocate(p, bytes);
  }
};

constexpr std::size_t MiB = std::size_t(1) << 20;

}  // namespace

TEST_CASE("the caching allocator rounds to size classes, reuses freed blocks and counts allocated and reserved") {
  using Cache = memory::CachingAllocator<SmallDevice>;
  CHECK(Cache::size_class(1) == 512);
  CHECK(Cache::size_class(512) == 512);
  CHECK(Cache::size_class(513) == 1024);
  CHECK(Cache::size_class(MiB) == 2 * MiB);
  CHECK(Cache::size_class(5 * MiB + 1) == 6 * MiB);

  SmallDevice::capacity = 64 * MiB;
  SmallDevice::calls = 0;
  {
    Cache cache;
    void* a = cache.allocate(1000);
    void* b = cache.allocate(3 * MiB);
    CHECK(cache.allocated().current() == 1024 + 4 * MiB);
    CHECK(cache.reserved().current() == 1024 + 4 * MiB);
    cache.deallocate(a, 1000);
    CHECK(cache.allocated().current() == 4 * MiB);
    CHECK(cache.reserved().current() == 1024 + 4 * MiB);  // kept for the next request of its class
    void* c = cache.allocate(700);                          // the same class: the same block, no raw call
    CHECK(c == a);
    CHECK(SmallDevice::calls == 2);
    CHECK(cache.allocated().peak() == 1024 + 4 * MiB);
    cache.deallocate(b, 3 * MiB);
    cache.deallocate(c, 700);
    CHECK(cache.allocated().current() == 0);
    CHECK_THROWS_WITH_AS(cache.deallocate(c, 700), doctest::Contains("freed twice"), Error);
    cache.release_cached();
    CHECK(cache.reserved().current() == 0);
    CHECK(SmallDevice::used == 0);
  }
  CHECK(SmallDevice::used == 0);
}

TEST_CASE("running out releases the cached blocks and tries again; then out of memory names the request") {
  using Cache = memory::CachingAllocator<SmallDevice>;
  SmallDevice::capacity = 16 * MiB;
  Cache cache;
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(cache.allocate(4 * MiB));  // fills the device
  for (void* p : blocks) cache.deallocate(p, 4 * MiB);                    // ... and stays reserved
  CHECK(cache.reserved().current() == 16 * MiB);
  void* big = cache.allocate(12 * MiB);  // another class: the cache is released to make room
  CHECK(big != nullptr);
  CHECK(cache.reserved().current() == 12 * MiB);
  try {
    (void)cache.allocate(6 * MiB);
    FAIL("expected out of memory");
  } catch (const OutOfMemory& e) {
    CHECK(e.bytes() == 6 * MiB);
    CHECK(std::string(e.what()).find("12582912 allocated") != std::string::npos);
  }
  cache.deallocate(big, 12 * MiB);
}
