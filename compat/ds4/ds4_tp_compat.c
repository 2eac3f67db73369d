/*
 * Seed ds4_tp API on the libds4tp C ABI. Every function here translates
 * arguments and return conventions; the protocol itself is libds4tp's.
 *
 * Threading follows libds4tp: one thread runs gates while another makes the
 * control calls. The per-handle bookkeeping below (last command, pending
 * hash, scratch buffers) belongs to the control-call thread only.
 */
#define _POSIX_C_SOURCE 200809L
#include "ds4_tp.h"

#include <ds4tp/ds4tp.h>

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The seed passes int token arrays where libds4tp takes int32_t. */
typedef char ds4_tp_compat_int_is_32_bits[sizeof(int) == sizeof(int32_t) ? 1 : -1];

/* ds4_vision_span field access for both layouts (ds4_tp.h). */
#if DS4_TP_COMPAT_VISION
#if DS4_TP_COMPAT_VISION_SPAN == 1
#define VSPAN(s, field) ((s).embedding.field)
#define VSPAN_EMBD(s) ((s).embedding.data)
#define VSPAN_DATA_WIDTH(tp, s) ((tp)->n_embd)
#else
#define VSPAN(s, field) ((s).field)
#define VSPAN_EMBD(s) ((s).embd)
#define VSPAN_DATA_WIDTH(tp, s) ((s).data_width)
#endif
#endif

struct ds4_tp {
  ds4tp_pair *pair;
  int rank;
  uint32_t n_embd;
  int32_t frame_timeout_ms;
  uint32_t logits_floats; /* per row, declared with each leader command */
  uint32_t runtime_features; /* ODINLINK identity word, 0 otherwise */
  /* Leader: the last command sent, to pick wait_ack or wait_sync, and the
   * replies of it the engine has not read yet (drained before the next
   * command, see drain_replies). */
  int sent_kind;
  uint64_t sent_session;
  int owed_ack;
  uint32_t owed_logits;
  float *drain_buf;
  /* Worker: the last command received, to shape its acks. */
  int recv_kind;
  uint64_t recv_session;
  uint32_t recv_tokens;
  /* Worker: a HASH command received by ds4_tp_recv_command, answered by the
   * next ds4_tp_hash_check. */
  int hash_pending;
  uint64_t hash_session, hash_seq;
  ds4tp_command cmd; /* receive buffer, reused */
  /* Leader scratch for converted arrays (control path only). */
  ds4tp_batch_item *items;
  uint32_t items_cap;
  ds4tp_image_span *spans;
  uint32_t spans_cap;
  float *head_row; /* ds4_tp_head_row_out */
};

/* ---- helpers ---- */

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return 0;
}

/* Copies libds4tp's message of the call that just failed into err. */
static int fail_rc(char *err, size_t errlen, const char *what, int rc) {
  const char *msg = ds4tp_last_error();
  return fail(err, errlen, "%s: %s (%s)", what, msg[0] ? msg : ds4tp_strerror(rc),
              ds4tp_err_name(rc));
}

static int ok(int rc) { return rc == DS4TP_OK ? 1 : 0; }

/* Reads an integer environment variable in [lo, hi]; unset keeps *out. */
static int env_int(const char *name, long lo, long hi, long *out, char *err,
                   size_t errlen) {
  const char *s = getenv(name);
  if (s == NULL || s[0] == '\0') return 1;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
    return fail(err, errlen, "%s=%s: expected an integer in %ld..%ld", name, s, lo, hi);
  *out = v;
  return 1;
}

static int grow(void **buf, uint32_t *cap, uint32_t n, size_t elem) {
  if (n <= *cap) return 1;
  void *p = realloc(*buf, (size_t)n * elem);
  if (p == NULL) return 0;
  *buf = p;
  *cap = n;
  return 1;
}

static const ds4tp_batch_item *convert_items(ds4_tp *tp, const ds4_tp_batch_item *items,
                                             uint32_t count) {
  if (count == 0 || items == NULL) return NULL;
  if (!grow((void **)&tp->items, &tp->items_cap, count, sizeof *tp->items)) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    tp->items[i].session_id = items[i].session_id;
    tp->items[i].token = items[i].token;
    tp->items[i].flags = items[i].reserved;
  }
  return tp->items;
}

/* Records the command just sent and the replies it owes: an ack (or
 * SYNC_ACK) when `ack`, and `logits` logits rows after a zero status. */
static void note_sent(ds4_tp *tp, int kind, uint64_t session, int ack, uint32_t logits) {
  tp->sent_kind = kind;
  tp->sent_session = session;
  tp->owed_ack = ack;
  tp->owed_logits = tp->logits_floats > 0 ? logits : 0;
}

/* Reads the ack of the last command: SYNC* are answered by SYNC_ACK. */
static int read_ack(ds4_tp *tp, uint64_t session_id, int32_t *status) {
  int rc;
  if (tp->sent_kind == DS4TP_CMD_SYNC || tp->sent_kind == DS4TP_CMD_SYNC_IMAGES)
    rc = ds4tp_wait_sync(tp->pair, session_id, status, NULL);
  else
    rc = ds4tp_wait_ack(tp->pair, session_id, status);
  tp->owed_ack = 0;
  if (rc != DS4TP_OK || *status != 0) tp->owed_logits = 0; /* none follow */
  return rc;
}

/* The engines move on without reading every reply: after a failed local
 * eval or sync the leader invalidates (or rewinds) the session and leaves
 * the worker's logits half, or the sync ack, in the socket. The engine's
 * own ds4_tp.c then read that stale frame as the next reply (a SYNC failed
 * the pair, an EVAL took the previous token's half). libds4tp refuses a
 * new command while a reply is unread, so here the unread replies are read
 * and dropped before the next command goes out: the INVALIDATE reaches the
 * worker and the next SYNC starts on a clean stream. Returns 1 when the
 * stream is clean; 0 when reading failed (the pair is then failed). */
static int drain_replies(ds4_tp *tp) {
  if (!tp->owed_ack && tp->owed_logits == 0) return 1;
  const int kind = tp->sent_kind;
  const uint32_t rows = tp->owed_logits;
  if (tp->owed_ack) {
    int32_t status = 0;
    if (read_ack(tp, tp->sent_session, &status) != DS4TP_OK) return 0;
  }
  if (tp->owed_logits > 0 && tp->drain_buf == NULL) {
    tp->drain_buf = malloc((size_t)tp->logits_floats * sizeof(float));
    if (tp->drain_buf == NULL) {
      ds4tp_mark_failed(tp->pair, "compat: out of memory draining unread logits");
      return 0;
    }
  }
  while (tp->owed_logits > 0) {
    if (ds4tp_recv_logits(tp->pair, tp->drain_buf, tp->logits_floats) != DS4TP_OK) {
      tp->owed_logits = 0;
      return 0;
    }
    tp->owed_logits--;
  }
  fprintf(stderr, "ds4-tp: dropped the unread replies of %s (session %llu, %u logits row(s)) "
                  "before the next command\n",
          ds4tp_command_name(kind), (unsigned long long)tp->sent_session, rows);
  return 1;
}

