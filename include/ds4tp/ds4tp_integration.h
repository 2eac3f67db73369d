/* libds4tp: engine integration: gate callbacks, staging hooks, gate service.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. */
#ifndef DS4TP_INTEGRATION_H
#define DS4TP_INTEGRATION_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ------------------------------------------------------------------ */
/* Engine integration: callbacks, staging hooks, gate service.          */
/*                                                                      */
/* Three ways to drive the gates (README "Integrating an engine"):      */
/*  1. call:     the engine's gate thread calls ds4tp_*_exchange.       */
/*  2. callback: the engine's own gate machinery (e.g. a GPU backend's  */
/*               service thread) holds a ds4tp_gate_fn and calls        */
/*               ds4tp_gate_callback with the pair as user data.        */
/*  3. service:  the library runs the gate thread; GPU kernels (or CPU  */
/*               threads) write a ready word into the slab and wait on  */
/*               a release word (ds4tp_gate_service_start).             */
/*                                                                      */
/* Threading contract (all three): exactly one thread at a time runs    */
/* gates (calls, callbacks, or the service thread while it runs); the   */
/* gate calls of one pair never overlap. Staging hooks run on that gate */
/* thread. Query functions and ds4tp_mark_failed are safe from any      */
/* thread at any time.                                                  */

/* Gate machinery callback shapes. They return 1 when the exchange
 * succeeded and 0 when it failed (the convention GPU gate machinery
 * uses: "mark failed if the callback returns 0"). */
typedef int (*ds4tp_gate_fn)(void *user_data, uint32_t layer, uint32_t gate,
                             uint64_t seq);
typedef int (*ds4tp_batch_gate_fn)(void *user_data, uint32_t index,
                                   uint32_t rows, uint64_t seq);
typedef int (*ds4tp_big_gate_fn)(void *user_data, uint32_t layer,
                                 uint64_t seq, const void *out, void *in,
                                 uint64_t bytes);

/* ds4tp_gate_exchange / ds4tp_batch_gate_exchange /
 * ds4tp_big_gate_exchange with `pair` (a ds4tp_pair *) as user data, so
 * they can be registered directly as ds4tp_*_fn. Unlike every other call
 * they return 1 on success and 0 on failure, and ANY failure (including
 * a bad argument or a wrong seq) latches the pair as failed: after a 0,
 * ds4tp_failed(pair) is 1 and ds4tp_errmsg(pair) / ds4tp_last_error()
 * say why. A NULL pair returns 0 (message in ds4tp_last_error). */
DS4TP_API int ds4tp_gate_callback(void *pair, uint32_t layer, uint32_t gate,
                                  uint64_t seq);
DS4TP_API int ds4tp_batch_gate_callback(void *pair, uint32_t index,
                                        uint32_t rows, uint64_t seq);
DS4TP_API int ds4tp_big_gate_callback(void *pair, uint32_t layer,
                                      uint64_t seq, const void *out,
                                      void *in, uint64_t bytes);

/* Staging hooks, for engines whose partials live in device memory the
 * transport (NIC, peer process) cannot see. Around every row and batch
 * gate, on the gate thread, the library calls
 *   before_exchange: copy this rank's partial from the device INTO
 *                    `slab_out` (the gate's out vector / batch rows);
 *   after_exchange:  copy the peer's partial FROM `slab_in` (the gate's
 *                    in vector / batch rows) to the device.
 * kind is DS4TP_STAGE_ROW (a = layer, b = gate) or DS4TP_STAGE_BATCH
 * (a = batch index, b = rows; rows lie vec_stride apart and `bytes` is
 * (rows-1)*vec_stride + vec_bytes). A hook returns 0 on success; any
 * other value fails the gate with DS4TP_EIO naming the value, and the
 * pair is failed. after_exchange runs only when the exchange succeeded.
 * Hooks must not call back into the library. Big gates take caller
 * buffers and are never staged. Without hooks (the default) the slab is
 * used in place. Either hook may be NULL. */
enum { DS4TP_STAGE_ROW = 1, DS4TP_STAGE_BATCH = 2 };

typedef struct ds4tp_staging_hooks {
  uint32_t size; /* sizeof(ds4tp_staging_hooks) as compiled by the caller */
  void *user_data;
  int (*before_exchange)(void *user_data, int kind, uint32_t a, uint32_t b,
                         uint64_t seq, void *slab_out, uint64_t bytes);
  int (*after_exchange)(void *user_data, int kind, uint32_t a, uint32_t b,
                        uint64_t seq, const void *slab_in, uint64_t bytes);
} ds4tp_staging_hooks;

/* Installs (copies) `hooks`; NULL removes them. Call after ds4tp_new and
 * before the first row or batch gate, with no gate service running:
 * later calls fail with DS4TP_ESTATE. Fails with DS4TP_EINVAL for a bad
 * size field. */
DS4TP_API int ds4tp_set_staging_hooks(ds4tp_pair *pair,
                                      const ds4tp_staging_hooks *hooks);

