// Our verbs ABI declarations (lib/link/rdma/verbs_abi.hpp) against
// rdma-core's <infiniband/verbs.h>, in one translation unit: every size,
// alignment, offset and constant the binding relies on. A drift fails the
// build, and the message names the field. Built where rdma-core's headers
// are installed (Linux with libibverbs-dev).
#include <infiniband/verbs.h>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>

#include "link/rdma/verbs_abi.hpp"

namespace abi = ds4tp::rdma::abi;

// The whole struct: same size and alignment.
#define SAME_STRUCT(ours, theirs)                                                      \
  static_assert(sizeof(abi::ours) == sizeof(theirs),                                   \
                "abi::" #ours ": size differs from rdma-core's " #theirs);             \
  static_assert(alignof(abi::ours) == alignof(theirs),                                 \
                "abi::" #ours ": alignment differs from rdma-core's " #theirs)

// One field under another name (a reserved_ run, a union member): same offset.
#define SAME_AT(ours, ofield, theirs, tfield)                                          \
  static_assert(offsetof(abi::ours, ofield) == offsetof(theirs, tfield),               \
                "abi::" #ours "." #ofield ": offset differs from rdma-core's " #theirs \
                "." #tfield)

// One field of the same name: same offset and size.
#define SAME_FIELD(ours, theirs, field)                                                \
  SAME_AT(ours, field, theirs, field);                                                 \
  static_assert(sizeof(abi::ours::field) == sizeof(theirs::field),                     \
                "abi::" #ours "." #field ": size differs from rdma-core's " #theirs    \
                "." #field)

#define SAME_CONST(ours, theirs) \
  static_assert(abi::ours == theirs, "abi::" #ours " differs from rdma-core's " #theirs)

// ---- addresses -------------------------------------------------------------
SAME_STRUCT(Gid, ibv_gid);
SAME_FIELD(Gid, ibv_gid, raw);
SAME_FIELD(Gid, ibv_gid, global);
SAME_STRUCT(GidEntry, ibv_gid_entry);
SAME_FIELD(GidEntry, ibv_gid_entry, gid);
SAME_FIELD(GidEntry, ibv_gid_entry, gid_index);
SAME_FIELD(GidEntry, ibv_gid_entry, port_num);
SAME_FIELD(GidEntry, ibv_gid_entry, gid_type);
SAME_FIELD(GidEntry, ibv_gid_entry, ndev_ifindex);
SAME_STRUCT(GlobalRoute, ibv_global_route);
SAME_FIELD(GlobalRoute, ibv_global_route, dgid);
SAME_FIELD(GlobalRoute, ibv_global_route, flow_label);
SAME_FIELD(GlobalRoute, ibv_global_route, sgid_index);
SAME_FIELD(GlobalRoute, ibv_global_route, hop_limit);
SAME_FIELD(GlobalRoute, ibv_global_route, traffic_class);
SAME_STRUCT(AhAttr, ibv_ah_attr);
SAME_FIELD(AhAttr, ibv_ah_attr, grh);
SAME_FIELD(AhAttr, ibv_ah_attr, dlid);
SAME_FIELD(AhAttr, ibv_ah_attr, sl);
SAME_FIELD(AhAttr, ibv_ah_attr, src_path_bits);
SAME_FIELD(AhAttr, ibv_ah_attr, static_rate);
SAME_FIELD(AhAttr, ibv_ah_attr, is_global);
SAME_FIELD(AhAttr, ibv_ah_attr, port_num);

// ---- the context -----------------------------------------------------------
SAME_STRUCT(ContextOps, ibv_context_ops);
SAME_AT(ContextOps, poll_cq, ibv_context_ops, poll_cq);
SAME_AT(ContextOps, post_send, ibv_context_ops, post_send);
SAME_AT(ContextOps, post_recv, ibv_context_ops, post_recv);
SAME_STRUCT(Context, ibv_context);
SAME_FIELD(Context, ibv_context, device);
SAME_FIELD(Context, ibv_context, ops);
SAME_FIELD(Context, ibv_context, cmd_fd);
SAME_FIELD(Context, ibv_context, async_fd);
SAME_FIELD(Context, ibv_context, num_comp_vectors);
SAME_FIELD(Context, ibv_context, mutex);
SAME_FIELD(Context, ibv_context, abi_compat);
// The tail of verbs_context: the same distances from query_port.
constexpr size_t kTheirTail = sizeof(verbs_context) - offsetof(verbs_context, query_port);
static_assert(sizeof(abi::ExtendedContextTail) == kTheirTail,
              "abi::ExtendedContextTail: size differs from verbs_context from query_port on");
static_assert(offsetof(abi::ExtendedContextTail, sz) ==
                  offsetof(verbs_context, sz) - offsetof(verbs_context, query_port),
              "abi::ExtendedContextTail.sz: distance from query_port differs from verbs_context");
static_assert(offsetof(abi::ExtendedContextTail, context) ==
                  offsetof(verbs_context, context) - offsetof(verbs_context, query_port),
              "abi::ExtendedContextTail.context: distance from query_port differs from "
              "verbs_context");
static_assert(sizeof(abi::ExtendedContextTail::query_port) == sizeof(verbs_context::query_port),
              "abi::ExtendedContextTail.query_port: size differs from verbs_context.query_port");

// ---- queries ---------------------------------------------------------------
SAME_STRUCT(DeviceAttr, ibv_device_attr);
SAME_FIELD(DeviceAttr, ibv_device_attr, fw_ver);
SAME_FIELD(DeviceAttr, ibv_device_attr, max_qp_wr);
SAME_FIELD(DeviceAttr, ibv_device_attr, max_sge);
SAME_FIELD(DeviceAttr, ibv_device_attr, max_cqe);
SAME_AT(DeviceAttr, reserved_, ibv_device_attr, max_mr);
SAME_FIELD(DeviceAttr, ibv_device_attr, max_pkeys);
SAME_FIELD(DeviceAttr, ibv_device_attr, phys_port_cnt);
// PortAttr is bigger on purpose (room for fields newer libraries write).
static_assert(sizeof(abi::PortAttr) >= sizeof(ibv_port_attr),
              "abi::PortAttr: smaller than rdma-core's ibv_port_attr");
static_assert(alignof(abi::PortAttr) == alignof(ibv_port_attr),
              "abi::PortAttr: alignment differs from rdma-core's ibv_port_attr");
static_assert(abi::kPortAttrBytes == offsetof(ibv_port_attr, port_cap_flags2) + 2,
              "abi::kPortAttrBytes: not the end of ibv_port_attr.port_cap_flags2");
SAME_FIELD(PortAttr, ibv_port_attr, state);
SAME_FIELD(PortAttr, ibv_port_attr, max_mtu);
SAME_FIELD(PortAttr, ibv_port_attr, active_mtu);
SAME_FIELD(PortAttr, ibv_port_attr, gid_tbl_len);
SAME_FIELD(PortAttr, ibv_port_attr, max_msg_sz);
SAME_FIELD(PortAttr, ibv_port_attr, lid);
SAME_FIELD(PortAttr, ibv_port_attr, phys_state);
SAME_FIELD(PortAttr, ibv_port_attr, link_layer);
SAME_FIELD(PortAttr, ibv_port_attr, flags);
SAME_FIELD(PortAttr, ibv_port_attr, port_cap_flags2);

// ---- memory, queues ----------------------------------------------------------
SAME_STRUCT(Mr, ibv_mr);
SAME_FIELD(Mr, ibv_mr, context);
SAME_FIELD(Mr, ibv_mr, addr);
SAME_FIELD(Mr, ibv_mr, length);
SAME_FIELD(Mr, ibv_mr, lkey);
SAME_FIELD(Mr, ibv_mr, rkey);
SAME_FIELD(Cq, ibv_cq, context);
SAME_FIELD(Qp, ibv_qp, context);
SAME_FIELD(Qp, ibv_qp, send_cq);
SAME_FIELD(Qp, ibv_qp, recv_cq);
SAME_FIELD(Qp, ibv_qp, qp_num);
SAME_FIELD(Qp, ibv_qp, state);
SAME_FIELD(Qp, ibv_qp, qp_type);
static_assert(sizeof(abi::Qp) <= sizeof(ibv_qp) && sizeof(abi::Cq) <= sizeof(ibv_cq),
              "abi::Qp/abi::Cq: a prefix longer than rdma-core's struct");
SAME_STRUCT(QpCap, ibv_qp_cap);
SAME_FIELD(QpCap, ibv_qp_cap, max_send_wr);
SAME_FIELD(QpCap, ibv_qp_cap, max_recv_wr);
SAME_FIELD(QpCap, ibv_qp_cap, max_send_sge);
SAME_FIELD(QpCap, ibv_qp_cap, max_recv_sge);
SAME_FIELD(QpCap, ibv_qp_cap, max_inline_data);
SAME_STRUCT(QpInitAttr, ibv_qp_init_attr);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, qp_context);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, send_cq);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, recv_cq);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, srq);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, cap);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, qp_type);
SAME_FIELD(QpInitAttr, ibv_qp_init_attr, sq_sig_all);
SAME_STRUCT(QpAttr, ibv_qp_attr);
SAME_FIELD(QpAttr, ibv_qp_attr, qp_state);
SAME_FIELD(QpAttr, ibv_qp_attr, path_mtu);
SAME_FIELD(QpAttr, ibv_qp_attr, rq_psn);
SAME_FIELD(QpAttr, ibv_qp_attr, sq_psn);
SAME_FIELD(QpAttr, ibv_qp_attr, dest_qp_num);
SAME_FIELD(QpAttr, ibv_qp_attr, qp_access_flags);
SAME_FIELD(QpAttr, ibv_qp_attr, cap);
SAME_FIELD(QpAttr, ibv_qp_attr, ah_attr);
SAME_FIELD(QpAttr, ibv_qp_attr, alt_ah_attr);
SAME_FIELD(QpAttr, ibv_qp_attr, pkey_index);
SAME_FIELD(QpAttr, ibv_qp_attr, max_rd_atomic);
SAME_FIELD(QpAttr, ibv_qp_attr, max_dest_rd_atomic);
SAME_FIELD(QpAttr, ibv_qp_attr, min_rnr_timer);
SAME_FIELD(QpAttr, ibv_qp_attr, port_num);
SAME_FIELD(QpAttr, ibv_qp_attr, timeout);
SAME_FIELD(QpAttr, ibv_qp_attr, retry_cnt);
SAME_FIELD(QpAttr, ibv_qp_attr, rnr_retry);
SAME_FIELD(QpAttr, ibv_qp_attr, rate_limit);

