/*
 * Test stand-in for an engine's ds4.h: defines the engine types the seed
 * ds4_tp.h takes from the engine, with the fields the seed engine uses.
 * Written for compat/ds4's own tests; a real engine uses its own ds4.h.
 */
#ifndef DS4_TEST_ENGINE_H
#define DS4_TEST_ENGINE_H
#include <stdbool.h>
#include <stdint.h>

#define DS4_TP_GATE_MASK_WORDS 3
/* This header keeps the flat ds4_vision_span (compat's layout 2); the
 * engines' nested one is tested with engines/multimodal/ds4.h. */
#define DS4_TP_COMPAT_VISION_SPAN 2

typedef enum {
  DS4_TP_NONE = 0,
  DS4_TP_LEADER = 1,
  DS4_TP_WORKER = 2
} ds4_tp_role;

typedef enum {
  DS4_TP_TRANSPORT_AUTO = 0,
  DS4_TP_TRANSPORT_RDMA = 1,
  DS4_TP_TRANSPORT_TCP = 2,
  DS4_TP_TRANSPORT_SHM = 3 /* compat extension value */
} ds4_tp_transport;

typedef struct {
  ds4_tp_role role;
  bool requested;
  const char *listen_host;
  int listen_port;
  const char *leader_host;
  int leader_port;
  ds4_tp_transport transport;
  const char *rdma_device;
  int rdma_gid_index;
  bool rdma_gid_index_set;
  bool glm_token_prefill;
  int debug_hash;
} ds4_tp_options;

typedef enum {
  DS4_DIST_NONE = 0,
  DS4_DIST_COORDINATOR = 1,
  DS4_DIST_WORKER = 2
} ds4_dist_role;

typedef struct {
  ds4_dist_role role;
  const char *listen_host;
  int listen_port;
  const char *coordinator_host;
  int coordinator_port;
  bool layers_set; /* --layers A:B (pipeline slices) */
} ds4_distributed_options;

/* Options TP cannot run with, in this test engine. */
#define DS4_TP_COMPAT_DIST_EXTRA_SET(dist) ((dist)->layers_set)

typedef struct {
  uint32_t token_start;
  uint32_t token_count;
  uint32_t data_width;
  uint32_t width, height;
  uint32_t content_width, content_height;
  uint8_t fingerprint[32];
  float *embd; /* token_count * data_width */
} ds4_vision_span;

typedef struct {
  int backend;
  bool ssd_streaming;
} ds4_engine_options;

typedef struct ds4_engine ds4_engine;

#endif
