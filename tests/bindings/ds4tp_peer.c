/*
 * ds4tp_peer: the C counterpart the binding tests (Python, Rust) run
 * against. It plays one rank of a fixed script whose payloads every side
 * can compute independently, so a binding proves it moves the same bytes
 * to and from the C library as C does.
 *
 *   ds4tp_peer layout                 struct sizes and field offsets, one
 *                                     "struct field offset size" per line
 *   ds4tp_peer leader [opts]          prints "port P" (flushed), then plays
 *   ds4tp_peer worker --port P [opts]
 *     opts: --layers N (4) --embd N (64) --tokens N (3) --transport NAME
 *
 * The script (both ranks; rank r, peer 1-r; word() below):
 *   connect; attach a library-allocated slab;
 *   for t in 0..tokens-1:
 *     every row gate in slot order, seq = 1, 2, ...: out[layer][gate]
 *       holds word(r, seq, i) as u32 i = 0..n_embd-1; exchange; in must
 *       hold word(1-r, seq, i);
 *     batch gate index t % batch_gates, rows t % 8 + 1, seq t + 1: row k
 *       word i holds word(r, 1000000 + seq, k * n_embd + i);
 *   big gate layer 0 seq 1: BIG_WORDS words word(r, 2000000, i).
 * Prints "peer OK" and exits 0 when every payload matched.
 *
 *   ds4tp_peer leader --control [--fail] [opts]
 *   ds4tp_peer worker --control [--manual] --port P [opts]
 * The control script instead (after connect; see control_leader() and
 * worker_handle() for every value): both ranks agree the execution mode
 * and drafter split, then the leader sends every command kind and reads
 * every reply (acks, sync acks, logits halves, hash checks, a cancelled
 * sync through ds4tp_sync_checkpoint, a verify block with small exchange
 * and head row) and ends with STOP and a closing handshake (a one-byte
 * small exchange, "L" for "W", once the worker is out of its loop); --fail
 * ends instead with a destroy
 * the worker fails (status -42, the leader gets EREMOTE). The worker
 * serves with ds4tp_worker_run, or with --manual by ds4tp_recv_command
 * and the explicit replies.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4tp/ds4tp.h"

enum { BIG_WORDS = 3 * 65536 + 7 };

static uint32_t word(int rank, uint64_t seq, uint64_t i) {
  return (uint32_t)rank * 0x9e3779b1u ^ (uint32_t)seq * 0x85ebca6bu ^ (uint32_t)i * 0xc2b2ae35u;
}

/* ---- layout: what a binding's struct mirrors must match ---------------- */

