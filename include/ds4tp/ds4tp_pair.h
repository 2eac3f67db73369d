/* libds4tp: the pair: options, identity, slab layout, handle, data plane.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. */
#ifndef DS4TP_PAIR_H
#define DS4TP_PAIR_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ------------------------------------------------------------------ */
/* Options. Call ds4tp_options_init first: it sets `size` and defaults;  */
/* a later library version may grow the struct at the end.             */

typedef struct ds4tp_options {
  uint32_t size;     /* sizeof(ds4tp_options) as compiled by the caller */
  int32_t role;      /* ds4tp_role; required */
  int32_t transport; /* ds4tp_transport; default AUTO */

  /* Leader: address to listen on (default "127.0.0.1"); port 0 picks a
   * free port, readable with ds4tp_listen_port after ds4tp_new. */
  const char *listen_host;
  int32_t listen_port;
  /* Worker: leader address to dial (default "127.0.0.1"). */
  const char *leader_host;
  int32_t leader_port;

  /* Deadlines in milliseconds, all > 0. */
  int32_t connect_timeout_ms;  /* whole bring-up (default 60000) */
  int32_t hello_timeout_ms;    /* one connection's hello (default 2000) */
  int32_t gate_timeout_ms;     /* row/batch gate: no progress once the
                                  peer's bytes started (default 750) */
  int32_t big_gate_timeout_ms; /* big gate: no progress once the peer's
                                  bytes started (default 10000) */
  int32_t frame_timeout_ms;    /* control frame once its first byte came,
                                  and the shortest reply wait (30000) */

  /* Wait policy: busy-poll this long before blocking in the kernel.
   * DS4TP_SPIN_ADAPTIVE (-1, the default) learns the spin per pair from
   * how late the peer arrives: it spins through the recent waits' typical
   * length (up to 1000 us) while spins keep their core, and stops spinning
   * (block at once) when a spin loses its core, as on an oversubscribed
   * host; over shm it yields instead of spinning while the peer's last
   * wait began on this rank's CPU. DS4TP_SPIN_ALWAYS: spin without limit
   * while the peer is alive (an engine that pins a core per rank).
   * DS4TP_SPIN_NEVER or 0: always block. 1..10000000 = a fixed spin. */
  int32_t spin_us;

  /* Logging: default sink writes INFO and above to stderr. */
  ds4tp_log_fn log_fn;
  void *log_user_data;
  int32_t log_level;

  /* Control plane: largest frame payload a peer may send; a larger
   * header is a protocol error before anything is allocated.
   * Default 64 MiB. */
  uint32_t max_frame_bytes;

  /* RDMA verbs transport: device name (NULL = first with an active
   * port), port number (default 1), GID index (-1 = pick, preferring
   * RoCE v2). */
  const char *rdma_device;
  int32_t rdma_port;
  int32_t rdma_gid_index;

  /* Authentication: a pre-shared key turns the hello into a mutual
   * HMAC-SHA256 challenge-response (both ranks need the same key, at
   * least 16 bytes). NULL/0 = the DS4TP_PSK (the key's bytes) or
   * DS4TP_PSK_FILE (a key file) environment variable, else none. A key
   * file loses one trailing newline; ds4tp_new fails with EINVAL when it
   * is not a regular file of this user (or root) with mode 0600 or less. */
  const void *psk;
  uint32_t psk_bytes;
  const char *psk_file; /* read at ds4tp_new; must not be group/world readable */

  /* Peer liveness (docs/RELIABILITY.md): both ranks' watcher threads
   * send heartbeats on the control connection. A peer whose heartbeats
   * stop for peer_silence_ms (stopped, frozen, link cut) fails every wait
   * with DS4TP_ETIMEDOUT naming the silence (default 1000, 200..600000).
   * A live peer may reach a gate, or answer a control call, up to
   * peer_arrival_timeout_ms late (default 300000;
   * DS4TP_ARRIVAL_UNLIMITED = wait as long as it stays alive). */
  int32_t peer_silence_ms;
  int32_t peer_arrival_timeout_ms;

  /* Failover (docs/RELIABILITY.md): 1 (the default) opens a standby tcp
   * link beside an rdma or shm transport, or beside a tcp pair's rails,
   * when the peer offers one too; a primary that fails mid-gate is left
   * for it, the gate runs again there and the call succeeds
   * (ds4tp_transport_active then says tcp, ds4tp_stats.failovers counts
   * it; an rdma pair that lost only rails stays on rdma, over its other
   * links, the standby their data connection). 0: no standby; a failed primary fails the pair, as any
   * data-plane failure of a pair without a standby does. */
  int32_t failover;

  /* Rails (docs/TRANSPORTS.md): a tcp pair given the leader's IPv4
   * addresses of up to 7 more links ("10.0.2.1,10.0.3.1"; the same list
   * on both ranks, in the same order) opens a tcp link to each beside the
   * data connection, measures them, and splits every big gate of 1 MiB or
   * more across all of them in proportion to their rates; row and batch
   * gates run on the link that answered soonest. One rank with rails and
   * one without, or the lists in another order, fail ds4tp_connect naming
   * why. NULL or "" = none; ignored (with a warning) over shm or rdma. */
  const char *rails;

  /* RDMA rails (docs/TRANSPORTS.md): this rank's verbs ports of up to 7
   * more rdma links beside rdma_device, each "device[:port[:gid_index]]"
   * ("mlx5_1", "rdma_en6:1:3"). Rail k of one rank pairs with rail k of
   * the other, so both ranks list as many, in cable order. An rdma pair
   * measures every link at attach and splits each big gate of 1 MiB or
   * more across them in proportion to their rates; row and batch gates
   * run on rdma_device's link, or on a rail whose round trip is under 3/4
   * of its own (ds4tp_links marks which). Lists of different lengths fail
   * ds4tp_connect, a rail whose cable joins another port (crossed rails)
   * fails ds4tp_attach_slab, naming the rail. With failover, a rail lost
   * mid-gate is left and the pair goes on over rdma on the other links.
   * NULL or "" = none; ignored (with a warning) when the pair does not
   * run rdma. */
  const char *rdma_rails;
} ds4tp_options;

