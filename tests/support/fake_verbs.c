/* A stand-in verbs library for the loader tests (test_platform): every symbol
 * the loader resolves, no devices. Built twice: with
 * FAKE_VERBS_DATA_PATH it also exports ibv_post_send, ibv_post_recv and
 * ibv_poll_cq as functions, as Apple's librdma may; without, like
 * rdma-core, whose data path is header inlines. Never part of libds4tp. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define FAKE __attribute__((visibility("default")))

FAKE void **ibv_get_device_list(int *num) {
  if (num) *num = 0;
  return calloc(1, sizeof(void *));
}
FAKE void ibv_free_device_list(void **list) { free(list); }
FAKE const char *ibv_get_device_name(void *dev) { (void)dev; return "fake0"; }
FAKE void *ibv_open_device(void *dev) { (void)dev; errno = ENODEV; return NULL; }
FAKE int ibv_close_device(void *ctx) { (void)ctx; return 0; }
FAKE int ibv_query_device(void *ctx, void *attr) { (void)ctx; (void)attr; return ENODEV; }
FAKE int ibv_query_port(void *ctx, uint8_t port, void *attr) {
  (void)ctx; (void)port; (void)attr;
  return ENODEV;
}
FAKE int ibv_query_gid(void *ctx, uint8_t port, int index, void *gid) {
  (void)ctx; (void)port; (void)index; (void)gid;
  return ENODEV;
}
FAKE void *ibv_alloc_pd(void *ctx) { (void)ctx; return NULL; }
FAKE int ibv_dealloc_pd(void *pd) { (void)pd; return 0; }
FAKE void *ibv_reg_mr(void *pd, void *addr, size_t len, int access) {
  (void)pd; (void)addr; (void)len; (void)access;
  return NULL;
}
FAKE int ibv_dereg_mr(void *mr) { (void)mr; return 0; }
FAKE void *ibv_create_cq(void *ctx, int cqe, void *cq_ctx, void *ch, int vec) {
  (void)ctx; (void)cqe; (void)cq_ctx; (void)ch; (void)vec;
  return NULL;
}
FAKE int ibv_destroy_cq(void *cq) { (void)cq; return 0; }
FAKE void *ibv_create_qp(void *pd, void *attr) { (void)pd; (void)attr; return NULL; }
FAKE int ibv_modify_qp(void *qp, void *attr, int mask) { (void)qp; (void)attr; (void)mask; return ENODEV; }
FAKE int ibv_destroy_qp(void *qp) { (void)qp; return 0; }
FAKE const char *ibv_wc_status_str(int status) { (void)status; return "fake status"; }

#if defined(FAKE_VERBS_DATA_PATH)
FAKE int ibv_post_send(void *qp, void *wr, void **bad) { (void)qp; (void)wr; (void)bad; return ENODEV; }
FAKE int ibv_post_recv(void *qp, void *wr, void **bad) { (void)qp; (void)wr; (void)bad; return ENODEV; }
FAKE int ibv_poll_cq(void *cq, int n, void *wc) { (void)cq; (void)n; (void)wc; return -1; }
#endif