#define FIELD(S, f) \
  printf("%s %s %zu %zu\n", #S, #f, offsetof(S, f), sizeof(((S *)0)->f))
#define SIZE(S) printf("%s sizeof %zu 0\n", #S, sizeof(S))

static void print_layout(void) {
  SIZE(ds4tp_options);
  FIELD(ds4tp_options, size);
  FIELD(ds4tp_options, role);
  FIELD(ds4tp_options, transport);
  FIELD(ds4tp_options, listen_host);
  FIELD(ds4tp_options, listen_port);
  FIELD(ds4tp_options, leader_host);
  FIELD(ds4tp_options, leader_port);
  FIELD(ds4tp_options, connect_timeout_ms);
  FIELD(ds4tp_options, hello_timeout_ms);
  FIELD(ds4tp_options, gate_timeout_ms);
  FIELD(ds4tp_options, big_gate_timeout_ms);
  FIELD(ds4tp_options, frame_timeout_ms);
  FIELD(ds4tp_options, spin_us);
  FIELD(ds4tp_options, log_fn);
  FIELD(ds4tp_options, log_user_data);
  FIELD(ds4tp_options, log_level);
  FIELD(ds4tp_options, max_frame_bytes);
  FIELD(ds4tp_options, rdma_device);
  FIELD(ds4tp_options, rdma_port);
  FIELD(ds4tp_options, rdma_gid_index);
  FIELD(ds4tp_options, psk);
  FIELD(ds4tp_options, psk_bytes);
  FIELD(ds4tp_options, psk_file);
  FIELD(ds4tp_options, peer_silence_ms);
  FIELD(ds4tp_options, peer_arrival_timeout_ms);
  FIELD(ds4tp_options, failover);
  FIELD(ds4tp_options, rails);
  FIELD(ds4tp_options, rdma_rails);

  SIZE(ds4tp_identity);
  FIELD(ds4tp_identity, size);
  FIELD(ds4tp_identity, model_bytes);
  FIELD(ds4tp_identity, model_id);
  FIELD(ds4tp_identity, n_layer);
  FIELD(ds4tp_identity, n_embd);
  FIELD(ds4tp_identity, n_vocab);
  FIELD(ds4tp_identity, quant_bits);
  FIELD(ds4tp_identity, ctx_size);
  FIELD(ds4tp_identity, gate_slot_start);
  FIELD(ds4tp_identity, gate_slot_step);
  FIELD(ds4tp_identity, gates_per_token);
  FIELD(ds4tp_identity, gate_slot_mask);
  FIELD(ds4tp_identity, features);
  FIELD(ds4tp_identity, engine_blob);
  FIELD(ds4tp_identity, engine_blob_bytes);

  SIZE(ds4tp_slab_layout);
  FIELD(ds4tp_slab_layout, size);
  FIELD(ds4tp_slab_layout, slots);
  FIELD(ds4tp_slab_layout, batch_gates);
  FIELD(ds4tp_slab_layout, batch_rows);
  FIELD(ds4tp_slab_layout, total_bytes);
  FIELD(ds4tp_slab_layout, vec_bytes);
  FIELD(ds4tp_slab_layout, vec_stride);
  FIELD(ds4tp_slab_layout, flag_stride);
  FIELD(ds4tp_slab_layout, out_offset);
  FIELD(ds4tp_slab_layout, in_offset);
  FIELD(ds4tp_slab_layout, in_seq_offset);
  FIELD(ds4tp_slab_layout, token_offset);
  FIELD(ds4tp_slab_layout, gpu_flags_offset);
  FIELD(ds4tp_slab_layout, batch_out_offset);
  FIELD(ds4tp_slab_layout, batch_in_offset);
  FIELD(ds4tp_slab_layout, batch_gate_stride);
  FIELD(ds4tp_slab_layout, big_out_offset);
  FIELD(ds4tp_slab_layout, big_in_offset);
  FIELD(ds4tp_slab_layout, big_staging_bytes);
  FIELD(ds4tp_slab_layout, gpu_release_offset);
  FIELD(ds4tp_slab_layout, slot_stride);

  SIZE(ds4tp_staging_hooks);
  FIELD(ds4tp_staging_hooks, size);
  FIELD(ds4tp_staging_hooks, user_data);
  FIELD(ds4tp_staging_hooks, before_exchange);
  FIELD(ds4tp_staging_hooks, after_exchange);

  SIZE(ds4tp_gate_service_options);
  FIELD(ds4tp_gate_service_options, size);
  FIELD(ds4tp_gate_service_options, spin_us);
  FIELD(ds4tp_gate_service_options, yield_us);
  FIELD(ds4tp_gate_service_options, sleep_us);
  FIELD(ds4tp_gate_service_options, stop_timeout_ms);
  FIELD(ds4tp_gate_service_options, cpu);

  SIZE(ds4tp_group_options);
  FIELD(ds4tp_group_options, size);
  FIELD(ds4tp_group_options, rank);
  FIELD(ds4tp_group_options, group_size);
  FIELD(ds4tp_group_options, rendezvous_host);
  FIELD(ds4tp_group_options, rendezvous_port);
  FIELD(ds4tp_group_options, transport);
  FIELD(ds4tp_group_options, connect_timeout_ms);
  FIELD(ds4tp_group_options, op_timeout_ms);
  FIELD(ds4tp_group_options, chunk_bytes);
  FIELD(ds4tp_group_options, psk);
  FIELD(ds4tp_group_options, psk_bytes);
  FIELD(ds4tp_group_options, spin_us);
  FIELD(ds4tp_group_options, peer_silence_ms);
  FIELD(ds4tp_group_options, yield_us);
  FIELD(ds4tp_group_options, peer_arrival_timeout_ms);
  FIELD(ds4tp_group_options, job_id);

  SIZE(ds4tp_batch_item);
  FIELD(ds4tp_batch_item, session_id);
  FIELD(ds4tp_batch_item, token);
  FIELD(ds4tp_batch_item, flags);

  SIZE(ds4tp_image_span);
  FIELD(ds4tp_image_span, token_start);
  FIELD(ds4tp_image_span, token_count);
  FIELD(ds4tp_image_span, data_width);
  FIELD(ds4tp_image_span, width);
  FIELD(ds4tp_image_span, height);
  FIELD(ds4tp_image_span, content_width);
  FIELD(ds4tp_image_span, content_height);
  FIELD(ds4tp_image_span, fingerprint);
  FIELD(ds4tp_image_span, embd);

  SIZE(ds4tp_command);
  FIELD(ds4tp_command, size);
  FIELD(ds4tp_command, kind);
  FIELD(ds4tp_command, session_id);
  FIELD(ds4tp_command, seq);
  FIELD(ds4tp_command, hash);
  FIELD(ds4tp_command, token);
  FIELD(ds4tp_command, pos);
  FIELD(ds4tp_command, limit);
  FIELD(ds4tp_command, count);
  FIELD(ds4tp_command, mode);
  FIELD(ds4tp_command, flags);
  FIELD(ds4tp_command, ctx_size);
  FIELD(ds4tp_command, logits_floats);
  FIELD(ds4tp_command, tokens);
  FIELD(ds4tp_command, n_tokens);
  FIELD(ds4tp_command, items);
  FIELD(ds4tp_command, n_items);
  FIELD(ds4tp_command, images);
  FIELD(ds4tp_command, n_images);

  SIZE(ds4tp_reply);
  FIELD(ds4tp_reply, logits);
  FIELD(ds4tp_reply, logits_rows);
  FIELD(ds4tp_reply, logits_floats);
  FIELD(ds4tp_reply, position);
  FIELD(ds4tp_reply, hash);
  FIELD(ds4tp_reply, message);

  SIZE(ds4tp_worker_ops);
  FIELD(ds4tp_worker_ops, size);
  FIELD(ds4tp_worker_ops, session_create);
  FIELD(ds4tp_worker_ops, session_destroy);
  FIELD(ds4tp_worker_ops, sync);
  FIELD(ds4tp_worker_ops, sync_images);
  FIELD(ds4tp_worker_ops, eval);
  FIELD(ds4tp_worker_ops, mtp);
  FIELD(ds4tp_worker_ops, rewind);
  FIELD(ds4tp_worker_ops, invalidate);
  FIELD(ds4tp_worker_ops, spec_restore);
  FIELD(ds4tp_worker_ops, eval_batch);
  FIELD(ds4tp_worker_ops, mixed_batch);
  FIELD(ds4tp_worker_ops, verify);
  FIELD(ds4tp_worker_ops, verify_commit);
  FIELD(ds4tp_worker_ops, draft);
  FIELD(ds4tp_worker_ops, hash);
}

/* ---- the script --------------------------------------------------------- */

static int fail(ds4tp_pair *tp, const char *what, int rc) {
  fprintf(stderr, "ds4tp_peer: %s: %s: %s\n", what, ds4tp_err_name(rc),
          tp ? ds4tp_errmsg(tp) : ds4tp_last_error());
  return 1;
}

static int mismatch(const char *what, uint64_t seq, uint64_t i, uint32_t got, uint32_t want) {
  fprintf(stderr, "ds4tp_peer: %s seq %llu word %llu is 0x%08x, expected 0x%08x\n", what,
          (unsigned long long)seq, (unsigned long long)i, got, want);
  return 1;
}

static int play(ds4tp_pair *tp, int tokens) {
  int rank = ds4tp_rank(tp), rc;
  if ((rc = ds4tp_connect(tp)) != DS4TP_OK) return fail(tp, "connect", rc);
  if ((rc = ds4tp_attach_slab(tp, NULL, 0)) != DS4TP_OK) return fail(tp, "attach", rc);
  unsigned char *slab = ds4tp_slab_base(tp);
  ds4tp_slab_layout l;
  memset(&l, 0, sizeof l);
  l.size = sizeof l;
  if ((rc = ds4tp_slab_layout_get(tp, &l)) != DS4TP_OK) return fail(tp, "layout", rc);
  uint64_t n = l.vec_bytes / 4, seq = 0;
  for (int t = 0; t < tokens; t++) {
    for (uint32_t slot = 0; slot < l.slots; slot++) {
      uint32_t layer = slot / 2, gate = slot % 2;
      uint32_t *out = (uint32_t *)(slab + ds4tp_slab_out_offset(tp, layer, gate));
      const uint32_t *in = (const uint32_t *)(slab + ds4tp_slab_in_offset(tp, layer, gate));
      seq++;
      for (uint64_t i = 0; i < n; i++) out[i] = word(rank, seq, i);
      if ((rc = ds4tp_gate_exchange(tp, layer, gate, seq)) != DS4TP_OK) return fail(tp, "gate", rc);
      for (uint64_t i = 0; i < n; i++)
        if (in[i] != word(1 - rank, seq, i)) return mismatch("gate", seq, i, in[i], word(1 - rank, seq, i));
    }
    uint32_t index = (uint32_t)t % l.batch_gates, rows = (uint32_t)t % 8 + 1;
    uint64_t bseq = (uint64_t)t + 1;
    unsigned char *bout = slab + ds4tp_slab_batch_out_offset(tp, index);
    const unsigned char *bin = slab + ds4tp_slab_batch_in_offset(tp, index);
    for (uint32_t k = 0; k < rows; k++) {
      uint32_t *row = (uint32_t *)(bout + k * l.vec_stride);
      for (uint64_t i = 0; i < n; i++) row[i] = word(rank, 1000000 + bseq, k * n + i);
    }
    if ((rc = ds4tp_batch_gate_exchange(tp, index, rows, bseq)) != DS4TP_OK)
      return fail(tp, "batch gate", rc);
    for (uint32_t k = 0; k < rows; k++) {
      const uint32_t *row = (const uint32_t *)(bin + k * l.vec_stride);
      for (uint64_t i = 0; i < n; i++)
        if (row[i] != word(1 - rank, 1000000 + bseq, k * n + i))
          return mismatch("batch gate", bseq, k * n + i, row[i], word(1 - rank, 1000000 + bseq, k * n + i));
    }
  }
  uint32_t *bo = malloc(BIG_WORDS * 4), *bi = malloc(BIG_WORDS * 4);
  if (!bo || !bi) return 1;
  for (uint64_t i = 0; i < BIG_WORDS; i++) bo[i] = word(rank, 2000000, i);
  rc = ds4tp_big_gate_exchange(tp, 0, 1, bo, bi, BIG_WORDS * 4);
  int bad = 0;
  for (uint64_t i = 0; rc == DS4TP_OK && !bad && i < BIG_WORDS; i++)
    if (bi[i] != word(1 - rank, 2000000, i)) bad = mismatch("big gate", 1, i, bi[i], word(1 - rank, 2000000, i));
  free(bo);
  free(bi);
  if (rc != DS4TP_OK) return fail(tp, "big gate", rc);
  return bad;
}

/* ---- the control script --------------------------------------------------- */

enum {
  SID = 42,          /* the main session */
  SID2 = 43,         /* a second one (batches, the cancelled sync) */
  LF = 16,           /* logits floats per half */
  HEAD_FLOATS = 32,  /* head row of the verify block */
  BAD_SID = 999,     /* destroy the worker fails (--fail) */
  FAIL_STATUS = -42, /* ... with this status */
  LEADER_CAPS = 0xB,
  WORKER_CAPS = 0x6,
  EXEC_FLAGS = 0x5
};
#define GOOD_HASH 0xABCDEFull

/* Values both sides compute: exact in float. */
static float logit(int kind, uint32_t row, uint32_t i) {
  return (float)(kind * 10000 + (int)row * 100 + (int)i) * 0.5f;
}
static float embd_value(uint32_t t, uint32_t i) { return (float)(t * 1000 + i) * 0.25f; }
static float head_value(uint32_t row, uint32_t i) { return (float)(row * 1000 + i) * 0.125f; }
static uint8_t meta_byte(uint32_t i) { return (uint8_t)(i ^ 0x5A); }

/* The image of the SYNC_IMAGES command (embd: 2 x n_embd floats). */
static ds4tp_image_span make_image(uint32_t n_embd, float *embd) {
  ds4tp_image_span im;
  memset(&im, 0, sizeof im);
  im.token_start = 1;
  im.token_count = 2;
  im.data_width = n_embd;
  im.width = 4;
  im.height = 4;
  im.content_width = 4;
  im.content_height = 3;
  for (uint32_t i = 0; i < DS4TP_IMAGE_FINGERPRINT_BYTES; i++) im.fingerprint[i] = (uint8_t)(i * 7);
  for (uint32_t t = 0; t < 2; t++)
    for (uint32_t i = 0; i < n_embd; i++) embd[t * n_embd + i] = embd_value(t, i);
  im.embd = embd;
  return im;
}

typedef struct {
  uint32_t n_embd, n_layer;
  int failed_on_purpose; /* the --fail destroy arrived */
  int commands;
} worker_state;

static void fill_logits(ds4tp_reply *r, int kind) {
  for (uint32_t row = 0; row < r->logits_rows; row++)
    for (uint32_t i = 0; i < r->logits_floats; i++)
      r->logits[(size_t)row * r->logits_floats + i] = logit(kind, row, i);
}

static int tokens_are(const ds4tp_command *c, const int32_t *want, uint32_t n) {
  if (c->n_tokens != n) return 0;
  for (uint32_t i = 0; i < n; i++)
    if (c->tokens[i] != want[i]) return 0;
  return 1;
}

#define EXPECT(cond)                                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      snprintf(reply->message, sizeof reply->message, "worker: %s: check failed: %s",  \
               ds4tp_command_name(cmd->kind), #cond);                                  \
      fprintf(stderr, "ds4tp_peer %s\n", reply->message);                            \
      return -100;                                                                     \
    }                                                                                  \
  } while (0)

