// The caching allocator's bookkeeping, over host memory with a fixed
// capacity standing in for a device's: blocks come back from the cache,
// allocated and reserved count what they should, and running out releases
// the cache before reporting out of memory.
#include <doctest/doctest.h>

#include <ft/tensor/caching_allocator.hpp>
#include <ft/tensor/memory.hpp>

namespace test_caching_allocator {

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

TEST_CASE("host pages: blocks are page-rounded, and the cache never holds more than the peak in use") {
  using Pages = memory::CachingAllocator<SmallDevice, memory::PageBlocks>;
  CHECK(Pages::size_class(1) == 4096);
  CHECK(Pages::size_class(4096) == 4096);
  CHECK(Pages::size_class(MiB + 1) == MiB + 4096);
  SmallDevice::capacity = 1024 * MiB;
  SmallDevice::calls = 0;
  Pages cache;
  // A step's repeating sizes come back from the cache.
  for (int step = 0; step < 3; ++step) {
    void* a = cache.allocate(3 * MiB);
    void* b = cache.allocate(MiB + 100);
    cache.deallocate(a, 3 * MiB);
    cache.deallocate(b, MiB + 100);
  }
  CHECK(SmallDevice::calls == 2);
  CHECK(cache.allocated().peak() == 4 * MiB + 4096);
  CHECK(cache.reserved().current() == 4 * MiB + 4096);
  // A size the cache does not have releases cached blocks, the largest first,
  // until reserving it stays within the peak in use (4 MiB + a page).
  void* c = cache.allocate(2 * MiB);
  CHECK(cache.reserved().current() == MiB + 4096 + 2 * MiB);  // the 3 MiB block went
  // At a new peak nothing may stay cached beside it.
  void* d = cache.allocate(5 * MiB);
  CHECK(cache.reserved().current() == 7 * MiB);
  CHECK(cache.reserved().current() <= cache.allocated().peak());
  cache.deallocate(c, 2 * MiB);
  cache.deallocate(d, 5 * MiB);
  cache.release_cached();
  CHECK(SmallDevice::used == 0);
}

TEST_CASE("host pages: room held for others' memory (MPI's scratch) comes out of the cache, not on top of the peak") {
  using Pages = memory::CachingAllocator<SmallDevice, memory::PageBlocks>;
  SmallDevice::capacity = 1024 * MiB;
  Pages cache;
  void* a = cache.allocate(4 * MiB);
  void* b = cache.allocate(2 * MiB);
  cache.deallocate(a, 4 * MiB);
  cache.deallocate(b, 2 * MiB);
  REQUIRE(cache.reserved().current() == 6 * MiB);  // the peak in use, all cached
  // 3 MiB of room within the 6 MiB peak: the largest cached block goes.
  cache.hold_room(3 * MiB);
  CHECK(cache.reserved().current() == 2 * MiB);
  void* c = cache.allocate(2 * MiB);  // from the cache
  CHECK(cache.reserved().current() == 2 * MiB);
  // In use and the room past the peak: nothing more may be cached beside them.
  void* d = cache.allocate(3 * MiB);
  CHECK(cache.reserved().current() == 5 * MiB);
  cache.deallocate(d, 3 * MiB);
  void* e = cache.allocate(MiB);  // a size not cached: the free 3 MiB goes first
  CHECK(cache.reserved().current() == 3 * MiB);
  CHECK(cache.reserved().current() + 3 * MiB <= std::max(cache.allocated().peak(), cache.allocated().current() + 3 * MiB));
  // The room given back, the cache may hold up to the peak again: a new
  // size keeps both cached blocks beside it (with the room, both would go).
  cache.give_room(3 * MiB);
  cache.deallocate(c, 2 * MiB);
  cache.deallocate(e, MiB);
  void* f = cache.allocate(3 * MiB);
  CHECK(cache.reserved().current() == 6 * MiB);
  cache.deallocate(f, 3 * MiB);
  cache.release_cached();
  CHECK(SmallDevice::used == 0);
}

}  // namespace test_caching_allocator
