// XRC domains (core/xrcd.h): the same file is the same domain; O_CREAT / O_EXCL as the kernel's
// ib_uverbs_open_xrcd; a domain lives while a handle or a user holds it.
#include "core/xrcd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/cq.h"
#include "core/srq.h"
#include "core/xrc_qp.h"
#include "core/qp.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class XrcdTest : public CoreTest {
 protected:
  XrcdTest() {
    char path[] = "/tmp/softverbs-xrcd-unit-XXXXXX";
    fd_ = mkstemp(path);
    path_ = path;
  }
  ~XrcdTest() override {
    close(fd_);
    unlink(path_.c_str());
  }
  int fd_ = -1;
  std::string path_;
};

TEST_F(XrcdTest, SameFileSameDomainAndOpenFlags) {
  EXPECT_EQ(Xrcd::Open(*context_, fd_, 0).status().code(), EAGAIN);  // none yet, no O_CREAT
  auto first = Xrcd::Open(*context_, fd_, O_CREAT | O_EXCL);
  ASSERT_TRUE(first.ok()) << first.status().rule();
  EXPECT_EQ(Xrcd::Open(*context_, fd_, O_CREAT | O_EXCL).status().code(), EINVAL);
  int other_fd = open(path_.c_str(), O_RDONLY);  // another description of the same inode
  auto second = Xrcd::Open(*context_, other_fd, 0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*first)->id(), (*second)->id());
  EXPECT_TRUE((*first)->from_file());
  close(other_fd);
  first.value().reset();
  second.value().reset();
  EXPECT_EQ(Xrcd::Open(*context_, fd_, 0).status().code(), EAGAIN);  // all closed: gone
  EXPECT_EQ(Xrcd::Open(*context_, 1 << 20, O_CREAT).status().code(), EBADF);
}

TEST_F(XrcdTest, AnonymousDomainsAreDistinctAndBusyWhileUsed) {
  auto a = Xrcd::Open(*context_, -1, 0);
  auto b = Xrcd::Open(*context_, -1, O_CREAT | O_EXCL);  // (oflags mean nothing without a file)
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)->id() == (*b)->id());
  QpInitAttributes init;
  init.type = QpType::kXrcRecv;
  init.has_xrcd = true;
  init.xrcd = a.value().get();
  auto qp = Qp::Create(*context_, init);
  ASSERT_TRUE(qp.ok()) << qp.status().rule();
  EXPECT_EQ((*a)->CheckClose().code(), EBUSY);
  qp.value().reset();
  EXPECT_TRUE((*a)->CheckClose().ok());
}

TEST_F(XrcdTest, FileDomainOutlivesItsHandleWhileUsed) {
  auto x = Xrcd::Open(*context_, fd_, O_CREAT);
  ASSERT_TRUE(x.ok());
  QpInitAttributes init;
  init.type = QpType::kXrcRecv;
  init.has_xrcd = true;
  init.xrcd = x.value().get();
  auto qp = Qp::Create(*context_, init);
  ASSERT_TRUE(qp.ok());
  EXPECT_TRUE((*x)->CheckClose().ok());
  x.value().reset();                                             // closed...
  EXPECT_TRUE(Xrcd::Open(*context_, fd_, 0).ok());              // ...yet the QP keeps the domain
  qp.value().reset();
  EXPECT_EQ(Xrcd::Open(*context_, fd_, 0).status().code(), EAGAIN);
}

TEST_F(XrcdTest, XrcRecvQpIgnoresPdAndCqsAndNeedsItsDomain) {
  QpInitAttributes init;
  init.type = QpType::kXrcRecv;
  EXPECT_EQ(Qp::Create(*context_, init).status().code(), EINVAL);  // no XRCD
  auto x = Xrcd::Open(*context_, -1, 0);
  ASSERT_TRUE(x.ok());
  init.has_xrcd = true;
  init.xrcd = x.value().get();
  init.pd = pd_.get();
  init.cap.max_send_wr = 8;
  auto qp = Qp::Create(*context_, init);
  ASSERT_TRUE(qp.ok());
  EXPECT_EQ((*qp)->init().pd, nullptr);
  EXPECT_EQ((*qp)->init().cap.max_send_wr, 0u);
  EXPECT_EQ((*qp)->PostRecv(1, nullptr, 0).code(), EINVAL);
  EXPECT_EQ(pd_->users().count(), 0);
}

TEST_F(XrcdTest, OpenQpFindsTargetQpsOfTheDomainOnly) {
  auto x = Xrcd::Open(*context_, -1, 0);
  auto y = Xrcd::Open(*context_, -1, 0);
  ASSERT_TRUE(x.ok() && y.ok());
  QpInitAttributes init;
  init.type = QpType::kXrcRecv;
  init.has_xrcd = true;
  init.xrcd = x.value().get();
  auto qp = Qp::Create(*context_, init);
  ASSERT_TRUE(qp.ok());
  const uint32_t qpn = (*qp)->qp_num();
  EXPECT_TRUE(OpenedQp::Open(*context_, **x, qpn).ok());
  EXPECT_EQ(OpenedQp::Open(*context_, **y, qpn).status().code(), EINVAL);       // another domain
  EXPECT_EQ(OpenedQp::Open(*context_, **x, 0xfffff0).status().code(), EINVAL);  // no such QP
  auto opened = OpenedQp::Open(*context_, **x, qpn);
  ASSERT_TRUE(opened.ok());
  QpAttributes a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = 0;
  ASSERT_TRUE((*opened)->Modify(a, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags).ok());
  EXPECT_EQ((*qp)->state(), QpState::kInit);
  EXPECT_EQ((*opened)->Query()->qp_state, QpState::kInit);
  qp.value().reset();  // its creator destroys it: the handle finds nothing any more
  EXPECT_EQ((*opened)->Query().status().code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::core
