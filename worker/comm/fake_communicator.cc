#include "worker/comm/fake_communicator.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/reduce_ops.h"
#include "worker/comm/work_impl.h"

namespace pshard::worker {
namespace {

class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator(FakeHub* hub, int rank) : hub_(hub), rank_(rank) {
    thread_ = std::thread([this] { Run(); });
  }

  ~FakeCommunicator() override {
    Abort(absl::CancelledError("communicator destroyed"));
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    thread_.join();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size(); }

  std::shared_ptr<Work> AllReduce(void* data, int64_t count,
                                  DataType dtype) override {
    int64_t bytes = count * DataTypeSize(dtype);
    int n = world_size();
    // What a ring all-reduce sends: 2(n-1)/n of the buffer.
    int64_t sent = n > 1 ? 2 * (n - 1) * bytes / n : 0;
    return Collective(FakeHub::OpKind::kAllReduce, data, count, dtype, 0, sent);
  }

  std::shared_ptr<Work> Reduce(void* data, int64_t count, DataType dtype,
                               int root) override {
    int64_t sent = rank_ == root ? 0 : count * DataTypeSize(dtype);
    return Collective(FakeHub::OpKind::kReduce, data, count, dtype, root, sent);
  }

  std::shared_ptr<Work> ReduceMean(void* data, int64_t count, DataType dtype,
                                   int root) override {
    int64_t sent = rank_ == root ? 0 : count * DataTypeSize(dtype);
    return Collective(FakeHub::OpKind::kReduceMean, data, count, dtype, root,
                      sent);
  }

  std::shared_ptr<Work> Broadcast(void* data, int64_t count, DataType dtype,
                                  int root) override {
    int64_t sent =
        rank_ == root ? (world_size() - 1) * count * DataTypeSize(dtype) : 0;
    return Collective(FakeHub::OpKind::kBroadcast, data, count, dtype, root,
                      sent);
  }

  std::shared_ptr<Work> Barrier() override {
    return Collective(FakeHub::OpKind::kBarrier, nullptr, 0,
                      DataType::kFloat32, 0, 0);
  }

  std::shared_ptr<Work> Enqueue(std::function<absl::Status()> fn) override {
    return Push([fn = std::move(fn)](int64_t) { return fn(); },
                /*collective=*/false);
  }

  void Abort(const absl::Status& reason) override {
    {
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) return;
      error_ = reason.ok() ? absl::AbortedError("aborted") : reason;
    }
    hub_->Break(reason.ok() ? absl::AbortedError("aborted") : reason);
  }

  int64_t bytes_sent() const override { return bytes_sent_.load(); }

 private:
  struct Op {
    std::function<absl::Status()> fn;
    std::shared_ptr<CompletionWork> work;
  };

  std::shared_ptr<Work> Collective(FakeHub::OpKind kind, void* data,
                                   int64_t count, DataType dtype, int root,
                                   int64_t sent) {
    if (absl::Status args =
            CheckCollectiveArgs(data, count, root, world_size());
        !args.ok()) {
      return CompletionWork::Done(args);
    }
    return Push(
        [this, kind, data, count, dtype, root, sent](int64_t seq) {
          absl::Status status =
              hub_->Join(seq, rank_, kind, data, count, dtype, root);
          if (status.ok()) bytes_sent_ += sent;
          return status;
        },
        /*collective=*/true);
  }

  std::shared_ptr<Work> Push(std::function<absl::Status(int64_t)> fn,
                             bool collective) {
    auto work = std::make_shared<CompletionWork>();
    absl::MutexLock lock(&mu_);
    // Sequence numbers are taken under the lock so that they follow the
    // queue order even if several threads issue operations.
    int64_t seq = collective ? next_seq_++ : -1;
    queue_.push_back(Op{[fn = std::move(fn), seq] { return fn(seq); }, work});
    return work;
  }

