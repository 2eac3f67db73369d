/*
 * Two-process test of the seed ds4_tp API (compat/ds4/ds4_tp.h) on
 * libds4tp. Written against the seed API alone, as an engine would use it:
 * the leader mirrors a scripted session to a forked worker, both run row,
 * batch and big gates, and every reply is checked on the receiving side.
 *
 * Usage: compat_ds4_seed_api tcp|shm. Exit 0 = pass, 77 = transport not
 * available here (ctest SKIP_RETURN_CODE), anything else = failure.
 */
#define _POSIX_C_SOURCE 200809L
#include "ds4_tp.h"

#include <ds4tp/ds4tp.h> /* only ds4tp_transport_available, to skip */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "free_port.h"

enum { N_LAYER = 4, N_EMBD = 64, N_VOCAB = 40, HALF = N_VOCAB / 2, ROWS = 3,
       HEAD_FLOATS = 100, BIG_BYTES = 3 << 20 };

static const char *who = "parent";
static char err[512];

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "[%s] %s:%d: check failed: %s (err: %s; last: %s)\n",    \
              who, __FILE__, __LINE__, #cond, err, ds4tp_last_error());          \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

/* Partial written by `rank` for element i of a gate; distinct per rank,
 * seq, slot and row so a misplaced vector is noticed. */
static float partial(int rank, uint64_t seq, uint32_t slot, uint32_t row, uint32_t i) {
  return (float)(rank * 4000000 + (int)(seq % 64) * 50000 + (int)slot * 1000 +
                 (int)row * 100 + (int)i);
}

static float logit(int msg, uint32_t i) { return (float)msg * 1000.0f + 0.25f * (float)i; }


/* ---- CLI helpers (single process) ---- */

static int parse_all(int argc, char **argv, ds4_tp_options *opt) {
  for (int i = 1; i < argc; i++) {
    int r = ds4_tp_parse_cli_arg(argv[i], &i, argc, argv, opt, err, sizeof err);
    if (r != DS4_TP_CLI_MATCHED) return r;
  }
  return DS4_TP_CLI_MATCHED;
}

static int test_cli(void) {
  ds4_tp_options o;
  memset(&o, 0, sizeof o);
  char *good[] = {"x", "--tensor-parallel", "--transport", "rdma", "--rdma-device", "mlx5_0",
                  "--rdma-gid-index", "3", "--debug-hash", "8",
                  "--tensor-parallel-token-prefill", NULL};
  CHECK(parse_all(11, good, &o) == DS4_TP_CLI_MATCHED);
  CHECK(o.requested && o.transport == DS4_TP_TRANSPORT_RDMA);
  CHECK(strcmp(o.rdma_device, "mlx5_0") == 0);
  CHECK(o.rdma_gid_index == 3 && o.rdma_gid_index_set);
  CHECK(o.debug_hash == 8 && o.glm_token_prefill);
  CHECK(!ds4_tp_enabled(&o)); /* no role yet */

  int i = 1;
  char *other[] = {"x", "--model", "m.gguf", NULL};
  CHECK(ds4_tp_parse_cli_arg(other[1], &i, 3, other, &o, err, sizeof err) ==
        DS4_TP_CLI_NOT_MATCHED);
  CHECK(i == 1);
  char *bad_gid[] = {"x", "--rdma-gid-index", "-1", NULL};
  i = 1;
  CHECK(ds4_tp_parse_cli_arg(bad_gid[1], &i, 3, bad_gid, &o, err, sizeof err) ==
        DS4_TP_CLI_ERROR);
  CHECK(strstr(err, "--rdma-gid-index") != NULL);
  char *bad_transport[] = {"x", "--transport", "pigeon", NULL};
  i = 1;
  CHECK(ds4_tp_parse_cli_arg(bad_transport[1], &i, 3, bad_transport, &o, err, sizeof err) ==
        DS4_TP_CLI_ERROR);
  char *missing[] = {"x", "--transport", NULL};
  i = 1;
  CHECK(ds4_tp_parse_cli_arg(missing[1], &i, 2, missing, &o, err, sizeof err) ==
        DS4_TP_CLI_ERROR);
  CHECK(strstr(err, "needs a value") != NULL);

  /* Role adoption from the distributed options. */
  ds4_distributed_options d;
  memset(&d, 0, sizeof d);
  ds4_tp_options t;
  memset(&t, 0, sizeof t);
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 1); /* TP not asked */
  CHECK(!ds4_tp_enabled(&t));
  t.requested = true;
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 0); /* no --role */
  d.role = DS4_DIST_WORKER;
  d.listen_host = "127.0.0.1";
  d.listen_port = 9000;
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 0); /* worker + listen */
  memset(&d, 0, sizeof d);
  d.role = DS4_DIST_COORDINATOR;
  d.listen_host = "127.0.0.1";
  d.listen_port = 9000;
  d.layers_set = true;
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 0); /* --layers */
  d.layers_set = false;
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 1);
  CHECK(t.role == DS4_TP_LEADER && t.listen_port == 9000 && ds4_tp_enabled(&t));
  CHECK(d.role == DS4_DIST_NONE && d.listen_host == NULL); /* cleared */
  CHECK(ds4_tp_adopt_distributed_options(&t, &d, err, sizeof err) == 0); /* role already set */

  /* The usage text lists every option the parser takes. */
  FILE *f = tmpfile();
  CHECK(f != NULL);
  ds4_tp_usage(f);
  long n = ftell(f);
  rewind(f);
  char text[4096] = {0};
  CHECK(n > 0 && fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  const char *opts[] = {"--tensor-parallel", "--transport", "--rdma-device", "--rdma-gid-index",
                        "--tensor-parallel-token-prefill", "--debug-hash"};
  for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) CHECK(strstr(text, opts[k]) != NULL);

  CHECK(ds4_tp_slab_bytes(N_LAYER, N_EMBD) > 0);
  CHECK(ds4_tp_slab_bytes(0, N_EMBD) == 0);
  return 0;
}

