// Control frame codecs (pure): every type round-trips, and every decoder
// rejects every malformed shape with a named protocol error.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "support/frame_samples.hpp"
#include "wire/codec.hpp"
#include "wire/frames.hpp"

using namespace ds4tp;
using namespace ds4tp::wire;
using ds4tp::test::frame_samples;
using ds4tp::test::reencode;

namespace {

std::vector<uint8_t> header_bytes(uint16_t type, uint32_t bytes, uint16_t flags = 0,
                                  uint32_t counter = 1) {
  std::vector<uint8_t> h(kFrameHeaderBytes);
  FrameHeader fh;
  fh.type = type;
  fh.flags = flags;
  fh.bytes = bytes;
  fh.counter = counter;
  encode_frame_header(fh, h.data());
  return h;
}

// A rejected payload: EPROTO, and the message names the frame.
void require_rejected(uint16_t type, const std::vector<uint8_t> &p, const std::string &shape) {
  Error err;
  INFO(frame_name(type) << " " << shape << " (" << p.size() << " bytes)");
  int rc = validate_payload(type, p.data(), p.size(), err);
  REQUIRE(rc == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains(frame_name(type)));
}

}  // namespace

TEST_CASE("frame types 1..32 have a name, a sender and a size rule and others do not") {
  for (uint16_t t = kFrameTypeMin; t <= kFrameTypeMax; t++) {
    const FrameRule *r = frame_rule(t);
    REQUIRE(r != nullptr);
    REQUIRE(std::string(r->name) != "?");
  }
  REQUIRE(frame_rule(0) == nullptr);
  REQUIRE(frame_rule(33) == nullptr);
  REQUIRE(frame_rule(0xffff) == nullptr);
  REQUIRE(std::string(frame_name(FrameType::Mtp)) == "MTP");
  REQUIRE(std::string(frame_name(uint16_t(99))) == "?");
  auto samples = frame_samples();
  REQUIRE(samples.size() == kFrameTypeMax);
  for (size_t i = 0; i < samples.size(); i++) REQUIRE(samples[i].type == i + 1);
}

TEST_CASE("every frame type round-trips through its codec byte for byte") {
  for (const auto &s : frame_samples()) {
    INFO(frame_name(s.type));
    Error err;
    // The header's size rule admits the sample's size...
    auto h = header_bytes(s.type, uint32_t(s.payload.size()));
    FrameHeader fh;
    REQUIRE(decode_frame_header(h.data(), h.size(), 64u << 20, fh, err) == DS4TP_OK);
    REQUIRE(fh.type == s.type);
    REQUIRE(fh.bytes == s.payload.size());
    REQUIRE(fh.counter == 1);
    // ...and decode then encode gives the same bytes back.
    std::vector<uint8_t> again;
    REQUIRE(reencode(s.type, s.payload.data(), s.payload.size(), again, err) == DS4TP_OK);
    REQUIRE(again == s.payload);
  }
}

TEST_CASE("decoded fields carry the encoded values") {
  Error err;
  EvalMsg e;
  auto samples = frame_samples();
  const auto &ev = samples[size_t(FrameType::Eval) - 1].payload;
  REQUIRE(decode(ev.data(), ev.size(), e, err) == DS4TP_OK);
  REQUIRE(e.session == 7);
  REQUIRE(e.seq == 42);
  REQUIRE(e.token == 99);
  REQUIRE(e.logits_floats == 500);
  // Little-endian on the wire whatever the host: seq 42 at byte 8.
  REQUIRE(ev[8] == 42);
  REQUIRE(ev[9] == 0);

  SyncImagesMsg im;
  const auto &si = samples[size_t(FrameType::SyncImages) - 1].payload;
  REQUIRE(decode(si.data(), si.size(), im, err) == DS4TP_OK);
  REQUIRE(im.tokens.size() == 6);
  REQUIRE(im.tokens[2] == -3);
  REQUIRE(im.images.size() == 1);
  REQUIRE(im.images[0].token_start == 1);
  REQUIRE(im.images[0].token_count == 2);
  REQUIRE(im.images[0].fingerprint[31] == 0xa0 + 31);
  REQUIRE(im.embd.size() == 8);
  REQUIRE(im.embd[1] == -2.25f);

  WorkerErrorMsg we;
  const auto &w = samples[size_t(FrameType::WorkerError) - 1].payload;
  REQUIRE(decode(w.data(), w.size(), we, err) == DS4TP_OK);
  REQUIRE(we.status == -5);
  REQUIRE(we.command == uint16_t(FrameType::Eval));
  REQUIRE(we.message == "engine ran out of KV cache");
}

