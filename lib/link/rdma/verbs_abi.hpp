// Our declarations of the verbs ABI: exactly the structs, constants and
// calls the binding (verbs_loader, verbs_device) touches, laid out as
// rdma-core's <infiniband/verbs.h> lays them out. Apple's librdma
// (macOS 26.2+) follows the same ABI but ships no header outside the
// SDK, so the binding compiles against this file on every platform: a
// Mac builds what Linux runs. tests/unit/test_verbs_abi.cpp checks every size
// and offset used here against rdma-core's header, field by field.
//
// Rules that keep this honest:
// - A struct the binding allocates, copies or passes by pointer for the
//   library to fill is declared whole (unused runs as reserved_ arrays of
//   the same size and alignment), so sizeof matches.
// - A struct only the library allocates (Cq, Qp) is declared as the prefix
//   the binding reads; never create, copy or sizeof one.
// - Opaque handles (Device, Pd, CompChannel) stay incomplete.
// - ABI enums are 4-byte ints here; the constants are the ABI's values.
// 64-bit targets only (LP64: Linux and macOS on x86_64 and arm64).
//
// Only verbs_*.cpp and tests include this header.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace ds4tp::rdma::abi {

static_assert(sizeof(void *) == 8 && sizeof(long) == 8, "the verbs ABI here is LP64 only");

struct Device;       // ibv_device: only its pointer is handed back
struct Pd;           // ibv_pd
struct CompChannel;  // ibv_comp_channel: never used (always nullptr)
struct Cq;
struct Qp;
struct Wc;
struct SendWr;
struct RecvWr;
struct PortAttr;

// ---- constants (values of rdma-core's enums) ----------------------------

inline constexpr int kPortNop = 0, kPortDown = 1, kPortInit = 2, kPortArmed = 3,
                     kPortActive = 4, kPortActiveDefer = 5;                 // ibv_port_state
inline constexpr uint8_t kLinkLayerInfiniband = 1, kLinkLayerEthernet = 2;  // IBV_LINK_LAYER_*
inline constexpr int kMtu256 = 1, kMtu4096 = 5;                             // ibv_mtu
inline constexpr uint32_t kGidTypeIb = 0, kGidTypeRoceV1 = 1, kGidTypeRoceV2 = 2;
inline constexpr int kQpsReset = 0, kQpsInit = 1, kQpsRtr = 2, kQpsRts = 3;  // ibv_qp_state
inline constexpr int kQptRc = 2, kQptUc = 3;                                // ibv_qp_type
inline constexpr int kAccessLocalWrite = 1, kAccessRemoteWrite = 2, kAccessRemoteRead = 4;
inline constexpr int kWrSendWithImm = 3;                                    // ibv_wr_opcode
inline constexpr unsigned kSendSignaled = 1u << 1;                          // ibv_send_flags
inline constexpr unsigned kWcWithImm = 1u << 1;                             // ibv_wc_flags
// ibv_qp_attr_mask bits.
inline constexpr int kQpState = 1 << 0, kQpAccessFlags = 1 << 3, kQpPkeyIndex = 1 << 4,
                     kQpPort = 1 << 5, kQpAv = 1 << 7, kQpPathMtu = 1 << 8,
                     kQpTimeout = 1 << 9, kQpRetryCnt = 1 << 10, kQpRnrRetry = 1 << 11,
                     kQpRqPsn = 1 << 12, kQpMaxQpRdAtomic = 1 << 13, kQpMinRnrTimer = 1 << 15,
                     kQpSqPsn = 1 << 16, kQpMaxDestRdAtomic = 1 << 17, kQpDestQpn = 1 << 20;

// ---- addresses -------------------------------------------------------------

struct GidHalves {  // big-endian on the wire
  uint64_t subnet_prefix;
  uint64_t interface_id;
};
union Gid {  // ibv_gid
  uint8_t raw[16];
  GidHalves global;
};

struct GidEntry {  // ibv_gid_entry (_ibv_query_gid_ex)
  Gid gid;
  uint32_t gid_index;
  uint32_t port_num;
  uint32_t gid_type;
  uint32_t ndev_ifindex;
};

struct GlobalRoute {  // ibv_global_route
  Gid dgid;
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
};

struct AhAttr {  // ibv_ah_attr
  GlobalRoute grh;
  uint16_t dlid;
  uint8_t sl;
  uint8_t src_path_bits;
  uint8_t static_rate;
  uint8_t is_global;
  uint8_t port_num;
};

// ---- the context -----------------------------------------------------------

// ibv_context_ops: 32 entries; the data path dispatches through three.
struct ContextOps {
  void (*reserved_a[11])();  // _compat_query_device .. _compat_create_cq
  int (*poll_cq)(Cq *cq, int num_entries, Wc *wc);
  void (*reserved_b[13])();  // req_notify_cq .. _compat_destroy_qp
  int (*post_send)(Qp *qp, SendWr *wr, SendWr **bad_wr);
  int (*post_recv)(Qp *qp, RecvWr *wr, RecvWr **bad_wr);
  void (*reserved_c[5])();  // _compat_create_ah .. _compat_async_event
};

// The same on every LP64 platform; asserted here so that the macOS build,
// which has no rdma-core header to compare with, checks them too.
static_assert(sizeof(ContextOps) == 32 * 8 && offsetof(ContextOps, poll_cq) == 11 * 8 &&
                  offsetof(ContextOps, post_send) == 25 * 8 &&
                  offsetof(ContextOps, post_recv) == 26 * 8,
              "ContextOps: the data-path entries moved");

