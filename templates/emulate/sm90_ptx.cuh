// Host emulation of templates/sm90/ptx.cuh (same functions, the semantics the PTX ISA gives them), for
// kdagen.codegen.emulate. Requires cuda_host.h and emulate/common_ptx.cuh.
//   - bulk and bulk-tensor copies run at once in the issuing thread (out-of-bounds box elements read 0;
//     with a swizzle, each box row takes a whole span and the swizzle applies to the shared addresses),
//     then complete their bytes (the box's, without that padding) on the mbarrier;
//   - bulk tensor stores are recorded at issue and read their shared source only when a wait_group.read of the
//     issuing thread covers their group, as late as the hardware may (a source rewritten before that wait, or a
//     store never waited for, shows up as wrong output); out-of-bounds box elements are not written;
//   - wgmma is warpgroup-collective and asynchronous: an issue records the operation (register A operands
//     as they are then), commit closes a group, and only a wait_group that covers a group executes it:
//     shared-memory operands are read and accumulators written at that point, as late as the hardware may;
//   - setmaxnreg checks its operand and that the whole warpgroup runs it; fences are no-ops.
namespace kdg {

__device__ __forceinline__ void ptx_fence_proxy_async_shared() {}
__device__ __forceinline__ void ptx_fence_mbarrier_init() {}

__device__ __forceinline__ void ptx_mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  mbarrier_update(bar, 1, bytes, "mbarrier.arrive.expect_tx");
}

__device__ __forceinline__ void ptx_mbarrier_expect_tx(u64* bar, u32 bytes) {
  mbarrier_update(bar, 0, bytes, "mbarrier.expect_tx");
}

__device__ __forceinline__ bool ptx_mbarrier_try_wait(u64* bar, int parity) { return ptx_mbarrier_test(bar, parity); }

// ---- bulk copies ----------------------------------------------------------------------------------------

// The emulator's tensor map (kdagen.codegen.emulate.encode_tiled writes it): byte strides of every
// dimension (dimension 0's is the element size), the box in elements, the swizzle span in bytes.
struct TensorMapEmulated {
  char magic[4];
  u32 rank;
  u64 address;
  u64 dims[5];
  u64 strides[5];
  u32 box[5];
  u32 elem_bytes;
  u32 swizzle;
  u32 unused;
};
static_assert(sizeof(TensorMapEmulated) == 128, "a tensor map is 128 bytes");

// The shared byte a tensor copy writes for `dst + offset`: address bits 4.. XOR bits 7.. within the span.
inline unsigned char* swizzled(unsigned char* dst, u32 offset, u32 swizzle) {
  if (!swizzle) return dst + offset;
  const u32 a = smem_addr(dst) + offset;
  return dst + offset + ((long long)(a ^ (((a >> 7) & (swizzle / 16 - 1)) << 4)) - (long long)a);
}

// Every element of a box: visit(its shared byte — each box row taking a whole swizzle span when swizzled, the
// swizzle applied to the shared address — and its global address, 0 outside the tensor); returns the element count.
template <typename Visit>
inline u64 box_walk(const TensorMapEmulated& m, const int* coords, int rank, unsigned char* tile, Visit visit) {
  u64 elems = 1;
  for (int i = 0; i < rank; ++i) elems *= m.box[i];
  const u32 pitch = m.swizzle ? m.swizzle : m.box[0] * m.elem_bytes;
  for (u64 n = 0; n < elems; ++n) {
    u64 rest = n, at = m.address;
    bool inside = true;
    for (int i = 0; i < rank; ++i) {
      const long long c = (long long)coords[i] + (long long)(rest % m.box[i]);
      rest /= m.box[i];
      inside = inside && c >= 0 && c < (long long)m.dims[i];
      at += (u64)c * m.strides[i];
    }
    visit(swizzled(tile, (u32)(n / m.box[0] * pitch + n % m.box[0] * m.elem_bytes), m.swizzle), inside ? at : 0);
  }
  return elems;
}

// The map a bulk tensor copy (either way) is given, checked as the hardware would fault: the emulator's encoding,
// the instruction's rank, a 128-byte aligned shared tile, an innermost coordinate on a 16-byte boundary.
inline TensorMapEmulated tma_checked(const void* map, int rank, const void* tile, int c0) {
  TensorMapEmulated m;
  std::memcpy(&m, map, sizeof m);
  if (std::memcmp(m.magic, "KDGT", 4) != 0)
    kdg_emu::fail("cp.async.bulk.tensor: not a tensor map of the emulator (encode it with emulate.encode_tiled)");
  if ((int)m.rank != rank) kdg_emu::fail("cp.async.bulk.tensor.%dd with a tensor map of rank %u", rank, m.rank);
  if (smem_addr(tile) % 128) kdg_emu::fail("cp.async.bulk.tensor: shared tile %p is not 128-byte aligned", tile);
  if ((long long)c0 * m.elem_bytes % 16)  // an illegal-instruction fault on the GPU
    kdg_emu::fail("cp.async.bulk.tensor: innermost coordinate %d x %u bytes is not a multiple of 16 bytes", c0,
                  m.elem_bytes);
  return m;
}

