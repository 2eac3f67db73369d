/*
 * Stand-in for the ds4.h of the engines without multimodal support (the
 * July 2026 lineage: mcx/ds4, wkljohn/ds4-strix-halo-tp-odinlink): the
 * engine types compat/ds4/ds4_tp.h takes from the engine, with the fields
 * those engines have. No ds4_vision_span, no DS4_TP_GATE_MASK_WORDS.
 * Our own text, for compat/ds4's conformance test only.
 */
#ifndef DS4_H
#define DS4_H
#include <stdbool.h>
#include <stdint.h>

typedef struct ds4_engine ds4_engine;

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