  void Run() {
    while (true) {
      Op op;
      absl::Status error;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](FakeCommunicator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                 self->mu_) { return self->shutdown_ || !self->queue_.empty(); },
            this));
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
        error = error_;
      }
      if (!error.ok()) {
        op.work->Complete(error);
        continue;
      }
      absl::Status status = op.fn();
      if (!status.ok()) {
        absl::MutexLock lock(&mu_);
        if (error_.ok()) error_ = status;
      }
      op.work->Complete(status);
    }
  }

  FakeHub* const hub_;
  const int rank_;
  std::atomic<int64_t> bytes_sent_{0};
  absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace

FakeHub::FakeHub(int world_size, absl::Duration timeout)
    : world_size_(world_size), timeout_(timeout) {}

std::unique_ptr<Communicator> FakeHub::Create(int rank) {
  return std::make_unique<FakeCommunicator>(this, rank);
}

void FakeHub::Break(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) broken_ = reason;
}

absl::Status FakeHub::Join(int64_t seq, int rank, OpKind kind, void* data,
                           int64_t count, DataType dtype, int root) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  Slot& slot = slots_[seq];
  if (slot.arrived == 0) {
    slot.kind = kind;
    slot.count = count;
    slot.dtype = dtype;
    slot.root = root;
    slot.buffers.assign(world_size_, nullptr);
  } else if (slot.kind != kind || slot.count != count || slot.dtype != dtype ||
             slot.root != root) {
    broken_ = absl::InternalError(absl::StrCat(
        "rank ", rank, " issued collective #", seq,
        " with a different kind, size, type or root than another rank"));
    return broken_;
  }
  slot.buffers[rank] = data;
  ++slot.arrived;
  if (slot.arrived == world_size_) {
    Execute(slot);
    slot.done = true;
  }
  auto ready = [this, &slot]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slot.done || !broken_.ok();
  };
  bool finished = mu_.AwaitWithTimeout(absl::Condition(&ready), timeout_);
  absl::Status status;
  if (slot.done) {
    status = slot.status;
  } else if (!broken_.ok()) {
    status = broken_;
  } else if (!finished) {
    status = absl::DeadlineExceededError(absl::StrCat(
        "collective #", seq, " on rank ", rank, ": other ranks did not join "
        "within ", absl::FormatDuration(timeout_)));
    broken_ = status;
  }
  if (++slot.left == world_size_ || !slot.done) {
    // The last rank out frees the slot; an unfinished slot stays (the hub is
    // broken anyway) so that late arrivals still see consistent state.
    if (slot.done) slots_.erase(seq);
  }
  return status;
}

void FakeHub::Execute(Slot& slot) {
  const int64_t bytes = slot.count * DataTypeSize(slot.dtype);
  switch (slot.kind) {
    case OpKind::kBarrier:
      return;
    case OpKind::kAllReduce:
    case OpKind::kReduce:
    case OpKind::kReduceMean: {
      // Sum in rank order into a scratch buffer, so every rank sees the same
      // bits (a real all-reduce is deterministic too).
      std::vector<char> sum(bytes);
      if (bytes > 0) std::memcpy(sum.data(), slot.buffers[0], bytes);
      for (int r = 1; r < world_size_; ++r) {
        if (slot.kind == OpKind::kReduceMean && r == world_size_ - 1) {
          AddIntoAndDivide(sum.data(), slot.buffers[r], slot.count, slot.dtype,
                           static_cast<float>(world_size_));
        } else {
          AddInto(sum.data(), slot.buffers[r], slot.count, slot.dtype);
        }
      }
      for (int r = 0; r < world_size_; ++r) {
        if (slot.kind == OpKind::kAllReduce || r == slot.root) {
          // (A world of one has nothing to add: its mean is itself.)
          if (bytes > 0) std::memcpy(slot.buffers[r], sum.data(), bytes);
        }
      }
      return;
    }
    case OpKind::kBroadcast:
      for (int r = 0; r < world_size_; ++r) {
        if (r != slot.root && bytes > 0) {
          std::memcpy(slot.buffers[r], slot.buffers[slot.root], bytes);
        }
      }
      return;
  }
}

}  // namespace pshard::worker
