#include "link/shm/segment.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include "os/os.hpp"

namespace ds4tp::shm {
namespace {

// For messages: where the segments live.
const char *shm_dir_name() {
  const char *d = os::shm_dir();
  return d != nullptr ? d : "shared memory";
}

}  // namespace

Segment::Segment(Segment &&o) noexcept { *this = std::move(o); }

Segment &Segment::operator=(Segment &&o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    linked_ = o.linked_;
    fd_ = o.fd_;
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.linked_ = false;
    o.fd_ = -1;
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Segment::~Segment() { release(); }

void Segment::release() {
  unlink();
  if (base_ != nullptr) {
    os::shared_mapping_removed(base_);
    munmap(base_, bytes_);
  }
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void Segment::unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());  // ENOENT: the peer removed it first
  linked_ = false;
}

int Segment::create(const std::string &name, uint64_t bytes, Error &err) {
  int fd = os::shm_open_cloexec(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return err.set(DS4TP_EIO, "cannot create shared-memory segment {}: {}", name,
                   std::strerror(errno));
  name_ = name;
  linked_ = true;
  fd_ = fd;
  bytes_ = bytes;
  if (ftruncate(fd, off_t(bytes)) != 0)
    return err.set(DS4TP_ENOMEM, "cannot size shared-memory segment {} to {} bytes: {}", name,
                   bytes, std::strerror(errno));
  return DS4TP_OK;
}

int Segment::map_created(Error &err) {
  int e = os::reserve_file(fd_, bytes_);
  if (e != 0)
    return err.set(DS4TP_ENOMEM,
                   "cannot reserve {} bytes of shared memory for segment {}: {} (is {} "
                   "full?)",
                   bytes_, name_, std::strerror(e), shm_dir_name());
  void *m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED)
    return err.set(DS4TP_ENOMEM, "cannot map {} byte shared-memory segment {}: {}", bytes_,
                   name_, std::strerror(errno));
  base_ = static_cast<uint8_t *>(m);
  os::shared_mapping_added(base_, bytes_, name_);
  ::close(fd_);  // the mapping keeps the memory
  fd_ = -1;
  return DS4TP_OK;
}

int Segment::open_existing(const std::string &name, uint64_t bytes, Error &err) {
  return open_named(name, bytes, true, err);
}

int Segment::open_shared(const std::string &name, uint64_t bytes, Error &err) {
  return open_named(name, bytes, false, err);
}

int Segment::open_named(const std::string &name, uint64_t bytes, bool remove_name, Error &err) {
  int fd = os::shm_open_cloexec(name.c_str(), O_RDWR, 0);
  absent_ = fd < 0 && errno == ENOENT;
  if (fd < 0)
    return err.set(DS4TP_EIO,
                   "cannot open the peer's shared-memory segment {}: {} (do both ranks see "
                   "the same {}?)",
                   name, std::strerror(errno), shm_dir_name());
  fd_ = fd;
  name_ = name;
  // Both ranks have it open or mapped now; the name is no longer needed.
  if (remove_name) shm_unlink(name.c_str());
  struct stat st {};
  if (fstat(fd, &st) != 0)
    return err.set(DS4TP_EIO, "cannot stat shared-memory segment {}: {}", name,
                   std::strerror(errno));
  if (st.st_uid != geteuid())
    return err.set(DS4TP_EIO,
                   "shared-memory segment {} belongs to uid {}, not to this process's uid {}",
                   name, st.st_uid, geteuid());
  absent_ = st.st_size == 0;
  if (uint64_t(st.st_size) != os::shm_object_bytes(bytes))
    return err.set(DS4TP_EPROTO, "shared-memory segment {} is {} bytes, expected {}", name,
                   uint64_t(st.st_size), bytes);
  void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return err.set(DS4TP_ENOMEM, "cannot map the peer's {} byte segment {}: {}", bytes, name,
                   std::strerror(errno));
  base_ = static_cast<uint8_t *>(m);
  bytes_ = bytes;
  os::shared_mapping_added(base_, bytes_, name_);
  ::close(fd_);
  fd_ = -1;
  return DS4TP_OK;
}

std::string unique_name(const std::string &prefix, uint64_t pid, uint64_t random, size_t max) {
  std::string name = fmt::format("{}{}-", prefix, pid);
  std::string tail = fmt::format("{:016x}", random);
  size_t room = max > name.size() ? max - name.size() : 0;
  return name + tail.substr(0, std::max<size_t>(room, 4));
}

int sweep_orphans(const std::string &prefix) {
  const char *dir = os::shm_dir();
  if (dir == nullptr || prefix.size() < 2 || prefix[0] != '/') return 0;
  DIR *d = opendir(dir);
  if (d == nullptr) return 0;
  const std::string bare = prefix.substr(1);  // directory entries have no '/'
  int removed = 0;
  while (const dirent *e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, bare.size(), bare) != 0) continue;
    char *end = nullptr;
    const long pid = std::strtol(name.c_str() + bare.size(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '-') continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // runs (or is not ours)
    if (shm_unlink(("/" + name).c_str()) == 0) removed++;
  }
  closedir(d);
  return removed;
}

bool usable(uint64_t need_bytes, std::string &why) {
  // Free space is known only where segments live in a directory.
  const char *dir = os::shm_dir();
  uint64_t avail = 0;
  if (dir != nullptr) {
    struct statvfs vfs {};
    if (statvfs(dir, &vfs) != 0) {
      why = fmt::format("{} is not available: {}", dir, std::strerror(errno));
      return false;
    }
    avail = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    if (avail < need_bytes) {
      why = fmt::format("{} has {} bytes free but the two segments need {}", dir, avail,
                        need_bytes);
      return false;
    }
  }
  sweep_orphans("/ds4tp-p");  // probes of processes killed between create and unlink
  uint64_t r = 0;
  if (!os::random_bytes(&r, sizeof r)) r = uint64_t(getpid()) << 20;
  std::string probe = unique_name("/ds4tp-p", uint64_t(getpid()), r, os::shm_name_max());
  int fd = os::shm_open_cloexec(probe.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    why = fmt::format("cannot create a segment in {}: {}", shm_dir_name(), std::strerror(errno));
    return false;
  }
  shm_unlink(probe.c_str());
  ::close(fd);
  why = dir != nullptr ? fmt::format("{} usable, {} bytes free", dir, avail)
                      : std::string("shared memory usable");
  return true;
}

}  // namespace ds4tp::shm
