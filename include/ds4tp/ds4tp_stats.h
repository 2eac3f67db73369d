/* libds4tp: observability: counters, histograms, Prometheus text, traces.
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. */
#ifndef DS4TP_STATS_H
#define DS4TP_STATS_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ---- Observability: counters, histograms, Prometheus text, traces ------ */
/* Every pair and group counts its work at no measurable cost (relaxed    */
/* per-thread counters, no lock, allocation or system call on the gate    */
/* path). DS4TP_STATS=0 in the environment skips the clock reads behind   */
/* the histograms (counters still count).                                 */

/* Histogram buckets: bucket i counts values <= 256 ns << i (i < 25);     */
/* the last one (DS4TP_STATS_BUCKETS - 1) everything above. Per bucket,   */
/* not cumulative.                                                        */
#define DS4TP_STATS_BUCKETS 26

/* Group collective kinds: the index of ds4tp_stats.collectives and      */
/* .collective.                                                           */
#define DS4TP_COLL_ALL_REDUCE 0
#define DS4TP_COLL_ALL_GATHER 1
#define DS4TP_COLL_BROADCAST 2
#define DS4TP_COLL_BARRIER 3
#define DS4TP_COLL_REDUCE_SCATTER 4
#define DS4TP_COLL_REDUCE 5
#define DS4TP_COLL_GATHER 6
#define DS4TP_COLL_SCATTER 7
#define DS4TP_COLL_ALL_GATHER_V 8
#define DS4TP_COLL_ALL_GATHER_ROWS 9
#define DS4TP_COLL_ALL_TO_ALL_V 10
#define DS4TP_COLL_KINDS 11

/* Groups: the ranks the per-rank arrival fields have room for. */
#define DS4TP_STATS_RANKS 16

typedef struct ds4tp_stats_hist {
  uint64_t count;   /* sum of the buckets */
  uint64_t sum_ns;
  uint64_t buckets[DS4TP_STATS_BUCKETS];
} ds4tp_stats_hist;

/* A snapshot since creation or the last ds4tp_stats_reset. Set `size` to */
/* sizeof(ds4tp_stats) before reading: a binary built against an older,   */
/* smaller struct gets the fields it knows. Pair snapshots fill the gate  */
/* fields, group snapshots the collective ones; the rest stay 0.          */
typedef struct ds4tp_stats {
  uint32_t size;
  int32_t rank;
  int32_t transport;          /* DS4TP_TRANSPORT_* */
  uint32_t reserved0;
  uint64_t row_gates, batch_gates, big_gates;
  uint64_t bytes_sent, bytes_received;   /* payload bytes, not headers */
  uint64_t errors;            /* calls that failed the handle */
  uint64_t timeouts, desyncs; /* of those: DS4TP_ETIMEDOUT, DS4TP_EDESYNC */
  uint64_t rdma_retries, rdma_qp_recreated;
  uint64_t heartbeats_received;
  uint64_t heartbeats_missed; /* our beat periods that brought none */
  /* Gates where the transport tells the peer's arrival apart (tcp: its   */
  /* first bytes; shm: its stamp): time waiting for the peer vs moving.   */
  uint64_t split_gates, peer_wait_ns, transfer_ns;
  uint64_t all_reduces, all_gathers, broadcasts, barriers;  /* groups */
  ds4tp_stats_hist row_gate, batch_gate, big_gate;
  ds4tp_stats_hist control_round_trip;  /* leader: command to first reply */
  ds4tp_stats_hist all_reduce;          /* groups */
  ds4tp_stats_hist row_peer_wait;       /* row gates: the waiting part */
  /* Tiered groups (ds4tp_group_topology): per collective, the time in  */
  /* its shm steps within the host and, on leaders, in the steps across. */
  ds4tp_stats_hist group_host_step, group_across_step;
  /* Pairs: times the primary link (rdma, shm, tcp rails) failed and   */
  /* the pair went on over its standby tcp link, or an rdma pair went  */
  /* on without a lost rail (ds4tp_options.failover).                  */
  uint64_t failovers;
  /* Waits for the peer that did not end at once (pairs: in row, batch   */
  /* and big gates; groups: in their collectives' steps), and where their */
  /* time went: busy-polling, yielding the CPU between polls, asleep in  */
  /* the kernel (the spin_us policy decides the split). Fields added    */
  /* later: a caller whose size ends before them reads none.            */
  uint64_t waits;
  uint64_t wait_spin_ns, wait_yield_ns, wait_sleep_ns;
  /* Groups: every collective kind (index DS4TP_COLL_*): calls that      */
  /* completed, and their latency from entry to return on this rank.     */
  /* all_reduces .. barriers and all_reduce above repeat their entries.  */
  uint64_t collectives[DS4TP_COLL_KINDS];
  ds4tp_stats_hist collective[DS4TP_COLL_KINDS];
  /* Groups: per rank (index = rank), the completed calls it entered     */
  /* after every other rank, and how long after the first rank it entered */
  /* each (the group clock, in us steps; ds4tp_group_dump). A tiered     */
  /* group's rank hears its host's ranks and, on a leader, the leaders; */
  /* arrived_last counts only calls where it heard every rank.           */
  uint64_t arrived_last[DS4TP_STATS_RANKS];
  ds4tp_stats_hist lateness[DS4TP_STATS_RANKS];
} ds4tp_stats;

