/* libds4tp: groups of N ranks and their collectives.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. Experimental (ds4tp.h, "API stability"). */
#ifndef DS4TP_GROUPS_H
#define DS4TP_GROUPS_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ------------------------------------------------------------------ */
/* Groups: N ranks (2..16) and collectives for tensor-parallel engines.  */
/* Beside the pair; no lockstep control plane. Every rank calls the same */
/* collectives in the same order with the same counts. Each call waits   */
/* at most op_timeout_ms for the slowest rank; a rank's death, stop or   */
/* ds4tp_group_mark_failed fails the group on every rank (EPEERCLOSED,   */
/* ETIMEDOUT or EFAILED naming the rank), and later calls return         */
/* DS4TP_EFAILED. One thread per handle at a time.                       */
/* One verdict per call: every call hears every rank (a broadcast's      */
/* non-roots send a header alone), so a rank may return success from a   */
/* call that another rank failed (it had all the bytes) but then fails   */
/* its next call, naming the rank that failed; no rank completes two     */
/* calls past a failure elsewhere. An engine that must not commit a      */
/* token on a split verdict commits it after the next call returns.      */

typedef struct ds4tp_group ds4tp_group;

typedef enum ds4tp_dtype {
  DS4TP_DTYPE_F32 = 0,
  DS4TP_DTYPE_F16 = 1,
  DS4TP_DTYPE_BF16 = 2,
  DS4TP_DTYPE_F64 = 3,
  DS4TP_DTYPE_I32 = 4,
  DS4TP_DTYPE_I64 = 5,
  DS4TP_DTYPE_U8 = 6
} ds4tp_dtype;

/* Reductions combine the ranks' elements in rank order 0..N-1. SUM and
 * PROD of f16 and bf16 accumulate in f32 and round once; of f32 in f32;
 * of f64 in f64; integers wrap (two's complement). MAX and MIN return one
 * of the operands (a NaN operand wins: the first in rank order). */
typedef enum ds4tp_reduce_op {
  DS4TP_OP_SUM = 0,
  DS4TP_OP_MAX = 1,
  DS4TP_OP_MIN = 2,
  DS4TP_OP_PROD = 3
} ds4tp_reduce_op;

/* Conversions between float and the 16-bit element types, the library's own
 * (the ones all_reduce widens and rounds with), so an engine filling an F16
 * or BF16 vector gets the bits the group's sums use. float to F16 or BF16
 * rounds to nearest, ties to even; a value past F16's range becomes an
 * infinity; a NaN stays a NaN (quiet; its payload may not survive). F16
 * and BF16 to float are exact. Exported functions, not static inline, so
 * FFI bindings can call them. */
DS4TP_EXPERIMENTAL_API uint16_t ds4tp_f32_to_f16(float value);
DS4TP_EXPERIMENTAL_API float ds4tp_f16_to_f32(uint16_t bits);
DS4TP_EXPERIMENTAL_API uint16_t ds4tp_f32_to_bf16(float value);
DS4TP_EXPERIMENTAL_API float ds4tp_bf16_to_f32(uint16_t bits);
/* Converts `count` elements of `src` (src_dtype) into `dst` (dst_dtype),
 * each DS4TP_DTYPE_F32, F16 or BF16, element by element as the functions
 * above (equal types: a copy). dst and src may be the same buffer when the
 * types have the same size; other overlaps are undefined. Returns 0, or
 * DS4TP_EINVAL (ds4tp_last_error names it) for an unknown dtype or a NULL
 * buffer with count > 0. */
DS4TP_EXPERIMENTAL_API int ds4tp_dtype_convert(void *dst, int dst_dtype, const void *src,
                                               int src_dtype, uint64_t count);

