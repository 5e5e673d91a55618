/* The C ABI of libfragscope_alloc.so: fragscope's caching allocator as a PyTorch pluggable CUDA
 * allocator (torch.cuda.memory.CUDAPluggableAllocator), plus stats, snapshot and log control.
 *
 * Setup (Python):
 *   a = torch.cuda.memory.CUDAPluggableAllocator("libfragscope_alloc.so",
 *                                                "fragscope_malloc", "fragscope_free")
 *   torch.cuda.memory.change_current_allocator(a)      # before any CUDA tensor exists
 * or simply fragscope.use_allocator(conf=..., log=...) (hooks/python/fragscope), which also
 * installs the optional hooks below. C++ jobs call fragscope::torch_hooks::UseFragscopeAllocator().
 *
 * Configuration, read once, at the first call that needs an allocator (or fragscope_configure):
 *   FRAGSCOPE_ALLOC_CONF  PYTORCH_CUDA_ALLOC_CONF syntax ("max_split_size_mb:128,...").
 *   FRAGSCOPE_LOG         .fslog path pattern: %p pid, %r rank, %d device, %% a percent sign.
 *                         Without %d, device N > 0 writes "<stem>.devN<ext>".
 * A bad FRAGSCOPE_ALLOC_CONF or an unopenable log is reported once on stderr, naming the key and
 * value, and every later fragscope_malloc returns NULL: fragscope never runs a job under a
 * configuration other than the one asked for.
 *
 * Contract of every function: thread-safe, never throws (errors become NULL / -1 / 0 and a message
 * available from fragscope_last_error()), never blocks on file I/O under an allocator lock.
 */
#ifndef FRAGSCOPE_HOOKS_FRAGSCOPE_ALLOC_H_
#define FRAGSCOPE_HOOKS_FRAGSCOPE_ALLOC_H_

#include <stddef.h>
#include <stdint.h>

/* The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is valid C11
 * and C++, so this header works with or without the CUDA headers. */
typedef struct CUstream_st* cudaStream_t;

#ifdef __cplusplus
extern "C" {
#endif

/* --- The pluggable-allocator ABI (MallocFuncType / FreeFuncType of PyTorch) --------------------
 * fragscope_malloc: `size` bytes usable on `stream` of `device`. size 0 returns NULL (PyTorch's
 * empty tensors have a null data pointer). Out of memory returns NULL after printing fragscope's
 * OOM report on stderr. NOTE: PyTorch's CUDAPluggableAllocator does not check for NULL; the tensor
 * gets a null data pointer and the first kernel touching it fails with an illegal memory access.
 * The LibTorch registration (torch_allocator.h) turns NULL into c10::OutOfMemoryError instead.
 * fragscope_free: `ptr` from fragscope_malloc; `size`, `device` and `stream` are ignored (the
 * allocator knows the block). NULL is a no-op. Unknown pointers are reported on stderr once. */
void* fragscope_malloc(size_t size, int device, cudaStream_t stream);
void fragscope_free(void* ptr, size_t size, int device, cudaStream_t stream);

/* --- Optional hooks (set_init_fn, set_reset_fn, set_memory_fraction_fn, set_record_stream_fn) --
 */
void fragscope_init(int device_count); /* creates nothing: allocators are lazy */
void fragscope_empty_cache(void);      /* torch.cuda.empty_cache(): every device */
void fragscope_set_memory_fraction(double fraction, int device);
void fragscope_record_stream(void* ptr, cudaStream_t stream);

/* --- Private pools: CUDA-graph capture (PyTorch's beginAllocateToPool, endAllocateToPool,
 * releasePool and getPoolUseCount) -------------------------------------------------------------
 * A pool is PyTorch's MempoolId_t (first, second): (n, 0) the pool a capture makes for itself,
 * (0, n) one from torch.cuda.graph_pool_handle(), which several captures may share. (0, 0), the
 * default pool, is refused, and so is a counter of 2^32 or more (a log's pool word holds 32 bits
 * of each). Each returns 0, or -1 with fragscope_last_error() naming the device, pool and why.
 * fragscope_begin_allocate_to_pool: creates the pool with one user, or adds a user to a live one,
 * then sends every request on `stream` of `device` to it (best fit, splits and reuse inside the
 * pool only; its alloc and segment records carry its id) until fragscope_end_allocate_to_pool. A
 * pool already being allocated to, or one all its users released, is refused.
 * fragscope_end_allocate_to_pool: requests on that stream go to the default pool again; the pool
 * keeps its blocks and segments (reserved) for its users.
 * fragscope_release_pool: one user fewer (a graph reset or deleted); with none left the pool's
 * unsplit free segments go back to the device at the next fragscope_empty_cache (or an
 * out-of-memory retry), the segments of blocks still live once those are freed too, and the pool
 * is gone once its last segment is.
 * fragscope_pool_use_count: the pool's users; -1 for a pool that does not exist (never begun, or
 * gone). */
int fragscope_begin_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second,
                                     cudaStream_t stream);