// ibv_context. The mutex is the platform's pthread_mutex_t, as the
// library was built with it (40 bytes on x86_64 glibc, 64 on Darwin).
struct Context {
  Device *device;
  ContextOps ops;
  int cmd_fd;
  int async_fd;
  int num_comp_vectors;
  pthread_mutex_t mutex;
  void *abi_compat;  // all ones: this context is the tail of an extended one
};

// The end of verbs_context, from query_port on. The full struct grows at
// the front (new ops go first), so the tail is what every version agrees
// on, and the "is query_port there" test below is size-independent.
struct ExtendedContextTail {
  int (*query_port)(Context *context, uint8_t port_num, PortAttr *attr, size_t attr_len);
  void (*reserved_ops[37])();  // advise_mr .. close_xrcd
  uint64_t reserved_;
  size_t sz;  // bytes of the provider's verbs_context
  Context context;
};

static_assert(offsetof(Context, ops) == 8, "Context.ops moved");
static_assert(offsetof(ExtendedContextTail, sz) == 39 * 8 &&
                  offsetof(ExtendedContextTail, context) == 40 * 8,
              "ExtendedContextTail: query_port is no longer 39 words before sz");

// verbs_get_ctx_op(context, query_port): the extended context when the
// library filled its query_port op, else nullptr.
inline ExtendedContextTail *extended_query_port(Context *context) {
  if (reinterpret_cast<uintptr_t>(context->abi_compat) != UINTPTR_MAX) return nullptr;
  auto *tail = reinterpret_cast<ExtendedContextTail *>(reinterpret_cast<uint8_t *>(context) -
                                                       offsetof(ExtendedContextTail, context));
  if (tail->sz < sizeof(ExtendedContextTail) || tail->query_port == nullptr) return nullptr;
  return tail;
}

// ---- queries -----------------------------------------------------------------

struct DeviceAttr {  // ibv_device_attr
  char fw_ver[64];
  uint64_t node_guid;
  uint64_t sys_image_guid;
  uint64_t max_mr_size;
  uint64_t page_size_cap;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  int max_qp;
  int max_qp_wr;
  unsigned device_cap_flags;
  int max_sge;
  int max_sge_rd;
  int max_cq;
  int max_cqe;
  int reserved_[22];  // max_mr .. max_srq_sge
  uint16_t max_pkeys;
  uint8_t local_ca_ack_delay;
  uint8_t phys_port_cnt;
};

// ibv_port_attr, through port_cap_flags2 (kPortAttrBytes), plus room:
// newer libraries append fields (rdma-core 45: active_speed_ex), and an
// exported ibv_query_port that writes its own size must not overrun us.
struct PortAttr {
  int state;
  int max_mtu;
  int active_mtu;
  int gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint32_t bad_pkey_cntr;
  uint32_t qkey_viol_cntr;
  uint16_t pkey_tbl_len;
  uint16_t lid;
  uint16_t sm_lid;
  uint8_t lmc;
  uint8_t max_vl_num;
  uint8_t sm_sl;
  uint8_t subnet_timeout;
  uint8_t init_type_reply;
  uint8_t active_width;
  uint8_t active_speed;
  uint8_t phys_state;
  uint8_t link_layer;
  uint8_t flags;
  uint16_t port_cap_flags2;
  uint8_t room_[64];
};
inline constexpr size_t kPortAttrBytes = offsetof(PortAttr, room_);

// ---- memory, queues --------------------------------------------------------

struct Mr {  // ibv_mr
  Context *context;
  Pd *pd;
  void *addr;
  size_t length;
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
};

struct Cq {  // ibv_cq, prefix
  Context *context;
};

struct Qp {  // ibv_qp, prefix
  Context *context;
  void *qp_context;
  Pd *pd;
  Cq *send_cq;
  Cq *recv_cq;
  void *srq;
  uint32_t handle;
  uint32_t qp_num;
  int state;
  int qp_type;
};

struct QpCap {  // ibv_qp_cap
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
};

struct QpInitAttr {  // ibv_qp_init_attr
  void *qp_context;
  Cq *send_cq;
  Cq *recv_cq;
  void *srq;
  QpCap cap;
  int qp_type;
  int sq_sig_all;
};

struct QpAttr {  // ibv_qp_attr
  int qp_state;
  int cur_qp_state;
  int path_mtu;
  int path_mig_state;
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  unsigned qp_access_flags;
  QpCap cap;
  AhAttr ah_attr;
  AhAttr alt_ah_attr;
  uint16_t pkey_index;
  uint16_t alt_pkey_index;
  uint8_t en_sqd_async_notify;
  uint8_t sq_draining;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t alt_port_num;
  uint8_t alt_timeout;
  uint32_t rate_limit;
};

// ---- work requests and completions ---------------------------------------

struct Sge {  // ibv_sge
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

struct SendWr {  // ibv_send_wr
  uint64_t wr_id;
  SendWr *next;
  Sge *sg_list;
  int num_sge;
  int opcode;
  unsigned send_flags;
  uint32_t imm_data;        // big-endian; shares storage with invalidate_rkey
  uint64_t reserved_wr[4];  // union wr: rdma, atomic, ud
  uint32_t reserved_qp_type;
  uint64_t reserved_bind[6];  // union bind_mw / tso
};

struct RecvWr {  // ibv_recv_wr
  uint64_t wr_id;
  RecvWr *next;
  Sge *sg_list;
  int num_sge;
};

struct Wc {  // ibv_wc
  uint64_t wr_id;
  int status;
  int opcode;
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data;  // big-endian; shares storage with invalidated_rkey
  uint32_t qp_num;
  uint32_t src_qp;
  unsigned wc_flags;
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
};

}  // namespace ds4tp::rdma::abi