TEST_CASE("every decoder rejects a short and a long payload, naming the frame") {
  for (const auto &s : frame_samples()) {
    if (!s.payload.empty()) {
      std::vector<uint8_t> p(s.payload.begin(), s.payload.end() - 1);
      require_rejected(s.type, p, "short by 1");
      require_rejected(s.type, {}, "empty");
    }
    std::vector<uint8_t> p = s.payload;
    p.push_back(0);
    require_rejected(s.type, p, "long by 1");
    p.insert(p.end(), {0, 0, 0});
    require_rejected(s.type, p, "long by 4");
  }
}

TEST_CASE("every count that disagrees with the payload or is huge is rejected") {
  int counted = 0;
  for (const auto &s : frame_samples()) {
    for (size_t off : s.count_offsets) {
      counted++;
      uint32_t v = get_u32(s.payload.data() + off);
      for (uint32_t bad : {v + 1, v - 1, 0xffffffffu, 0x40000000u, 0x80000001u}) {
        std::vector<uint8_t> p = s.payload;
        put_u32(p.data() + off, bad);
        require_rejected(s.type, p, "count at byte " + std::to_string(off) + " = " + std::to_string(bad));
      }
    }
  }
  REQUIRE(counted == 12);  // every count field of every array frame
}

TEST_CASE("frame headers: magic, byte order, type, flags and size are checked first") {
  Error err;
  FrameHeader fh;
  auto h = header_bytes(uint16_t(FrameType::Eval), 24);
  REQUIRE(decode_frame_header(h.data(), h.size(), 1024, fh, err) == DS4TP_OK);

  REQUIRE(decode_frame_header(h.data(), 15, 1024, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("truncated"));

  auto bad = h;
  bad[0] = 'X';
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("magic"));

  bad = h;
  put_u32(bad.data(), kFrameMagicSwapped);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("other byte order"));

  for (uint16_t t : {uint16_t(0), uint16_t(33), uint16_t(0xffff)}) {
    bad = header_bytes(t, 12);
    REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains("unknown control frame type " + std::to_string(t)) &&
                                  Catch::Contains("12 payload bytes"));
  }

  bad = header_bytes(uint16_t(FrameType::Eval), 24, 1);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("EVAL") && Catch::Contains("flags"));

  // A size above max_frame_bytes is refused before anything is allocated.
  bad = header_bytes(uint16_t(FrameType::Sync), 0xfffffff0u);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 64u << 20, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("SYNC") && Catch::Contains("4294967280") &&
                                Catch::Contains("max_frame_bytes 67108864"));

  // Per-type size rules: fixed sizes exactly, arrays in whole elements.
  bad = header_bytes(uint16_t(FrameType::Eval), 20);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  REQUIRE_THAT(err.message, Catch::Contains("EVAL") && Catch::Contains("exactly 24"));
  bad = header_bytes(uint16_t(FrameType::Sync), 18);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  bad = header_bytes(uint16_t(FrameType::SmallExchange), 16 + 193);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
  bad = header_bytes(uint16_t(FrameType::HeadRow), 16 + 4 * (kHeadRowMax + 1));
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 64u << 20, fh, err) == DS4TP_EPROTO);
  bad = header_bytes(uint16_t(FrameType::Verify), 16 + 4 * 9);
  REQUIRE(decode_frame_header(bad.data(), bad.size(), 1024, fh, err) == DS4TP_EPROTO);
}