typedef struct ds4tp_group_options {
  uint32_t size; /* sizeof(ds4tp_group_options) as compiled by the caller */
  /* Rank and group size; -1 = from the launcher's environment:
   * RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE
   * (mpirun), SLURM_PROCID/SLURM_NTASKS (srun). */
  int32_t rank;
  int32_t group_size;
  /* Rank 0's rendezvous address: rank 0 listens, the others dial.
   * NULL / -1 = MASTER_ADDR / MASTER_PORT, else "127.0.0.1" / 29600. */
  const char *rendezvous_host;
  int32_t rendezvous_port;
  /* AUTO: shm when all ranks share a host; tiered when they span hosts
   * and some share one (shm within a host, a mesh between the hosts'
   * leaders; the host from the host id, a host's order and leader from
   * LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID when set);
   * else a flat mesh. Across hosts the mesh is rdma when every rank has
   * a usable RDMA port, else tcp. TCP: always the flat tcp mesh (as does
   * DS4TP_GROUP_FLAT=1 at rank 0, keeping the mesh's transport). SHM:
   * one host only. RDMA: queue pairs between every two ranks (or the
   * leaders); where a rank's cannot come up the group runs tcp over the
   * same links and logs why (docs/GROUPS.md, "Over rdma"). */
  int32_t transport;
  int32_t connect_timeout_ms; /* whole bring-up (default 60000) */
  int32_t op_timeout_ms;      /* once every rank is in a collective, a wait on a
                               * peer that makes no progress (tcp: bytes still
                               * moving on a slow link restart it; default
                               * 10000). A rank not yet in it is waited for
                               * up to peer_arrival_timeout_ms. */
  /* Largest bytes a rank contributes per step; bigger calls run in
   * chunks. Also the size of ds4tp_group_buffer. Default 1 MiB. */
  uint32_t chunk_bytes;
  /* Pre-shared key (>= 16 bytes): every rank proves it to rank 0 with an
   * HMAC-SHA256 over a fresh nonce. NULL/0 = DS4TP_PSK, else the file
   * DS4TP_PSK_FILE names, else none. */
  const void *psk;
  uint32_t psk_bytes;
  /* How a rank waits for its peers (shm and tcp): busy-poll spin_us,
   * then yield the CPU for yield_us, then sleep in the kernel. spin_us
   * means what it means in ds4tp_options: DS4TP_SPIN_ADAPTIVE (-1, the
   * default) learns the spin from how late the peers arrive (at most
   * 1000 us), only when the host has a core per rank (else none: spinning
   * would keep the awaited rank off the CPU) and only while spins keep
   * their core; 0 = never spin (the yield phase stays); DS4TP_SPIN_ALWAYS
   * = spin without limit while the peers are alive; DS4TP_SPIN_NEVER =
   * neither spin nor yield: sleep at once (yield_us must then be -1 or 0);
   * else 1..10000000 us.
   * DS4TP_GROUP_SPIN_US, when set, fixes it (a negative value: none).
   * A caller whose `size` ends before yield_us gets the older meaning,
   * mapped: 0 (its default) is DS4TP_SPIN_ADAPTIVE, -1 (its "never")
   * is 0. */
  int32_t spin_us;
  /* tcp groups: every rank beats on its rendezvous connection; a rank
   * not heard for peer_silence_ms (stopped, frozen, link cut) fails the
   * group on every rank with DS4TP_ETIMEDOUT naming it, even between
   * calls (default 1000, 200..600000; shm groups read the ranks' process
   * state instead). Fields added later: older callers get the default. */
  int32_t peer_silence_ms;
  /* The yield phase after the spin: -1 (default) = DS4TP_GROUP_YIELD_US,
   * else 200 us; 0 = sleep right after the spin; else 1..10000000 us. */
  int32_t yield_us;
  /* A rank not yet in a collective (computing, or a server waiting for
   * its next request) is waited for while it is alive, up to this long
   * (default 300000, as a pair's; DS4TP_ARRIVAL_UNLIMITED: while alive);
   * never less than op_timeout_ms. A dead rank ends the wait at once, a
   * stopped or silent one within peer_silence_ms (tcp: its heartbeats;
   * shm: its process state). */
  int32_t peer_arrival_timeout_ms;
  /* The job this rank belongs to: every rank of one job gives the same
   * text, and rank 0 refuses, naming it, a join from another job (at the
   * same port) without ending its own bring-up. NULL = DS4TP_JOB_ID, else
   * the launcher's job id: TORCHELASTIC_RUN_ID (torchrun), SLURM_JOB_ID
   * (with SLURM_STEP_ID), OMPI_MCA_orte_ess_jobid or PMIX_NAMESPACE (Open
   * MPI); else none, and two jobs on one port cannot be told apart. Any
   * other refusal of a join of this job (identity, key, size, a rank
   * taken) ends bring-up at once on rank 0 and on every rank that joined,
   * with its cause. */
  const char *job_id;
} ds4tp_group_options;

/* Fills `opt` with defaults (rank and size from the environment). */
DS4TP_EXPERIMENTAL_API void ds4tp_group_options_init(ds4tp_group_options *opt);

/* Creates this rank's handle; nothing is dialled yet. `identity` (may be
 * NULL) must match on every rank. EINVAL for bad options (size 2..16,
 * rank in range, rank and size known). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_new(ds4tp_group **out, const ds4tp_group_options *opt,
                              const ds4tp_identity *identity);

/* Bring-up: every rank dials rank 0 with its identity (and key proof);
 * rank 0 checks identities (EIDENTITY naming the rank and field), ranks
 * (duplicate: EPROTO; missing at the deadline: ETIMEDOUT naming them),
 * group sizes and keys (EAUTH), and sends the roster; then the data
 * links (shm segment or a tcp full mesh) are opened. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_connect(ds4tp_group *g);

/* In-process form (the ncclCommInitAll shape): n handles for n threads of
 * this process, connected, sharing memory, no sockets. opt may be NULL;
 * its rank, size, rendezvous and transport are ignored. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_new_local(ds4tp_group **groups, int n,
                                    const ds4tp_group_options *opt,
                                    const ds4tp_identity *identity);

/* Accepts NULL. Peers still in a call see this rank leave. */
DS4TP_EXPERIMENTAL_API void ds4tp_group_free(ds4tp_group *g);