/* peer_arrival_timeout_ms: no limit while the peer is alive. */
#define DS4TP_ARRIVAL_UNLIMITED (-1)
/* spin_us (ds4tp_options, ds4tp_gate_service_options): the adaptive wait
 * policy, the default of both (older libraries reject -1 with EINVAL). */
#define DS4TP_SPIN_ADAPTIVE (-1)
/* spin_us (ds4tp_options, ds4tp_group_options): busy-poll without limit
 * while the peer is alive, for engines that pin a dedicated core per
 * rank; deadlines and the peer's liveness still end a wait. Never yields
 * or sleeps, so never on a host with fewer cores than spinning ranks. */
#define DS4TP_SPIN_ALWAYS (-2)
/* spin_us (ds4tp_options, ds4tp_group_options): never busy-poll or yield:
 * every wait sleeps in the kernel at once, for engines that share their
 * cores. Older libraries reject -2 and -3 with EINVAL. */
#define DS4TP_SPIN_NEVER (-3)

/* Fills `opt` with defaults (role NONE: you must set it). */
DS4TP_API void ds4tp_options_init(ds4tp_options *opt);

/* ------------------------------------------------------------------ */
/* Engine identity: both ranks must present the same one (ctx_size      */
/* excepted), or bring-up fails with DS4TP_EIDENTITY naming the field.   */

typedef struct ds4tp_identity {
  uint32_t size; /* sizeof(ds4tp_identity) as compiled by the caller */
  uint64_t model_bytes; /* model file size or another content measure */
  uint32_t model_id;    /* engine's model variant */
  uint32_t n_layer;
  uint32_t n_embd; /* gate vectors are n_embd f32 */
  uint32_t n_vocab;
  uint32_t quant_bits;
  uint32_t ctx_size; /* not compared; the peer's is ds4tp_peer_ctx_size */
  /* Decode gate schedule: the slot (layer*2 + gate) that row gate `seq`
   * (1-based) must hit. A nonempty mask lists the slots in firing order;
   * else with gates_per_token > 0:
   *   slot(seq) = start + ((seq-1) % gates_per_token) * step;
   * else every slot fires in order: slot(seq) = (seq-1) % (n_layer*2). */
  uint32_t gate_slot_start;
  uint32_t gate_slot_step;
  uint32_t gates_per_token;
  uint64_t gate_slot_mask[DS4TP_GATE_MASK_WORDS];
  /* Engine feature bits both ranks must share (arithmetic, layouts). */
  uint64_t features;
  /* Opaque engine bytes compared byte for byte (e.g. a model hash). */
  const void *engine_blob;
  uint32_t engine_blob_bytes;
} ds4tp_identity;

