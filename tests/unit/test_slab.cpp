// Slab layout and gate schedule: pure functions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "ds4tp/ds4tp.h"
#include "slab/layout.hpp"
#include "slab/schedule.hpp"

using namespace ds4tp::slab;

TEST_CASE("layout regions do not overlap and are aligned") {
  for (uint32_t n_layer : {1u, 2u, 43u, 61u}) {
    for (uint32_t n_embd : {1u, 7u, 1024u, 4096u, 7168u}) {
      Layout l;
      REQUIRE(compute_layout(n_layer, n_embd, l));
      INFO("n_layer " << n_layer << " n_embd " << n_embd);
      struct R {
        uint64_t start, bytes;
      };
      std::vector<R> regions = {
          {l.out, l.slots * l.slot_stride},
          {l.in, l.slots * l.slot_stride},
          {l.in_seq, l.slots * l.flag_stride},
          {l.token, 64},
          {l.gpu_flags, l.slots * l.flag_stride},
          {l.gpu_release, l.slots * l.flag_stride},
          {l.batch_out, l.batch_gates * l.batch_gate_stride},
          {l.batch_in, l.batch_gates * l.batch_gate_stride},
          {l.big_out, l.big_staging},
          {l.big_in, l.big_staging},
      };
      for (size_t i = 0; i < regions.size(); i++) {
        REQUIRE(regions[i].start % kRegionAlign == 0);
        REQUIRE(regions[i].start + regions[i].bytes <= l.total);
        for (size_t j = i + 1; j < regions.size(); j++) {
          bool apart = regions[i].start + regions[i].bytes <= regions[j].start ||
                       regions[j].start + regions[j].bytes <= regions[i].start;
          REQUIRE(apart);
        }
      }
      REQUIRE(l.vec_bytes == uint64_t(n_embd) * 4);
      REQUIRE(l.vec_stride >= l.vec_bytes);
      REQUIRE(l.vec_stride % kVectorAlign == 0);
      // Row slots: the library's header room, then the vector, aligned.
      REQUIRE(l.slot_stride == l.vec_stride + kGateRoom);
      REQUIRE(l.out_vec(0) == l.out + kGateRoom);
      REQUIRE(l.in_vec(1) - l.in_vec(0) == l.slot_stride);
      REQUIRE(l.out_vec(0) % kVectorAlign == 0);
      REQUIRE(l.in_vec(l.slots - 1) % kVectorAlign == 0);
      REQUIRE(l.slots == n_layer * 2);
      REQUIRE(l.total % kRegionAlign == 0);
      // The last vector of each region ends inside the region.
      REQUIRE(l.out_vec(l.slots - 1) + l.vec_bytes <= l.in);
      REQUIRE(l.batch_out_gate(l.batch_gates - 1) + l.batch_gate_stride <= l.batch_in);
    }
  }
}

TEST_CASE("layout rejects empty and absurd shapes") {
  Layout l;
  REQUIRE_FALSE(compute_layout(0, 4096, l));
  REQUIRE_FALSE(compute_layout(4, 0, l));
  REQUIRE_FALSE(compute_layout(kMaxLayers + 1, 16, l));
  REQUIRE_FALSE(compute_layout(4, kMaxEmbd + 1, l));
}

TEST_CASE("C layout matches the internal one and honours a smaller struct") {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.n_layer = 43;
  id.n_embd = 4096;
  ds4tp_slab_layout out{};
  out.size = sizeof out;
  REQUIRE(ds4tp_slab_layout_compute(&id, &out) == DS4TP_OK);
  Layout l;
  compute_layout(43, 4096, l);
  REQUIRE(out.total_bytes == l.total);
  // out/in_offset name slot 0's vector, past its header room.
  REQUIRE(out.out_offset == l.out_vec(0));
  REQUIRE(out.in_offset == l.in_vec(0));
  REQUIRE(out.slot_stride == l.slot_stride);
  REQUIRE(out.out_offset + 5 * out.slot_stride == l.out_vec(5));
  REQUIRE(out.big_in_offset == l.big_in);
  // An older caller whose struct ends after total_bytes gets just that.
  ds4tp_slab_layout small{};
  small.size = offsetof(ds4tp_slab_layout, vec_bytes);
  small.in_offset = 12345;
  REQUIRE(ds4tp_slab_layout_compute(&id, &small) == DS4TP_OK);
  REQUIRE(small.total_bytes == l.total);
  REQUIRE(small.in_offset == 12345);
}

TEST_CASE("identity schedule fires every slot in order") {
  Schedule s;
  s.slots = 8;
  REQUIRE(validate_schedule(s).empty());
  REQUIRE(slot_for_seq(s, 0) == -1);
  for (uint64_t seq = 1; seq <= 24; seq++) REQUIRE(slot_for_seq(s, seq) == int64_t((seq - 1) % 8));
}

TEST_CASE("start/step schedule: one FFN gate per sparse layer") {
  Schedule s;
  s.slots = 20;  // 10 layers
  s.start = 3;   // layer 1 FFN: one leading dense layer
  s.step = 2;
  s.per_token = 8;
  REQUIRE(validate_schedule(s).empty());
  std::vector<int64_t> got;
  for (uint64_t seq = 1; seq <= 9; seq++) got.push_back(slot_for_seq(s, seq));
  REQUIRE(got == std::vector<int64_t>{3, 5, 7, 9, 11, 13, 15, 17, 3});
  s.per_token = 9;  // would reach slot 19: still inside
  REQUIRE(validate_schedule(s).empty());
  s.per_token = 10;  // slot 21 > 19
  REQUIRE_FALSE(validate_schedule(s).empty());
}

TEST_CASE("mask schedule lists slots in firing order across words") {
  Schedule s;
  s.slots = 200;
  s.mask[0] = (1ull << 0) | (1ull << 1) | (1ull << 5);
  s.mask[1] = 1ull << 63;  // slot 127
  s.mask[3] = 1ull << 7;   // slot 199
  s.per_token = 5;
  REQUIRE(validate_schedule(s).empty());
  std::vector<int64_t> got;
  for (uint64_t seq = 1; seq <= 7; seq++) got.push_back(slot_for_seq(s, seq));
  REQUIRE(got == std::vector<int64_t>{0, 1, 5, 127, 199, 0, 1});
  s.per_token = 4;
  REQUIRE_THAT(validate_schedule(s), Catch::Contains("5 bits"));
  s.per_token = 5;
  s.slots = 150;  // slot 199 is now out of range
  REQUIRE_THAT(validate_schedule(s), Catch::Contains("slot 199"));
}

TEST_CASE("ds4tp_schedule_slot maps a gate seq to its slot and refuses an invalid schedule") {
  ds4tp_identity id;
  ds4tp_identity_init(&id);
  id.n_layer = 4;
  id.n_embd = 16;
  id.gate_slot_mask[0] = 0b10110;
  id.gates_per_token = 3;
  REQUIRE(ds4tp_schedule_slot(&id, 1) == 1);
  REQUIRE(ds4tp_schedule_slot(&id, 2) == 2);
  REQUIRE(ds4tp_schedule_slot(&id, 3) == 4);
  REQUIRE(ds4tp_schedule_slot(&id, 4) == 1);
  REQUIRE(ds4tp_schedule_slot(&id, 0) == -1);
  id.gates_per_token = 2;  // invalid: popcount 3
  REQUIRE(ds4tp_schedule_slot(&id, 1) == -1);
}