/* ---- both ranks ---- */

static int run_gates(ds4_tp *tp, unsigned char *slab, int rank) {
  const int peer = 1 - rank;
  /* Two tokens of row gates in the identity schedule. */
  for (uint64_t seq = 1; seq <= 2 * N_LAYER * 2; seq++) {
    uint32_t slot = (uint32_t)((seq - 1) % (N_LAYER * 2)), layer = slot / 2, gate = slot % 2;
    float *out = (float *)(slab + ds4_tp_slab_out_offset(tp, layer, gate));
    for (uint32_t i = 0; i < N_EMBD; i++) out[i] = partial(rank, seq, slot, 0, i);
    CHECK(ds4_tp_gate_exchange(tp, layer, gate, seq) == 1);
    const float *in = (const float *)(slab + ds4_tp_slab_in_offset(tp, layer, gate));
    for (uint32_t i = 0; i < N_EMBD; i++) CHECK(in[i] == partial(peer, seq, slot, 0, i));
  }
  /* A verify block with two batch gates per layer. */
  uint32_t gpl = 2;
  CHECK(ds4_tp_batch_block_begin_gates(tp, ROWS, N_LAYER, &gpl) == 1);
  CHECK(gpl == 2);
  const uint64_t stride = ds4_tp_slab_vec_stride(tp);
  CHECK(stride >= N_EMBD * 4);
  for (uint32_t idx = 0; idx < N_LAYER * gpl; idx++) {
    unsigned char *out = slab + ds4_tp_slab_batch_out_offset(tp, idx);
    for (uint32_t r = 0; r < ROWS; r++)
      for (uint32_t i = 0; i < N_EMBD; i++)
        ((float *)(out + r * stride))[i] = partial(rank, idx + 1, idx, r, i);
    CHECK(ds4_tp_batch_gate_exchange(tp, idx, ROWS, idx + 1) == 1);
    const unsigned char *in = slab + ds4_tp_slab_batch_in_offset(tp, idx);
    for (uint32_t r = 0; r < ROWS; r++)
      for (uint32_t i = 0; i < N_EMBD; i++)
        CHECK(((const float *)(in + r * stride))[i] == partial(peer, idx + 1, idx, r, i));
  }
  CHECK(ds4_tp_batch_block_end(tp) == 1);
  /* A prefill gate bigger than one 2 MiB round. */
  unsigned char *bo = malloc(BIG_BYTES), *bi = malloc(BIG_BYTES);
  CHECK(bo != NULL && bi != NULL);
  for (size_t i = 0; i < BIG_BYTES; i++) bo[i] = (unsigned char)(i * 7 + (size_t)rank * 31);
  int big = ds4_tp_big_gate_exchange(tp, 1, 1, bo, bi, BIG_BYTES);
  int same = 1;
  for (size_t i = 0; i < BIG_BYTES && big; i++)
    if (bi[i] != (unsigned char)(i * 7 + (size_t)peer * 31)) same = 0;
  free(bo);
  free(bi);
  CHECK(big == 1 && same);
  /* Agreed cancellation: either rank's request stops both. */
  bool cancelled = false;
  CHECK(ds4_tp_sync_checkpoint(tp, 1, 10, 100, rank == 1, &cancelled) == 1);
  CHECK(cancelled);
  CHECK(ds4_tp_sync_checkpoint(tp, 1, 20, 100, false, &cancelled) == 1);
  CHECK(!cancelled);
  return 0;
}