static const int32_t TEN[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

/* Serves one command: checks every field against the leader's script and
 * fills the reply. Shared by the callback table and the manual loop. */
static int worker_handle(worker_state *w, ds4tp_pair *tp, const ds4tp_command *cmd,
                         ds4tp_reply *reply) {
  w->commands++;
  switch (cmd->kind) {
    case DS4TP_CMD_SESSION_CREATE:
      EXPECT((cmd->session_id == SID && cmd->ctx_size == 512) ||
             (cmd->session_id == SID2 && cmd->ctx_size == 256));
      return 0;
    case DS4TP_CMD_SESSION_DESTROY:
      if (cmd->session_id == BAD_SID) {
        w->failed_on_purpose = 1;
        snprintf(reply->message, sizeof reply->message, "no session %d on the worker", BAD_SID);
        return FAIL_STATUS;
      }
      EXPECT(cmd->session_id == SID || cmd->session_id == SID2);
      return 0;
    case DS4TP_CMD_SYNC:
      EXPECT(tokens_are(cmd, TEN, 10) && cmd->logits_floats == LF);
      if (cmd->session_id == SID2) {
        /* Cancelled at an agreed checkpoint: the leader passes requested 0. */
        int cancelled = 0;
        int rc = ds4tp_sync_checkpoint(tp, 1, 5, 10, 1, &cancelled);
        EXPECT(rc == DS4TP_OK && cancelled == 1);
        reply->position = 5;
        return DS4TP_ACK_CANCELLED;
      }
      EXPECT(cmd->session_id == SID && reply->position == 10);
      fill_logits(reply, cmd->kind);
      return 0;
    case DS4TP_CMD_SYNC_IMAGES: {
      EXPECT(cmd->session_id == SID && tokens_are(cmd, TEN, 6) && cmd->n_images == 1);
      const ds4tp_image_span *im = &cmd->images[0];
      EXPECT(im->token_start == 1 && im->token_count == 2 && im->data_width == w->n_embd);
      EXPECT(im->width == 4 && im->height == 4 && im->content_width == 4 && im->content_height == 3);
      for (uint32_t i = 0; i < DS4TP_IMAGE_FINGERPRINT_BYTES; i++) EXPECT(im->fingerprint[i] == (uint8_t)(i * 7));
      for (uint32_t t = 0; t < 2; t++)
        for (uint32_t i = 0; i < w->n_embd; i++) EXPECT(im->embd[t * w->n_embd + i] == embd_value(t, i));
      fill_logits(reply, cmd->kind);
      return 0;
    }
    case DS4TP_CMD_EVAL:
      EXPECT(cmd->session_id == SID && cmd->seq == 1 && cmd->token == 77 && cmd->logits_floats == LF);
      EXPECT(reply->logits_rows == 1);
      fill_logits(reply, cmd->kind);
      return 0;
    case DS4TP_CMD_MTP:
      EXPECT(cmd->session_id == SID && cmd->seq == 2 && cmd->token == 78 && cmd->limit == 3);
      return 0;
    case DS4TP_CMD_REWIND:
      EXPECT(cmd->session_id == SID && cmd->pos == 5);
      return 0;
    case DS4TP_CMD_INVALIDATE:
      EXPECT(cmd->session_id == SID);
      return 0;
    case DS4TP_CMD_SPEC_RESTORE:
      EXPECT(cmd->session_id == SID && cmd->pos == 4);
      return DS4TP_ACK_UNAVAILABLE;
    case DS4TP_CMD_EVAL_BATCH:
      EXPECT(cmd->n_items == 2 && cmd->items[0].session_id == SID && cmd->items[0].token == 5 &&
             cmd->items[1].session_id == SID2 && cmd->items[1].token == 6);
      EXPECT(reply->logits_rows == 2 && reply->logits_floats == LF);
      fill_logits(reply, cmd->kind);
      return 0;
    case DS4TP_CMD_MIXED_BATCH: {
      static const int32_t prompt[3] = {9, 8, 7};
      EXPECT(cmd->session_id == SID && tokens_are(cmd, prompt, 3));
      EXPECT(cmd->n_items == 1 && cmd->items[0].session_id == SID2 && cmd->items[0].token == 3);
      EXPECT(reply->logits_rows == 2);
      fill_logits(reply, cmd->kind);
      return 0;
    }
    case DS4TP_CMD_VERIFY: {
      static const int32_t drafts[3] = {11, 12, 13};
      EXPECT(cmd->session_id == SID && tokens_are(cmd, drafts, 3) &&
             cmd->flags == DS4TP_VERIFY_DRAFT_SHARED);
      /* The verify block both ranks run: symmetric calls. */
      uint32_t gpl = 2;
      EXPECT(ds4tp_block_begin(tp, 3, w->n_layer, &gpl) == DS4TP_OK && gpl == 1);
      char peer[8];
      EXPECT(ds4tp_small_exchange(tp, "worker!!", peer, 8) == DS4TP_OK && !memcmp(peer, "leader!!", 8));
      float row[HEAD_FLOATS];
      for (uint32_t i = 0; i < HEAD_FLOATS; i++) row[i] = head_value(1, i);
      EXPECT(ds4tp_head_row_send(tp, 1, row, HEAD_FLOATS) == DS4TP_OK);
      EXPECT(ds4tp_block_end(tp) == DS4TP_OK);
      return 0;
    }
    case DS4TP_CMD_VERIFY_COMMIT:
      EXPECT(cmd->mode == DS4TP_COMMIT_PREFIX && cmd->count == 2);
      return 0;
    case DS4TP_CMD_DRAFT:
      EXPECT(cmd->session_id == SID && cmd->token == 5 && cmd->pos == 7 &&
             cmd->mode == DS4TP_DRAFT_PROPOSE);
      return 0;
    case DS4TP_CMD_HASH:
      EXPECT(cmd->session_id == SID && (cmd->seq == 9 || cmd->seq == 10));
      reply->hash = cmd->seq == 9 ? GOOD_HASH : 2; /* seq 10 diverges on purpose */
      return 0;
    default:
      EXPECT(0 && "unexpected command");
  }
  return 0;
}

static int worker_op(void *ud, ds4tp_pair *tp, const ds4tp_command *cmd, ds4tp_reply *reply) {
  return worker_handle(ud, tp, cmd, reply);
}

/* Logits halves the leader reads after a command with status 0. */
static uint32_t logits_rows(const ds4tp_command *c) {
  if (c->logits_floats == 0) return 0;
  switch (c->kind) {
    case DS4TP_CMD_EVAL:
    case DS4TP_CMD_SYNC:
    case DS4TP_CMD_SYNC_IMAGES: return 1;
    case DS4TP_CMD_EVAL_BATCH: return c->n_items;
    case DS4TP_CMD_MIXED_BATCH: return 1 + c->n_items;
    case DS4TP_CMD_VERIFY_COMMIT: return c->mode == DS4TP_COMMIT_ROLLBACK && c->count > 0;
    default: return 0;
  }
}

/* The same service by hand: receive, handle, send what the protocol wants. */
static int worker_manual(ds4tp_pair *tp, worker_state *w) {
  ds4tp_command cmd;
  ds4tp_command_init(&cmd);
  float *logits = NULL;
  int rc = DS4TP_OK;
  for (;;) {
    ds4tp_command_free(&cmd); /* recv_command replaces the arrays without freeing them */
    rc = ds4tp_recv_command(tp, &cmd, 30000);
    if (rc != DS4TP_OK) break;
    if (cmd.kind == DS4TP_CMD_STOP) break;
    ds4tp_reply reply;
    memset(&reply, 0, sizeof reply);
    reply.logits_rows = logits_rows(&cmd);
    reply.logits_floats = cmd.logits_floats;
    reply.position = cmd.n_tokens;
    free(logits);
    logits = calloc((size_t)reply.logits_rows * reply.logits_floats + 1, sizeof(float));
    reply.logits = reply.logits_rows ? logits : NULL;
    int status = worker_handle(w, tp, &cmd, &reply);
    if (status < 0) {
      rc = ds4tp_send_error(tp, status, reply.message);
      if (rc == DS4TP_OK) rc = DS4TP_EFAILED;
      break;
    }
    switch (cmd.kind) {
      case DS4TP_CMD_SESSION_CREATE:
      case DS4TP_CMD_SESSION_DESTROY:
      case DS4TP_CMD_MTP:
      case DS4TP_CMD_SPEC_RESTORE:
      case DS4TP_CMD_EVAL_BATCH:
      case DS4TP_CMD_MIXED_BATCH: rc = ds4tp_send_ack(tp, status); break;
      case DS4TP_CMD_SYNC:
      case DS4TP_CMD_SYNC_IMAGES: rc = ds4tp_send_sync_ack(tp, status, reply.position); break;
      case DS4TP_CMD_HASH: {
        rc = ds4tp_hash_check(tp, cmd.session_id, cmd.seq, reply.hash);
        if (rc == DS4TP_EDIVERGED) rc = DS4TP_OK; /* expected for seq 10; the pair goes on */
        break;
      }
      default: break;
    }
    for (uint32_t row = 0; rc == DS4TP_OK && status == 0 && row < reply.logits_rows; row++)
      rc = ds4tp_send_logits(tp, logits + (size_t)row * reply.logits_floats, reply.logits_floats);
    if (rc != DS4TP_OK) break;
  }
  ds4tp_command_free(&cmd);
  free(logits);
  return rc;
}

static int control_worker(ds4tp_pair *tp, int manual) {
  int rc;
  if ((rc = ds4tp_connect(tp)) != DS4TP_OK) return fail(tp, "connect", rc);
  ds4tp_slab_layout l;
  memset(&l, 0, sizeof l);
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  worker_state w = {(uint32_t)(l.vec_bytes / 4), l.slots / 2, 0, 0};
  uint32_t caps = WORKER_CAPS;
  if ((rc = ds4tp_agree_execution_mode(tp, EXEC_FLAGS, &caps)) != DS4TP_OK) return fail(tp, "exec mode", rc);
  if (caps != (LEADER_CAPS & WORKER_CAPS)) return fail(tp, "exec mode caps", DS4TP_EPROTO);
  uint8_t meta[DS4TP_DRAFTER_META_BYTES];
  for (uint32_t i = 0; i < sizeof meta; i++) meta[i] = meta_byte(i);
  int agreed = 0, peer_on = 0;
  if ((rc = ds4tp_agree_drafter_split(tp, 1, meta, &agreed, &peer_on)) != DS4TP_OK)
    return fail(tp, "drafter split", rc);
  if (!agreed || !peer_on) return fail(tp, "drafter split not agreed", DS4TP_EPROTO);
  if (manual) {
    rc = worker_manual(tp, &w);
  } else {
    ds4tp_worker_ops ops;
    ds4tp_worker_ops_init(&ops);
    ds4tp_command_fn *slots[] = {&ops.session_create, &ops.session_destroy, &ops.sync,
                                 &ops.sync_images, &ops.eval, &ops.mtp, &ops.rewind,
                                 &ops.invalidate, &ops.spec_restore, &ops.eval_batch,
                                 &ops.mixed_batch, &ops.verify, &ops.verify_commit, &ops.draft,
                                 &ops.hash};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) *slots[i] = worker_op;
    rc = ds4tp_worker_run(tp, &ops, &w);
  }
  if (rc == DS4TP_EFAILED && w.failed_on_purpose) {
    printf("worker reported the failure it was asked to\n");
    rc = DS4TP_OK;
  }
  if (rc != DS4TP_OK) return fail(tp, manual ? "manual worker" : "worker loop", rc);
  if (!w.failed_on_purpose) {
    char bye = 0; /* the leader's closing handshake after STOP */
    if ((rc = ds4tp_small_exchange(tp, "W", &bye, 1)) != DS4TP_OK) return fail(tp, "closing handshake", rc);
    if (bye != 'L') return fail(tp, "closing handshake byte", DS4TP_EPROTO);
  }
  printf("worker served %d commands\n", w.commands);
  return 0;
}

