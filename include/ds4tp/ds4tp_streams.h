/* libds4tp: GPU streams: stream-ordered gates and all-reduce.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. Experimental (ds4tp.h, "API stability"). */
#ifndef DS4TP_STREAMS_H
#define DS4TP_STREAMS_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ------------------------------------------------------------------ */
/* GPU streams: stream-ordered gates and all-reduce, no host call per   */
/* gate. The engine's stream writes a READY word (cuStreamWriteValue64) */
/* after its output has landed, and waits on a RELEASE word             */
/* (cuStreamWaitValue64, CU_STREAM_WAIT_VALUE_GEQ) before consuming the */
/* peer's data; the library's service thread serves the gates (pair) or */
/* all-reduces (group) in slot order as ready words appear.             */
/*                                                                      */
/* Words: library-allocated in one page-aligned block (base, bytes),    */
/* `stride` bytes apart, 64-bit (default) or 32-bit (word_bits = 32, for */
/* GPUs without 64-bit stream memory operations: the low 32 bits of the */
/* 64-bit values; they wrap, and GEQ waits compare cyclically). Register */
/* the whole block with cudaHostRegister(base, bytes,                   */
/* cudaHostRegisterMapped) and take device pointers with                */
/* cudaHostGetDevicePointer; unregister before stopping for good / free.*/
/* The block lives until ds4tp_free / ds4tp_group_free.                 */
/*                                                                      */
/* Values, per slot s (pair: s = layer*2 + gate, in the identity's      */
/* schedule order; group: s = (seq - 1) % slots):                       */
/*   DS4TP_STREAM_SEQ    ready and release carry the gate seq (pair: the */
/*                       pair's row gate count + 1, ...; group: 1, 2, ...) */
/*   DS4TP_STREAM_FIXED  both carry s + 1 on every token, so a captured */
/*                       CUDA graph replays unchanged; the service clears */
/*                       ready[s] when it takes it and release[s] once  */
/*                       the stream has written a later ready.           */
/* A stream writes ready[s] = v, waits release[s] >= v (cyclic GEQ),    */
/* then checks release[s] == v on the device: any other value is POISON */
/* (the service failed: peer death, mark_failed, stop, a timeout, an    */
/* out-of-order ready), so the consuming kernel must skip its work and  */
/* raise an error flag the host reads after synchronising (see          */
/* examples/cuda). Poison = last released value + 2^(word_bits - 2):    */
/* every current and later wait passes at once. One outstanding gate per */
/* pair or group; ready words in schedule order. A ready value that     */
/* contradicts it fails the pair / group with DS4TP_EDESYNC naming the  */
/* slot, the value and the expected seq.                                */

typedef enum ds4tp_stream_mode {
  DS4TP_STREAM_SEQ = 0,
  DS4TP_STREAM_FIXED = 1
} ds4tp_stream_mode;

typedef struct ds4tp_stream_options {
  uint32_t size;      /* sizeof(ds4tp_stream_options) */
  uint32_t word_bits; /* 64 (default) or 32 */
  int32_t mode;       /* ds4tp_stream_mode; default DS4TP_STREAM_SEQ */
  /* Groups only (a pair's slots and vectors are its slab's): */
  uint32_t slots;     /* default 2; fixed mode needs >= 2 */
  uint64_t count;     /* elements all-reduced per slot (required) */
  int32_t dtype;      /* ds4tp_dtype; default F32 */
} ds4tp_stream_options;

/* What the engine needs to drive the words; filled by the start calls. */
typedef struct ds4tp_stream_words {
  uint32_t size;      /* set by the caller: sizeof(ds4tp_stream_words) */
  uint32_t word_bits;
  int32_t mode;
  uint32_t slots;
  uint32_t stride;    /* bytes between two slots' words (64) */
  uint32_t reserved;  /* 0; keeps the pointers 8-byte aligned on every ABI */
  void *base;         /* page-aligned block: register this */
  uint64_t bytes;     /* a multiple of the page size */
  void *ready;        /* slot s's ready word at ready + s * stride */
  void *release;      /* slot s's release word at release + s * stride */
  void *data;         /* groups: slot s's vector at data + s * slot_bytes */
  uint64_t slot_bytes;
  uint64_t poison_gap; /* 2^(word_bits - 2) */
} ds4tp_stream_words;

DS4TP_EXPERIMENTAL_API void ds4tp_stream_options_init(ds4tp_stream_options *opt);

/* Starts the pair's gate service on stream words (svc / opt NULL =
 * defaults) and describes them in *words. The words are created by the
 * first call and kept (same block, same addresses) for the pair's life;
 * a later start with other word_bits or mode reuses the block with every
 * word reset to 0.
 * Each start re-arms the words (undoes a poison): start with the stream
 * idle. Data stay in the slab (out/in vectors), which the engine maps
 * for its device (cudaHostAlloc mapped or cudaHostRegister). Stop with
 * ds4tp_gate_service_stop: in stream mode it poisons the release words
 * after the thread ends, so no stream waits forever. Errors as
 * ds4tp_gate_service_start. */
DS4TP_EXPERIMENTAL_API int ds4tp_gate_stream_start(ds4tp_pair *pair,
                                      const ds4tp_gate_service_options *svc,
                                      const ds4tp_stream_options *opt,
                                      ds4tp_stream_words *words);

/* Group counterpart: a service thread that all-reduces (sum) slot s's
 * vector of opt->count elements in place when ready[s] appears, then
 * releases it. Every rank starts one with the same options. While it
 * runs it is the group's only caller (direct collectives: DS4TP_ESTATE).
 * The words and vectors are created by the first call and kept; a later
 * start with other slots, count or dtype fails with DS4TP_EINVAL (other
 * word_bits or mode: as for the pair). EINVAL for count 0; EFAILED on a
 * failed group; ESTATE when running or not connected. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_stream_start(ds4tp_group *g,
                                       const ds4tp_gate_service_options *svc,
                                       const ds4tp_stream_options *opt,
                                       ds4tp_stream_words *words);
/* Serves a ready already written, joins the thread, poisons the release
 * words. 0 once ended; ETIMEDOUT as ds4tp_gate_service_stop. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_stream_stop(ds4tp_group *g);
/* ds4tp_service_state of the group's stream service. Any thread. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_stream_state(const ds4tp_group *g);
/* Last seq the group's stream service released (0 before the first). */
DS4TP_EXPERIMENTAL_API uint64_t ds4tp_group_stream_seq(const ds4tp_group *g);

#endif /* DS4TP_STREAMS_H */