/* Leader and worker share this part of a verify block. */
static int verify_block(ds4_tp *tp, unsigned char *slab, int rank) {
  CHECK(ds4_tp_batch_block_begin(tp, ROWS, N_LAYER) == 1);
  const uint64_t stride = ds4_tp_slab_vec_stride(tp);
  for (uint32_t idx = 0; idx < N_LAYER; idx++) {
    unsigned char *out = slab + ds4_tp_slab_batch_out_offset(tp, idx);
    for (uint32_t r = 0; r < ROWS; r++)
      ((float *)(out + r * stride))[0] = partial(rank, 100 + idx, idx, r, 0);
    CHECK(ds4_tp_batch_gate_exchange(tp, idx, ROWS, 100 + idx) == 1);
    const unsigned char *in = slab + ds4_tp_slab_batch_in_offset(tp, idx);
    for (uint32_t r = 0; r < ROWS; r++)
      CHECK(((const float *)(in + r * stride))[0] == partial(1 - rank, 100 + idx, idx, r, 0));
  }
  unsigned char mine[16], theirs[16];
  for (int i = 0; i < 16; i++) mine[i] = (unsigned char)(rank * 100 + i);
  CHECK(ds4_tp_small_exchange(tp, mine, theirs, sizeof mine) == 1);
  for (int i = 0; i < 16; i++) CHECK(theirs[i] == (unsigned char)((1 - rank) * 100 + i));
  return 0;
}