inline void tma_load_emulated(void* dst, const void* map, const int* coords, int rank, u64* bar) {
  const TensorMapEmulated m = tma_checked(map, rank, dst, coords[0]);
  const u64 elems = box_walk(m, coords, rank, static_cast<unsigned char*>(dst), [&](unsigned char* at, u64 src) {
    if (src) std::memcpy(at, reinterpret_cast<const void*>(src), m.elem_bytes);
    else std::memset(at, 0, m.elem_bytes);
  });
  mbarrier_update(bar, 0, -(long long)(elems * m.elem_bytes), "cp.async.bulk.tensor complete_tx");
}

__device__ __forceinline__ void ptx_tma_load_2d(void* dst, const void* map, int c0, int c1, u64* bar) {
  const int c[] = {c0, c1};
  tma_load_emulated(dst, map, c, 2, bar);
}

__device__ __forceinline__ void ptx_tma_load_3d(void* dst, const void* map, int c0, int c1, int c2, u64* bar) {
  const int c[] = {c0, c1, c2};
  tma_load_emulated(dst, map, c, 3, bar);
}

__device__ __forceinline__ void ptx_tma_load_4d(void* dst, const void* map, int c0, int c1, int c2, int c3,
                                                u64* bar) {
  const int c[] = {c0, c1, c2, c3};
  tma_load_emulated(dst, map, c, 4, bar);
}

struct BulkStore {
  TensorMapEmulated map;
  int coords[5];
  int rank;
  unsigned char* src;
};
inline thread_local std::vector<BulkStore> bulk_open;                   // issued, not yet committed
inline thread_local std::vector<std::vector<BulkStore>> bulk_groups;    // committed, oldest first

inline void bulk_store_execute(const BulkStore& st) {
  box_walk(st.map, st.coords, st.rank, st.src, [&](unsigned char* from, u64 at) {
    if (at) std::memcpy(reinterpret_cast<void*>(at), from, st.map.elem_bytes);   // outside the tensor: not written
  });
}

__device__ __forceinline__ void ptx_tma_store_2d(const void* map, int c0, int c1, const void* src) {
  BulkStore st{};
  st.map = tma_checked(map, 2, src, c0);
  st.coords[0] = c0;
  st.coords[1] = c1;
  st.rank = 2;
  st.src = static_cast<unsigned char*>(const_cast<void*>(src));
  bulk_open.push_back(st);
  ++kdg_emu::bulk_stores_pending;
}

__device__ __forceinline__ void ptx_bulk_commit_group() {
  bulk_groups.push_back(std::move(bulk_open));
  bulk_open.clear();
}

template <int N>
__device__ __forceinline__ void ptx_bulk_wait_group_read() {
  while ((int)bulk_groups.size() > N) {
    for (const BulkStore& st : bulk_groups.front()) {
      bulk_store_execute(st);
      --kdg_emu::bulk_stores_pending;
    }
    bulk_groups.erase(bulk_groups.begin());
  }
}

// A hint with no effect on memory: only its operands are checked.
__device__ __forceinline__ void ptx_prefetch_l2(const void* p, u32 bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16 || bytes % 16 || bytes == 0)
    kdg_emu::fail("cp.async.bulk.prefetch.L2: %p, %u bytes: address and size must be non-zero multiples of 16", p,
                  bytes);
}

__device__ __forceinline__ void ptx_bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  if (smem_addr(dst) % 16 || reinterpret_cast<std::uintptr_t>(src) % 16 || bytes % 16)
    kdg_emu::fail("cp.async.bulk: %p <- %p, %u bytes: addresses and size must be multiples of 16", dst, src, bytes);
  (void)kdg_emu::shared_pointer(smem_addr(dst), bytes, "cp.async.bulk");
  std::memcpy(dst, src, bytes);
  mbarrier_update(bar, 0, -(long long)bytes, "cp.async.bulk complete_tx");
}

// ---- wgmma ----------------------------------------------------------------------------------------------