/* A pair's data links: the data connection, its rails and its standby */
/* link where it has them, in that order (ds4tp_links).                 */
#define DS4TP_LINK_DATA 0
#define DS4TP_LINK_RAIL 1
#define DS4TP_LINK_STANDBY 2
typedef struct ds4tp_link_info {
  int32_t transport;  /* DS4TP_TRANSPORT_* it carries */
  int32_t role;       /* DS4TP_LINK_* */
  int32_t state;      /* 1 carries gates, 0 idle (a standby), -1 lost */
  int32_t row;        /* 1: row and batch gates run on it */
  uint32_t share;     /* rails: thousandths of each big gate it carries */
  uint32_t rate_mbit; /* rails: measured at bring-up, Mbit/s; else 0 */
  uint32_t rtt_us;    /* rails: measured round trip, us; else 0 */
  uint32_t reserved;
} ds4tp_link_info;

/* The pair's links into links[0..cap) (entry_size = sizeof(ds4tp_link_info) */
/* as compiled by the caller; a smaller one gets the fields it knows): the */
/* number of links the pair has (more than cap: call again), or a negative */
/* status (DS4TP_ESTATE before ds4tp_connect). Call from the gate thread or */
/* while no gate runs. links may be NULL when cap is 0.                    */
DS4TP_API int ds4tp_links(const ds4tp_pair *pair, ds4tp_link_info *links, int cap,
                          size_t entry_size);

/* Fills *st (st->size set by the caller). DS4TP_EINVAL for NULL or a     */
/* size below 16. Any thread, any time, also on a failed pair.            */
DS4TP_API int ds4tp_stats_read(const ds4tp_pair *pair, ds4tp_stats *st);
/* Later snapshots count from now. Any thread. */
DS4TP_API int ds4tp_stats_reset(ds4tp_pair *pair);
/* Upper bound of bucket i in ns (UINT64_MAX for the last). */
DS4TP_API uint64_t ds4tp_stats_bucket_le_ns(int i);
/* Prometheus text exposition (HELP/TYPE lines, ds4tp_* names, labels     */
/* rank, transport and kind; histograms in seconds) written into buf,     */
/* NUL-terminated. *needed (may be NULL) gets the length without the NUL; */
/* DS4TP_ENOMEM when cap <= that length (buf is then left untouched, so   */
/* call again with *needed + 1). buf may be NULL when cap is 0.           */
DS4TP_API int ds4tp_stats_prometheus(const ds4tp_pair *pair, char *buf, size_t cap,
                                     size_t *needed);

/* Tracing: gate and control events go into a preallocated ring (the last */
/* 65536 gates; DS4TP_TRACE_EVENTS sets another count) and are written as */
/* Chrome trace / Perfetto JSON (pid = rank, ts in us of CLOCK_MONOTONIC) */
/* by ds4tp_trace_write and at ds4tp_free. DS4TP_TRACE=path starts it at  */
/* connect ("%r" in the path becomes the rank). Call from the gate thread */
/* or while no gate runs. `ds4tp trace merge a.json b.json -o both.json`  */
/* puts two ranks on one timeline. DS4TP_ESTATE if one already records.   */
DS4TP_API int ds4tp_trace_start(ds4tp_pair *pair, const char *path);
/* Writes the file now (recording goes on). DS4TP_ESTATE when none        */
/* records, DS4TP_EIO when the file cannot be written. */
DS4TP_API int ds4tp_trace_write(ds4tp_pair *pair);
/* The flight recorder, always on: the pair's last 256 gates (kind,      */
/* index, seq, bytes, start, duration, how long this rank waited for the  */
/* peer's first data where the link tells, status) written as text to    */
/* `path` and as a Chrome trace to `path`.json ("%r": the rank; NULL:     */
/* DS4TP_PAIR_DUMP). A gate that fails the pair writes it by itself to    */
/* DS4TP_PAIR_DUMP where set, else logs its last 8 gates. Any thread, any */
/* time, also on a failed pair. DS4TP_EINVAL without a path, DS4TP_EIO    */
/* naming the file. Groups: ds4tp_group_dump.                             */
DS4TP_API int ds4tp_dump(const ds4tp_pair *pair, const char *path);
/* Writes it as ds4tp_dump(pair, path) each time the process gets `signo` */
/* (one the engine does not use, e.g. SIGUSR2; 0 stops). The handler,     */
/* installed for the process's life, only writes a byte to a pipe; a      */
/* library thread writes the files. DS4TP_EINVAL for a signal that cannot */
/* be caught or a NULL path.                                              */
DS4TP_API int ds4tp_dump_on_signal(ds4tp_pair *pair, int signo, const char *path);
/* Merges two ranks' traces into `out`, shifting b's clock onto a's: 0 on */
/* one host, else estimated from the gates both hold (each rank's gate   */
/* ends after the peer's began). *offset_us and *uncertainty_us (may be   */
/* NULL) get the shift and its half-width. DS4TP_EIO naming the problem. */
DS4TP_API int ds4tp_trace_merge(const char *a, const char *b, const char *out,
                                double *offset_us, double *uncertainty_us);

#endif /* DS4TP_STATS_H */