static int refuse_unread(const ds4_tp *tp, const char *call) {
  fprintf(stderr, "ds4-tp: %s refused: %s%u logits row(s) of %s (session %llu) are unread\n",
          call, tp->owed_ack ? "the ack and " : "", tp->owed_logits,
          ds4tp_command_name(tp->sent_kind), (unsigned long long)tp->sent_session);
  return 0;
}

/* The commands that start a session's timeline over or end it (SYNC,
 * REWIND, INVALIDATE, SPEC_RESTORE, SESSION_DESTROY, STOP) drain first:
 * they are what the engines send on their recovery paths. Any other
 * command sent over an unread reply is refused by libds4tp (ESTATE naming
 * the reply): there the engine may still mean to read it, and dropping it
 * would hide the bug the engines' ds4_tp.c turned into a misread reply. */
#define LEADER_SEND_PREP(tp) \
  do {                        \
    if ((tp) == NULL) return 0; \
    if (!drain_replies(tp)) return 0; \
  } while (0)
#define LEADER_SEND_CHECK(tp)                                     \
  do {                                                            \
    if ((tp) == NULL) return 0;                                   \
    if ((tp)->owed_ack || (tp)->owed_logits > 0) return refuse_unread(tp, __func__); \
  } while (0)

/* ---- options, CLI ---- */