/* In-place all-reduce of `count` elements of `dtype` by `op`
 * (ds4tp_reduce_op): combined in rank order 0..N-1 on every rank, so every
 * rank gets identical bits.
 * A tiered group (see transport) sums host-major instead: each host's
 * ranks in local order (rounded to the element type), then the hosts in
 * the order of their first rank; still the same bits on every rank for
 * a given roster. Flat order: transport TCP or DS4TP_GROUP_FLAT=1.
 * Calls from the ring's size (tcp and rdma meshes of 3 or more ranks, and
 * the leaders of 3 or more hosts: from 1 MiB, DS4TP_GROUP_RING_BYTES; the
 * plan names it)
 * sum each segment along the ring of ranks (or hosts) from its own
 * member, rounding at each hop: the same bits on every rank, not the
 * rank-order ones (docs/GROUPS.md "Algorithms"). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_reduce(ds4tp_group *g, void *buf, uint64_t count,
                                     int dtype, int op);
/* out[r*bytes .. ] = rank r's `in` (bytes each); out holds size*bytes. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather(ds4tp_group *g, const void *in, void *out,
                                     uint64_t bytes);
/* Every rank's buf gets root's bytes. Every rank takes part (the others
 * stamp or send a 16-byte header), so it waits for the slowest rank. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_broadcast(ds4tp_group *g, void *buf, uint64_t bytes,
                                    int root);
DS4TP_EXPERIMENTAL_API int ds4tp_group_barrier(ds4tp_group *g);

/* The collectives below follow the same rules: every rank calls the same
 * one with the same counts, dtype, op and root (ranks that differ fail it
 * with DS4TP_EDESYNC naming both calls); every rank that gets a result
 * gets the same bits (the same rank-order combination as all_reduce's
 * one-shot: docs/GROUPS.md, "Collectives"). Buffers may not overlap unless
 * a call says so. A tiered group composes them of its all-reduce,
 * all-gather and broadcast (their host-major order). */

/* Reduce-scatter: `in` holds size x count elements; `out` (count
 * elements) gets this rank's segment of their reduction: out = op over
 * ranks r of in_r[rank*count .. +count]. In place: out may be that
 * segment of in. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_reduce_scatter(ds4tp_group *g, const void *in, void *out,
                                                      uint64_t count, int dtype, int op);
/* Reduce to `root`: the root's buf (count elements) becomes the op over
 * every rank's buf, in place; the other ranks' bufs are left as they were. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_reduce(ds4tp_group *g, void *buf, uint64_t count,
                                              int dtype, int op, int root);
/* Gather to `root`: its out[r*bytes ..] = rank r's `in` (bytes each); out
 * holds size*bytes at the root and is not touched (may be NULL) elsewhere. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_gather(ds4tp_group *g, const void *in, void *out,
                                              uint64_t bytes, int root);
/* Scatter from `root`: every rank's out (bytes) = the root's in[rank*bytes
 * ..]; in holds size*bytes at the root and may be NULL elsewhere. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_scatter(ds4tp_group *g, const void *in, void *out,
                                               uint64_t bytes, int root);
/* All-gather of uneven parts: rank r gives bytes[r] (the same array on
 * every rank; 0 allowed), and every rank's out holds the parts packed in
 * rank order (the sum of bytes[]). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather_v(ds4tp_group *g, const void *in, void *out,
                                                    const uint64_t *bytes);
/* All-gather of rows: `in` holds `rows` rows of row_bytes (this rank's
 * slice of each row, back to back); `out` holds `rows` rows of
 * size*row_bytes, rank r's slice of row i at out[i*size*row_bytes +
 * r*row_bytes] (a batch of prompt rows in one call). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather_rows(ds4tp_group *g, const void *in,
                                                       void *out, uint64_t rows,
                                                       uint64_t row_bytes);
/* All-to-all with per-peer counts (MoE dispatch and combine): send_bytes[r]
 * bytes at in + send_offsets[r] go to rank r, and rank r's send_bytes to
 * this rank land at out + recv_offsets[r], recv_bytes[r] of them (which
 * must equal what rank r sends: EDESYNC naming both otherwise). The arrays
 * hold size entries; counts are exchanged first, so each rank gives only
 * its own. Flat groups only (DS4TP_EUNSUPPORTED on a tiered one). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_to_all_v(ds4tp_group *g, const void *in,
                                                    const uint64_t *send_bytes,
                                                    const uint64_t *send_offsets, void *out,
                                                    const uint64_t *recv_bytes,
                                                    const uint64_t *recv_offsets);

/* Library-allocated buffer of chunk_bytes (64-byte aligned) the engine
 * may fill and pass to the calls above; valid until ds4tp_group_free.
 * Over shm, once connected, it lies in the shared segment, and an
 * all_reduce of a vector in it needs no copy in (README "Groups"); take
 * it after ds4tp_group_connect (before, it is a heap buffer). */