#define STEP(what, call)                                     \
  do {                                                       \
    int rc_ = (call);                                        \
    if (rc_ != DS4TP_OK) return fail(tp, what, rc_);         \
  } while (0)
#define CHECK(what, cond)                                                 \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "ds4tp_peer: %s: check failed: %s\n", what, #cond); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

static int read_logits(ds4tp_pair *tp, int kind, uint32_t row) {
  float half[LF];
  STEP("recv logits", ds4tp_recv_logits(tp, half, LF));
  for (uint32_t i = 0; i < LF; i++) CHECK("logits", half[i] == logit(kind, row, i));
  return 0;
}

static int control_leader(ds4tp_pair *tp, int fail_on_purpose) {
  int32_t status = -1;
  uint32_t position = 0;
  STEP("connect", ds4tp_connect(tp));
  ds4tp_slab_layout l;
  memset(&l, 0, sizeof l);
  l.size = sizeof l;
  ds4tp_slab_layout_get(tp, &l);
  uint32_t n_embd = (uint32_t)(l.vec_bytes / 4), n_layer = l.slots / 2;

  uint32_t caps = LEADER_CAPS;
  STEP("exec mode", ds4tp_agree_execution_mode(tp, EXEC_FLAGS, &caps));
  CHECK("exec mode", caps == (LEADER_CAPS & WORKER_CAPS));
  uint8_t meta[DS4TP_DRAFTER_META_BYTES];
  for (uint32_t i = 0; i < sizeof meta; i++) meta[i] = meta_byte(i);
  int agreed = 0, peer_on = 0;
  STEP("drafter split", ds4tp_agree_drafter_split(tp, 1, meta, &agreed, &peer_on));
  CHECK("drafter split", agreed == 1 && peer_on == 1);

  STEP("session create", ds4tp_send_session_create(tp, SID, 512));
  STEP("ack", ds4tp_wait_ack(tp, SID, &status));
  CHECK("session create", status == DS4TP_ACK_DONE);
  STEP("sync", ds4tp_send_sync(tp, SID, TEN, 10, LF));
  STEP("sync ack", ds4tp_wait_sync(tp, SID, &status, &position));
  CHECK("sync", status == 0 && position == 10);
  if (read_logits(tp, DS4TP_CMD_SYNC, 0)) return 1;

  STEP("session create 2", ds4tp_send_session_create(tp, SID2, 256));
  STEP("ack", ds4tp_wait_ack(tp, SID2, &status));
  STEP("sync 2", ds4tp_send_sync(tp, SID2, TEN, 10, LF));
  int cancelled = 0;
  STEP("checkpoint", ds4tp_sync_checkpoint(tp, 1, 5, 10, 0, &cancelled));
  CHECK("checkpoint", cancelled == 1);
  STEP("sync ack 2", ds4tp_wait_sync(tp, SID2, &status, &position));
  CHECK("cancelled sync", status == DS4TP_ACK_CANCELLED && position == 5);

  float *embd = malloc(sizeof(float) * 2 * n_embd);
  if (!embd) return 1;
  ds4tp_image_span im = make_image(n_embd, embd);
  int rc = ds4tp_send_sync_images(tp, SID, TEN, 6, &im, 1, LF);
  free(embd); /* copied into the frame */
  STEP("sync images", rc);
  STEP("sync images ack", ds4tp_wait_sync(tp, SID, &status, &position));
  CHECK("sync images", status == 0 && position == 6);
  if (read_logits(tp, DS4TP_CMD_SYNC_IMAGES, 0)) return 1;

  STEP("eval", ds4tp_send_eval(tp, SID, 1, 77, LF));
  if (read_logits(tp, DS4TP_CMD_EVAL, 0)) return 1;
  STEP("mtp", ds4tp_send_mtp(tp, SID, 2, 78, 3));
  STEP("mtp ack", ds4tp_wait_ack(tp, SID, &status));
  CHECK("mtp", status == 0);
  STEP("rewind", ds4tp_send_rewind(tp, SID, 5));
  STEP("invalidate", ds4tp_send_invalidate(tp, SID));
  STEP("spec restore", ds4tp_send_spec_restore(tp, SID, 4));
  STEP("spec restore ack", ds4tp_wait_ack(tp, SID, &status));
  CHECK("spec restore", status == DS4TP_ACK_UNAVAILABLE);

  ds4tp_batch_item items[2] = {{SID, 5, 0}, {SID2, 6, 0}};
  STEP("eval batch", ds4tp_send_eval_batch(tp, items, 2, LF));
  STEP("eval batch ack", ds4tp_wait_ack(tp, 0, &status));
  CHECK("eval batch", status == 0);
  for (uint32_t row = 0; row < 2; row++)
    if (read_logits(tp, DS4TP_CMD_EVAL_BATCH, row)) return 1;
  static const int32_t prompt[3] = {9, 8, 7};
  ds4tp_batch_item one = {SID2, 3, 0};
  STEP("mixed batch", ds4tp_send_mixed_batch(tp, SID, prompt, 3, &one, 1, LF));
  STEP("mixed batch ack", ds4tp_wait_ack(tp, SID, &status));
  CHECK("mixed batch", status == 0);
  for (uint32_t row = 0; row < 2; row++)
    if (read_logits(tp, DS4TP_CMD_MIXED_BATCH, row)) return 1;

  static const int32_t drafts[3] = {11, 12, 13};
  STEP("verify", ds4tp_send_verify(tp, SID, drafts, 3, DS4TP_VERIFY_DRAFT_SHARED));
  uint32_t gpl = 1;
  STEP("block begin", ds4tp_block_begin(tp, 3, n_layer, &gpl));
  CHECK("block begin", gpl == 1);
  char peer[8];
  STEP("small exchange", ds4tp_small_exchange(tp, "leader!!", peer, 8));
  CHECK("small exchange", !memcmp(peer, "worker!!", 8));
  float row[HEAD_FLOATS];
  STEP("head row", ds4tp_head_row_recv(tp, 1, row, HEAD_FLOATS));
  for (uint32_t i = 0; i < HEAD_FLOATS; i++) CHECK("head row", row[i] == head_value(1, i));
  STEP("block end", ds4tp_block_end(tp));
  STEP("verify commit", ds4tp_send_verify_commit(tp, DS4TP_COMMIT_PREFIX, 2, 0));
  STEP("draft", ds4tp_send_draft(tp, SID, 5, 7, DS4TP_DRAFT_PROPOSE));

  STEP("hash check", ds4tp_hash_check(tp, SID, 9, GOOD_HASH));
  rc = ds4tp_hash_check(tp, SID, 10, 1);
  CHECK("diverged hash", rc == DS4TP_EDIVERGED && !ds4tp_failed(tp));

  STEP("destroy 2", ds4tp_send_session_destroy(tp, SID2));
  STEP("destroy 2 ack", ds4tp_wait_ack(tp, SID2, &status));
  STEP("destroy", ds4tp_send_session_destroy(tp, SID));
  STEP("destroy ack", ds4tp_wait_ack(tp, SID, &status));
  CHECK("destroy", status == 0);
  if (fail_on_purpose) {
    STEP("destroy bad", ds4tp_send_session_destroy(tp, BAD_SID));
    rc = ds4tp_wait_ack(tp, BAD_SID, &status);
    /* The header promises EREMOTE with *status set. Today the library
     * leaves *status unset, and when its watcher sees the worker close
     * first the call returns EFAILED naming the same failure; both are
     * accepted until that is fixed, the worker's status and words are not
     * optional. */
    CHECK("remote failure", (rc == DS4TP_EREMOTE || rc == DS4TP_EFAILED) &&
                                ds4tp_remote_status(tp) == FAIL_STATUS && ds4tp_failed(tp));
    CHECK("remote message", strstr(ds4tp_errmsg(tp), "no session 999") != NULL);
    printf("leader got the worker's failure: %s\n", ds4tp_errmsg(tp));
    return 0;
  }
  STEP("stop", ds4tp_send_stop(tp));
  /* Closing handshake: returns once the worker has read STOP, so freeing
   * this pair cannot overtake it. (Without it, a manual worker's
   * ds4tp_recv_command can report the closed connection instead of the
   * STOP queued before it: a library race.) */
  char bye = 0;
  STEP("closing handshake", ds4tp_small_exchange(tp, "L", &bye, 1));
  CHECK("closing handshake", bye == 'W');
  return 0;
}