/* Zeroes `id` and sets `size`. */
DS4TP_API void ds4tp_identity_init(ds4tp_identity *id);

/* Slot that row gate `seq` must hit under `id`'s schedule, or -1 when
 * seq is 0 or the identity is invalid. Pure. */
DS4TP_API int64_t ds4tp_schedule_slot(const ds4tp_identity *id,
                                      uint64_t seq);

/* ------------------------------------------------------------------ */
/* Slab layout. All offsets are from the slab base; every region starts  */
/* on a 4096-byte boundary and every vector on a 64-byte one.           */
/* Row-gate vector `slot` (= layer * 2 + gate) is at                     */
/* out_offset + slot * slot_stride; the 64 bytes before each one belong  */
/* to the library (the tcp transport puts the gate header there, so a    */
/* gate is one send and one receive). Batch rows lie vec_stride apart,   */
/* back to back when n_embd is a multiple of 16.                         */

typedef struct ds4tp_slab_layout {
  uint32_t size;        /* sizeof(ds4tp_slab_layout), set by caller */
  uint32_t slots;       /* n_layer * 2 row-gate slots */
  uint32_t batch_gates; /* n_layer * DS4TP_BATCH_GATES_PER_LAYER */
  uint32_t batch_rows;  /* DS4TP_BATCH_MAX_ROWS */
  uint64_t total_bytes;
  uint64_t vec_bytes;   /* n_embd * 4 */
  uint64_t vec_stride;  /* distance between consecutive batch rows */
  uint64_t flag_stride; /* distance between consecutive flag words */
  uint64_t out_offset;  /* slot 0's vector; this rank's partials */
  uint64_t in_offset;   /* slot 0's vector; the peer's partials */
  uint64_t in_seq_offset;    /* slots u64: seq of the landed in vector */
  uint64_t token_offset;     /* {u64 seq, i32 token}, 64 bytes */
  uint64_t gpu_flags_offset; /* slots u64: engine "gate reached" words */
  uint64_t batch_out_offset; /* batch_gates * batch_rows vectors */
  uint64_t batch_in_offset;
  uint64_t batch_gate_stride; /* batch_rows * vec_stride */
  uint64_t big_out_offset;    /* staging for big gates */
  uint64_t big_in_offset;
  uint64_t big_staging_bytes;
  uint64_t gpu_release_offset; /* slots u64: gate service "gate done" words */
  uint64_t slot_stride; /* distance between row-gate vectors: vec_stride + 64 */
} ds4tp_slab_layout;

/* Computes the layout for `id`. `out->size` must be set by the caller.
 * Returns DS4TP_EINVAL for an invalid identity. Pure. */
DS4TP_API int ds4tp_slab_layout_compute(const ds4tp_identity *id,
                                        ds4tp_slab_layout *out);

/* ------------------------------------------------------------------ */
/* The pair handle.                                                     */

typedef struct ds4tp_pair ds4tp_pair;

/* Validates options and identity and creates a handle. A leader binds
 * and listens here, so ds4tp_listen_port works before ds4tp_connect.
 * On failure *out is NULL and ds4tp_last_error() says why. */
DS4TP_API int ds4tp_new(ds4tp_pair **out, const ds4tp_options *opt,
                        const ds4tp_identity *id);

/* Blocking bring-up. Leader: accepts connections until a worker completes
 * a valid hello (stray or silent connections are dropped); worker: dials
 * with retry. Both compare identities and negotiate the transport.
 * Fails with ETIMEDOUT (connect deadline), EIDENTITY, EVERSION, EPROTO,
 * EIO, EUNSUPPORTED (requested transport impossible), EAUTH (worker: the
 * pre-shared keys differ or only one rank has one; a leader instead drops
 * such a worker, logs it and keeps waiting). */
DS4TP_API int ds4tp_connect(ds4tp_pair *pair);

/* Releases everything. Accepts NULL. */
DS4TP_API void ds4tp_free(ds4tp_pair *pair);

/* Leader: the bound port (after ds4tp_new); worker: the dialed port. */
DS4TP_API int ds4tp_listen_port(const ds4tp_pair *pair);
/* 0 for the leader, 1 for the worker; -1 for NULL. */
DS4TP_API int ds4tp_rank(const ds4tp_pair *pair);
/* Negotiated ds4tp_transport after ds4tp_connect, AUTO before. */
DS4TP_API int ds4tp_transport_active(const ds4tp_pair *pair);
/* The peer's ctx_size from its hello (0 before connect). */
DS4TP_API uint32_t ds4tp_peer_ctx_size(const ds4tp_pair *pair);

