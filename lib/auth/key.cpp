#include "auth/key.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth/crypto.hpp"

namespace ds4tp::auth {

Key::Key(const void *bytes, size_t n) {
  const auto *b = static_cast<const uint8_t *>(bytes);
  bytes_.assign(b, b + n);
}

Key &Key::operator=(const Key &o) {
  if (this != &o) {
    wipe();
    bytes_.assign(o.bytes_.begin(), o.bytes_.end());
  }
  return *this;
}

void Key::wipe() {
  if (!bytes_.empty()) crypto::wipe(bytes_.data(), bytes_.size());
  bytes_.clear();
}

namespace {

int check_length(size_t n, const std::string &source, Error &err) {
  if (n < kMinKeyBytes)
    return err.set(DS4TP_EINVAL,
                   "the pre-shared key from {} is {} bytes; use at least {} random "
                   "bytes (e.g. `openssl rand -hex 32`)",
                   source, n, kMinKeyBytes);
  if (n > kMaxKeyBytes)
    return err.set(DS4TP_EINVAL, "the pre-shared key from {} is {} bytes, more than {}",
                   source, n, kMaxKeyBytes);
  return DS4TP_OK;
}

}  // namespace

int read_key_file(const std::string &path, Key &out, Error &err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return err.set(errno == ENOENT ? DS4TP_EINVAL : DS4TP_EIO,
                   "cannot open the key file {}: {}", path, std::strerror(errno));
  struct stat st {};
  int rc = DS4TP_OK;
  if (fstat(fd, &st) != 0) {
    rc = err.set(DS4TP_EIO, "cannot stat the key file {}: {}", path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    rc = err.set(DS4TP_EINVAL, "the key file {} is not a regular file", path);
  } else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    rc = err.set(DS4TP_EINVAL,
                 "the key file {} has mode {:04o}: group and others must have no access "
                 "to a key (chmod 600 {})",
                 path, unsigned(st.st_mode & 07777), path);
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    rc = err.set(DS4TP_EINVAL,
                 "the key file {} belongs to uid {}, not to this user (uid {}) or root",
                 path, unsigned(st.st_uid), unsigned(geteuid()));
  } else if (st.st_size > off_t(kMaxKeyBytes + 2)) {
    rc = err.set(DS4TP_EINVAL, "the key file {} is {} bytes, more than a key can be ({})",
                 path, (long long)st.st_size, kMaxKeyBytes);
  }
  if (rc != DS4TP_OK) {
    ::close(fd);
    return rc;
  }
  uint8_t buf[kMaxKeyBytes + 3];
  size_t n = 0;
  while (n < sizeof buf) {
    ssize_t r = ::read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      ::close(fd);
      crypto::wipe(buf, sizeof buf);
      return err.set(DS4TP_EIO, "cannot read the key file {}: {}", path, std::strerror(e));
    }
    if (r == 0) break;
    n += size_t(r);
  }
  ::close(fd);
  // Files written by `echo` or `openssl rand -hex` end with a newline that
  // is not part of the key.
  if (n > 0 && buf[n - 1] == '\n') n--;
  if (n > 0 && buf[n - 1] == '\r') n--;
  rc = check_length(n, "key file " + path, err);
  if (rc == DS4TP_OK) out = Key(buf, n);
  crypto::wipe(buf, sizeof buf);
  return rc;
}

int load_key(const void *psk, size_t psk_bytes, const char *psk_file, Key &out,
             std::string &source, Error &err) {
  out = Key();
  source.clear();
  if (psk != nullptr && psk_bytes > 0) {
    source = "options.psk";
    int rc = check_length(psk_bytes, source, err);
    if (rc == DS4TP_OK) out = Key(psk, psk_bytes);
    return rc;
  }
  if (psk_file != nullptr && psk_file[0] != '\0') {
    source = std::string("key file ") + psk_file;
    return read_key_file(psk_file, out, err);
  }
  if (const char *env = std::getenv("DS4TP_PSK"); env != nullptr && env[0] != '\0') {
    source = "DS4TP_PSK";
    size_t n = std::strlen(env);
    int rc = check_length(n, source, err);
    if (rc == DS4TP_OK) out = Key(env, n);
    return rc;
  }
  if (const char *env = std::getenv("DS4TP_PSK_FILE"); env != nullptr && env[0] != '\0') {
    source = std::string("key file ") + env + " (DS4TP_PSK_FILE)";
    int rc = read_key_file(env, out, err);
    if (rc != DS4TP_OK) err.message += " (named by DS4TP_PSK_FILE)";
    return rc;
  }
  return DS4TP_OK;
}

}  // namespace ds4tp::auth