// The element (mn, k) of the MN x 16 slice a shared-memory descriptor describes (layouts in wgmma.cuh).
inline float wgmma_smem_element(u64 desc, int mn, int k, int mn_major) {
  const u32 start = (u32)(desc & 0x3FFF) << 4, lbo = (u32)((desc >> 16) & 0x3FFF) << 4;
  const u32 sbo = (u32)((desc >> 32) & 0x3FFF) << 4, base_offset = (u32)((desc >> 49) & 7);
  static constexpr u32 spans[4] = {0, 128, 64, 32};  // layout field: none, 128-, 64-, 32-byte swizzle
  const u32 span = spans[desc >> 62];
  if (base_offset)
    kdg_emu::fail("wgmma: descriptor base offset %u is not modelled (align tiles to their pattern)", base_offset);
  u32 off;
  if (!mn_major && !span) off = (mn / 8) * sbo + (k / 8) * lbo + (mn % 8) * 16 + (k % 8) * 2;
  else if (!mn_major) off = (mn / 8) * sbo + (mn % 8) * span + (k / 8) * 16 + (k % 8) * 2;
  else if (!span) off = (mn / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + (mn % 8) * 2;
  else off = (mn / (span / 2)) * lbo + (k / 8) * sbo + (k % 8) * span + (mn % (span / 2)) * 2;
  u32 a = start + off;
  if (span) a ^= ((a >> 7) & (span / 16 - 1)) << 4;
  unsigned short bits;
  std::memcpy(&bits, kdg_emu::shared_pointer(a, 2, "wgmma operand"), 2);
  return __bfloat162float(__ushort_as_bfloat16(bits));
}

// One issued wgmma: its shape and descriptors, every thread's accumulator and (RS) A registers.
struct WgmmaOp {
  int n, scale_d, tnsp_a, tnsp_b, rs;
  u64 desc_a, desc_b;
  float* d[128];
  u32 a[128][4];
};

inline void wgmma_execute(const WgmmaOp& op) {
  float A[64][16], B[16][256];
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < op.n; ++n) B[k][n] = wgmma_smem_element(op.desc_b, n, k, op.tnsp_b);
  if (!op.rs)
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) A[m][k] = wgmma_smem_element(op.desc_a, m, k, op.tnsp_a);
  else
    for (int t = 0; t < 128; ++t)
      for (int r = 0; r < 4; ++r) {  // x[r]: row 16w + g (+8 for r odd), columns 2q, 2q + 1 (+8 for r >= 2)
        const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (r & 1), col = 2 * (t % 4) + 8 * (r >> 1);
        A[row][col] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(op.a[t][r] & 0xffffu)));
        A[row][col + 1] = __bfloat162float(__ushort_as_bfloat16((unsigned short)(op.a[t][r] >> 16)));
      }
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < op.n / 2; ++i) {  // d[i]: row 16w + g (+8 for i % 4 >= 2), column 8(i / 4) + 2q + i % 2
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * (t % 4) + i % 2;
      float acc = op.scale_d ? op.d[t][i] : 0.f;
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      op.d[t][i] = acc;
    }
}

inline void wgmma_issue_emulated(float* d, int n, const u32* a, u64 desc_a, u64 desc_b, int scale_d, int tnsp_a,
                                 int tnsp_b) {
  kdg_emu::WarpGroup& wg = kdg_emu::warpgroup("wgmma.mma_async");
  const int t = threadIdx.x % 128, index = kdg_emu::warp_id / 4;
  unsigned long long* s = wg.slot[t];
  s[0] = reinterpret_cast<std::uintptr_t>(d);
  s[1] = a ? a[0] | (u64)a[1] << 32 : 0;
  s[2] = a ? a[2] | (u64)a[3] << 32 : 0;
  s[3] = a ? 0 : desc_a;
  s[4] = desc_b;
  s[5] = (u64)n | (u64)(scale_d != 0) << 16 | (u64)tnsp_a << 20 | (u64)tnsp_b << 24 | (u64)(a != nullptr) << 28;
  wg.sync("wgmma.mma_async", index);
  if (t == 0) {
    auto op = std::make_shared<WgmmaOp>();
    *op = WgmmaOp{n, scale_d != 0, tnsp_a, tnsp_b, a != nullptr, desc_a, desc_b, {}, {}};
    for (int u = 0; u < 128; ++u) {
      const unsigned long long* o = wg.slot[u];
      if (o[3] != s[3] || o[4] != s[4] || o[5] != s[5])
        kdg_emu::fail("wgmma.mma_async: thread %d of warpgroup %d has other descriptors, shape or scale-d than "
                      "thread 0", u, index);
      op->d[u] = reinterpret_cast<float*>(o[0]);
      const u32 regs[4] = {(u32)o[1], (u32)(o[1] >> 32), (u32)o[2], (u32)(o[2] >> 32)};
      std::memcpy(op->a[u], regs, sizeof regs);
    }
    wg.open.push_back([op] { wgmma_execute(*op); });
  }
  wg.sync("wgmma.mma_async", index);
}