// ---- work requests and completions -------------------------------------------
SAME_STRUCT(Sge, ibv_sge);
SAME_FIELD(Sge, ibv_sge, addr);
SAME_FIELD(Sge, ibv_sge, length);
SAME_FIELD(Sge, ibv_sge, lkey);
SAME_STRUCT(SendWr, ibv_send_wr);
SAME_FIELD(SendWr, ibv_send_wr, wr_id);
SAME_FIELD(SendWr, ibv_send_wr, next);
SAME_FIELD(SendWr, ibv_send_wr, sg_list);
SAME_FIELD(SendWr, ibv_send_wr, num_sge);
SAME_FIELD(SendWr, ibv_send_wr, opcode);
SAME_FIELD(SendWr, ibv_send_wr, send_flags);
SAME_FIELD(SendWr, ibv_send_wr, imm_data);
SAME_AT(SendWr, reserved_wr, ibv_send_wr, wr);
SAME_AT(SendWr, reserved_qp_type, ibv_send_wr, qp_type);
SAME_AT(SendWr, reserved_bind, ibv_send_wr, bind_mw);
SAME_STRUCT(RecvWr, ibv_recv_wr);
SAME_FIELD(RecvWr, ibv_recv_wr, wr_id);
SAME_FIELD(RecvWr, ibv_recv_wr, next);
SAME_FIELD(RecvWr, ibv_recv_wr, sg_list);
SAME_FIELD(RecvWr, ibv_recv_wr, num_sge);
SAME_STRUCT(Wc, ibv_wc);
SAME_FIELD(Wc, ibv_wc, wr_id);
SAME_FIELD(Wc, ibv_wc, status);
SAME_FIELD(Wc, ibv_wc, opcode);
SAME_FIELD(Wc, ibv_wc, vendor_err);
SAME_FIELD(Wc, ibv_wc, byte_len);
SAME_FIELD(Wc, ibv_wc, imm_data);
SAME_FIELD(Wc, ibv_wc, qp_num);
SAME_FIELD(Wc, ibv_wc, wc_flags);

