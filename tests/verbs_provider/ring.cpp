#include "ring.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fv {

namespace {

std::string ring_dir() {
  const char *d = std::getenv("DS4TP_VERBS_PROVIDER_DIR");
  if (d != nullptr && *d) return d;
  struct stat st {};
  return ::stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
}

constexpr uint64_t kMapBytes = sizeof(RingHeader) + kRingBytes;

}  // namespace

std::string ring_path(const uint8_t gid[16], uint32_t qpn) {
  char name[80];
  int n = std::snprintf(name, sizeof name, "/ds4tp-fv-");
  for (int i = 0; i < 16; i++) n += std::snprintf(name + n, sizeof name - size_t(n), "%02x", gid[i]);
  std::snprintf(name + n, sizeof name - size_t(n), "-%06x", qpn);
  return ring_dir() + name;
}

void sweep_rings() {
  std::string dir = ring_dir();
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent *e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "ds4tp-fv-", 9) != 0) continue;
    std::string p = dir + "/" + e->d_name;
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    RingHeader h{};
    bool got = ::pread(fd, &h, sizeof h, 0) == ssize_t(sizeof h);
    ::close(fd);
    if (got && h.owner_pid > 0 && ::kill(h.owner_pid, 0) != 0 && errno == ESRCH)
      ::unlink(p.c_str());
  }
  ::closedir(d);
}

Ring::~Ring() {
  if (h_ != nullptr) ::munmap(h_, kMapBytes);
  if (!unlink_.empty()) ::unlink(unlink_.c_str());
}

bool Ring::create(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::ftruncate(fd, off_t(kMapBytes)) == 0;
  void *m = ok ? ::mmap(nullptr, kMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
               : MAP_FAILED;
  ::close(fd);
  if (m == MAP_FAILED) {
    ::unlink(path.c_str());
    return false;
  }
  h_ = static_cast<RingHeader *>(m);
  h_->size = kRingBytes;
  h_->owner_pid = int32_t(::getpid());
  h_->tail.store(0, std::memory_order_relaxed);
  h_->head.store(0, std::memory_order_release);
  unlink_ = path;
  return true;
}

bool Ring::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  void *m = ::fstat(fd, &st) == 0 && uint64_t(st.st_size) == kMapBytes
                ? ::mmap(nullptr, kMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  ::close(fd);
  if (m == MAP_FAILED) return false;
  h_ = static_cast<RingHeader *>(m);
  return true;
}

bool Ring::push(const Record &r, const void *payload) {
  const uint64_t size = h_->size;
  uint64_t head = h_->head.load(std::memory_order_relaxed);
  const uint64_t tail = h_->tail.load(std::memory_order_acquire);
  const uint64_t n = need(r.len);
  const uint64_t to_end = size - head % size;
  const uint64_t wrap = n > to_end ? to_end : 0;
  if (size - (head - tail) < wrap + n) return false;
  if (wrap) {
    Record w{};
    w.flags = kRecWrap;
    std::memcpy(data() + head % size, &w, sizeof w);
    head += wrap;
  }
  uint8_t *p = data() + head % size;
  std::memcpy(p, &r, sizeof r);
  if (r.len) std::memcpy(p + sizeof r, payload, r.len);
  h_->head.store(head + n, std::memory_order_release);
  return true;
}

const Record *Ring::front() {
  for (;;) {
    const uint64_t tail = h_->tail.load(std::memory_order_relaxed);
    if (h_->head.load(std::memory_order_acquire) == tail) return nullptr;
    auto *r = reinterpret_cast<const Record *>(data() + tail % h_->size);
    if (!(r->flags & kRecWrap)) return r;
    h_->tail.store(tail + (h_->size - tail % h_->size), std::memory_order_release);
  }
}

void Ring::pop() {
  const uint64_t tail = h_->tail.load(std::memory_order_relaxed);
  auto *r = reinterpret_cast<const Record *>(data() + tail % h_->size);
  h_->tail.store(tail + need(r->len), std::memory_order_release);
}

}  // namespace fv
