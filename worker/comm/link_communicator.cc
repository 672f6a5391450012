#include "worker/comm/link_communicator.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/comm/work_impl.h"

namespace pshard::worker {
namespace {

enum class OpKind { kAllReduce, kReduce, kBroadcast, kBarrier, kEnqueue };

struct Op {
  OpKind kind;
  char* data = nullptr;
  int64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  bool mean = false;  // Reduce: the root divides the sum by the world size
  std::function<absl::Status()> fn;
  // Memory the op reads or writes; `full_barrier` ops conflict with all.
  std::vector<Communicator::MemoryRange> ranges;
  bool full_barrier = false;
  std::shared_ptr<CompletionWork> work;
  uint64_t seq = 0;

  // Once posted: one transfer per send to or receive from one peer.
  struct Posted {
    std::unique_ptr<Transfer> transfer;
    bool send = false;
    int peer = 0;
  };
  std::vector<Posted> transfers;
  std::vector<char> tokens;  // a barrier's one-byte messages, 2 per peer
  // Completion: kPosted -> (all-reduce: kGathering ->) kDone with `result`.
  enum Stage { kPosted, kGathering, kDone };
  Stage stage = kPosted;
  absl::Status result;
  size_t gather_first = 0;
  int64_t pending_send_bytes = 0;

  int64_t bytes() const { return count * DataTypeSize(dtype); }
};

bool Overlaps(const Communicator::MemoryRange& a,
              const Communicator::MemoryRange& b) {
  if (a.bytes <= 0 || b.bytes <= 0) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

bool Conflicts(const Op& earlier, const Op& later) {
  if (earlier.full_barrier || later.full_barrier) return true;
  for (const auto& a : earlier.ranges) {
    for (const auto& b : later.ranges) {
      if (Overlaps(a, b)) return true;
    }
  }
  return false;
}

class LinkCommunicator : public Communicator {
 public:
  LinkCommunicator(const LinkCommunicatorOptions& options,
                   std::unique_ptr<Transport> transport)
      : rank_(options.rank),
        world_size_(options.world_size),
        timeout_(options.timeout),
        max_in_flight_(std::max(1, options.max_in_flight)),
        transport_(std::move(transport)) {
    links_.assign(world_size_, nullptr);
    barrier_links_.assign(world_size_, nullptr);
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      links_[r] = &transport_->DataLink(r);
      barrier_links_[r] = &transport_->BarrierLink(r);
    }
    issuer_ = std::thread([this] { IssueLoop(); });
    completer_ = std::thread([this] { CompleteLoop(); });
  }

  ~LinkCommunicator() override {
    Abort(absl::CancelledError("communicator destroyed"));
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    issuer_.join();
    completer_.join();
    // Every link is closed (Abort), so the transport no longer touches any
    // buffer; only now may the buffers of failed operations go.
    graveyard_.clear();
    transport_.reset();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  std::shared_ptr<Work> AllReduce(void* data, int64_t count,
                                  DataType dtype) override {
    return Issue(OpKind::kAllReduce, data, count, dtype, 0);
  }

  std::shared_ptr<Work> Reduce(void* data, int64_t count, DataType dtype,
                               int root) override {
    return Issue(OpKind::kReduce, data, count, dtype, root);
  }

  std::shared_ptr<Work> ReduceMean(void* data, int64_t count, DataType dtype,
                                   int root) override {
    return Issue(OpKind::kReduce, data, count, dtype, root, /*mean=*/true);
  }

  std::shared_ptr<Work> Broadcast(void* data, int64_t count, DataType dtype,
                                  int root) override {
    return Issue(OpKind::kBroadcast, data, count, dtype, root);
  }

  std::shared_ptr<Work> Barrier() override {
    return Issue(OpKind::kBarrier, nullptr, 0, DataType::kFloat32, 0);
  }

  std::shared_ptr<Work> Enqueue(std::function<absl::Status()> fn) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kEnqueue;
    op->fn = std::move(fn);
    op->full_barrier = true;
    return Push(std::move(op));
  }

  std::shared_ptr<Work> EnqueueTouching(
      std::function<absl::Status()> fn,
      std::vector<MemoryRange> ranges) override {
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kEnqueue;
    op->fn = std::move(fn);
    op->ranges = std::move(ranges);
    return Push(std::move(op));
  }

  void Abort(const absl::Status& reason) override {
    Fail(reason.ok() ? absl::AbortedError("communicator aborted") : reason);
  }

  int64_t bytes_sent() const override { return bytes_sent_.load(); }

 private:
  std::shared_ptr<Work> Issue(OpKind kind, void* data, int64_t count,
                              DataType dtype, int root, bool mean = false) {
    if (absl::Status args = CheckCollectiveArgs(data, count, root, world_size_);
        !args.ok()) {
      return CompletionWork::Done(args);
    }
    auto op = std::make_unique<Op>();
    op->kind = kind;
    op->data = static_cast<char*>(data);
    op->count = count;
    op->dtype = dtype;
    op->root = root;
    op->mean = mean;
    if (op->bytes() > 0) op->ranges.push_back({data, op->bytes()});
    return Push(std::move(op));
  }

  std::shared_ptr<Work> Push(std::unique_ptr<Op> op) {
    op->work = std::make_shared<CompletionWork>();
    std::shared_ptr<Work> work = op->work;
    absl::MutexLock lock(&mu_);
    // Only transfers take a sequence number (their tag): Enqueue runs on some
    // ranks only (the owner), and every rank must number the transfers alike.
    op->seq = op->kind == OpKind::kEnqueue ? 0 : next_seq_++;
    queue_.push_back(std::move(op));
    return work;
  }

  // Records the first failure, interrupts every wait on the transport and
  // closes every link so that peers fail fast too.
  void Fail(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) return;
      error_ = status;
      for (const auto& op : in_flight_) AbortWaits(*op);
    }
    if (transport_ != nullptr) transport_->Close(status);
  }

