// Making, opening and naming an N-member link's shared area (area.hpp).
#include "link/shm/area.hpp"

#include <unistd.h>

#include <cstring>

#include "os/os.hpp"

namespace ds4tp::shm {

void Area::init(uint64_t home_bytes, uint64_t two_shot_bytes, uint32_t maker_pid) {
  auto *h = new (base) Header{};
  h->ranks = uint32_t(n);
  h->chunk = chunk;
  h->home_bytes = home_bytes;
  h->two_shot_bytes = two_shot_bytes;
  for (int r = 0; r < n; r++) new (line(r)) RankLine{};
  if (maker_pid != 0) {
    info(0)->start_time.store(os::process_start_time(pid_t(maker_pid)), std::memory_order_relaxed);
    line(0)->pid.store(maker_pid, std::memory_order_relaxed);
  }
  __atomic_store_n(&h->magic, kAreaMagic, __ATOMIC_RELEASE);
}

std::shared_ptr<Area> area_heap(int n, size_t chunk, uint64_t home_bytes,
                                uint64_t two_shot_bytes, Error &err) {
  auto a = std::make_shared<Area>(n, chunk);
  a->heap = static_cast<uint8_t *>(std::aligned_alloc(4096, (a->bytes + 4095) & ~size_t(4095)));
  if (a->heap == nullptr) {
    err.set(DS4TP_ENOMEM, "group area of {} bytes", a->bytes);
    return nullptr;
  }
  a->base = a->heap;
  std::memset(a->base, 0, a->bytes);
  a->init(home_bytes, two_shot_bytes);
  return a;
}

int area_create(int n, size_t chunk, uint64_t home_bytes, uint64_t two_shot_bytes,
                std::string &name, std::shared_ptr<Area> &out, Error &err) {
  uint64_t rnd = 0;
  os::random_bytes(&rnd, sizeof rnd);
  sweep_orphans("/ds4tp-g");  // left by a rank 0 killed in an earlier bring-up
  if (name.empty()) name = unique_name("/ds4tp-g", uint64_t(getpid()), rnd, os::shm_name_max());
  auto a = std::make_shared<Area>(n, chunk);
  if (int rc = a->segment.create(name, a->bytes, err)) return rc;
  if (int rc = a->segment.map_created(err)) return rc;
  a->base = a->segment.base();
  a->init(home_bytes, two_shot_bytes, uint32_t(getpid()));
  out = std::move(a);
  return DS4TP_OK;
}

int area_open(const std::string &name, int n, size_t chunk, std::shared_ptr<Area> &out,
              Error &err, bool *not_yet) {
  auto a = std::make_shared<Area>(n, chunk);
  if (int rc = a->segment.open_shared(name, a->bytes, err)) {
    if (not_yet) *not_yet = a->segment.absent();
    return rc;
  }
  a->base = a->segment.base();
  Header *h = a->header();
  const uint32_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
  if (not_yet) *not_yet = magic == 0;
  if (magic != kAreaMagic)
    return err.set(DS4TP_EVERSION, "group segment {} has layout {:08x}, this build reads {:08x}",
                   name, magic, kAreaMagic);
  if (h->ranks != uint32_t(n) || h->chunk != chunk)
    return err.set(DS4TP_EPROTO, "group segment {} has ranks {} chunk {}, expected {} and {}",
                   name, h->ranks, h->chunk, n, chunk);
  out = std::move(a);
  return DS4TP_OK;
}

void area_unlink(Area &area) { area.segment.unlink(); }

std::string host_area_name(uint32_t leader_pid, uint64_t seed, int host) {
  uint64_t rnd = seed;
  // The host in the top hex digit, which a short name limit keeps.
  rnd = (rnd & ~(uint64_t(0xf) << 60)) | uint64_t(host & 0xf) << 60;
  return unique_name("/ds4tp-g", leader_pid, rnd, os::shm_name_max());
}

void area_expect(Area &area, int member, uint32_t pid) {
  if (pid == 0) return;
  RankLine *l = area.line(member);
  area.info(member)->start_time.store(os::process_start_time(pid_t(pid)), std::memory_order_relaxed);
  l->pid.store(pid, std::memory_order_release);
}

}  // namespace ds4tp::shm