static int parse_transport(const char *s) {
  for (int t = DS4TP_TRANSPORT_AUTO; t <= DS4TP_TRANSPORT_RDMA; t++)
    if (!strcmp(s, ds4tp_transport_name(t))) return t;
  return -1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "layout")) {
    print_layout();
    return 0;
  }
  if (argc < 2 || (strcmp(argv[1], "leader") && strcmp(argv[1], "worker"))) {
    fprintf(stderr, "usage: ds4tp_peer layout | leader|worker [--port P] [--layers N] "
                    "[--embd N] [--tokens N] [--transport auto|tcp|shm] "
                    "[--control [--fail | --manual]]\n");
    return 2;
  }
  int leader = !strcmp(argv[1], "leader");
  int port = 0, layers = 4, embd = 64, tokens = 3, transport = DS4TP_TRANSPORT_AUTO;
  int control = 0, manual = 0, fail_on_purpose = 0;
  for (int i = 2; i < argc; i += 2) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(k, "--control") || !strcmp(k, "--manual") || !strcmp(k, "--fail")) {
      control |= 1;
      manual |= !strcmp(k, "--manual");
      fail_on_purpose |= !strcmp(k, "--fail");
      i--; /* a flag without a value */
    } else if (!strcmp(k, "--port")) port = atoi(v);
    else if (!strcmp(k, "--layers")) layers = atoi(v);
    else if (!strcmp(k, "--embd")) embd = atoi(v);
    else if (!strcmp(k, "--tokens")) tokens = atoi(v);
    else if (!strcmp(k, "--transport")) transport = parse_transport(v);
    else {
      fprintf(stderr, "ds4tp_peer: unknown option %s\n", k);
      return 2;
    }
  }
  if (transport < 0 || layers < 1 || embd < 1 || tokens < 0) {
    fprintf(stderr, "ds4tp_peer: bad option value\n");
    return 2;
  }
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = 0xB1D;
  id.model_id = 7;
  id.n_layer = (uint32_t)layers;
  id.n_embd = (uint32_t)embd;
  id.n_vocab = 1000;
  id.quant_bits = 32;
  id.ctx_size = 512;
  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.role = leader ? DS4TP_ROLE_LEADER : DS4TP_ROLE_WORKER;
  opt.transport = transport;
  if (leader) opt.listen_port = port;
  else opt.leader_port = port;
  opt.connect_timeout_ms = 30000;
  opt.gate_timeout_ms = 5000;
  opt.frame_timeout_ms = 20000;
  opt.log_level = DS4TP_LOG_WARN;
  ds4tp_pair *tp = NULL;
  int rc = ds4tp_new(&tp, &opt, &id);
  if (rc != DS4TP_OK) return fail(NULL, "new", rc);
  if (leader) {
    printf("port %d\n", ds4tp_listen_port(tp));
    fflush(stdout);
  }
  if (control) rc = leader ? control_leader(tp, fail_on_purpose) : control_worker(tp, manual);
  else rc = play(tp, tokens);
  if (rc == 0) printf("peer OK: rank %d, transport %s\n", ds4tp_rank(tp),
                      ds4tp_transport_name(ds4tp_transport_active(tp)));
  ds4tp_free(tp);
  return rc;
}