  static void AbortWaits(Op& op) {
    for (auto& t : op.transfers) t.transfer->AbortWait();
  }

  absl::Status CurrentError() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  void IssueLoop() {
    while (true) {
      std::unique_ptr<Op> op;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](LinkCommunicator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                 self->mu_) { return self->shutdown_ || !self->queue_.empty(); },
            this));
        if (queue_.empty()) {
          issuer_done_ = true;
          return;
        }
        // A transfer may start once nothing in flight conflicts with it. An
        // Enqueue'd function is handed over at once: the completion thread
        // runs it only after every earlier op has finished, which already
        // orders it after the transfers it touches. Holding it here until
        // then would hold up every later op as well (ops are posted in
        // order), among them the next pieces' receives, which Gloo's peers
        // do not send before; the owner's pipeline would drain at every
        // piece it steps. Later ops on its memory still wait for it below.
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          if (!error_.ok()) return true;
          if (static_cast<int>(in_flight_.size()) >= max_in_flight_) {
            return false;
          }
          if (queue_.front()->kind == OpKind::kEnqueue) return true;
          for (const auto& flying : in_flight_) {
            if (Conflicts(*flying, *queue_.front())) return false;
          }
          return true;
        };
        mu_.Await(absl::Condition(&ready));
        op = std::move(queue_.front());
        queue_.pop_front();
        if (!error_.ok()) {
          absl::Status error = error_;
          mu_.Unlock();
          op->work->Complete(error);
          mu_.Lock();
          continue;
        }
      }
      absl::Status posted = Post(*op);
      if (!posted.ok()) Fail(posted);
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) AbortWaits(*op);
      in_flight_.push_back(std::move(op));
    }
  }

  // Completes posted ops strictly in order: an op's first round of
  // transfers, then (an all-reduce) its second round, then the next op.
  // Every rank waits for the same transfers in the same order, which is what
  // keeps shared-memory rings from deadlocking: a ring is drained by the
  // receiver's wait, so two ranks that each waited, in different orders, for
  // a send into a full ring would wait on each other for ever. (Moving on to
  // the next op's first round while an all-reduce's second was in flight
  // made the order depend on whether that op had been posted yet, which
  // differs between ranks.) Later ops' transfers still proceed meanwhile:
  // they are posted as soon as they are issued, and TCP receives and every
  // ring's sender make progress on their own threads.
  void CompleteLoop() {
    while (true) {
      Op* op = nullptr;
      bool finish_front = false;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](LinkCommunicator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                 self->mu_) {
              return !self->in_flight_.empty() || self->issuer_done_;
            },
            this));
        // The issuer has stopped and everything it posted is finished.
        if (in_flight_.empty()) return;
        Op* front = in_flight_.front().get();
        if (front->stage != Op::kDone) {
          op = front;
          finish_front = front->stage == Op::kGathering;
        }
        if (op != nullptr && !error_.ok()) {
          op->result = error_;
          op->stage = Op::kDone;
          op = nullptr;
        }
      }
      if (op != nullptr) {
        absl::Status status =
            finish_front ? FinishGather(*op) : Process(*op);
        if (!status.ok()) {
          {
            absl::MutexLock lock(&mu_);
            op->result = status;
            op->stage = Op::kDone;
          }
          Fail(status);
        }
        continue;
      }
      std::unique_ptr<Op> done;
      {
        absl::MutexLock lock(&mu_);
        if (in_flight_.empty() || in_flight_.front()->stage != Op::kDone) {
          continue;
        }
        done = std::move(in_flight_.front());
        in_flight_.pop_front();
      }
      std::shared_ptr<CompletionWork> work = done->work;
      const absl::Status status = done->result;
      if (!status.ok()) {
        // The transport may still hold these buffers until the links are
        // closed: keep them until the destructor.
        graveyard_.push_back(std::move(done));
      }
      work->Complete(status);
    }
  }

  // Chunk c of an all-reduce: elements [begin, end).
  int64_t ChunkBegin(const Op& op, int c) const {
    return op.count * c / world_size_;
  }
  int64_t ChunkElems(const Op& op, int c) const {
    return ChunkBegin(op, c + 1) - ChunkBegin(op, c);
  }

  // Posts a send of [data, data + bytes) to `peer` on `link`.
  absl::Status PostSend(Op& op, Link& link, int peer, const char* data,
                        int64_t bytes, int lane) {
    ASSIGN_OR_RETURN(std::unique_ptr<Transfer> t,
                     link.Send(data, bytes, op.seq, lane));
    op.pending_send_bytes += bytes;
    op.transfers.push_back({std::move(t), /*send=*/true, peer});
    return absl::OkStatus();
  }

  // Posts a receive of `bytes` from `peer` on `link`.
  absl::Status PostReceive(Op& op, Link& link, int peer, int64_t bytes,
                           const Delivery& into, int lane) {
    ASSIGN_OR_RETURN(std::unique_ptr<Transfer> t,
                     link.Receive(bytes, into, op.seq, lane));
    op.transfers.push_back({std::move(t), /*send=*/false, peer});
    return absl::OkStatus();
  }

  Delivery CopyTo(const Op& op, char* dst) const {
    return Delivery{dst, /*add=*/false, op.dtype, 0};
  }
  Delivery AddTo(const Op& op, char* dst, float divisor = 0) const {
    return Delivery{dst, /*add=*/true, op.dtype, divisor};
  }

  // Hands the op's first transfers to the links without waiting.
  absl::Status Post(Op& op) {
    if (op.kind == OpKind::kEnqueue || world_size_ == 1) return absl::OkStatus();
    absl::Status status = PostFirstRound(op);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("posting operation #", op.seq, ": ",
                                       status.message()));
    }
    return absl::OkStatus();
  }

  absl::Status PostFirstRound(Op& op) {
    const int n = world_size_;
    const size_t esize = DataTypeSize(op.dtype);
    switch (op.kind) {
      case OpKind::kReduce: {
        if (op.bytes() == 0) break;
        if (rank_ != op.root) {
          return PostSend(op, *links_[op.root], op.root, op.data, op.bytes(),
                          0);
        }
        // Summed into place as they arrive; a mean divides in the last
        // addition.
        const int last = rank_ == n - 1 ? n - 2 : n - 1;
        for (int r = 0; r < n; ++r) {
          if (r == rank_) continue;
          const float divisor =
              op.mean && r == last ? static_cast<float>(n) : 0.0f;
          RETURN_IF_ERROR(PostReceive(op, *links_[r], r, op.bytes(),
                                      AddTo(op, op.data, divisor), 0));
        }
        break;
      }
      case OpKind::kBroadcast:
        if (op.bytes() == 0) break;
        if (rank_ != op.root) {
          return PostReceive(op, *links_[op.root], op.root, op.bytes(),
                             CopyTo(op, op.data), 0);
        }
        for (int r = 0; r < n; ++r) {
          if (r == rank_) continue;
          RETURN_IF_ERROR(PostSend(op, *links_[r], r, op.data, op.bytes(), 0));
        }
        break;
      case OpKind::kAllReduce: {
        if (op.bytes() == 0) break;
        // Round 0 (reduce-scatter): chunk c goes to rank c, summed there.
        const int64_t mine = ChunkElems(op, rank_);
        char* my_chunk = op.data + ChunkBegin(op, rank_) * esize;
        for (int r = 0; r < n; ++r) {
          if (r == rank_) continue;
          if (ChunkElems(op, r) > 0) {
            RETURN_IF_ERROR(PostSend(op, *links_[r], r,
                                     op.data + ChunkBegin(op, r) * esize,
                                     ChunkElems(op, r) * esize, 0));
          }
          if (mine > 0) {
            RETURN_IF_ERROR(PostReceive(op, *links_[r], r, mine * esize,
                                        AddTo(op, my_chunk), 0));
          }
        }
        break;
      }
      case OpKind::kBarrier:
        // One byte each way with every peer.
        op.tokens.assign(2 * n, 0);
        for (int r = 0; r < n; ++r) {
          if (r == rank_) continue;
          char* token = op.tokens.data() + 2 * r;
          RETURN_IF_ERROR(PostSend(op, *barrier_links_[r], r, token, 1, 0));
          RETURN_IF_ERROR(PostReceive(op, *barrier_links_[r], r, 1,
                                      CopyTo(op, token + 1), 0));
        }
        break;
      case OpKind::kEnqueue:
        break;
    }
    return absl::OkStatus();
  }

  // Waits for one transfer. Once the communicator has failed, its first
  // error stands for every later failure (a closed link fails every wait).
  absl::Status WaitFor(const Op& op, Op::Posted& posted) {
    absl::Status status = posted.transfer->Wait(timeout_);
    if (status.ok()) return status;
    absl::Status error = CurrentError();
    if (!error.ok()) return error;
    return absl::Status(
        status.code(),
        absl::StrCat(posted.send ? "sending to rank " : "receiving from rank ",
                     posted.peer, " for operation #", op.seq, " on rank ",
                     rank_, ": ", status.message()));
  }

  // Waits for transfers [first, end) of `op`, receives first, then sends: a
  // rank that both sends and receives in one op (all-reduce) must drain its
  // incoming ring before it waits for its own message to fit into the
  // peer's, or two full rings would wait on each other.
  absl::Status WaitAll(Op& op, size_t first) {
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = first; i < op.transfers.size(); ++i) {
        if (op.transfers[i].send != (pass == 1)) continue;
        RETURN_IF_ERROR(WaitFor(op, op.transfers[i]));
      }
    }
    return absl::OkStatus();
  }

  // Handles a posted op: waits for its transfers (kDone), or for an
  // all-reduce, its first round, then posts the second (kGathering). Errors
  // are returned (the caller fails the communicator).
  absl::Status Process(Op& op) {
    if (op.kind == OpKind::kEnqueue) {
      RETURN_IF_ERROR(op.fn());
      return MarkDone(op);
    }
    RETURN_IF_ERROR(WaitAll(op, 0));
    if (op.kind != OpKind::kAllReduce || op.transfers.empty()) {
      return MarkDone(op);
    }
    // Round 1 (all-gather): my reduced chunk to everyone, theirs to me.
    // Posted under the lock: Abort() walks the transfers.
    const size_t esize = DataTypeSize(op.dtype);
    const int64_t mine = ChunkElems(op, rank_);
    char* my_chunk = op.data + ChunkBegin(op, rank_) * esize;
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(error_);
    op.gather_first = op.transfers.size();
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      absl::Status posted;
      if (mine > 0) {
        posted = PostSend(op, *links_[r], r, my_chunk, mine * esize, 1);
      }
      if (posted.ok() && ChunkElems(op, r) > 0) {
        char* chunk = op.data + ChunkBegin(op, r) * esize;
        posted = PostReceive(op, *links_[r], r, ChunkElems(op, r) * esize,
                             CopyTo(op, chunk), 1);
      }
      if (!posted.ok()) {
        return absl::Status(
            posted.code(), absl::StrCat("posting all-gather of operation #",
                                        op.seq, ": ", posted.message()));
      }
    }
    op.stage = Op::kGathering;
    return absl::OkStatus();
  }

  // Waits for an all-reduce's second round.
  absl::Status FinishGather(Op& op) {
    RETURN_IF_ERROR(WaitAll(op, op.gather_first));
    return MarkDone(op);
  }

  absl::Status MarkDone(Op& op) {
    bytes_sent_ += op.pending_send_bytes;
    absl::MutexLock lock(&mu_);
    op.result = absl::OkStatus();
    op.stage = Op::kDone;
    return absl::OkStatus();
  }

  const int rank_;
  const int world_size_;
  const absl::Duration timeout_;
  const int max_in_flight_;
  std::unique_ptr<Transport> transport_;
  // The links to each peer (null for this rank), chosen once.
  std::vector<Link*> links_;
  std::vector<Link*> barrier_links_;
  std::atomic<int64_t> bytes_sent_{0};

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Op>> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool issuer_done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;

  // Only touched by the completion thread, then by the destructor.
  std::vector<std::unique_ptr<Op>> graveyard_;

  std::thread issuer_;
  std::thread completer_;
};

}  // namespace

std::unique_ptr<Communicator> CreateLinkCommunicator(
    const LinkCommunicatorOptions& options,
    std::unique_ptr<Transport> transport) {
  return std::make_unique<LinkCommunicator>(options, std::move(transport));
}

}  // namespace pshard::worker