static int leader_script(ds4_tp *tp, unsigned char *slab) {
  float half[HALF];
  int msg = 0;
#define EXPECT_LOGITS()                                                  \
  do {                                                                   \
    CHECK(ds4_tp_recv_logits_half(tp, half, HALF) == 1);                 \
    for (uint32_t i_ = 0; i_ < HALF; i_++) CHECK(half[i_] == logit(msg, i_)); \
    msg++;                                                               \
  } while (0)

  CHECK(ds4_tp_send_session_create(tp, 1, 4096) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 1, "session create", err, sizeof err) == 1);

  const int prompt[5] = {11, 12, 13, 14, 15};
  CHECK(ds4_tp_send_sync(tp, 1, prompt, 5) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 1, "sync", err, sizeof err) == 1);
  EXPECT_LOGITS();

  CHECK(ds4_tp_send_eval(tp, 1, 1, 42) == 1);
  EXPECT_LOGITS();
  CHECK(ds4_tp_hash_check(tp, 1, 0xabcull, err, sizeof err) == 1);
  CHECK(ds4_tp_hash_check(tp, 2, 0xabcull, err, sizeof err) == -1); /* worker differs */
  CHECK(strstr(err, "hash") != NULL || strstr(err, "diverged") != NULL);
  CHECK(!ds4_tp_failed(tp)); /* a mismatch is reported, the pair stays usable */

  const int drafts[ROWS] = {21, 22, 23};
  CHECK(ds4_tp_send_verify_flags(tp, 1, drafts, ROWS, DS4_TP_VERIFY_HEAD_SPLIT) == 1);
  if (verify_block(tp, slab, 0)) return 1;
  float row[HEAD_FLOATS];
  CHECK(ds4_tp_head_row_recv(tp, 1, row, HEAD_FLOATS) == 1);
  for (uint32_t i = 0; i < HEAD_FLOATS; i++) CHECK(row[i] == 0.5f * (float)i);
  CHECK(ds4_tp_batch_block_end(tp) == 1);
  CHECK(ds4_tp_send_verify_commit(tp, DS4_TP_VERIFY_ROLLBACK_REPLAY, 2) == 1);
  EXPECT_LOGITS(); /* the replay's logits */

  CHECK(ds4_tp_send_glm_mtp(tp, 1, 2, 5, 2) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 1, "mtp", err, sizeof err) == 1);
  int status = -7;
  CHECK(ds4_tp_send_spec_restore(tp, 1, 3) == 1);
  CHECK(ds4_tp_wait_command_status(tp, 1, &status, "speculative restore", err, sizeof err) == 1);
  CHECK(status == 1);
  CHECK(ds4_tp_send_rewind(tp, 1, 2) == 1);
  CHECK(ds4_tp_send_invalidate(tp, 1) == 1);
  CHECK(ds4_tp_send_dspark_draft(tp, 1, 9, 4, DS4_TP_DSPARK_DRAFT) == 1);

  ds4_tp_batch_item items[2] = {{1, 31, 0}, {2, 32, 0}};
  CHECK(ds4_tp_send_eval_batch(tp, items, 2) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 0, "eval batch", err, sizeof err) == 1);
  EXPECT_LOGITS();
  EXPECT_LOGITS();
  const int chunk[3] = {41, 42, 43};
  CHECK(ds4_tp_send_mixed_batch(tp, 1, chunk, 3, &items[1], 1) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 1, "mixed batch", err, sizeof err) == 1);
  EXPECT_LOGITS();
  EXPECT_LOGITS();

  float embd[2 * N_EMBD];
  for (int i = 0; i < 2 * N_EMBD; i++) embd[i] = (float)i * 0.125f;
  ds4_vision_span img;
  memset(&img, 0, sizeof img);
  img.token_start = 1;
  img.token_count = 2;
  img.data_width = N_EMBD;
  img.width = img.height = 224;
  img.content_width = img.content_height = 200;
  for (int i = 0; i < 32; i++) img.fingerprint[i] = (uint8_t)(i + 1);
  img.embd = embd;
  const int mm[4] = {1, 2, 3, 4};
  CHECK(ds4_tp_send_sync_multimodal(tp, 1, mm, 4, &img, 1) == 1);
  CHECK(ds4_tp_wait_command_ack(tp, 1, "multimodal sync", err, sizeof err) == 1);
  EXPECT_LOGITS();

  /* An engine that keeps the full vocabulary on rank 0: no halves. */
  CHECK(ds4_tp_compat_set_logits_floats(tp, 0) == 1);
  CHECK(ds4_tp_send_eval(tp, 1, 3, 43) == 1);
  CHECK(ds4_tp_recv_logits_half(tp, half, HALF) == 0); /* none is due */

  CHECK(ds4_tp_send_session_destroy(tp, 7) == 1);
  status = -7;
  CHECK(ds4_tp_wait_command_status(tp, 7, &status, "session destroy", err, sizeof err) == 1);
  CHECK(status == 1); /* unknown session */
  CHECK(ds4_tp_send_stop(tp) == 1);
  return 0;
#undef EXPECT_LOGITS
}

