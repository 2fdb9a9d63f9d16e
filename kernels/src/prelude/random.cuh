// Dummy weights: `HostData::Random`'s stream (and RandomFp8's): chunks of RANDOM_CHUNK elements,
// chunk c starting from splitmix64(seed ^ c * golden), one splitmix64 step per element.
#define RANDOM_CHUNK 65536ull

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The elements [start, end) this thread's chunk draws and the stream's state before the first;
// false when the chunk is past n.
__device__ __forceinline__ bool random_chunk(u64 n, u64 seed, u64* start, u64* end, u64* state) {
    const u64 chunk = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    *start = chunk * RANDOM_CHUNK;
    if (*start >= n) return false;
    *end = *start + RANDOM_CHUNK < n ? *start + RANDOM_CHUNK : n;
    *state = splitmix64(seed ^ (chunk * 0x9e3779b97f4a7c15ull));
    return true;
}