// ---- constants ---------------------------------------------------------------
SAME_CONST(kPortNop, IBV_PORT_NOP);
SAME_CONST(kPortDown, IBV_PORT_DOWN);
SAME_CONST(kPortInit, IBV_PORT_INIT);
SAME_CONST(kPortArmed, IBV_PORT_ARMED);
SAME_CONST(kPortActive, IBV_PORT_ACTIVE);
SAME_CONST(kPortActiveDefer, IBV_PORT_ACTIVE_DEFER);
SAME_CONST(kLinkLayerInfiniband, IBV_LINK_LAYER_INFINIBAND);
SAME_CONST(kLinkLayerEthernet, IBV_LINK_LAYER_ETHERNET);
SAME_CONST(kMtu256, IBV_MTU_256);
SAME_CONST(kMtu4096, IBV_MTU_4096);
SAME_CONST(kGidTypeIb, IBV_GID_TYPE_IB);
SAME_CONST(kGidTypeRoceV1, IBV_GID_TYPE_ROCE_V1);
SAME_CONST(kGidTypeRoceV2, IBV_GID_TYPE_ROCE_V2);
SAME_CONST(kQpsReset, IBV_QPS_RESET);
SAME_CONST(kQpsInit, IBV_QPS_INIT);
SAME_CONST(kQpsRtr, IBV_QPS_RTR);
SAME_CONST(kQpsRts, IBV_QPS_RTS);
SAME_CONST(kQptRc, IBV_QPT_RC);
SAME_CONST(kQptUc, IBV_QPT_UC);
SAME_CONST(kAccessLocalWrite, IBV_ACCESS_LOCAL_WRITE);
SAME_CONST(kAccessRemoteWrite, IBV_ACCESS_REMOTE_WRITE);
SAME_CONST(kAccessRemoteRead, IBV_ACCESS_REMOTE_READ);
SAME_CONST(kWrSendWithImm, IBV_WR_SEND_WITH_IMM);
SAME_CONST(kSendSignaled, IBV_SEND_SIGNALED);
SAME_CONST(kWcWithImm, IBV_WC_WITH_IMM);
SAME_CONST(kQpState, IBV_QP_STATE);
SAME_CONST(kQpAccessFlags, IBV_QP_ACCESS_FLAGS);
SAME_CONST(kQpPkeyIndex, IBV_QP_PKEY_INDEX);
SAME_CONST(kQpPort, IBV_QP_PORT);
SAME_CONST(kQpAv, IBV_QP_AV);
SAME_CONST(kQpPathMtu, IBV_QP_PATH_MTU);
SAME_CONST(kQpTimeout, IBV_QP_TIMEOUT);
SAME_CONST(kQpRetryCnt, IBV_QP_RETRY_CNT);
SAME_CONST(kQpRnrRetry, IBV_QP_RNR_RETRY);
SAME_CONST(kQpRqPsn, IBV_QP_RQ_PSN);
SAME_CONST(kQpMaxQpRdAtomic, IBV_QP_MAX_QP_RD_ATOMIC);
SAME_CONST(kQpMinRnrTimer, IBV_QP_MIN_RNR_TIMER);
SAME_CONST(kQpSqPsn, IBV_QP_SQ_PSN);
SAME_CONST(kQpMaxDestRdAtomic, IBV_QP_MAX_DEST_RD_ATOMIC);
SAME_CONST(kQpDestQpn, IBV_QP_DEST_QPN);