static int worker_script(ds4_tp *tp, unsigned char *slab) {
  static const int expected[] = {
      DS4_TP_FRAME_SESSION_CREATE, DS4_TP_FRAME_SYNC,        DS4_TP_FRAME_EVAL,
      DS4_TP_FRAME_VERIFY,         DS4_TP_FRAME_GLM_MTP,     DS4_TP_FRAME_SPEC_RESTORE,
      DS4_TP_FRAME_REWIND,         DS4_TP_FRAME_INVALIDATE,  DS4_TP_FRAME_DSPARK_DRAFT,
      DS4_TP_FRAME_EVAL_BATCH,     DS4_TP_FRAME_MIXED_BATCH, DS4_TP_FRAME_SYNC_MULTIMODAL,
      DS4_TP_FRAME_EVAL,           DS4_TP_FRAME_SESSION_DESTROY, DS4_TP_FRAME_STOP};
  float half[HALF];
  int msg = 0;
#define SEND_LOGITS()                                                     \
  do {                                                                    \
    for (uint32_t i_ = 0; i_ < HALF; i_++) half[i_] = logit(msg, i_);     \
    CHECK(ds4_tp_send_logits_half(tp, half, HALF) == 1);                  \
    msg++;                                                                \
  } while (0)

  for (size_t step = 0; step < sizeof expected / sizeof expected[0]; step++) {
    ds4_tp_command c;
    CHECK(ds4_tp_recv_command(tp, &c, err, sizeof err) == 1);
    CHECK((int)c.type == expected[step]);
    int rc = 0;
    switch (c.type) {
    case DS4_TP_FRAME_SESSION_CREATE:
      CHECK(c.session_id == 1 && c.value == 4096);
      CHECK(ds4_tp_send_command_ack(tp, 1, 0) == 1);
      break;
    case DS4_TP_FRAME_SYNC:
      CHECK(c.n_tokens == 5 && c.tokens[0] == 11 && c.tokens[4] == 15);
      CHECK(ds4_tp_send_command_ack(tp, 1, 0) == 1);
      SEND_LOGITS();
      break;
    case DS4_TP_FRAME_EVAL:
      if (c.seq == 1) {
        CHECK(c.value == 42);
        SEND_LOGITS();
        CHECK(ds4_tp_hash_check(tp, 1, 0xabcull, err, sizeof err) == 1);
        CHECK(ds4_tp_hash_check(tp, 2, 0xdefull, err, sizeof err) == -1);
      } else {
        CHECK(c.seq == 3 && c.value == 43);
        CHECK(ds4_tp_send_logits_half(tp, half, HALF) == 0); /* leader asked for none */
      }
      break;
    case DS4_TP_FRAME_VERIFY: {
      CHECK(c.n_tokens == ROWS && c.tokens[2] == 23);
      CHECK((uint32_t)c.value == DS4_TP_VERIFY_HEAD_SPLIT);
      rc = verify_block(tp, slab, 1);
      if (rc) break;
      float *row = ds4_tp_head_row_out(tp);
      CHECK(row != NULL);
      for (uint32_t i = 0; i < HEAD_FLOATS; i++) row[i] = 0.5f * (float)i;
      CHECK(ds4_tp_head_row_send(tp, 1, HEAD_FLOATS) == 1);
      CHECK(ds4_tp_batch_block_end(tp) == 1);
      int32_t mode = -1, count = -1;
      CHECK(ds4_tp_recv_verify_commit(tp, &mode, &count) == 1);
      CHECK(mode == DS4_TP_VERIFY_ROLLBACK_REPLAY && count == 2);
      SEND_LOGITS();
      break;
    }
    case DS4_TP_FRAME_GLM_MTP:
      CHECK(c.seq == 2 && c.value == 5 && c.limit == 2);
      CHECK(ds4_tp_send_command_ack(tp, 1, 0) == 1);
      break;
    case DS4_TP_FRAME_SPEC_RESTORE:
      CHECK(c.value == 3);
      CHECK(ds4_tp_send_command_ack(tp, 1, 1) == 1); /* state not kept */
      break;
    case DS4_TP_FRAME_REWIND: CHECK(c.value == 2); break;
    case DS4_TP_FRAME_INVALIDATE: CHECK(c.session_id == 1); break;
    case DS4_TP_FRAME_DSPARK_DRAFT:
      CHECK(c.value == 9 && c.limit == 4 && c.seq == DS4_TP_DSPARK_DRAFT);
      break;
    case DS4_TP_FRAME_EVAL_BATCH:
      CHECK(c.n_items == 2 && c.items[0].session_id == 1 && c.items[1].token == 32);
      CHECK(ds4_tp_send_command_ack(tp, 0, 0) == 1);
      SEND_LOGITS();
      SEND_LOGITS();
      break;
    case DS4_TP_FRAME_MIXED_BATCH:
      CHECK(c.session_id == 1 && c.n_tokens == 3 && c.tokens[1] == 42);
      CHECK(c.n_items == 1 && c.items[0].session_id == 2);
      CHECK(ds4_tp_send_command_ack(tp, 1, 0) == 1);
      SEND_LOGITS();
      SEND_LOGITS();
      break;
    case DS4_TP_FRAME_SYNC_MULTIMODAL:
      CHECK(c.n_tokens == 4 && c.n_images == 1);
      CHECK(c.images[0].token_start == 1 && c.images[0].token_count == 2);
      CHECK(c.images[0].data_width == N_EMBD && c.images[0].width == 224);
      CHECK(c.images[0].content_height == 200 && c.images[0].fingerprint[31] == 32);
      CHECK(c.images[0].embd[2 * N_EMBD - 1] == (float)(2 * N_EMBD - 1) * 0.125f);
      CHECK(ds4_tp_send_command_ack(tp, 1, 0) == 1);
      SEND_LOGITS();
      break;
    case DS4_TP_FRAME_SESSION_DESTROY:
      CHECK(c.session_id == 7);
      CHECK(ds4_tp_send_command_ack(tp, 7, 1) == 1);
      break;
    case DS4_TP_FRAME_STOP: break;
    default: CHECK(!"unexpected frame");
    }
    ds4_tp_command_free(&c);
    CHECK(c.tokens == NULL && c.items == NULL && c.images == NULL);
    if (rc) return rc;
  }
  return 0;
#undef SEND_LOGITS
}

