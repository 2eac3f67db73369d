/*
 * Stand-in for the ds4.h of the engines with multimodal prompts and the
 * gate slot mask (the seed lineage: the seed header, socrat3/ds4,
 * 1bit-MONSTER/ds4): the legacy types plus ds4_vision_span and the mask
 * width as an enum constant, as those engines declare it.
 * Our own text, for compat/ds4's conformance test only.
 */
#ifndef DS4_H
#define DS4_H
#include <stdbool.h>
#include <stdint.h>

typedef struct ds4_engine ds4_engine;

enum { DS4_TP_GATE_MASK_WORDS = 3 };

/* An encoded image, nested in the span as the engines declare it. */
typedef struct {
  float *data; /* token_count rows of the model's n_embd floats */
  uint32_t token_count;
  uint32_t layout;
  uint32_t grid_width, grid_height;
  uint32_t width, height;
  uint32_t content_width, content_height;
  uint8_t fingerprint[32];
} ds4_vision_embedding;

typedef struct {
  uint32_t token_start;
  ds4_vision_embedding embedding;
} ds4_vision_span;

typedef enum { DS4_DISTRIBUTED_NONE = 0, DS4_DISTRIBUTED_COORDINATOR, DS4_DISTRIBUTED_WORKER } ds4_distributed_role;

typedef struct {
  uint32_t start, end;
  bool has_output;
  bool set;
} ds4_distributed_layers;

typedef struct {
  ds4_distributed_role role;
  ds4_distributed_layers layers;
  const char *listen_host;
  int listen_port;
  const char *coordinator_host;
  int coordinator_port;
  uint32_t prefill_chunk;
  uint32_t prefill_window;
  uint32_t activation_bits;
  bool replay_check;
  bool debug;
} ds4_distributed_options;

typedef enum { DS4_TP_NONE = 0, DS4_TP_LEADER, DS4_TP_WORKER } ds4_tp_role;
typedef enum { DS4_TP_TRANSPORT_AUTO = 0, DS4_TP_TRANSPORT_RDMA, DS4_TP_TRANSPORT_TCP } ds4_tp_transport;

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

typedef struct {
  int backend;
  bool ssd_streaming;
  ds4_tp_options tp;
} ds4_engine_options;

#endif