TEST_CASE("decoders check enums, reserved fields and ids") {
  Error err;
  auto check = [&](FrameType t, std::vector<uint8_t> p, const char *needle) {
    INFO(frame_name(t) << ": " << needle);
    REQUIRE(validate_payload(uint16_t(t), p.data(), p.size(), err) == DS4TP_EPROTO);
    REQUIRE_THAT(err.message, Catch::Contains(frame_name(t)) && Catch::Contains(needle));
  };
  auto samples = frame_samples();
  auto sample = [&](FrameType t) { return samples[size_t(t) - 1].payload; };
  auto with_u32 = [&](FrameType t, size_t off, uint32_t v) {
    auto p = sample(t);
    put_u32(p.data() + off, v);
    return p;
  };
  auto with_u64 = [&](FrameType t, size_t off, uint64_t v) {
    auto p = sample(t);
    put_u64(p.data() + off, v);
    return p;
  };
  check(FrameType::Eval, with_u64(FrameType::Eval, 0, 0), "session id 0");
  check(FrameType::Eval, with_u64(FrameType::Eval, 8, 0), "seq 0");
  check(FrameType::Rewind, with_u32(FrameType::Rewind, 8, uint32_t(-1)), "negative");
  check(FrameType::Rewind, with_u32(FrameType::Rewind, 12, 1), "reserved");
  check(FrameType::SessionCreate, with_u32(FrameType::SessionCreate, 8, 0), "ctx_size 0");
  check(FrameType::VerifyCommit, with_u32(FrameType::VerifyCommit, 8, 3), "commit mode 3");
  check(FrameType::VerifyCommit, with_u32(FrameType::VerifyCommit, 12, 0), "at least 1 row");
  check(FrameType::Verify, with_u32(FrameType::Verify, 12, 4), "DRAFT_SEED");
  check(FrameType::Verify, with_u32(FrameType::Verify, 12, 8), "unknown flag");
  check(FrameType::Mtp, with_u32(FrameType::Mtp, 20, 8), "limit 8");
  check(FrameType::Mtp, with_u32(FrameType::Mtp, 20, 0), "limit 0");
  check(FrameType::Draft, with_u32(FrameType::Draft, 16, 3), "mode 3");
  check(FrameType::Draft, with_u32(FrameType::Draft, 12, 0), "position 0");
  check(FrameType::SyncCheckpoint, with_u32(FrameType::SyncCheckpoint, 20, 2), "cancel flag 2");
  check(FrameType::BlockBegin, with_u32(FrameType::BlockBegin, 16, 3), "gates per layer 3");
  check(FrameType::BlockBegin, with_u32(FrameType::BlockBegin, 8, 9), "rows 9");
  check(FrameType::DrafterSplit, with_u32(FrameType::DrafterSplit, 0, 2), "opt-in flag 2");
  check(FrameType::CommandAck, with_u32(FrameType::CommandAck, 12, 17), "not a command");
  check(FrameType::EvalBatch, with_u64(FrameType::EvalBatch, 8, 0), "session id 0");
  check(FrameType::EvalBatch, with_u32(FrameType::EvalBatch, 20, 1), "flags");
  check(FrameType::HeadRow, with_u32(FrameType::HeadRow, 8, 8), "row 8");
  // An image outside the prompt, and one with no pixels.
  check(FrameType::SyncImages, with_u32(FrameType::SyncImages, 48, 5), "spans tokens 5..7");
  check(FrameType::SyncImages, with_u32(FrameType::SyncImages, 60, 0), "0x16 pixels");
}

TEST_CASE("payload sizes are computed in 64 bits") {
  REQUIRE(sync_bytes(0xffffffffull) == 16 + 4 * 0xffffffffull);
  ImageMeta im;
  im.token_count = 0xffffffffu;
  im.data_width = 0xffffffffu;
  REQUIRE(sync_images_bytes(0, &im, 1) > (1ull << 63));
}

TEST_CASE("the frame table says what each command owes and which callback serves it") {
  using T = FrameType;
  // Answered with a status: COMMAND_ACK, or SYNC_ACK for the two syncs.
  for (T t : {T::SessionCreate, T::SessionDestroy, T::Mtp, T::SpecRestore, T::EvalBatch,
              T::MixedBatch}) {
    INFO(frame_name(t));
    REQUIRE(has_status_reply(t));
    REQUIRE(frame_info(t).reply == Reply::Ack);
  }
  for (T t : {T::Sync, T::SyncImages}) REQUIRE(frame_info(t).reply == Reply::SyncAck);
  REQUIRE(frame_info(T::Hash).reply == Reply::Hash);
  for (T t : {T::Eval, T::Rewind, T::Invalidate, T::Stop, T::Verify, T::VerifyCommit, T::Draft,
              T::Hash}) {
    INFO(frame_name(t));
    REQUIRE_FALSE(has_status_reply(t));
  }
  REQUIRE(frame_info(T::CommandAck).reply == Reply::NotCommand);
  REQUIRE(frame_name(reply_frame(Reply::Ack)) == std::string("COMMAND_ACK"));
  // Logits halves, none without logits_floats.
  REQUIRE(logits_rows(T::Eval, 10, 0, 0, 0) == 1);
  REQUIRE(logits_rows(T::Eval, 0, 0, 0, 0) == 0);
  REQUIRE(logits_rows(T::EvalBatch, 10, 3, 0, 0) == 3);
  REQUIRE(logits_rows(T::MixedBatch, 10, 3, 0, 0) == 4);
  REQUIRE(logits_rows(T::VerifyCommit, 10, 0, kCommitRollback, 2) == 1);
  REQUIRE(logits_rows(T::VerifyCommit, 10, 0, kCommitRollback, 0) == 0);
  REQUIRE(logits_rows(T::VerifyCommit, 10, 0, kCommitFull, 0) == 0);
  REQUIRE(logits_rows(T::Mtp, 10, 0, 0, 0) == 0);
  // Every command but STOP has a worker callback, and nothing else does.
  REQUIRE(callback_name(T::Eval) == std::string("eval"));
  REQUIRE(callback_name(T::SessionDestroy) == std::string("session_destroy"));
  REQUIRE(callback_name(T::Stop) == std::string("?"));
  REQUIRE(callback_name(T::Logits) == std::string("?"));
  REQUIRE(worker_callback_count() == 15);
  REQUIRE(fixed_bytes(T::Eval) == 24);
}