static int run_rank(int rank, const char *transport, int port) {
  who = rank == 0 ? "leader" : "worker";
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  /* The engine's command line: TP options here, role from its --role. */
  char *argv[] = {"engine", "--tensor-parallel", "--transport", (char *)transport, NULL};
  ds4_tp_options opt;
  memset(&opt, 0, sizeof opt);
  CHECK(parse_all(4, argv, &opt) == DS4_TP_CLI_MATCHED);
  ds4_distributed_options dist;
  memset(&dist, 0, sizeof dist);
  if (rank == 0) {
    dist.role = DS4_DIST_COORDINATOR;
    dist.listen_host = "127.0.0.1";
    dist.listen_port = port;
  } else {
    dist.role = DS4_DIST_WORKER;
    dist.coordinator_host = "127.0.0.1";
    dist.coordinator_port = port;
  }
  CHECK(ds4_tp_adopt_distributed_options(&opt, &dist, err, sizeof err) == 1);
  CHECK(ds4_tp_enabled(&opt));

  ds4_tp_identity id;
  memset(&id, 0, sizeof id);
  id.gguf_bytes = 123456789;
  id.model_id = 7;
  id.n_layer = N_LAYER;
  id.n_embd = N_EMBD;
  id.n_vocab = N_VOCAB;
  id.quant_bits = 4;
  id.ctx_size = rank == 0 ? 4096 : 2048;

  ds4_tp *tp = NULL;
  CHECK(ds4_tp_create(&tp, &opt, &id, err, sizeof err) == 1);
  int rc = 1;
  unsigned char *slab = NULL;
  do {
    CHECK(ds4_tp_rank(tp) == rank);
    CHECK(ds4_tp_peer_ctx(tp) == (rank == 0 ? 2048u : 4096u));
    CHECK(!ds4_tp_is_rdma(tp));
    CHECK(ds4_tp_command_mailbox_active(tp));
    CHECK(!ds4_tp_failed(tp));
    bool full = rank == 0; /* only the leader could hold every expert */
    CHECK(ds4_tp_agree_execution_mode(tp, DS4_TP_MODE_EXPERT_INTERMEDIATE_SPLIT, &full, err,
                                      sizeof err) == 1);
    CHECK(!full);
    unsigned char meta[DS4_TP_DSPARK_META_BYTES];
    memset(meta, 0x5a, sizeof meta);
    bool agreed = false, peer_on = false;
    CHECK(ds4_tp_agree_dspark_split(tp, true, meta, &agreed, &peer_on, err, sizeof err) == 1);
    CHECK(agreed && peer_on);

    uint64_t bytes = ds4_tp_slab_bytes(N_LAYER, N_EMBD);
    CHECK(bytes > 0 && ds4_tp_slab_gpu_flags_offset(tp) < bytes);
    void *mem = NULL;
    CHECK(posix_memalign(&mem, 4096, (size_t)bytes) == 0);
    slab = mem;
    memset(slab, 0, (size_t)bytes);
    CHECK(ds4_tp_attach_slab(tp, slab, err, sizeof err) == 1);
    if (run_gates(tp, slab, rank)) break;
    if ((rank == 0 ? leader_script : worker_script)(tp, slab)) break;
    CHECK(!ds4_tp_failed(tp));
    rc = 0;
  } while (0);
  if (rc != 0) ds4_tp_mark_failed(tp); /* let the peer give up at once */
  ds4_tp_detach_slab(tp);
  ds4_tp_free(tp);
  free(slab);
  if (rc == 0) fprintf(stderr, "[%s] ok\n", who);
  return rc;
}

/* A pair whose identities differ: both ranks' create fails and names the
 * field with both values. */