/* Gate service: a library thread that runs the row gates for kernels.
 *
 * Words (u64, 8-byte aligned, each on its own 64-byte line; slab offsets
 * from ds4tp_slab_layout: gpu_flags_offset / gpu_release_offset +
 * slot * flag_stride, slot = layer * 2 + gate):
 *   ready[slot]    written by the ENGINE only: store `seq` (release order)
 *                  once out[slot] holds this rank's partial for gate seq.
 *   release[slot]  written by the SERVICE only: `seq` (release order)
 *                  once in[slot] holds the peer's partial for gate seq;
 *                  DS4TP_GATE_POISON in every word when the pair failed.
 * A kernel waits while release[slot] < seq, then gives up if the word is
 * DS4TP_GATE_POISON, else reads in[slot] (acquire order). The poison
 * overwrites every word, so a kernel that had not yet read its release
 * gives up too: once the pair failed, the eval must stop either way. Kernels fire
 * gates in the identity's schedule order (ds4tp_schedule_slot), one
 * outstanding gate at a time per pair; seqs continue the pair's row gate
 * count (the first gate after ds4tp_attach_slab is seq 1). ds4tp_attach_slab
 * zeroes both regions. The engine touches no other library word (an
 * engine running its own machinery, callback style, may use the release
 * words itself while the service is stopped).
 *
 * While the service runs it is the only gate caller: the engine's own
 * ds4tp_*_exchange calls fail with DS4TP_ESTATE (callbacks return 0).
 * Batch and big gates: stop the service, call them, start it again.
 *
 * Failure (exchange error, peer gone, ds4tp_mark_failed from any thread,
 * a ready word that contradicts the schedule): the service latches the
 * pair failed, stores DS4TP_GATE_POISON into every release word so every
 * waiting or later kernel gives up, and its thread ends; state FAILED. */
#define DS4TP_GATE_POISON UINT64_MAX

typedef enum ds4tp_service_state {
  DS4TP_SERVICE_STOPPED = 0,
  DS4TP_SERVICE_RUNNING = 1,
  DS4TP_SERVICE_FAILED = 2
} ds4tp_service_state;

/* How the service thread waits for the next ready word: busy-poll for
 * spin_us after the last gate, then sched_yield() between polls until
 * yield_us, then sleep sleep_us between polls (each sleep adds up to
 * sleep_us plus the kernel's timer slack to a gate that arrives then).
 * spin_us DS4TP_SPIN_ADAPTIVE (the default) learns the spin: up to 1000 us
 * while recent gates arrived inside it, toward 0 (yield at once) while
 * they did not, e.g. when the host has fewer free cores than spinners. */
typedef struct ds4tp_gate_service_options {
  uint32_t size;           /* sizeof(ds4tp_gate_service_options) */
  int32_t spin_us;         /* default DS4TP_SPIN_ADAPTIVE; or 0..10000000 */
  int32_t yield_us;        /* default 10000; 0..10000000 */
  int32_t sleep_us;        /* default 20; 1..100000 */
  int32_t stop_timeout_ms; /* ds4tp_gate_service_stop's wait; 0 (default)
                              = the pair's gate_timeout_ms + 1000 */
  int32_t cpu;             /* pin the thread to this CPU; -1 = no (default) */
} ds4tp_gate_service_options;

/* Fills `opt` with defaults and sets `size`. */
DS4TP_API void ds4tp_gate_service_options_init(ds4tp_gate_service_options *opt);

/* Starts the service thread (opt NULL = defaults). Needs an attached slab.
 * Fails with DS4TP_ESTATE (no slab, already running), DS4TP_EINVAL (bad
 * options, CPU cannot be pinned), DS4TP_EFAILED (pair failed). */
DS4TP_API int ds4tp_gate_service_start(ds4tp_pair *pair,
                                       const ds4tp_gate_service_options *opt);

/* Stops the service and joins its thread. A gate whose ready word is
 * already written is served first; call it when no kernel is heading for
 * a gate (one that arrives later is never released). ds4tp_detach_slab
 * and ds4tp_free also stop the service, and then poison the release words
 * so any kernel still waiting gives up. Returns 0 once the thread has
 * ended (also after a service failure, or when none ran); DS4TP_ETIMEDOUT
 * if it is still inside an exchange at stop_timeout_ms (it ends by itself
 * within gate_timeout_ms: call stop again). On stream words
 * (ds4tp_gate_stream_start) the ended thread has poisoned them. */
DS4TP_API int ds4tp_gate_service_stop(ds4tp_pair *pair);

/* ds4tp_service_state of the pair's service (STOPPED for NULL). Any
 * thread. */
DS4TP_API int ds4tp_gate_service_state(const ds4tp_pair *pair);

/* The last row gate seq the pair completed (0 before the first); while
 * the service runs, the last one it released. Any thread. */
DS4TP_API uint64_t ds4tp_gate_seq(const ds4tp_pair *pair);

#endif /* DS4TP_INTEGRATION_H */
