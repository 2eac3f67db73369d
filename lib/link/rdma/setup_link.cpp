#include "link/rdma/setup_link.hpp"

#include "net/socket.hpp"
#include "wire/codec.hpp"
#include "wire/frames.hpp"

namespace ds4tp::rdma {

namespace {

// Set-up payloads are tiny; anything larger is not one of ours.
constexpr uint32_t kMaxSetupPayload = 256;

const char *setup_frame_name(uint32_t type) {
  switch (type) {
    case wire::kFrameRdmaInfo: return "RDMA_INFO";
    case wire::kFrameRdmaReady: return "RDMA_READY";
    case wire::kFrameRdmaWarm: return "RDMA_WARM";
    case wire::kFrameRdmaPosted: return "RDMA_POSTED";
    default: return "non-RDMA";
  }
}

class SocketSetupLink final : public SetupLink {
 public:
  explicit SocketSetupLink(int fd) : fd_(fd) {}

  int send(uint32_t type, const uint8_t *payload, size_t bytes, uint64_t deadline_ns,
           Error &err) override {
    uint8_t buf[wire::kFrameHeaderBytes + kMaxSetupPayload];
    if (bytes > kMaxSetupPayload)
      return err.set(DS4TP_EINVAL, "rdma set-up: {} payload of {} bytes is too large",
                     setup_frame_name(type), bytes);
    // The control channel's header layout (wire/frames.hpp), written here
    // field by field so set-up does not depend on the channel's code.
    wire::put_u32(buf, wire::kFrameMagic);
    wire::put_u16(buf + 4, uint16_t(type));
    wire::put_u16(buf + 6, 0);
    wire::put_u32(buf + 8, uint32_t(bytes));
    wire::put_u32(buf + 12, ++sent_);
    for (size_t i = 0; i < bytes; i++) buf[wire::kFrameHeaderBytes + i] = payload[i];
    return net::write_all(fd_, buf, wire::kFrameHeaderBytes + bytes, deadline_ns,
                          setup_frame_name(type), err);
  }

  int recv(uint32_t type, uint8_t *payload, size_t bytes, uint64_t deadline_ns,
           Error &err) override {
    uint8_t hb[wire::kFrameHeaderBytes];
    std::string what = fmt::format("waiting for the peer's {} frame", setup_frame_name(type));
    if (int rc = net::read_exact(fd_, hb, sizeof hb, deadline_ns, what.c_str(), err)) return rc;
    uint32_t magic = wire::get_u32(hb);
    uint16_t got_type = wire::get_u16(hb + 4);
    uint16_t flags = wire::get_u16(hb + 6);
    uint32_t got_bytes = wire::get_u32(hb + 8);
    uint32_t counter = wire::get_u32(hb + 12);
    if (magic != wire::kFrameMagic)
      return err.set(DS4TP_EPROTO,
                     "rdma set-up: expected a {} frame but the control connection carried "
                     "magic 0x{:08x}{}",
                     setup_frame_name(type), magic,
                     magic == wire::kFrameMagicSwapped ? " (the peer uses the other byte order)"
                                                       : "");
    if (got_type != type || got_bytes != bytes || flags != 0)
      return err.set(DS4TP_EPROTO,
                     "rdma set-up: expected a {} frame of {} bytes but the peer sent {} "
                     "(type {}, flags 0x{:x}) with {} bytes",
                     setup_frame_name(type), bytes, setup_frame_name(got_type), got_type,
                     flags, got_bytes);
    if (counter != received_ + 1)
      return err.set(DS4TP_EPROTO, "rdma set-up: frame counter {} where {} was due", counter,
                     received_ + 1);
    received_ = counter;
    return net::read_exact(fd_, payload, bytes, deadline_ns, what.c_str(), err);
  }

 private:
  int fd_;
  uint32_t sent_ = 0;
  uint32_t received_ = 0;
};

}  // namespace

std::unique_ptr<SetupLink> make_socket_setup_link(int fd) {
  return std::make_unique<SocketSetupLink>(fd);
}

}  // namespace ds4tp::rdma
