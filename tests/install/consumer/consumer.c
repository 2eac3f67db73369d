/*
 * An out-of-tree C user of an installed libds4tp: built against the
 * install prefix only (find_package or pkg-config). Leader here, worker in
 * a forked child, over loopback: bring-up, two row gates and a big gate,
 * payloads checked bit for bit. Prints "consumer OK" on success.
 */
#include <ds4tp/ds4tp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N_LAYER = 2, N_EMBD = 64, BIG = 10000 };

static uint32_t word(int rank, uint64_t seq, uint32_t i) {
  return (uint32_t)rank * 0x9e3779b1u ^ (uint32_t)seq * 0x85ebca6bu ^ i * 0xc2b2ae35u;
}

static int fail(const char *what, ds4tp_pair *tp, int rc) {
  fprintf(stderr, "consumer: %s: %s: %s\n", what, ds4tp_err_name(rc),
          tp ? ds4tp_errmsg(tp) : ds4tp_last_error());
  return 1;
}

static int run(ds4tp_pair *tp) {
  int rank = ds4tp_rank(tp), rc;
  if ((rc = ds4tp_connect(tp)) != DS4TP_OK) return fail("connect", tp, rc);
  if ((rc = ds4tp_attach_slab(tp, NULL, 0)) != DS4TP_OK) return fail("attach", tp, rc);
  unsigned char *slab = ds4tp_slab_base(tp);
  uint64_t seq = 0;
  for (uint32_t layer = 0; layer < N_LAYER; layer++) {
    uint32_t *out = (uint32_t *)(slab + ds4tp_slab_out_offset(tp, layer, DS4TP_GATE_ATTN));
    uint32_t *in = (uint32_t *)(slab + ds4tp_slab_in_offset(tp, layer, DS4TP_GATE_ATTN));
    seq++;
    for (uint32_t i = 0; i < N_EMBD; i++) out[i] = word(rank, seq, i);
    if ((rc = ds4tp_gate_exchange(tp, layer, DS4TP_GATE_ATTN, seq)) != DS4TP_OK)
      return fail("gate", tp, rc);
    for (uint32_t i = 0; i < N_EMBD; i++)
      if (in[i] != word(1 - rank, seq, i)) return fail("gate payload", tp, DS4TP_EPROTO);
    /* FFN gate: the identity's default schedule fires every slot in order. */
    out = (uint32_t *)(slab + ds4tp_slab_out_offset(tp, layer, DS4TP_GATE_FFN));
    in = (uint32_t *)(slab + ds4tp_slab_in_offset(tp, layer, DS4TP_GATE_FFN));
    seq++;
    for (uint32_t i = 0; i < N_EMBD; i++) out[i] = word(rank, seq, i);
    if ((rc = ds4tp_gate_exchange(tp, layer, DS4TP_GATE_FFN, seq)) != DS4TP_OK)
      return fail("gate", tp, rc);
    for (uint32_t i = 0; i < N_EMBD; i++)
      if (in[i] != word(1 - rank, seq, i)) return fail("gate payload", tp, DS4TP_EPROTO);
  }
  uint32_t *bout = malloc(BIG * 4), *bin = malloc(BIG * 4);
  if (!bout || !bin) return 1;
  for (uint32_t i = 0; i < BIG; i++) bout[i] = word(rank, 777, i);
  rc = ds4tp_big_gate_exchange(tp, 0, 1, bout, bin, BIG * 4);
  int bad = 0;
  for (uint32_t i = 0; rc == DS4TP_OK && i < BIG; i++) bad |= bin[i] != word(1 - rank, 777, i);
  free(bout);
  free(bin);
  if (rc != DS4TP_OK) return fail("big gate", tp, rc);
  if (bad) return fail("big gate payload", tp, DS4TP_EPROTO);
  return 0;
}

int main(void) {
  if (ds4tp_version() != DS4TP_VERSION_HEX) {
    fprintf(stderr, "consumer: header %x but library %x\n", DS4TP_VERSION_HEX, ds4tp_version());
    return 1;
  }
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.model_bytes = 1234;
  id.n_layer = N_LAYER;
  id.n_embd = N_EMBD;
  id.n_vocab = 100;
  id.quant_bits = 32;
  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.role = DS4TP_ROLE_LEADER;
  opt.transport = DS4TP_TRANSPORT_TCP;
  opt.listen_port = 0;
  opt.connect_timeout_ms = 20000;
  opt.gate_timeout_ms = 5000;
  opt.log_level = DS4TP_LOG_WARN;
  ds4tp_pair *tp = NULL;
  int rc = ds4tp_new(&tp, &opt, &id);
  if (rc != DS4TP_OK) return fail("new leader", NULL, rc);

  fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    /* The worker gets its own handle and must not hold the listener. */
    ds4tp_options w = opt;
    w.role = DS4TP_ROLE_WORKER;
    w.leader_port = ds4tp_listen_port(tp);
    ds4tp_free(tp);
    ds4tp_pair *wp = NULL;
    int wrc = ds4tp_new(&wp, &w, &id);
    if (wrc != DS4TP_OK) _exit(fail("new worker", NULL, wrc));
    wrc = run(wp);
    ds4tp_free(wp);
    _exit(wrc);
  }
  int lrc = run(tp);
  const char *transport = ds4tp_transport_name(ds4tp_transport_active(tp));
  ds4tp_free(tp);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "consumer: worker failed (status 0x%x)\n", status);
    return 1;
  }
  if (lrc != 0) return 1;
  printf("consumer OK: ds4tp %s, transport %s\n", ds4tp_version_string(), transport);
  return 0;
}