__device__ __forceinline__ void ptx_wgmma_fence() {}

__device__ __forceinline__ void ptx_wgmma_commit() {
  kdg_emu::WarpGroup& wg = kdg_emu::warpgroup("wgmma.commit_group");
  const int index = kdg_emu::warp_id / 4;
  wg.sync("wgmma.commit_group", index);
  if (threadIdx.x % 128 == 0) {
    wg.groups.push_back(std::move(wg.open));
    wg.open.clear();
  }
  wg.sync("wgmma.commit_group", index);
}

inline void wgmma_wait_emulated(int pending) {
  kdg_emu::WarpGroup& wg = kdg_emu::warpgroup("wgmma.wait_group");
  const int index = kdg_emu::warp_id / 4;
  wg.sync("wgmma.wait_group", index);
  if (threadIdx.x % 128 == 0)
    while ((int)wg.groups.size() > pending) {
      for (const auto& run : wg.groups.front()) run();
      wg.groups.pop_front();
    }
  wg.sync("wgmma.wait_group", index);
}

template <int N>
__device__ __forceinline__ void ptx_wgmma_wait() {
  wgmma_wait_emulated(N);
}

__device__ __forceinline__ void ptx_fence_operand(float&) {}
__device__ __forceinline__ void ptx_fence_operand(u32&) {}

template <int N, int TA, int TB>
__device__ __forceinline__ void ptx_wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d) {
  wgmma_issue_emulated(d, N, nullptr, desc_a, desc_b, scale_d, TA, TB);
}

template <int N, int TB>
__device__ __forceinline__ void ptx_wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, int scale_d) {
  wgmma_issue_emulated(d, N, a, 0, desc_b, scale_d, 0, TB);
}

// ---- registers ------------------------------------------------------------------------------------------

inline void setmaxnreg_emulated(int n, int inc, const char* what) {
  if (n % 8 || n < 24 || n > 256) kdg_emu::fail("%s %d: the count must be a multiple of 8 in [24, 256]", what, n);
  kdg_emu::WarpGroup& wg = kdg_emu::warpgroup(what);
  const int t = threadIdx.x % 128, index = kdg_emu::warp_id / 4;
  wg.slot[t][0] = (u64)n | (u64)inc << 16;
  wg.sync(what, index);
  for (int u = 0; u < 128; ++u)
    if (wg.slot[u][0] != wg.slot[t][0])
      kdg_emu::fail("%s %d: thread %d of warpgroup %d ran setmaxnreg.%s %d", what, n, u, index,
                    wg.slot[u][0] >> 16 ? "inc" : "dec", (int)(wg.slot[u][0] & 0xffff));
  wg.sync(what, index);
}

template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_inc() {
  setmaxnreg_emulated(N, 1, "setmaxnreg.inc");
}

template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_dec() {
  setmaxnreg_emulated(N, 0, "setmaxnreg.dec");
}

// ---- stmatrix -------------------------------------------------------------------------------------------

// Each lane writes the row it addressed, gathering its 8 elements from the lanes that hold them.
inline void stmatrix_x4_emulated(void* row_ptr, const u32 (&r)[4], bool trans) {
  kdg_emu::Warp& w = kdg_emu::warp();
  const int lane = kdg_emu::lane_id;
  if (smem_addr(row_ptr) % 16)
    kdg_emu::fail("stmatrix: row address %p of lane %d is not 16-byte aligned", row_ptr, lane);
  w.slot[lane][0] = reinterpret_cast<std::uintptr_t>(row_ptr);
  for (int i = 0; i < 4; ++i) w.slot[lane][1 + i] = r[i];
  w.bar.arrive_and_wait();
  const int m = lane / 8, row = lane % 8;
  unsigned short e[8];
  for (int col = 0; col < 8; ++col) {  // element (row, col) of matrix m: which lane holds it, in which half
    const int src = trans ? 4 * col + row / 2 : 4 * row + col / 2, half = trans ? row % 2 : col % 2;
    const u32 v = (u32)w.slot[src][1 + m];
    e[col] = (unsigned short)(half ? v >> 16 : v & 0xffffu);
  }
  std::memcpy(row_ptr, e, sizeof e);
  w.bar.arrive_and_wait();
}

__device__ __forceinline__ void ptx_stmatrix_x4(void* row_ptr, const u32 (&r)[4]) {
  stmatrix_x4_emulated(row_ptr, r, false);
}
__device__ __forceinline__ void ptx_stmatrix_x4_trans(void* row_ptr, const u32 (&r)[4]) {
  stmatrix_x4_emulated(row_ptr, r, true);
}

}  // namespace kdg
