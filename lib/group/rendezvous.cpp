#include "group/rendezvous.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "auth/crypto.hpp"
#include "common/clock.hpp"
#include "auth/proof.hpp"
#include "net/intake.hpp"

namespace ds4tp::group {

bool join_mac(const auth::Key &key, const wire::Nonce &nonce, const uint8_t *fixed,
              wire::Mac &out) {
  uint8_t msg[kNonceMsgBytes + kJoinFixedBytes];
  std::memcpy(msg, nonce.data(), nonce.size());
  std::memcpy(msg + nonce.size(), fixed, kJoinFixedBytes);
  std::memset(msg + nonce.size() + 56, 0, 32);  // the mac field itself
  static_assert(sizeof(wire::Mac) == auth::crypto::kHmacSha256Bytes);
  return auth::crypto::hmac_sha256(key.data(), key.size(), msg, nonce.size() + kJoinFixedBytes,
                                   out.data());
}

std::array<uint8_t, 16> job_token(const std::string &name) {
  std::array<uint8_t, 16> t{};
  if (name.empty()) return t;
  static const char kLabel[] = "ds4tp job";
  uint8_t mac[auth::crypto::kHmacSha256Bytes];
  if (auth::crypto::hmac_sha256(reinterpret_cast<const uint8_t *>(kLabel), sizeof kLabel - 1,
                                reinterpret_cast<const uint8_t *>(name.data()), name.size(), mac))
    std::memcpy(t.data(), mac, t.size());
  else  // no libcrypto: the name's bytes, folded (still equal for equal names)
    for (size_t i = 0; i < name.size(); i++) t[i % t.size()] ^= uint8_t(name[i] + i);
  t[0] |= 1;  // never all zero
  return t;
}

namespace {

std::string list_ranks(const std::vector<int> &rs) {
  std::string s;
  for (int r : rs) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

net::IntakeConfig intake_config(const Options &o, const char *what) {
  net::IntakeConfig c;
  c.what = what;
  c.visit_ns = std::min<uint64_t>(o.connect_timeout_ns, 5'000'000'000ull);
  c.log = o.log;
  return c;
}

class JoinDesk final : public net::IntakeHandler {
 public:
  JoinDesk(const Options &o, Joined &out) : o_(o), out_(out) {}

  void open(net::Visitor &v) override {
    wire::Nonce nonce{};
    Error e;
    if (auth::fresh_nonce(nonce, e) != DS4TP_OK) {
      v.stage = -1;  // judged (and dropped) at its first byte
      v.need = 1;
      v.memo.assign(e.message.begin(), e.message.end());
      return;
    }
    std::memcpy(v.secret.data(), nonce.data(), nonce.size());
    v.out.resize(kNonceMsgBytes);
    encode_nonce(nonce, v.out.data());
    v.need = kJoinFixedBytes;
  }

  net::Verdict judge(net::Visitor &v, std::string &why) override {
    Error e;
    Join j;
    if (v.stage < 0) {
      why = "no nonce: " + std::string(v.memo.begin(), v.memo.end());
      return net::Verdict::kDrop;
    }
    if (v.stage == 0) {
      if (decode_join(v.in.data(), v.in.size(), j, e)) {
        why = "not a join: " + e.message;
        return net::Verdict::kDrop;
      }
      v.memo = v.in;  // the fixed part, for the key proof
      v.need = j.hello_bytes;
      v.out.clear();
      v.sent = 0;
      v.stage = 1;
      return net::Verdict::kMore;
    }
    decode_join(v.memo.data(), v.memo.size(), j, e);
    Error no;
    const bool other_job = j.job != o_.job;
    if (!ended_.ok() && !other_job)  // the group cannot form: a rank still joining hears why
      no.set(ended_.code, "bring-up ended: rank 0 refused the join claiming rank {}: {}",
             ended_rank_, ended_.message);
    else if (other_job)
      no.set(DS4TP_EPROTO, "a join claiming rank {} belongs to another job (its job token "
             "differs from this group's, {})", j.rank,
             o_.job_name.empty() ? "none" : o_.job_name);
    if (!no.ok() || refuse(v, j, no)) {  // j.host_id becomes the hello's when it passes
      Roster ro;
      ro.status = no.code;
      ro.message = no.message;
      v.out.resize(kRosterBytes);  // the refused rank reads why
      encode_roster(ro, v.out.data());
      v.sent = 0;
      why = no.message;
      // A rank of this job refused (its key proven, where there is a key):
      // it will not come back right, so the group cannot form and every
      // rank hears why now. Another job's join, or one whose proof fails
      // (anyone may send that), is named at the deadline instead.
      if (!ended_.ok()) {
        // told already
      } else if (!other_job && (o_.key.empty() || proven(v, j))) {
        ended_ = no;
        ended_rank_ = int(j.rank);
        ended_at_ = now_ns();
      } else {
        last_ = no;
        refused_rank_ = int(j.rank);
      }
      return net::Verdict::kDrop;
    }
    const size_t r = j.rank;
    out_.joins[r] = j;
    out_.hosts[r] = v.host;
    out_.ctl[r] = std::move(v.fd);
    joined_++;
    return net::Verdict::kKeep;
  }

  // Ended: after a short grace in which ranks still joining are told why.
  bool done() const override {
    return joined_ == o_.size || (!ended_.ok() && now_ns() - ended_at_ >= kEndGraceNs);
  }

  void tick(uint64_t now) override {
    if (next_report_ == 0) next_report_ = now + o_.report_ns;
    if (now < next_report_) return;
    next_report_ = now + o_.report_ns;
    o_.log.warn("group rendezvous: {} of {} ranks joined ({}); waiting for {}", joined_, o_.size,
                list_ranks(ranks(true)), list_ranks(ranks(false)));
  }

  // The refusal that ended the desk, named; DS4TP_OK when none did.
  int ended(Error &err) const {
    if (ended_.ok()) return DS4TP_OK;
    return err.set(ended_.code, "bring-up ended: rank 0 refused the join claiming rank {}: {}",
                   ended_rank_, ended_.message);
  }

  // The error at the deadline: who is missing, and the last refusal.
  int missing(Error &err) const {
    const std::vector<int> rs = ranks(false);
    const std::string what = fmt::format("rank{} {} did not join within {} ms",
                                         rs.size() > 1 ? "s" : "", list_ranks(rs),
                                         o_.connect_timeout_ns / 1'000'000);
    if (last_.ok()) return err.set(DS4TP_ETIMEDOUT, "{}", what);
    return err.set(last_.code, "{}; refused a join claiming rank {}: {}", what, refused_rank_,
                   last_.message);
  }

 private:
  // The join's key proof verifies against this visit's nonce.
  bool proven(const net::Visitor &v, const Join &j) const {
    if (o_.key.empty() || !j.has_mac) return false;
    wire::Nonce nonce{};
    std::memcpy(nonce.data(), v.secret.data(), nonce.size());
    wire::Mac want{};
    return join_mac(o_.key, nonce, v.memo.data(), want) && auth::mac_equal(want, j.mac);
  }

  // A join of another group, key or model; or a rank already taken.
  bool refuse(const net::Visitor &v, Join &j, Error &no) const {
    const int r = int(j.rank);
    if (j.size != uint32_t(o_.size)) {
      no.set(DS4TP_EINVAL, "rank {} has group size {}, rank 0 has {}", r, j.size, o_.size);
    } else if (!o_.key.empty() && !j.has_mac) {
      no.set(DS4TP_EAUTH, "rank {} sent no key proof; rank 0 has a key", r);
    } else if (o_.key.empty() && j.has_mac) {
      no.set(DS4TP_EAUTH, "rank {} sent a key proof; rank 0 has no key", r);
    } else if (j.has_mac && !proven(v, j)) {
      no.set(DS4TP_EAUTH, "rank {}: key proof does not verify (the keys differ)", r);
    }
    if (no.ok() && r == 0) no.set(DS4TP_EPROTO, "a second rank 0 joined from {}", v.host);
    if (no.ok() && out_.ctl[size_t(r)].valid())
      no.set(DS4TP_EPROTO, "rank {} joined twice (from {} and {})", r, out_.hosts[size_t(r)],
             v.host);
    if (no.ok() && j.chunk != o_.chunk_bytes)
      no.set(DS4TP_EINVAL, "rank {} has chunk_bytes {}, rank 0 has {}", r, j.chunk,
             o_.chunk_bytes);
    if (!no.ok()) return true;
    wire::Preamble pre;
    wire::Hello ph;
    Error e;
    if (wire::decode_preamble(v.in.data(), v.in.size(), wire::kHelloMaxBytes, pre, e) ||
        wire::decode_hello_body(v.in.data() + wire::kPreambleBytes,
                                v.in.size() - wire::kPreambleBytes, ph, e) ||
        wire::compare_identity(o_.id, ph.id, e) != DS4TP_OK) {
      no.set(e.code, "rank {}: {}", r, e.message);
      return true;
    }
    j.host_id = ph.host_id;
    return false;
  }

  // The ranks that joined (rank 0 with them), or those still awaited.
  std::vector<int> ranks(bool joined) const {
    std::vector<int> rs;
    for (int r = 0; r < o_.size; r++)
      if ((r == 0 || out_.ctl[size_t(r)].valid()) == joined) rs.push_back(r);
    return rs;
  }

  const Options &o_;
  Joined &out_;
  int joined_ = 1;
  static constexpr uint64_t kEndGraceNs = 300'000'000;
  Error ended_;  // a refusal of a rank of this job
  int ended_rank_ = -1;
  uint64_t ended_at_ = 0;
  Error last_;   // the last other refusal, named at the deadline
  int refused_rank_ = -1;
  uint64_t next_report_ = 0;
};

class LinkDesk final : public net::IntakeHandler {
 public:
  LinkDesk(const Options &o, const LinkToken &token, const std::vector<int> &from,
           std::vector<net::Fd> &fds)
      : o_(o), token_(token), from_(from), fds_(fds) {}

  void open(net::Visitor &v) override { v.need = kLinkBytes; }

  net::Verdict judge(net::Visitor &v, std::string &why) override {
    uint32_t r = 0;
    LinkToken t{};
    Error e;
    if (decode_link(v.in.data(), v.in.size(), uint32_t(o_.size), r, t, e)) {
      why = "not a data link: " + e.message;
      return net::Verdict::kDrop;
    }
    if (t != token_) {
      why = fmt::format("a data link claiming rank {} shows another group's token", r);
    } else if (std::find(from_.begin(), from_.end(), int(r)) == from_.end()) {
      why = fmt::format("rank {} links to rank {}, which takes no link from it", r, o_.rank);
    } else if (fds_[r].valid()) {
      why = fmt::format("rank {} linked twice", r);
    }
    if (!why.empty()) return net::Verdict::kDrop;
    fds_[r] = std::move(v.fd);
    linked_++;
    return net::Verdict::kKeep;
  }

  bool done() const override { return linked_ == int(from_.size()); }

  std::string missing() const {
    std::vector<int> ranks;
    for (int r : from_)
      if (!fds_[size_t(r)].valid()) ranks.push_back(r);
    return list_ranks(ranks);
  }

 private:
  const Options &o_;
  const LinkToken &token_;
  const std::vector<int> &from_;
  std::vector<net::Fd> &fds_;
  int linked_ = 0;
};

}  // namespace

int serve_joins(const Options &o, int lfd, uint64_t deadline_ns, Joined &out, Error &err) {
  out.joins.assign(size_t(o.size), Join{});
  out.hosts.assign(size_t(o.size), std::string());
  out.ctl.clear();
  out.ctl.resize(size_t(o.size));
  JoinDesk desk(o, out);
  const net::IntakeConfig cfg = intake_config(o, "group rendezvous");
  net::IntakeCounts counts;
  const int rc = net::serve_intake(lfd, desk, cfg, deadline_ns, counts, err);
  if (int ended = desk.ended(err)) return ended;
  if (rc == DS4TP_ETIMEDOUT) return desk.missing(err);
  return rc;
}

int serve_links(const Options &o, const LinkToken &token, const std::vector<int> &from, int lfd,
                uint64_t deadline_ns, std::vector<net::Fd> &fds, Error &err) {
  LinkDesk desk(o, token, from, fds);
  const net::IntakeConfig cfg = intake_config(o, "group data listener");
  net::IntakeCounts counts;
  const int rc = net::serve_intake(lfd, desk, cfg, deadline_ns, counts, err);
  if (rc == DS4TP_ETIMEDOUT)
    return err.set(rc, "data links: rank(s) {} did not link in time", desk.missing());
  return rc;
}

}  // namespace ds4tp::group