int fragscope_end_allocate_to_pool(int device, uint64_t pool_first, uint64_t pool_second);
int fragscope_release_pool(int device, uint64_t pool_first, uint64_t pool_second);
int fragscope_pool_use_count(int device, uint64_t pool_first, uint64_t pool_second);

/* --- Configuration ----------------------------------------------------------------------------
 * Replaces the environment: conf (NULL = FRAGSCOPE_ALLOC_CONF, "" = PyTorch defaults) and
 * log_pattern (NULL = FRAGSCOPE_LOG, "" = no log). Returns 0, or -1 (see fragscope_last_error) if
 * the conf is invalid or an allocator already exists (configure before the first allocation). */
int fragscope_configure(const char* conf, const char* log_pattern);
/* Starts over on simulated devices (a dry run: fragscope.predict, tests): every allocator and log
 * of the process is dropped (logs flushed and closed), and devices created from now on are
 * simulated, `device_bytes` each (2 MiB to 4 TiB); conf and log_pattern as in fragscope_configure.
 * Pointers from before are forgotten: freeing one is reported as unknown, unless the fresh
 * allocator has since handed out the same address (simulated devices place blocks
 * deterministically), which that free would then release, so callers drop the frees of an earlier
 * simulation. Other threads may be inside this ABI meanwhile: the call waits for them to leave the
 * old allocators. Refused (-1) while fragscope allocates on a real device in this process, and
 * from inside a call of this ABI (a backend factory). */
int fragscope_simulate(uint64_t device_bytes, const char* conf, const char* log_pattern);
/* The last error of this thread, or of the configuration; "" if none. Valid until the next call on
 * this thread. */
const char* fragscope_last_error(void);

/* --- Statistics: PyTorch's torch.cuda.memory_stats() keys and semantics --------------------- */
int fragscope_stat_count(void);            /* number of keys (fixed) */
const char* fragscope_stat_key(int index); /* "allocation.all.current", ...; NULL if bad */
/* Fills values[0..min(capacity, count)) in key order for `device` (zeros for a device fragscope
 * has not allocated on). Returns the number of keys, or -1 for a negative device. */
int fragscope_stat_values(int device, int64_t* values, int capacity);
int64_t fragscope_stat(int device, const char* key); /* one value; 0 for unknown keys */
void fragscope_reset_peak_stats(int device);
void fragscope_reset_accumulated_stats(int device);

/* Text outputs, snprintf-style: write at most len-1 bytes plus a NUL and return the full length
 * (call with len 0 to size the buffer). */
size_t fragscope_memory_summary(int device, char* buf, size_t len); /* torch.cuda.memory_summary */
/* {"device":0,"segments":[{"address":...,"total_size":...,"blocks":[...]}]}: the field names of
 * torch.cuda.memory_snapshot(). */
size_t fragscope_snapshot_json(int device, char* buf, size_t len);

/* --- Event log ------------------------------------------------------------------------------ */
/* A phase annotation ("step 12 / forward") in every open device log; no-op without a log. */
void fragscope_mark(const char* text);
/* The job's model as JSON (fragscope.model/1: analysis/explain/model_job.h) in every log. */
void fragscope_record_model(const char* json);
/* The role of the live block at `ptr` on `device` (fslog/allocation_role.h: 1 weights, 2
 * gradients, 3 optimizer states, 4 optimizer-step temporaries, 5 activations saved for backward,
 * 6 other temporaries, 7 workspaces, 8 communication buffers, 9 KV cache) as a tag record in that
 * device's log (fslog/FORMAT.md, "Tag records"). Returns 0; -1 for a role outside 0..9 (nothing
 * written); a no-op without a log. */
int fragscope_tag_block(const void* ptr, int device, int role);
/* Who holds the memory (fslog/FORMAT.md, "Context records"): the id of a context -- role (as
 * above), module path ("model.h.7.attn"), ATen op ("aten::bmm"), code location ("train.py:88 in
 * step"), each "" or NULL when not known, and whether it is a backward pass -- interned once per
 * process and defined in every log (open now or later). 0 without a log, or for a role outside
 * 0..9 (an error). */
uint32_t fragscope_define_context(int role, const char* module, const char* op, const char* site,
                                  int backward);
/* The context of the allocations this thread makes from now on (0: none): their alloc records
 * name it. */
void fragscope_set_context(uint32_t context);
/* fragscope_tag_block, and the block's context from now on (0: keep it). */
int fragscope_tag_block_context(const void* ptr, int device, int role, uint32_t context);
/* Writes everything recorded so far to the log files. 0, or -1 on a write error. */
int fragscope_flush(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FRAGSCOPE_HOOKS_FRAGSCOPE_ALLOC_H_ */