bool ds4_tp_enabled(const ds4_tp_options *opt) {
  return opt != NULL && ((int)opt->role == DS4_TP_COMPAT_ROLE_LEADER ||
                         (int)opt->role == DS4_TP_COMPAT_ROLE_WORKER);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* The value after argv[*index]; advances *index. NULL when missing. */
static const char *take_value(int *index, int argc, char **argv) {
  if (*index + 1 >= argc || argv[*index + 1] == NULL) return NULL;
  *index += 1;
  return argv[*index];
}

int ds4_tp_parse_cli_arg(const char *arg, int *index, int argc, char **argv,
                         ds4_tp_options *opt, char *err, size_t errlen) {
  if (arg == NULL || index == NULL || argv == NULL || opt == NULL) {
    fail(err, errlen, "ds4_tp_parse_cli_arg: NULL argument");
    return DS4_TP_CLI_ERROR;
  }
  if (strcmp(arg, "--tensor-parallel") == 0) {
    opt->requested = true;
    return DS4_TP_CLI_MATCHED;
  }
  if (strcmp(arg, "--tensor-parallel-token-prefill") == 0) {
    opt->glm_token_prefill = true;
    return DS4_TP_CLI_MATCHED;
  }
  const int takes_value = strcmp(arg, "--transport") == 0 || strcmp(arg, "--rdma-device") == 0 ||
                          strcmp(arg, "--rdma-gid-index") == 0 ||
                          strcmp(arg, "--debug-hash") == 0;
  if (!takes_value) return DS4_TP_CLI_NOT_MATCHED;
  const char *v = take_value(index, argc, argv);
  if (v == NULL) {
    fail(err, errlen, "%s needs a value", arg);
    return DS4_TP_CLI_ERROR;
  }
  long n = 0;
  if (strcmp(arg, "--transport") == 0) {
    if (strcmp(v, "auto") == 0) opt->transport = DS4_TP_COMPAT_TRANSPORT_AUTO;
    else if (strcmp(v, "rdma") == 0) opt->transport = DS4_TP_COMPAT_TRANSPORT_RDMA;
    else if (strcmp(v, "tcp") == 0) opt->transport = DS4_TP_COMPAT_TRANSPORT_TCP;
    else if (strcmp(v, "shm") == 0) opt->transport = DS4_TP_COMPAT_TRANSPORT_SHM;
    else {
      fail(err, errlen, "--transport %s: expected auto, rdma, tcp or shm", v);
      return DS4_TP_CLI_ERROR;
    }
  } else if (strcmp(arg, "--rdma-device") == 0) {
    if (v[0] == '\0') {
      fail(err, errlen, "--rdma-device needs a device name (e.g. mlx5_0)");
      return DS4_TP_CLI_ERROR;
    }
    opt->rdma_device = v;
  } else if (strcmp(arg, "--rdma-gid-index") == 0) {
    if (!parse_int(v, 0, INT_MAX, &n)) {
      fail(err, errlen, "--rdma-gid-index %s: expected an integer in 0..%d", v, INT_MAX);
      return DS4_TP_CLI_ERROR;
    }
    opt->rdma_gid_index = (int)n;
    opt->rdma_gid_index_set = true;
  } else {
    if (!parse_int(v, 0, INT_MAX, &n)) {
      fail(err, errlen, "--debug-hash %s: expected a token interval in 0..%d", v, INT_MAX);
      return DS4_TP_CLI_ERROR;
    }
    opt->debug_hash = (int)n;
  }
  return DS4_TP_CLI_MATCHED;
}

/* The rules (and their order) of the engines' own ds4_tp.c, so a command
 * line the engine refused before is refused now. */
int ds4_tp_adopt_distributed_options(ds4_tp_options *tp, ds4_distributed_options *dist,
                                     char *err, size_t errlen) {
  if (tp == NULL || dist == NULL || !tp->requested) return 1;
  if ((int)tp->role != DS4_TP_COMPAT_ROLE_NONE)
    return fail(err, errlen, "--tensor-parallel selects its role through --role");
  const int role = (int)dist->role;
  if (role == DS4_TP_COMPAT_DIST_ROLE_NONE)
    return fail(err, errlen, "--tensor-parallel requires --role coordinator or --role worker");
  if (DS4_TP_COMPAT_DIST_EXTRA_SET(dist))
    return fail(err, errlen, "--layers, --dist-* and distributed debug options cannot be used "
                             "with --tensor-parallel (one 50/50 worker; TP and pipeline modes "
                             "are exclusive)");
  if (role == DS4_TP_COMPAT_DIST_ROLE_COORDINATOR) {
    if (dist->listen_host == NULL || dist->listen_port <= 0 || dist->listen_port > 65535)
      return fail(err, errlen, "--role coordinator --tensor-parallel requires --listen HOST PORT "
                               "(port 1..65535, got %d)", (int)dist->listen_port);
    if (dist->coordinator_host != NULL || dist->coordinator_port != 0)
      return fail(err, errlen, "--role coordinator must not use --coordinator");
    tp->role = DS4_TP_COMPAT_ROLE_LEADER;
    tp->listen_host = dist->listen_host;
    tp->listen_port = dist->listen_port;
  } else if (role == DS4_TP_COMPAT_DIST_ROLE_WORKER) {
    if (dist->coordinator_host == NULL || dist->coordinator_port <= 0 ||
        dist->coordinator_port > 65535)
      return fail(err, errlen, "--role worker --tensor-parallel requires --coordinator HOST PORT "
                               "(port 1..65535, got %d)", (int)dist->coordinator_port);
    if (dist->listen_host != NULL || dist->listen_port != 0)
      return fail(err, errlen, "--role worker --tensor-parallel must not use --listen");
    tp->role = DS4_TP_COMPAT_ROLE_WORKER;
    tp->leader_host = dist->coordinator_host;
    tp->leader_port = dist->coordinator_port;
  } else {
    return fail(err, errlen, "invalid tensor-parallel role %d", role);
  }
  memset(dist, 0, sizeof *dist); /* TP and pipeline modes are exclusive */
  return 1;
}

void ds4_tp_usage(FILE *fp) {
  if (fp == NULL) return;
  fputs("Tensor parallel (two ranks, libds4tp):\n"
        "  --tensor-parallel             split the model over two ranks; with\n"
        "                                --role coordinator --listen HOST PORT (leader)\n"
        "                                or --role worker --coordinator HOST PORT\n"
        "  --transport auto|rdma|tcp|shm data plane (default auto: best both offer)\n"
        "  --rdma-device NAME            verbs device (e.g. mlx5_0)\n"
        "  --rdma-gid-index N            local GID index (default: pick, RoCE v2 first)\n"
        "  --tensor-parallel-token-prefill  GLM diagnostic: one-token prefill\n"
        "  --debug-hash N                cross-check the hidden state every N tokens\n"
        "Environment: DS4_TP_TIMEOUT_SEC (control replies, default 300),\n"
        "  DS4_TP_GATE_TIMEOUT_MS (gate without progress, default 750),\n"
        "  DS4_TP_BIG_GATE_TIMEOUT_MS (peer arrival at a prefill gate,\n"
        "  default DS4_TP_TIMEOUT_SEC), DS4_TP_CONNECT_TIMEOUT_SEC (bring-up,\n"
        "  default 1800), DS4_TP_LOGITS (split|none|N floats per row).\n",
        fp);
}

/* ---- bring-up ---- */

static int fill_identity(const ds4_tp_identity *in, ds4tp_identity *id, char *err,
                         size_t errlen) {
  ds4tp_identity_init(id);
  id->model_bytes = in->gguf_bytes;
  id->model_id = in->model_id;
  id->n_layer = in->n_layer;
  id->n_embd = in->n_embd;
  id->n_vocab = in->n_vocab;
  id->quant_bits = in->quant_bits;
  id->ctx_size = in->ctx_size;
  id->gate_slot_start = in->gate_slot_start;
  id->gate_slot_step = in->gate_slot_step;
  id->gates_per_token = in->gates_per_token;
#if DS4_TP_COMPAT_GATE_MASK
  for (unsigned w = 0; w < (unsigned)DS4_TP_GATE_MASK_WORDS; w++) {
    if (w < (unsigned)DS4TP_GATE_MASK_WORDS) id->gate_slot_mask[w] = in->gate_slot_mask[w];
    else if (in->gate_slot_mask[w] != 0)
      return fail(err, errlen, "gate_slot_mask word %u is set, but libds4tp carries %d words "
                  "(%d slots)", w, DS4TP_GATE_MASK_WORDS, DS4TP_GATE_MASK_WORDS * 64);
  }
#endif
  (void)err;
  (void)errlen;
  return 1;
}

/* Does the engine split its vocabulary head? DeepSeek's schedule (every
 * layer fires ATTN then FFN) goes with a split head; GLM's (FFN gates of
 * the sparse layers, or a mask) with a full head on the leader. */
static int schedule_splits_head(const ds4tp_identity *id) {
  for (int w = 0; w < DS4TP_GATE_MASK_WORDS; w++)
    if (id->gate_slot_mask[w] != 0) return 0;
  if (id->gates_per_token == 0) return 1;
  return id->gate_slot_start == 0 && id->gate_slot_step == 1 &&
         id->gates_per_token == 2u * id->n_layer;
}

/* Floats per logits row, the same on both ranks (see ds4_tp.h). */
static int logits_floats_for(const ds4tp_identity *id, uint32_t features, uint32_t *out,
                             char *err, size_t errlen) {
  const uint32_t half = id->n_vocab / 2;
  const char *e = getenv("DS4_TP_LOGITS");
  if (e != NULL && e[0] != '\0') {
    long n = 0;
    if (strcmp(e, "split") == 0) *out = half;
    else if (strcmp(e, "none") == 0) *out = 0;
    else if (parse_int(e, 0, (long)id->n_vocab, &n)) *out = (uint32_t)n;
    else
      return fail(err, errlen, "DS4_TP_LOGITS=%s: expected split, none or 0..%u floats", e,
                  id->n_vocab);
    return 1;
  }
#if DS4_TP_COMPAT_ODINLINK_API
  if (features & DS4_TP_FEATURE_RANK0_FULL_LOGITS) {
    *out = 0;
    return 1;
  }
  if (features & DS4_TP_FEATURE_GREEDY_TOP2) {
    *out = (uint32_t)(sizeof(ds4_tp_logits_top2) / sizeof(float));
    return 1;
  }
#endif
  (void)features;
  *out = schedule_splits_head(id) ? half : 0;
  return 1;
}

int ds4_tp_create(ds4_tp **out, const ds4_tp_options *opt, const ds4_tp_identity *id,
                  char *err, size_t errlen) {
  if (out == NULL || opt == NULL || id == NULL)
    return fail(err, errlen, "ds4_tp_create: NULL argument");
  *out = NULL;
  ds4tp_options o;
  ds4tp_options_init(&o);
  const int role = (int)opt->role;
  if (role == DS4_TP_COMPAT_ROLE_LEADER) o.role = DS4TP_ROLE_LEADER;
  else if (role == DS4_TP_COMPAT_ROLE_WORKER) o.role = DS4TP_ROLE_WORKER;
  else return fail(err, errlen, "ds4_tp_create: TP role %d is neither leader nor worker", role);
  const int transport = (int)opt->transport;
  if (transport == DS4_TP_COMPAT_TRANSPORT_AUTO) o.transport = DS4TP_TRANSPORT_AUTO;
  else if (transport == DS4_TP_COMPAT_TRANSPORT_TCP) o.transport = DS4TP_TRANSPORT_TCP;
  else if (transport == DS4_TP_COMPAT_TRANSPORT_RDMA) o.transport = DS4TP_TRANSPORT_RDMA;
  else if (transport == DS4_TP_COMPAT_TRANSPORT_SHM) o.transport = DS4TP_TRANSPORT_SHM;
  else return fail(err, errlen, "ds4_tp_create: unknown transport value %d", transport);
  if (opt->listen_host != NULL) o.listen_host = opt->listen_host;
  o.listen_port = opt->listen_port;
  if (opt->leader_host != NULL) o.leader_host = opt->leader_host;
  o.leader_port = opt->leader_port;
  o.rdma_device = opt->rdma_device;
  o.rdma_gid_index = opt->rdma_gid_index_set ? opt->rdma_gid_index : -1;

  /* The engines' environment knobs, validated (they used atoi). The
   * defaults never end a live pair in a long prefill: a live peer may
   * reach any gate (one rank may finish a cold prefill chunk minutes
   * after the other) as late as a control reply may come
   * (peer_arrival_timeout_ms, DS4_TP_BIG_GATE_TIMEOUT_MS when set); a
   * stopped or cut-off peer ends the wait after peer_silence_ms; a gate
   * whose peer has arrived and then stops making progress ends after
   * 750 ms (big gates: the library's big_gate_timeout_ms). */
  long frame_sec = 300, connect_sec = 1800, gate_ms = o.gate_timeout_ms;
  if (!env_int("DS4_TP_TIMEOUT_SEC", 1, 86400, &frame_sec, err, errlen) ||
      !env_int("DS4_TP_CONNECT_TIMEOUT_SEC", 1, 86400, &connect_sec, err, errlen) ||
      !env_int("DS4_TP_GATE_TIMEOUT_MS", 1, 60000, &gate_ms, err, errlen))
    return 0;
  long big_ms = frame_sec * 1000;
  if (!env_int("DS4_TP_BIG_GATE_TIMEOUT_MS", 1, 86400000, &big_ms, err, errlen)) return 0;
  o.frame_timeout_ms = (int32_t)(frame_sec * 1000);
  o.connect_timeout_ms = (int32_t)(connect_sec * 1000);
  o.gate_timeout_ms = (int32_t)gate_ms;
  o.peer_arrival_timeout_ms = (int32_t)big_ms;

  ds4tp_identity ident;
  if (!fill_identity(id, &ident, err, errlen)) return 0;
  uint32_t features = 0;
#if DS4_TP_COMPAT_RUNTIME_FEATURES
  features = id->runtime_features;
#endif
  uint32_t logits_floats = 0;
  if (!logits_floats_for(&ident, features, &logits_floats, err, errlen)) return 0;

  ds4_tp *tp = calloc(1, sizeof *tp);
  if (tp == NULL) return fail(err, errlen, "ds4_tp_create: out of memory");
  ds4tp_command_init(&tp->cmd);
  tp->frame_timeout_ms = o.frame_timeout_ms;
  tp->logits_floats = logits_floats;
  tp->runtime_features = features;
  int rc = ds4tp_new(&tp->pair, &o, &ident);
  if (rc != DS4TP_OK) {
    fail_rc(err, errlen, "ds4_tp_create", rc);
    free(tp);
    return 0;
  }
  rc = ds4tp_connect(tp->pair);
  if (rc != DS4TP_OK) {
    fail_rc(err, errlen, "ds4_tp_create", rc);
    ds4_tp_free(tp);
    return 0;
  }
  tp->rank = ds4tp_rank(tp->pair);
  tp->n_embd = id->n_embd;
#if DS4_TP_COMPAT_RUNTIME_FEATURES
  /* The engine's hello compared runtime_features exactly; libds4tp's
   * identity has no such word, so the execution-mode agreement does it. */
  rc = ds4tp_agree_execution_mode(tp->pair, features, NULL);
  if (rc != DS4TP_OK) {
    fail_rc(err, errlen, "ds4_tp_create: runtime_features", rc);
    ds4_tp_free(tp);
    return 0;
  }
#endif
  *out = tp;
  return 1;
}

void ds4_tp_free(ds4_tp *tp) {
  if (tp == NULL) return;
  ds4tp_free(tp->pair);
  ds4tp_command_free(&tp->cmd);
  free(tp->items);
  free(tp->spans);
  free(tp->head_row);
  free(tp->drain_buf);
  free(tp);
}

int ds4_tp_rank(const ds4_tp *tp) { return tp ? tp->rank : -1; }

bool ds4_tp_is_rdma(const ds4_tp *tp) {
  return tp != NULL && ds4tp_transport_active(tp->pair) == DS4TP_TRANSPORT_RDMA;
}

bool ds4_tp_command_mailbox_active(const ds4_tp *tp) {
  return tp != NULL && !ds4tp_failed(tp->pair);
}

uint32_t ds4_tp_peer_ctx(const ds4_tp *tp) { return tp ? ds4tp_peer_ctx_size(tp->pair) : 0; }

#if DS4_TP_COMPAT_AGREE_ARGS != 0
static int agree_mode(ds4_tp *tp, uint32_t flags, bool *full_experts, char *err,
                      size_t errlen) {
  if (tp == NULL) return fail(err, errlen, "ds4_tp_agree_execution_mode: NULL handle");
  uint32_t caps = (full_experts != NULL && *full_experts) ? 1u : 0u;
  int rc = ds4tp_agree_execution_mode(tp->pair, flags, &caps);
  if (rc != DS4TP_OK) return fail_rc(err, errlen, "execution mode agreement", rc);
  if (full_experts != NULL) *full_experts = (caps & 1u) != 0;
  return 1;
}

#endif

#if DS4_TP_COMPAT_AGREE_ARGS == 5
int ds4_tp_agree_execution_mode(ds4_tp *tp, uint32_t flags, bool *full_experts, char *err,
                                size_t errlen) {
  return agree_mode(tp, flags, full_experts, err, errlen);
}
#elif DS4_TP_COMPAT_AGREE_ARGS == 4
int ds4_tp_agree_execution_mode(ds4_tp *tp, uint32_t flags, char *err, size_t errlen) {
  return agree_mode(tp, flags, NULL, err, errlen);
}
#endif

bool ds4_tp_failed(const ds4_tp *tp) { return tp == NULL || ds4tp_failed(tp->pair) != 0; }

void ds4_tp_mark_failed(ds4_tp *tp) {
  if (tp != NULL) ds4tp_mark_failed(tp->pair, "marked failed by the engine (ds4_tp_mark_failed)");
}

/* ---- slab ---- */

uint64_t ds4_tp_slab_bytes(uint32_t n_layer, uint32_t n_embd) {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.n_layer = n_layer;
  id.n_embd = n_embd;
  ds4tp_slab_layout l;
  memset(&l, 0, sizeof l);
  l.size = sizeof l;
  if (ds4tp_slab_layout_compute(&id, &l) != DS4TP_OK) return 0;
  return l.total_bytes;
}

uint64_t ds4_tp_slab_out_offset(const ds4_tp *tp, uint32_t layer, uint32_t gate) {
  return tp ? ds4tp_slab_out_offset(tp->pair, layer, gate) : UINT64_MAX;
}
uint64_t ds4_tp_slab_in_offset(const ds4_tp *tp, uint32_t layer, uint32_t gate) {
  return tp ? ds4tp_slab_in_offset(tp->pair, layer, gate) : UINT64_MAX;
}
uint64_t ds4_tp_slab_batch_out_offset(const ds4_tp *tp, uint32_t layer) {
  return tp ? ds4tp_slab_batch_out_offset(tp->pair, layer) : UINT64_MAX;
}
uint64_t ds4_tp_slab_batch_in_offset(const ds4_tp *tp, uint32_t layer) {
  return tp ? ds4tp_slab_batch_in_offset(tp->pair, layer) : UINT64_MAX;
}
uint64_t ds4_tp_slab_gpu_flags_offset(const ds4_tp *tp) {
  return tp ? ds4tp_slab_gpu_flags_offset(tp->pair) : UINT64_MAX;
}

uint64_t ds4_tp_slab_vec_stride(const ds4_tp *tp) {
  if (tp == NULL) return 0;
  ds4tp_slab_layout l;
  memset(&l, 0, sizeof l);
  l.size = sizeof l;
  return ds4tp_slab_layout_get(tp->pair, &l) == DS4TP_OK ? l.vec_stride : 0;
}

int ds4_tp_attach_slab(ds4_tp *tp, void *base, char *err, size_t errlen) {
  if (tp == NULL) return fail(err, errlen, "ds4_tp_attach_slab: NULL handle");
  int rc = ds4tp_attach_slab(tp->pair, base, ds4tp_slab_bytes(tp->pair));
  return rc == DS4TP_OK ? 1 : fail_rc(err, errlen, "ds4_tp_attach_slab", rc);
}

void ds4_tp_detach_slab(ds4_tp *tp) {
  if (tp != NULL) ds4tp_detach_slab(tp->pair);
}

/* ---- gates: the callbacks already speak 1/0 and latch failure ---- */

int ds4_tp_gate_exchange(ds4_tp *tp, uint32_t layer, uint32_t gate, uint64_t seq) {
  return tp ? ds4tp_gate_callback(tp->pair, layer, gate, seq) : 0;
}

int ds4_tp_batch_gate_exchange(ds4_tp *tp, uint32_t layer, uint32_t rows, uint64_t seq) {
  return tp ? ds4tp_batch_gate_callback(tp->pair, layer, rows, seq) : 0;
}

int ds4_tp_big_gate_exchange(ds4_tp *tp, uint32_t layer, uint64_t seq, const void *out,
                             void *in, uint64_t bytes) {
  return tp ? ds4tp_big_gate_callback(tp->pair, layer, seq, out, in, bytes) : 0;
}

int ds4_tp_batch_block_begin(ds4_tp *tp, uint32_t rows, uint32_t n_layers) {
  return tp ? ok(ds4tp_block_begin(tp->pair, rows, n_layers, NULL)) : 0;
}

int ds4_tp_batch_block_begin_gates(ds4_tp *tp, uint32_t rows, uint32_t n_layers,
                                   uint32_t *gates_per_layer) {
  return tp ? ok(ds4tp_block_begin(tp->pair, rows, n_layers, gates_per_layer)) : 0;
}

int ds4_tp_batch_block_end(ds4_tp *tp) { return tp ? ok(ds4tp_block_end(tp->pair)) : 0; }

/* ---- leader commands ---- */

int ds4_tp_send_session_create(ds4_tp *tp, uint64_t session_id, int ctx_size) {
  LEADER_SEND_CHECK(tp);
  if (ctx_size <= 0) return 0;
  note_sent(tp, DS4TP_CMD_SESSION_CREATE, session_id, 1, 0);
  return ok(ds4tp_send_session_create(tp->pair, session_id, (uint32_t)ctx_size));
}

int ds4_tp_send_session_destroy(ds4_tp *tp, uint64_t session_id) {
  LEADER_SEND_PREP(tp);
  note_sent(tp, DS4TP_CMD_SESSION_DESTROY, session_id, 1, 0);
  return ok(ds4tp_send_session_destroy(tp->pair, session_id));
}

int ds4_tp_send_sync(ds4_tp *tp, uint64_t session_id, const int *tokens, uint32_t n_tokens) {
  LEADER_SEND_PREP(tp);
  note_sent(tp, DS4TP_CMD_SYNC, session_id, 1, 1);
  return ok(ds4tp_send_sync(tp->pair, session_id, (const int32_t *)tokens, n_tokens,
                            tp->logits_floats));
}

#if DS4_TP_COMPAT_VISION
int ds4_tp_send_sync_multimodal(ds4_tp *tp, uint64_t session_id, const int *tokens,
                                uint32_t n_tokens, const ds4_vision_span *images,
                                uint32_t image_count) {
  LEADER_SEND_PREP(tp);
  if (image_count > 0 && images == NULL) return 0;
  if (!grow((void **)&tp->spans, &tp->spans_cap, image_count ? image_count : 1,
            sizeof *tp->spans))
    return 0;
  for (uint32_t i = 0; i < image_count; i++) {
    ds4tp_image_span *sp = &tp->spans[i];
    memset(sp, 0, sizeof *sp);
    sp->token_start = images[i].token_start;
    sp->token_count = VSPAN(images[i], token_count);
    sp->data_width = VSPAN_DATA_WIDTH(tp, images[i]);
    sp->width = VSPAN(images[i], width);
    sp->height = VSPAN(images[i], height);
    sp->content_width = VSPAN(images[i], content_width);
    sp->content_height = VSPAN(images[i], content_height);
    size_t fp = sizeof VSPAN(images[i], fingerprint) < sizeof sp->fingerprint
                    ? sizeof VSPAN(images[i], fingerprint) : sizeof sp->fingerprint;
    memcpy(sp->fingerprint, VSPAN(images[i], fingerprint), fp);
    sp->embd = VSPAN_EMBD(images[i]);
  }
  note_sent(tp, DS4TP_CMD_SYNC_IMAGES, session_id, 1, 1);
  return ok(ds4tp_send_sync_images(tp->pair, session_id, (const int32_t *)tokens, n_tokens,
                                   tp->spans, image_count, tp->logits_floats));
}
#endif

int ds4_tp_send_eval(ds4_tp *tp, uint64_t session_id, uint64_t seq, int token) {
  LEADER_SEND_CHECK(tp);
  note_sent(tp, DS4TP_CMD_EVAL, session_id, 0, 1);
  return ok(ds4tp_send_eval(tp->pair, session_id, seq, token, tp->logits_floats));
}

int ds4_tp_send_glm_mtp(ds4_tp *tp, uint64_t session_id, uint64_t seq, int token, int limit) {
  LEADER_SEND_CHECK(tp);
  if (limit < 1) return 0;
  note_sent(tp, DS4TP_CMD_MTP, session_id, 1, 0);
  return ok(ds4tp_send_mtp(tp->pair, session_id, seq, token, (uint32_t)limit));
}

int ds4_tp_send_rewind(ds4_tp *tp, uint64_t session_id, int pos) {
  LEADER_SEND_PREP(tp);
  note_sent(tp, DS4TP_CMD_REWIND, session_id, 0, 0);
  return ok(ds4tp_send_rewind(tp->pair, session_id, pos));
}

int ds4_tp_send_spec_restore(ds4_tp *tp, uint64_t session_id, int pos) {
  LEADER_SEND_PREP(tp);
  note_sent(tp, DS4TP_CMD_SPEC_RESTORE, session_id, 1, 0);
  return ok(ds4tp_send_spec_restore(tp->pair, session_id, pos));
}

int ds4_tp_send_invalidate(ds4_tp *tp, uint64_t session_id) {
  LEADER_SEND_PREP(tp);
  note_sent(tp, DS4TP_CMD_INVALIDATE, session_id, 0, 0);
  return ok(ds4tp_send_invalidate(tp->pair, session_id));
}

int ds4_tp_send_eval_batch(ds4_tp *tp, const ds4_tp_batch_item *items, uint32_t count) {
  LEADER_SEND_CHECK(tp);
  const ds4tp_batch_item *it = convert_items(tp, items, count);
  if (count > 0 && it == NULL) return 0;
  note_sent(tp, DS4TP_CMD_EVAL_BATCH, 0, 1, count);
  return ok(ds4tp_send_eval_batch(tp->pair, it, count, tp->logits_floats));
}

int ds4_tp_send_mixed_batch(ds4_tp *tp, uint64_t prefill_session_id, const int *prompt,
                            uint32_t prompt_count, const ds4_tp_batch_item *items,
                            uint32_t count) {
  LEADER_SEND_CHECK(tp);
  const ds4tp_batch_item *it = convert_items(tp, items, count);
  if (count > 0 && it == NULL) return 0;
  note_sent(tp, DS4TP_CMD_MIXED_BATCH, prefill_session_id, 1, 1 + count);
  return ok(ds4tp_send_mixed_batch(tp->pair, prefill_session_id, (const int32_t *)prompt,
                                   prompt_count, it, count, tp->logits_floats));
}

int ds4_tp_send_verify(ds4_tp *tp, uint64_t session_id, const int *drafts, uint32_t n) {
  return ds4_tp_send_verify_flags(tp, session_id, drafts, n, 0);
}

int ds4_tp_send_verify_flags(ds4_tp *tp, uint64_t session_id, const int *drafts, uint32_t n,
                             uint32_t flags) {
  LEADER_SEND_CHECK(tp);
  if ((flags & ~DS4_TP_VERIFY_FLAGS) != 0) return 0;
  /* The seed's bits are libds4tp's: HEAD_SPLIT, DRAFT_SHARED, DRAFT_SEED. */
  note_sent(tp, DS4TP_CMD_VERIFY, session_id, 0, 0);
  return ok(ds4tp_send_verify(tp->pair, session_id, (const int32_t *)drafts, n, flags));
}

/* Both commit forms carry the same numbers: full_accept 1 is FULL (mode 1),
 * 0 is ROLLBACK (mode 0) replaying replay_n tokens. */
int ds4_tp_send_verify_commit(ds4_tp *tp, int32_t mode, int32_t token_count) {
  LEADER_SEND_CHECK(tp);
#if DS4_TP_COMPAT_COMMIT_ACCEPT
  if (mode != 0) {
    mode = DS4TP_COMMIT_FULL;
    token_count = 0;
  }
#endif
  const uint32_t replays = (mode == DS4_TP_VERIFY_ROLLBACK_REPLAY && token_count > 0) ? 1 : 0;
  note_sent(tp, DS4TP_CMD_VERIFY_COMMIT, tp->sent_session, 0, replays);
  return ok(ds4tp_send_verify_commit(tp->pair, mode, token_count,
                                     replays ? tp->logits_floats : 0));
}

int ds4_tp_send_dspark_draft(ds4_tp *tp, uint64_t session_id, int token, int pos,
                             uint32_t mode) {
  LEADER_SEND_CHECK(tp);
  note_sent(tp, DS4TP_CMD_DRAFT, session_id, 0, 0);
  return ok(ds4tp_send_draft(tp->pair, session_id, token, pos, mode));
}

int ds4_tp_send_stop(ds4_tp *tp) {
  if (tp == NULL) return 0;
  (void)drain_replies(tp); /* a failed drain fails the pair: STOP then fails too */
  return ok(ds4tp_send_stop(tp->pair));
}

/* ---- leader replies ---- */

int ds4_tp_wait_command_ack(ds4_tp *tp, uint64_t session_id, const char *operation, char *err,
                            size_t errlen) {
  const char *op = operation ? operation : "command";
  if (tp == NULL) return fail(err, errlen, "%s: NULL handle", op);
  int32_t status = 0;
  int rc = read_ack(tp, session_id, &status);
  if (rc == DS4TP_OK && status == 0) return 1;
  if (rc == DS4TP_OK)
    return fail(err, errlen, "tp: worker %s failed (session %llu, status %d)", op,
                (unsigned long long)session_id, (int)status);
  return fail_rc(err, errlen, op, rc);
}

int ds4_tp_wait_command_status(ds4_tp *tp, uint64_t session_id, int *status,
                               const char *operation, char *err, size_t errlen) {
  const char *op = operation ? operation : "command";
  if (tp == NULL || status == NULL) return fail(err, errlen, "%s: NULL argument", op);
  int32_t st = 0;
  int rc = read_ack(tp, session_id, &st);
  if (rc == DS4TP_OK) {
    *status = st;
    return 1;
  }
  if (rc == DS4TP_EREMOTE) { /* the worker failed it: the seed's status -1 */
    *status = st < 0 ? st : -1;
    fail_rc(err, errlen, op, rc);
    return 1;
  }
  return fail_rc(err, errlen, op, rc);
}

int ds4_tp_recv_logits_half(ds4_tp *tp, float *half, uint32_t count) {
  if (tp == NULL) return 0;
  int rc = ds4tp_recv_logits(tp->pair, half, count);
  if (rc == DS4TP_OK && tp->owed_logits > 0) tp->owed_logits--;
  else if (rc != DS4TP_OK) tp->owed_logits = 0;
  return ok(rc);
}

/* ---- both ranks ---- */

int ds4_tp_sync_checkpoint(ds4_tp *tp, uint32_t point, int current, int total, bool requested,
                           bool *cancelled) {
  if (tp == NULL) return 0;
  int c = 0;
  int rc = ds4tp_sync_checkpoint(tp->pair, point, current, total, requested ? 1 : 0, &c);
  if (rc == DS4TP_OK && cancelled != NULL) *cancelled = c != 0;
  return ok(rc);
}

int ds4_tp_agree_dspark_split(ds4_tp *tp, bool mine_on, const void *meta, bool *agreed,
                              bool *peer_on, char *err, size_t errlen) {
  if (tp == NULL) return fail(err, errlen, "ds4_tp_agree_dspark_split: NULL handle");
  int a = 0, p = 0;
  int rc = ds4tp_agree_drafter_split(tp->pair, mine_on ? 1 : 0, meta, &a, &p);
  if (rc != DS4TP_OK) return fail_rc(err, errlen, "DSpark split agreement", rc);
  if (agreed != NULL) *agreed = a != 0;
  if (peer_on != NULL) *peer_on = p != 0;
  return 1;
}

int ds4_tp_small_exchange(ds4_tp *tp, const void *mine, void *peer, uint32_t bytes) {
  return tp ? ok(ds4tp_small_exchange(tp->pair, mine, peer, bytes)) : 0;
}

float *ds4_tp_head_row_out(ds4_tp *tp) {
  if (tp == NULL) return NULL;
  if (tp->head_row == NULL) tp->head_row = calloc(DS4_TP_HEAD_ROW_MAX, sizeof(float));
  return tp->head_row;
}

int ds4_tp_head_row_send(ds4_tp *tp, uint32_t row, uint32_t floats) {
  if (tp == NULL || tp->head_row == NULL) return 0; /* nothing written to send */
  return ok(ds4tp_head_row_send(tp->pair, row, tp->head_row, floats));
}

int ds4_tp_head_row_recv(ds4_tp *tp, uint32_t row, float *dst, uint32_t floats) {
  return tp ? ok(ds4tp_head_row_recv(tp->pair, row, dst, floats)) : 0;
}

int ds4_tp_hash_check(ds4_tp *tp, uint64_t seq, uint64_t hash, char *err, size_t errlen) {
  if (tp == NULL) return fail(err, errlen, "ds4_tp_hash_check: NULL handle");
  uint64_t session = tp->sent_session;
  if (tp->rank == 1) {
    /* libds4tp's worker answers the leader's HASH command: read it unless
     * ds4_tp_recv_command already did. */
    if (!tp->hash_pending) {
      int rc = ds4tp_recv_command(tp->pair, &tp->cmd, tp->frame_timeout_ms);
      if (rc != DS4TP_OK) return fail_rc(err, errlen, "hash check", rc);
      if (tp->cmd.kind != DS4TP_CMD_HASH) {
        ds4tp_mark_failed(tp->pair, "hash check: the leader sent another command");
        return fail(err, errlen, "hash check at seq %llu: the leader sent %s instead of HASH",
                    (unsigned long long)seq, ds4tp_command_name(tp->cmd.kind));
      }
      tp->hash_session = tp->cmd.session_id;
      tp->hash_seq = tp->cmd.seq;
    }
    tp->hash_pending = 0;
    session = tp->hash_session;
  }
  int rc = ds4tp_hash_check(tp->pair, session, seq, hash);
  if (rc == DS4TP_OK) return 1;
  fail_rc(err, errlen, "lockstep hash check", rc);
  return (rc == DS4TP_EDIVERGED || rc == DS4TP_EDESYNC) ? -1 : 0;
}

/* ---- worker ---- */

static int copy_command(ds4_tp *tp, ds4_tp_command *out, char *err, size_t errlen) {
  const ds4tp_command *c = &tp->cmd;
  out->type = (ds4_tp_frame_type)c->kind;
  out->session_id = c->session_id;
  out->seq = c->seq;
  switch (c->kind) {
#if DS4_TP_COMPAT_VISION
  case DS4TP_CMD_SYNC_IMAGES: out->type = DS4_TP_FRAME_SYNC_MULTIMODAL; break;
#endif
  case DS4TP_CMD_MTP: out->type = DS4_TP_FRAME_GLM_MTP; out->value = c->token;
    out->limit = c->limit; break;
  case DS4TP_CMD_EVAL: out->value = c->token; break;
  case DS4TP_CMD_REWIND:
  case DS4TP_CMD_SPEC_RESTORE: out->value = c->pos; break;
  case DS4TP_CMD_SESSION_CREATE: out->value = (int)c->ctx_size; break;
  case DS4TP_CMD_VERIFY: out->value = (int)c->flags; break;
  case DS4TP_CMD_VERIFY_COMMIT: out->value = (int)c->mode; out->limit = c->count; break;
  /* The seed's DSPARK_DRAFT carries token in value, pos in limit, mode in seq. */
  case DS4TP_CMD_DRAFT: out->type = DS4_TP_FRAME_DSPARK_DRAFT; out->value = c->token;
    out->limit = c->pos; out->seq = c->mode; break;
  default: break;
  }
  if (c->n_tokens > 0) {
    out->tokens = malloc((size_t)c->n_tokens * sizeof *out->tokens);
    if (out->tokens == NULL) return fail(err, errlen, "ds4_tp_recv_command: out of memory");
    memcpy(out->tokens, c->tokens, (size_t)c->n_tokens * sizeof *out->tokens);
    out->n_tokens = c->n_tokens;
  }
  if (c->n_items > 0) {
    out->items = malloc((size_t)c->n_items * sizeof *out->items);
    if (out->items == NULL) return fail(err, errlen, "ds4_tp_recv_command: out of memory");
    for (uint32_t i = 0; i < c->n_items; i++) {
      out->items[i].session_id = c->items[i].session_id;
      out->items[i].token = c->items[i].token;
      out->items[i].reserved = c->items[i].flags;
    }
    out->n_items = c->n_items;
  }
#if DS4_TP_COMPAT_VISION
  if (c->n_images > 0) {
    out->images = calloc(c->n_images, sizeof *out->images);
    if (out->images == NULL) return fail(err, errlen, "ds4_tp_recv_command: out of memory");
    out->n_images = c->n_images;
    for (uint32_t i = 0; i < c->n_images; i++) {
      const ds4tp_image_span *s = &c->images[i];
      ds4_vision_span *d = &out->images[i];
      d->token_start = s->token_start;
      VSPAN(*d, token_count) = s->token_count;
#if DS4_TP_COMPAT_VISION_SPAN != 1
      d->data_width = s->data_width;
#endif
      VSPAN(*d, width) = s->width;
      VSPAN(*d, height) = s->height;
      VSPAN(*d, content_width) = s->content_width;
      VSPAN(*d, content_height) = s->content_height;
      size_t fp = sizeof VSPAN(*d, fingerprint) < sizeof s->fingerprint
                      ? sizeof VSPAN(*d, fingerprint) : sizeof s->fingerprint;
      memcpy(VSPAN(*d, fingerprint), s->fingerprint, fp);
      size_t n = (size_t)s->token_count * s->data_width;
      float *embd = malloc((n ? n : 1) * sizeof(float));
      if (embd == NULL) return fail(err, errlen, "ds4_tp_recv_command: out of memory");
      if (n) memcpy(embd, s->embd, n * sizeof(float));
      VSPAN_EMBD(*d) = embd;
    }
  }
#endif
  return 1;
}

int ds4_tp_recv_command(ds4_tp *tp, ds4_tp_command *command, char *err, size_t errlen) {
  if (command == NULL) return fail(err, errlen, "ds4_tp_recv_command: NULL command");
  memset(command, 0, sizeof *command);
  command->type = DS4_TP_FRAME_ERROR;
  if (tp == NULL) return fail(err, errlen, "ds4_tp_recv_command: NULL handle");
  int rc = ds4tp_recv_command(tp->pair, &tp->cmd, DS4TP_WAIT_FOREVER);
  if (rc != DS4TP_OK) return fail_rc(err, errlen, "ds4_tp_recv_command", rc);
  tp->recv_kind = tp->cmd.kind;
  tp->recv_session = tp->cmd.kind == DS4TP_CMD_EVAL_BATCH ? 0 : tp->cmd.session_id;
  tp->recv_tokens = tp->cmd.n_tokens;
  if (tp->cmd.kind == DS4TP_CMD_HASH) {
    tp->hash_pending = 1;
    tp->hash_session = tp->cmd.session_id;
    tp->hash_seq = tp->cmd.seq;
  }
  if (!copy_command(tp, command, err, errlen)) {
    ds4_tp_command_free(command);
    command->type = DS4_TP_FRAME_ERROR;
    ds4tp_mark_failed(tp->pair, "ds4_tp_recv_command: out of memory");
    return 0;
  }
  return 1;
}

void ds4_tp_command_free(ds4_tp_command *command) {
  if (command == NULL) return;
  free(command->tokens);
  free(command->items);
  command->tokens = NULL;
  command->items = NULL;
  command->n_tokens = command->n_items = 0;
#if DS4_TP_COMPAT_VISION
  for (uint32_t i = 0; command->images != NULL && i < command->n_images; i++)
    free((void *)VSPAN_EMBD(command->images[i]));
  free(command->images);
  command->images = NULL;
  command->n_images = 0;
#endif
}

int ds4_tp_send_command_ack(ds4_tp *tp, uint64_t session_id, int status) {
  if (tp == NULL) return 0;
  if (session_id != tp->recv_session) {
    ds4tp_mark_failed(tp->pair, "ds4_tp_send_command_ack: ack for another session than the "
                                "command's");
    return 0;
  }
  if (tp->recv_kind == DS4TP_CMD_SYNC || tp->recv_kind == DS4TP_CMD_SYNC_IMAGES)
    return ok(ds4tp_send_sync_ack(tp->pair, status, status == 0 ? tp->recv_tokens : 0));
  return ok(ds4tp_send_ack(tp->pair, status));
}

int ds4_tp_send_logits_half(ds4_tp *tp, const float *half, uint32_t count) {
  return tp ? ok(ds4tp_send_logits(tp->pair, half, count)) : 0;
}

int ds4_tp_recv_verify_commit(ds4_tp *tp, int32_t *mode, int32_t *token_count) {
  if (tp == NULL || mode == NULL || token_count == NULL) return 0;
  int rc = ds4tp_recv_command(tp->pair, &tp->cmd, tp->frame_timeout_ms);
  if (rc != DS4TP_OK) return 0;
  if (tp->cmd.kind != DS4TP_CMD_VERIFY_COMMIT) {
    ds4tp_mark_failed(tp->pair, "a VERIFY must be followed by its VERIFY_COMMIT");
    return 0;
  }
  tp->recv_kind = tp->cmd.kind;
  *mode = (int32_t)tp->cmd.mode;
  *token_count = tp->cmd.count;
#if DS4_TP_COMPAT_COMMIT_ACCEPT
  /* (full_accept, replay_n): a leader of this form sends no PREFIX. */
  if (*mode == DS4TP_COMMIT_PREFIX) {
    ds4tp_mark_failed(tp->pair, "VERIFY_COMMIT PREFIX reached a (full_accept, replay_n) worker");
    return 0;
  }
  if (*mode == DS4TP_COMMIT_FULL) *token_count = 0;
#endif
  return 1;
}

/* ---- extensions ---- */

int ds4_tp_compat_set_logits_floats(ds4_tp *tp, uint32_t count) {
  if (tp == NULL) return 0;
  tp->logits_floats = count;
  free(tp->drain_buf);
  tp->drain_buf = NULL;
  return 1;
}

uint32_t ds4_tp_compat_logits_floats(const ds4_tp *tp) { return tp ? tp->logits_floats : 0; }

#if DS4_TP_COMPAT_RUNTIME_FEATURES || DS4_TP_COMPAT_ODINLINK_API
uint32_t ds4_tp_runtime_features(const ds4_tp *tp) { return tp ? tp->runtime_features : 0; }
#endif

#if DS4_TP_COMPAT_ODINLINK_API
void ds4_tp_set_devcopy(ds4_tp_devcopy_fn fn) { (void)fn; }

bool ds4_tp_big_gate_is_rdma_capable(const ds4_tp *tp) { return ds4_tp_is_rdma(tp); }

bool ds4_tp_requires_host_slab(const ds4_tp *tp) {
  (void)tp;
  return false;
}

uint64_t ds4_tp_alloc_slab_bytes(const ds4_tp *tp) {
  return tp ? ds4tp_slab_bytes(tp->pair) : 0;
}

uint64_t ds4_tp_slab_big_out_offset(const ds4_tp *tp) {
  (void)tp;
  return UINT64_MAX;
}

uint64_t ds4_tp_slab_big_in_offset(const ds4_tp *tp) {
  (void)tp;
  return UINT64_MAX;
}

uint32_t ds4_tp_big_capacity_rows(const ds4_tp *tp) {
  (void)tp;
  return 0;
}

int ds4_tp_big_gate_exchange_waves(ds4_tp *tp, uint32_t layer, uint64_t seq, const void *out,
                                   void *in, uint64_t bytes, uint64_t wave_bytes,
                                   uint32_t waves, ds4_tp_big_wave_ready_fn ready,
                                   void *ready_ud) {
  (void)wave_bytes;
  if (!ds4_tp_big_gate_exchange(tp, layer, seq, out, in, bytes)) return 0;
  for (uint32_t w = 0; ready != NULL && w < waves; w++) ready(ready_ud, w);
  return 1;
}

int ds4_tp_exchange_logits_halves(ds4_tp *tp, float *logits, uint32_t half_count) {
  if (tp == NULL || logits == NULL) return 0;
  if (tp->rank == 0) return ds4_tp_recv_logits_half(tp, logits + half_count, half_count);
  return ds4_tp_send_logits_half(tp, logits + half_count, half_count);
}

/* A top-2 record rides as one logits row of 4 floats (same 16 bytes). */
typedef char ds4_tp_compat_top2_is_4_floats[sizeof(ds4_tp_logits_top2) == 4 * sizeof(float) ? 1 : -1];

int ds4_tp_send_logits_top2(ds4_tp *tp, const ds4_tp_logits_top2 *top2) {
  if (tp == NULL || top2 == NULL) return 0;
  float row[4];
  memcpy(row, top2, sizeof row);
  return ds4_tp_send_logits_half(tp, row, 4);
}

int ds4_tp_recv_logits_top2(ds4_tp *tp, ds4_tp_logits_top2 *top2) {
  if (tp == NULL || top2 == NULL) return 0;
  float row[4];
  if (!ds4_tp_recv_logits_half(tp, row, 4)) return 0;
  memcpy(top2, row, sizeof row);
  return 1;
}
#endif

struct ds4tp_pair *ds4_tp_compat_pair(ds4_tp *tp) { return tp ? tp->pair : NULL; }