/* 1 once a data- or control-plane failure latched, else 0. */
DS4TP_API int ds4tp_failed(const ds4tp_pair *pair);
/* Latches failure from the engine side (e.g. a GPU error at a gate), so
 * every later call returns DS4TP_EFAILED at once. */
DS4TP_API void ds4tp_mark_failed(ds4tp_pair *pair, const char *reason);
/* Message of the handle's last failed call, "" if none. The returned
 * pointer is valid until this thread's next ds4tp call. */
DS4TP_API const char *ds4tp_errmsg(const ds4tp_pair *pair);

/* ------------------------------------------------------------------ */
/* Slab.                                                                */

/* This pair's layout (identity-derived). Valid after ds4tp_new. */
DS4TP_API int ds4tp_slab_layout_get(const ds4tp_pair *pair,
                                    ds4tp_slab_layout *out);
/* Total slab bytes. 0 for NULL. */
DS4TP_API uint64_t ds4tp_slab_bytes(const ds4tp_pair *pair);
/* Offsets of one vector; UINT64_MAX when out of range. */
DS4TP_API uint64_t ds4tp_slab_out_offset(const ds4tp_pair *pair,
                                         uint32_t layer, uint32_t gate);
DS4TP_API uint64_t ds4tp_slab_in_offset(const ds4tp_pair *pair,
                                        uint32_t layer, uint32_t gate);
/* Row 0 of batch gate `index` (< n_layer * 2); rows follow at vec_stride. */
DS4TP_API uint64_t ds4tp_slab_batch_out_offset(const ds4tp_pair *pair,
                                               uint32_t index);
DS4TP_API uint64_t ds4tp_slab_batch_in_offset(const ds4tp_pair *pair,
                                              uint32_t index);
DS4TP_API uint64_t ds4tp_slab_gpu_flags_offset(const ds4tp_pair *pair);

/* Hands the slab to the transport. `base` must be 64-byte aligned and
 * `bytes` >= ds4tp_slab_bytes. With base NULL the library allocates a
 * page-aligned, zeroed slab itself (ds4tp_slab_base returns it); under
 * the shm transport that slab is shared memory the peer writes into
 * directly, while an engine-owned slab costs one extra copy per gate.
 * Call after ds4tp_connect, before the first gate. */
DS4TP_API int ds4tp_attach_slab(ds4tp_pair *pair, void *base,
                                uint64_t bytes);
/* The attached slab's base, NULL when none. */
DS4TP_API void *ds4tp_slab_base(const ds4tp_pair *pair);
/* Stops the data plane (and a running gate service) and forgets the
 * slab; later gates fail with ESTATE. Call before freeing engine-owned
 * slab memory. */
DS4TP_API void ds4tp_detach_slab(ds4tp_pair *pair);

/* ------------------------------------------------------------------ */
/* Data plane. All three return once the peer's payload has fully landed */
/* or with an error; any error latches the failed state.                */

/* Sends out[layer][gate] to the peer's in[layer][gate] and waits for the
 * peer's partial of the same (layer, gate, seq). Row gate seqs start at
 * 1, rise by one per gate and must hit the identity's schedule. */
DS4TP_API int ds4tp_gate_exchange(ds4tp_pair *pair, uint32_t layer,
                                  uint32_t gate, uint64_t seq);

/* Verify-block batch gate: swaps `rows` (1..DS4TP_BATCH_MAX_ROWS) rows of
 * batch gate `index` (batch_out -> peer's batch_in). `seq` is the caller's
 * batch counter (nonzero); both ranks must pass the same values. */
DS4TP_API int ds4tp_batch_gate_exchange(ds4tp_pair *pair, uint32_t index,
                                        uint32_t rows, uint64_t seq);

/* Prefill gate of any size: sends `bytes` from `out` and receives the
 * peer's `bytes` into `in` (distinct, non-overlapping buffers; any
 * memory but the slab's big staging regions, which the transport moves
 * through: DS4TP_EINVAL where it does, shm always, rdma unless both
 * buffers lie in the slab). A live peer may arrive up to
 * peer_arrival_timeout_ms late. */
DS4TP_API int ds4tp_big_gate_exchange(ds4tp_pair *pair, uint32_t layer,
                                      uint64_t seq, const void *out,
                                      void *in, uint64_t bytes);

#endif /* DS4TP_PAIR_H */