static int run_mismatch(int rank, const char *transport, int port) {
  who = rank == 0 ? "leader(mismatch)" : "worker(mismatch)";
  ds4_tp_options opt;
  memset(&opt, 0, sizeof opt);
  opt.role = rank == 0 ? DS4_TP_LEADER : DS4_TP_WORKER;
  opt.transport = strcmp(transport, "shm") == 0 ? DS4_TP_TRANSPORT_SHM : DS4_TP_TRANSPORT_TCP;
  opt.listen_host = opt.leader_host = "127.0.0.1";
  opt.listen_port = opt.leader_port = port;
  ds4_tp_identity id;
  memset(&id, 0, sizeof id);
  id.n_layer = N_LAYER;
  id.n_embd = rank == 0 ? N_EMBD : 2 * N_EMBD;
  id.n_vocab = N_VOCAB;
  ds4_tp *tp = NULL;
  err[0] = '\0';
  CHECK(ds4_tp_create(&tp, &opt, &id, err, sizeof err) == 0);
  CHECK(tp == NULL);
  CHECK(strstr(err, "n_embd") != NULL);
  fprintf(stderr, "[%s] refused as expected: %s\n", who, err);
  return 0;
}

/* A worker that fails a command: the leader's wait_command_status returns
 * 1 with the seed's negative status, and the pair is failed on both ranks. */
static int run_remote_failure(int rank, const char *transport, int port) {
  who = rank == 0 ? "leader(failure)" : "worker(failure)";
  ds4_tp_options opt;
  memset(&opt, 0, sizeof opt);
  opt.role = rank == 0 ? DS4_TP_LEADER : DS4_TP_WORKER;
  opt.transport = strcmp(transport, "shm") == 0 ? DS4_TP_TRANSPORT_SHM : DS4_TP_TRANSPORT_TCP;
  opt.listen_host = opt.leader_host = "127.0.0.1";
  opt.listen_port = opt.leader_port = port;
  ds4_tp_identity id;
  memset(&id, 0, sizeof id);
  id.n_layer = N_LAYER;
  id.n_embd = N_EMBD;
  id.n_vocab = N_VOCAB;
  ds4_tp *tp = NULL;
  CHECK(ds4_tp_create(&tp, &opt, &id, err, sizeof err) == 1);
  int rc = 1;
  do {
    if (rank == 0) {
      int status = 0;
      CHECK(ds4_tp_send_session_create(tp, 3, 100) == 1);
      CHECK(ds4_tp_wait_command_status(tp, 3, &status, "session create", err, sizeof err) == 1);
      CHECK(status == -1);
      CHECK(ds4_tp_failed(tp));
      CHECK(ds4_tp_send_eval(tp, 3, 1, 1) == 0); /* nothing more goes out */
    } else {
      ds4_tp_command c;
      CHECK(ds4_tp_recv_command(tp, &c, err, sizeof err) == 1);
      CHECK(c.type == DS4_TP_FRAME_SESSION_CREATE && c.value == 100);
      ds4_tp_command_free(&c);
      CHECK(ds4_tp_send_command_ack(tp, 3, -1) == 1); /* the engine failed it */
    }
    rc = 0;
  } while (0);
  ds4_tp_free(tp);
  return rc;
}

static int run_pair(const char *transport, int (*body)(int, const char *, int)) {
  int port = free_port();
  CHECK(port > 0);
  fflush(NULL);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    alarm(90);
    exit(body(1, transport, port)); /* exit, not _exit: leak checkers run in the worker too */
  }
  alarm(90);
  int leader = body(0, transport, port);
  alarm(0);
  int st = 0;
  who = "parent";
  CHECK(waitpid(child, &st, 0) == child);
  int worker = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  fprintf(stderr, "leader %d, worker %d\n", leader, worker);
  return leader == 0 && worker == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *transport = argc > 1 ? argv[1] : "tcp";
  const int t = strcmp(transport, "shm") == 0 ? DS4TP_TRANSPORT_SHM : DS4TP_TRANSPORT_TCP;
  char why[256] = "";
  if (!ds4tp_transport_available(t, why, sizeof why)) {
    printf("ds4tp-skip: %s not available here: %s\n", transport, why);
    return 77;
  }
  /* Bounded: control replies, bring-up and gates give up by themselves;
   * the alarm is a last resort against a bug in this test. */
  setenv("DS4_TP_TIMEOUT_SEC", "20", 1);
  setenv("DS4_TP_CONNECT_TIMEOUT_SEC", "20", 1);
  setenv("DS4_TP_GATE_TIMEOUT_MS", "10000", 1);
  if (test_cli()) return 1;
  if (run_pair(transport, run_rank)) return 1;
  if (run_pair(transport, run_remote_failure)) return 1;
  return run_pair(transport, run_mismatch);
}