DS4TP_EXPERIMENTAL_API int ds4tp_group_buffer(ds4tp_group *g, void **ptr, uint64_t *bytes);

DS4TP_EXPERIMENTAL_API int ds4tp_group_rank(const ds4tp_group *g);
DS4TP_EXPERIMENTAL_API int ds4tp_group_size(const ds4tp_group *g);
/* Active transport (TCP, SHM or RDMA; a tiered group's is the one
 * between hosts) after connect, AUTO before. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_transport(const ds4tp_group *g);
/* Rank 0's rendezvous port after ds4tp_group_new on rank 0 (port 0 asks
 * for a free one), else the configured port. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_rendezvous_port(const ds4tp_group *g);
/* The plan the group runs, in one line, the same on every rank: "plan: 1
 * host x 4 ranks; shm within the host; all-reduce one-shot below 4 KiB,
 * in the shared buffer from 4 KiB to 1 MiB, two-shot above 1 MiB; steps
 * of at most 1 MiB". Into buf (NUL-terminated) with its length in
 * *needed (may be NULL); ENOMEM when cap <= that length, ESTATE before
 * connect. The words may change between versions; parse nothing. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_plan(const ds4tp_group *g, char *buf, size_t cap,
                                            size_t *needed);
/* Where rank `rank` sits, after connect: *host its host index (hosts
 * numbered in rank order, rank 0's first), *local_index its place among
 * that host's ranks (0: the host's leader), *tiered 1 when the group runs
 * tiered (shm within a host, tcp between leaders; host-major sums), else
 * 0. Any pointer may be NULL. DS4TP_ESTATE before connect, DS4TP_EINVAL
 * for a rank outside the group. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_topology(const ds4tp_group *g, int rank, int *host,
                                                int *local_index, int *tiered);
/* The failure status once failed, else 0. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_failed(const ds4tp_group *g);
/* Message of the failure (or last error); never NULL. */
DS4TP_EXPERIMENTAL_API const char *ds4tp_group_errmsg(const ds4tp_group *g);
/* Fails the group here and on every rank; any thread, async-safe enough
 * to call from a watchdog. */
DS4TP_EXPERIMENTAL_API void ds4tp_group_mark_failed(ds4tp_group *g);

/* The group's counters (ds4tp_stats.h): collectives by kind, bytes, the
 * all-reduce latency histogram; the pair-only fields stay 0. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_stats_read(const ds4tp_group *g, ds4tp_stats *st);
DS4TP_EXPERIMENTAL_API int ds4tp_group_stats_reset(ds4tp_group *g);
DS4TP_EXPERIMENTAL_API int ds4tp_group_stats_prometheus(const ds4tp_group *g, char *buf, size_t cap,
                                                        size_t *needed);

/* The flight recorder: the group's last 256 calls on this rank (op,
 * bytes, algorithm, duration, status and error, and when each rank
 * entered it on the group clock, rank 0's, which ranks on other hosts
 * measure their offset to at bring-up), written as text an operator reads
 * to `path` and as a Chrome trace to `path`.json ("%r" in path: the
 * rank). NULL path: DS4TP_GROUP_DUMP. A call that fails writes it there
 * by itself when DS4TP_GROUP_DUMP is set, else logs its last 8 calls.
 * Any thread, any time, also on a failed group. DS4TP_EINVAL without a
 * path, DS4TP_EIO naming the file that could not be written. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_dump(const ds4tp_group *g, const char *path);
/* Writes the recorder as ds4tp_group_dump(g, path) each time the process
 * gets signal `signo` (one the engine does not use, e.g. SIGUSR2);
 * signo 0 stops it. The handler, installed for the process's life, only
 * writes a byte to a pipe; a library thread writes the files. Any
 * thread. DS4TP_EINVAL for a signal that cannot be caught or a NULL path. */
DS4TP_EXPERIMENTAL_API int ds4tp_group_dump_on_signal(ds4tp_group *g, int signo, const char *path);

#endif /* DS4TP_GROUPS_H */