// ---- behaviour, on rdma-core's own structs --------------------------------------

namespace {
int their_query_port(ibv_context *, uint8_t, ibv_port_attr *, size_t) { return 0; }
}  // namespace

TEST_CASE("the extended-context test finds query_port as rdma-core's verbs_get_ctx_op does") {
  verbs_context v{};
  v.sz = sizeof v;
  v.query_port = their_query_port;
  v.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  auto *ours = reinterpret_cast<abi::Context *>(&v.context);

  abi::ExtendedContextTail *tail = abi::extended_query_port(ours);
  REQUIRE(tail != nullptr);
  CHECK(reinterpret_cast<void *>(tail->query_port) == reinterpret_cast<void *>(their_query_port));
  CHECK(tail->sz == sizeof v);
  CHECK(&tail->context == ours);

  SECTION("a provider whose verbs_context ends before query_port") {
    v.sz = sizeof v - offsetof(verbs_context, query_port) - 1;
    CHECK(abi::extended_query_port(ours) == nullptr);
  }
  SECTION("no query_port op") {
    v.query_port = nullptr;
    CHECK(abi::extended_query_port(ours) == nullptr);
  }
  SECTION("a plain (not extended) context") {
    v.context.abi_compat = nullptr;
    CHECK(abi::extended_query_port(ours) == nullptr);
  }
}

TEST_CASE("the data-path ops sit where rdma-core's inlines look for them") {
  ibv_context c{};
  auto poll = [](ibv_cq *, int, ibv_wc *) { return 7; };
  auto send = [](ibv_qp *, ibv_send_wr *, ibv_send_wr **) { return 8; };
  auto recv = [](ibv_qp *, ibv_recv_wr *, ibv_recv_wr **) { return 9; };
  c.ops.poll_cq = poll;
  c.ops.post_send = send;
  c.ops.post_recv = recv;
  auto *ours = reinterpret_cast<abi::Context *>(&c);
  CHECK(ours->ops.poll_cq(nullptr, 0, nullptr) == 7);
  CHECK(ours->ops.post_send(nullptr, nullptr, nullptr) == 8);
  CHECK(ours->ops.post_recv(nullptr, nullptr, nullptr) == 9);
}
