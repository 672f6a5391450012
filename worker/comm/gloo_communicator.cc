#include "worker/comm/gloo_communicator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <unistd.h>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/comm/reduce_ops.h"
#include "worker/comm/shm_channel.h"
#include "worker/comm/work_impl.h"

namespace pshard::worker {
namespace {

using ::gloo::transport::UnboundBuffer;

// Our slots live in their own range so they never meet Gloo's own
// collectives' slots (which use small prefixes in the top byte).
constexpr uint64_t kSlotPrefix = uint64_t{0x5d} << 56;

// All-reduces whose second round may be in flight at once.
constexpr int kMaxGathering = 8;

uint64_t SlotOf(uint64_t seq, int phase) {
  return kSlotPrefix | (seq << 2) | static_cast<uint64_t>(phase);
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo throws on every failure; this is the one place its exceptions become
// statuses.
absl::Status FromGlooException(const std::exception& e,
                               absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", e.what());
  if (absl::StrContains(e.what(), "imed out") ||
      absl::StrContains(e.what(), "imeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

// gloo::rendezvous::Store over a KvClient. Gloo expects failures as
// exceptions; CreateGlooCommunicator catches them.
class KvGlooStore : public ::gloo::rendezvous::Store {
 public:
  KvGlooStore(KvClient& kv, std::string prefix, absl::Duration timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status status =
        kv_.Put(prefix_ + key, std::string(data.begin(), data.end()));
    if (!status.ok()) Throw(status);
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, timeout_);
    if (!value.ok()) Throw(value.status());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, ToChrono(timeout_));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    absl::Duration limit =
        std::min(timeout_, absl::Milliseconds(timeout.count()));
    if (timeout.count() <= 0) limit = timeout_;
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = kv_.Get(prefix_ + key, limit);
      if (!value.ok()) Throw(value.status());
    }
  }

  // The store's own failure, if Gloo failed because of one.
  const absl::Status& error() const { return error_; }

 private:
  [[noreturn]] void Throw(const absl::Status& status) {
    error_ = status;
    throw ::gloo::IoException(status.ToString());
  }

  KvClient& kv_;
  const std::string prefix_;
  const absl::Duration timeout_;
  absl::Status error_;
};

// Reusable receive buffers: reductions receive every bucket into scratch
// memory, and fresh multi-megabyte allocations would fault their pages in on
// every step.
class ScratchPool {
 public:
  std::unique_ptr<char[]> Acquire(size_t bytes) {
    absl::MutexLock lock(&mu_);
    auto& free = free_[bytes];
    if (!free.empty()) {
      std::unique_ptr<char[]> buffer = std::move(free.back());
      free.pop_back();
      return buffer;
    }
    return std::unique_ptr<char[]>(new char[std::max<size_t>(bytes, 1)]);
  }

  void Release(size_t bytes, std::unique_ptr<char[]> buffer) {
    absl::MutexLock lock(&mu_);
    auto& free = free_[bytes];
    if (free.size() < 32) free.push_back(std::move(buffer));
  }

 private:
  absl::Mutex mu_;
  std::map<size_t, std::vector<std::unique_ptr<char[]>>> free_
      ABSL_GUARDED_BY(mu_);
};

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

  // Transport state, once posted: one unbound buffer per transfer (a send to
  // or a receive from one peer), each on the context of its direction.
  struct Transfer {
    std::unique_ptr<UnboundBuffer> buffer;  // TCP; null for shared memory
    bool send = false;
    int peer = 0;
    int64_t bytes = 0;
    // Shared memory: a send completes when its sender thread has written it
    // into the ring; a receive consumes from the ring into `dst`.
    std::shared_ptr<CompletionWork> shm_sent;
    char* dst = nullptr;
    int ring = 0;
  };
  std::vector<Transfer> transfers;
  std::vector<std::unique_ptr<char[]>> scratch;  // per rank, or null
  // Completion: kPosted -> (all-reduce: kGathering ->) kDone with `result`.
  enum Stage { kPosted, kGathering, kDone };
  Stage stage = kPosted;
  absl::Status result;
  size_t gather_first = 0;
  std::vector<size_t> scratch_bytes;
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

struct ShmSend {
  const char* data = nullptr;
  int64_t bytes = 0;
  std::shared_ptr<CompletionWork> done;
};

// The sending end of one shared-memory ring and the thread that feeds it (a
// thread per ring, so that a full ring to one peer never holds up another).
struct ShmSender {
  std::unique_ptr<ShmChannel> channel;
  absl::Mutex mu;
  std::deque<ShmSend> queue ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
  absl::Status failed;  // sender thread only
  std::thread thread;
};

class GlooCommunicator : public Communicator {
 public:
  // contexts[0] carries data from lower to higher ranks, contexts[1] from
  // higher to lower: Gloo's TCP pair serialises reads and writes on one
  // socket under one lock, so one context per direction keeps both
  // directions of every link busy at once.
  //
  // shm_out/shm_in[ring * world_size + r]: shared-memory rings to/from rank
  // r when it is on this host (null otherwise: TCP). Ring 0 carries reduce,
  // broadcast and the first round of all-reduce, in issue order; ring 1 the
  // all-reduce's second round, which is posted later, in op order.
  GlooCommunicator(const GlooOptions& options,
                   std::array<std::shared_ptr<::gloo::Context>, 2> contexts,
                   std::vector<std::unique_ptr<ShmChannel>> shm_out,
                   std::vector<std::unique_ptr<ShmChannel>> shm_in)
      : rank_(options.rank),
        world_size_(options.world_size),
        timeout_(options.timeout),
        max_in_flight_(std::max(1, options.max_in_flight)),
        contexts_(std::move(contexts)),
        shm_in_(std::move(shm_in)) {
    shm_out_.resize(2 * world_size_);
    for (int r = 0; r < static_cast<int>(shm_out.size()); ++r) {
      if (shm_out[r] == nullptr) continue;
      auto sender = std::make_unique<ShmSender>();
      sender->channel = std::move(shm_out[r]);
      ShmSender* raw = sender.get();
      sender->thread = std::thread([this, raw] { SendLoop(*raw); });
      shm_out_[r] = std::move(sender);
    }
    shm_in_.resize(2 * world_size_);
    issuer_ = std::thread([this] { IssueLoop(); });
    completer_ = std::thread([this] { CompleteLoop(); });
  }

  ~GlooCommunicator() override {
    Abort(absl::CancelledError("communicator destroyed"));
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    issuer_.join();
    completer_.join();
    for (auto& sender : shm_out_) {
      if (sender == nullptr) continue;
      {
        absl::MutexLock lock(&sender->mu);
        sender->stop = true;
      }
      sender->thread.join();
    }
    // Closing the pairs first guarantees the transport no longer touches any
    // buffer; only then may the buffers of failed operations go.
    CloseConnections();
    graveyard_.clear();
    for (auto& context : contexts_) context.reset();
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
    // Only transfers take a sequence number (their slot): Enqueue runs on some
    // ranks only (the owner), and every rank must number the transfers alike.
    op->seq = op->kind == OpKind::kEnqueue ? 0 : next_seq_++;
    queue_.push_back(std::move(op));
    return work;
  }

  // Records the first failure, interrupts every wait on the transport and
  // closes the connections so that peers fail fast too.
  void Fail(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) return;
      error_ = status;
      for (const auto& op : in_flight_) AbortWaits(*op);
    }
    // Wakes every ring waiter here and on the peers.
    for (auto& sender : shm_out_) {
      if (sender != nullptr) sender->channel->Close();
    }
    for (auto& channel : shm_in_) {
      if (channel != nullptr) channel->Close();
    }
    CloseConnections();
  }

  static void AbortWaits(Op& op) {
    for (auto& t : op.transfers) {
      if (t.buffer == nullptr) continue;
      t.send ? t.buffer->abortWaitSend() : t.buffer->abortWaitRecv();
    }
  }

  void CloseConnections() {
    absl::MutexLock lock(&close_mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& context : contexts_) {
      if (context == nullptr) continue;
      try {
        context->closeConnections();
      } catch (const std::exception&) {
        // Already broken: nothing more to close.
      }
    }
  }

  absl::Status CurrentError() {
    absl::MutexLock lock(&mu_);
    return error_.ok() ? absl::AbortedError("communicator aborted") : error_;
  }

  void IssueLoop() {
    while (true) {
      std::unique_ptr<Op> op;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](GlooCommunicator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
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

  // Completes posted ops in order. An all-reduce needs a second round of
  // transfers (its all-gather) once its first has arrived; rather than wait
  // for that round before looking at later ops, the loop posts it and moves
  // on to the next ops' arrivals, so consecutive all-reduces overlap. Ops
  // still complete (their Work, and Enqueue'd functions run) in order.
  void CompleteLoop() {
    while (true) {
      Op* op = nullptr;
      bool finish_front = false;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](GlooCommunicator* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                 self->mu_) {
              return !self->in_flight_.empty() || self->issuer_done_;
            },
            this));
        // The issuer has stopped and everything it posted is finished.
        if (in_flight_.empty()) return;
        Op* front = in_flight_.front().get();
        Op* next = nullptr;
        int gathering = 0;
        for (const auto& o : in_flight_) {
          if (o->stage == Op::kGathering) ++gathering;
          if (o->stage == Op::kPosted) {
            next = o.get();
            break;
          }
        }
        if (front->stage == Op::kDone) {
          // Fall through to completing the front.
        } else if (front->stage == Op::kGathering &&
                   (next == nullptr || next->kind == OpKind::kEnqueue ||
                    gathering >= kMaxGathering || !error_.ok())) {
          finish_front = true;
          op = front;
        } else if (next != nullptr &&
                   (next->kind != OpKind::kEnqueue || next == front)) {
          op = next;
        } else {
          finish_front = true;
          op = front;
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
      if (status.ok()) {
        Recycle(*done);
      } else {
        // The transport may still hold these buffers until the connections
        // are closed: keep them until the destructor.
        graveyard_.push_back(std::move(done));
      }
      work->Complete(status);
    }
  }

  void Recycle(Op& op) {
    for (size_t r = 0; r < op.scratch.size(); ++r) {
      if (op.scratch[r]) {
        pool_.Release(op.scratch_bytes[r], std::move(op.scratch[r]));
      }
    }
  }

  // Chunk c of an all-reduce: elements [begin, end).
  int64_t ChunkBegin(const Op& op, int c) const {
    return op.count * c / world_size_;
  }
  int64_t ChunkElems(const Op& op, int c) const {
    return ChunkBegin(op, c + 1) - ChunkBegin(op, c);
  }

  ::gloo::Context& ContextFor(int src, int dst) {
    return *contexts_[src < dst ? 0 : 1];
  }

  // Reduce and broadcast transfers go through shared memory when the peer is
  // on this host: each direction's transfers are posted in issue order on
  // both ranks, which is the order a ring delivers them.
  void PostShmSend(Op& op, int peer, char* data, int64_t bytes, int ring = 0) {
    Op::Transfer t;
    t.send = true;
    t.peer = peer;
    t.bytes = bytes;
    t.ring = ring;
    t.shm_sent = std::make_shared<CompletionWork>();
    ShmSender& sender = *shm_out_[ring * world_size_ + peer];
    {
      absl::MutexLock lock(&sender.mu);
      sender.queue.push_back({data, bytes, t.shm_sent});
    }
    op.pending_send_bytes += bytes;
    op.transfers.push_back(std::move(t));
  }

  void PostShmRecv(Op& op, int peer, char* dst, int64_t bytes, int ring = 0) {
    Op::Transfer t;
    t.peer = peer;
    t.bytes = bytes;
    t.dst = dst;
    t.ring = ring;
    op.transfers.push_back(std::move(t));
  }

  bool Shm(int peer, bool send, int ring = 0) const {
    const int i = ring * world_size_ + peer;
    return send ? shm_out_[i] != nullptr : shm_in_[i] != nullptr;
  }

  // Posts a send of [data, data + bytes) to `peer`.
  void PostSend(Op& op, int peer, char* data, int64_t bytes, int phase) {
    Op::Transfer t;
    t.buffer = ContextFor(rank_, peer).createUnboundBuffer(data, bytes);
    t.send = true;
    t.peer = peer;
    t.bytes = bytes;
    t.buffer->send(peer, SlotOf(op.seq, phase));
    op.pending_send_bytes += bytes;
    op.transfers.push_back(std::move(t));
  }

  // Posts a receive from `peer` into [data, data + bytes).
  void PostRecv(Op& op, int peer, char* data, int64_t bytes, int phase) {
    Op::Transfer t;
    t.buffer = ContextFor(peer, rank_).createUnboundBuffer(data, bytes);
    t.peer = peer;
    t.bytes = bytes;
    t.buffer->recv(peer, SlotOf(op.seq, phase));
    op.transfers.push_back(std::move(t));
  }

  char* Scratch(Op& op, int r, size_t bytes) {
    op.scratch_bytes[r] = bytes;
    op.scratch[r] = pool_.Acquire(bytes);
    return op.scratch[r].get();
  }

  // Hands the op's first transfers to the transport without waiting.
  absl::Status Post(Op& op) {
    if (op.kind == OpKind::kEnqueue || world_size_ == 1) return absl::OkStatus();
    const int n = world_size_;
    const size_t esize = DataTypeSize(op.dtype);
    op.scratch.resize(n);
    op.scratch_bytes.assign(n, 0);
    try {
      switch (op.kind) {
        case OpKind::kReduce:
          if (op.bytes() == 0) break;
          if (rank_ == op.root) {
            for (int r = 0; r < n; ++r) {
              if (r == rank_) continue;
              if (Shm(r, false)) {
                PostShmRecv(op, r, nullptr, op.bytes());  // summed in place
              } else {
                PostRecv(op, r, Scratch(op, r, op.bytes()), op.bytes(), 0);
              }
            }
          } else if (Shm(op.root, true)) {
            PostShmSend(op, op.root, op.data, op.bytes());
          } else {
            PostSend(op, op.root, op.data, op.bytes(), 0);
          }
          break;
        case OpKind::kBroadcast:
          if (op.bytes() == 0) break;
          if (rank_ == op.root) {
            for (int r = 0; r < n; ++r) {
              if (r == rank_) continue;
              if (Shm(r, true)) {
                PostShmSend(op, r, op.data, op.bytes());
              } else {
                PostSend(op, r, op.data, op.bytes(), 0);
              }
            }
          } else if (Shm(op.root, false)) {
            PostShmRecv(op, op.root, op.data, op.bytes());
          } else {
            PostRecv(op, op.root, op.data, op.bytes(), 0);
          }
          break;
        case OpKind::kAllReduce: {
          if (op.bytes() == 0) break;
          // Phase 0 (reduce-scatter): chunk c goes to rank c.
          const int64_t mine = ChunkElems(op, rank_);
          for (int r = 0; r < n; ++r) {
            if (r == rank_) continue;
            if (ChunkElems(op, r) > 0) {
              char* chunk = op.data + ChunkBegin(op, r) * esize;
              const int64_t bytes = ChunkElems(op, r) * esize;
              if (Shm(r, true)) {
                PostShmSend(op, r, chunk, bytes);
              } else {
                PostSend(op, r, chunk, bytes, 0);
              }
            }
            if (mine > 0) {
              if (Shm(r, false)) {
                PostShmRecv(op, r, nullptr, mine * esize);  // summed in place
              } else {
                PostRecv(op, r, Scratch(op, r, mine * esize), mine * esize, 0);
              }
            }
          }
          break;
        }
        case OpKind::kBarrier:
          for (int r = 0; r < n; ++r) {
            if (r == rank_) continue;
            char* token = Scratch(op, r, 2);
            PostSend(op, r, token, 1, 0);
            PostRecv(op, r, token + 1, 1, 0);
          }
          break;
        case OpKind::kEnqueue:
          break;
      }
    } catch (const std::exception& e) {
      return FromGlooException(e, absl::StrCat("posting operation #", op.seq));
    }
    return absl::OkStatus();
  }

  absl::Status Wait(Op::Transfer& t, const Op& op) {
    if (t.shm_sent != nullptr) {
      // The sender thread bounds each of its waits by the timeout; this wait
      // only needs to outlast it.
      absl::Status status = t.shm_sent->Wait(timeout_ + absl::Seconds(10));
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("sending to rank ", t.peer,
                                         " for operation #", op.seq, ": ",
                                         status.message()));
      }
      return absl::OkStatus();
    }
    try {
      const bool done = t.send ? t.buffer->waitSend(ToChrono(timeout_))
                               : t.buffer->waitRecv(ToChrono(timeout_));
      if (!done) return CurrentError();
    } catch (const std::exception& e) {
      return FromGlooException(
          e, absl::StrCat(t.send ? "sending to rank " : "receiving from rank ",
                          t.peer, " for operation #", op.seq, " on rank ",
                          rank_));
    }
    return absl::OkStatus();
  }

  // Consumes a shared-memory receive: straight into t.dst, or added into
  // `sum_into` (the reduction's root), dividing when `divisor` > 0.
  absl::Status ReadShm(Op& op, Op::Transfer& t, char* sum_into,
                       float divisor) {
    const int64_t esize = DataTypeSize(op.dtype);
    const DataType dtype = op.dtype;
    absl::Status status = shm_in_[t.ring * world_size_ + t.peer]->Read(
        t.bytes, esize, timeout_,
        [&](int64_t offset, const char* data, int64_t length) {
          if (sum_into == nullptr) {
            std::memcpy(t.dst + offset, data, length);
          } else if (divisor > 0) {
            AddIntoAndDivide(sum_into + offset, data, length / esize, dtype,
                             divisor);
          } else {
            AddInto(sum_into + offset, data, length / esize, dtype);
          }
        });
    if (!status.ok()) {
      absl::Status error = CurrentErrorIfFailed();
      if (!error.ok()) return error;
      return absl::Status(status.code(),
                          absl::StrCat("receiving from rank ", t.peer,
                                       " for operation #", op.seq, " on rank ",
                                       rank_, ": ", status.message()));
    }
    return absl::OkStatus();
  }

  absl::Status CurrentErrorIfFailed() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  // Writes the queued sends of one ring, in order.
  void SendLoop(ShmSender& sender) {
    while (true) {
      ShmSend send;
      {
        absl::MutexLock lock(&sender.mu);
        auto ready = [&sender]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sender.mu) {
          return sender.stop || !sender.queue.empty();
        };
        sender.mu.Await(absl::Condition(&ready));
        if (sender.queue.empty()) return;
        send = std::move(sender.queue.front());
        sender.queue.pop_front();
      }
      absl::Status status = sender.failed;
      if (status.ok()) {
        status = sender.channel->Write(send.data, send.bytes, timeout_);
        if (!status.ok()) {
          absl::Status error = CurrentErrorIfFailed();
          if (!error.ok()) status = error;
          sender.failed = status;  // later sends cannot be in order any more
        }
      }
      send.done->Complete(status);
    }
  }

  // Waits for transfers [first, end) of `op`; receives into scratch are
  // added into `sum_into` (count elements) as they arrive.
  // With `divisor` > 0 the last addition also divides (a fused mean).
  absl::Status WaitAll(Op& op, size_t first, char* sum_into, int64_t count,
                       float divisor = 0) {
    size_t last_recv = op.transfers.size();
    for (size_t i = first; i < op.transfers.size(); ++i) {
      if (!op.transfers[i].send) last_recv = i;
    }
    // Receives first, then sends: a rank that both sends and receives in one
    // op (all-reduce) must drain its incoming ring before it waits for its
    // own message to fit into the peer's, or two full rings would wait on
    // each other.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = first; i < op.transfers.size(); ++i) {
        Op::Transfer& t = op.transfers[i];
        if (t.send != (pass == 1)) continue;
        if (!t.send && t.buffer == nullptr) {
          RETURN_IF_ERROR(ReadShm(op, t, sum_into,
                                  divisor > 0 && i == last_recv ? divisor : 0));
          continue;
        }
        RETURN_IF_ERROR(Wait(t, op));
        if (!t.send && sum_into != nullptr && op.scratch[t.peer] != nullptr) {
          if (divisor > 0 && i == last_recv) {
            AddIntoAndDivide(sum_into, op.scratch[t.peer].get(), count, op.dtype,
                             divisor);
          } else {
            AddInto(sum_into, op.scratch[t.peer].get(), count, op.dtype);
          }
        }
      }
    }
    return absl::OkStatus();
  }


  // Handles a posted op: waits for its transfers and does its arithmetic
  // (kDone), or for an all-reduce, its first round, then posts the second
  // (kGathering). Errors are returned (the caller fails the communicator).
  absl::Status Process(Op& op) {
    if (op.kind == OpKind::kEnqueue) {
      RETURN_IF_ERROR(op.fn());
      return MarkDone(op);
    }
    if (world_size_ == 1 || op.transfers.empty()) return MarkDone(op);
    const int n = world_size_;
    const size_t esize = DataTypeSize(op.dtype);
    switch (op.kind) {
      case OpKind::kReduce:
        RETURN_IF_ERROR(WaitAll(
            op, 0, rank_ == op.root ? op.data : nullptr, op.count,
            op.mean ? static_cast<float>(n) : 0.0f));
        break;
      case OpKind::kBroadcast:
      case OpKind::kBarrier:
        RETURN_IF_ERROR(WaitAll(op, 0, nullptr, 0));
        break;
      case OpKind::kAllReduce: {
        const int64_t mine = ChunkElems(op, rank_);
        char* my_chunk = op.data + ChunkBegin(op, rank_) * esize;
        RETURN_IF_ERROR(WaitAll(op, 0, my_chunk, mine));
        // Phase 1 (all-gather): my reduced chunk to everyone, theirs to me.
        // Posted under the lock: Abort() walks the transfers.
        absl::MutexLock lock(&mu_);
        RETURN_IF_ERROR(error_);
        op.gather_first = op.transfers.size();
        try {
          for (int r = 0; r < n; ++r) {
            if (r == rank_) continue;
            if (mine > 0) {
              if (Shm(r, true, 1)) {
                PostShmSend(op, r, my_chunk, mine * esize, 1);
              } else {
                PostSend(op, r, my_chunk, mine * esize, 1);
              }
            }
            if (ChunkElems(op, r) > 0) {
              char* chunk = op.data + ChunkBegin(op, r) * esize;
              const int64_t bytes = ChunkElems(op, r) * esize;
              if (Shm(r, false, 1)) {
                PostShmRecv(op, r, chunk, bytes, 1);
              } else {
                PostRecv(op, r, chunk, bytes, 1);
              }
            }
          }
        } catch (const std::exception& e) {
          return FromGlooException(
              e, absl::StrCat("posting all-gather of operation #", op.seq));
        }
        op.stage = Op::kGathering;
        return absl::OkStatus();
      }
      case OpKind::kEnqueue:
        break;
    }
    return MarkDone(op);
  }

  // Waits for an all-reduce's second round.
  absl::Status FinishGather(Op& op) {
    RETURN_IF_ERROR(WaitAll(op, op.gather_first, nullptr, 0));
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
  std::array<std::shared_ptr<::gloo::Context>, 2> contexts_;
  std::vector<std::unique_ptr<ShmSender>> shm_out_;
  std::vector<std::unique_ptr<ShmChannel>> shm_in_;
  ScratchPool pool_;
  std::atomic<int64_t> bytes_sent_{0};

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Op>> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool issuer_done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;

  // Only touched by the completion thread, then by the destructor.
  std::vector<std::unique_ptr<Op>> graveyard_;

  std::thread issuer_;
  std::thread completer_;
};

}  // namespace

namespace {

// This machine's identity: ranks with equal ones may share memory.
std::string HostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(in, boot_id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(boot_id, "/", host);
}

// Sets up a ring in each direction with every rank on this host, through
// the rendezvous store: publish identity; create my outgoing rings and
// publish their names; open the incoming ones and say whether that worked;
// keep an outgoing ring only if the peer could open it. Rendezvous failures
// are errors; a ring that cannot be made just leaves that pair on TCP.
absl::Status ConnectSharedMemory(
    const GlooOptions& options, KvClient& kv,
    std::vector<std::unique_ptr<ShmChannel>>& out,
    std::vector<std::unique_ptr<ShmChannel>>& in) {
  const std::string prefix = absl::StrCat(options.key_prefix, "shm/");
  const int me = options.rank;
  const std::string identity = HostIdentity();
  RETURN_IF_ERROR(kv.Put(absl::StrCat(prefix, "host/", me), identity));
  std::vector<bool> same(options.world_size, false);
  for (int r = 0; r < options.world_size; ++r) {
    if (r == me) continue;
    absl::StatusOr<std::string> other =
        kv.Get(absl::StrCat(prefix, "host/", r), options.timeout);
    if (!other.ok()) return other.status();
    same[r] = *other == identity;
  }
  const int n = options.world_size;
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<std::unique_ptr<ShmChannel>> ring = ShmChannel::Create(
          absl::StrCat(me, "to", r, "r", k), options.shm_ring_bytes);
      std::string name;
      if (ring.ok()) {
        name = (*ring)->name();
        out[k * n + r] = *std::move(ring);
      }
      RETURN_IF_ERROR(
          kv.Put(absl::StrCat(prefix, "ring/", me, "/", r, "/", k), name));
    }
  }
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
    bool opened = true;
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<std::string> name = kv.Get(
          absl::StrCat(prefix, "ring/", r, "/", me, "/", k), options.timeout);
      if (!name.ok()) return name.status();
      absl::StatusOr<std::unique_ptr<ShmChannel>> ring =
          name->empty() ? absl::UnavailableError("no ring")
                        : ShmChannel::Open(*name);
      if (ring.ok()) {
        in[k * n + r] = *std::move(ring);
      } else {
        opened = false;
      }
    }
    // Both rings of a direction or neither.
    if (!opened) {
      in[r].reset();
      in[n + r].reset();
    }
    RETURN_IF_ERROR(kv.Put(absl::StrCat(prefix, "opened/", r, "/", me),
                                opened ? "1" : "0"));
  }
  for (int r = 0; r < n; ++r) {
    if (!same[r]) continue;
    absl::StatusOr<std::string> opened =
        kv.Get(absl::StrCat(prefix, "opened/", me, "/", r), options.timeout);
    if (!opened.ok()) return opened.status();
    if (*opened != "1") {
      out[r].reset();
      out[n + r].reset();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, KvClient& kv) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " of world size ",
                     options.world_size, " is out of range"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  std::array<std::shared_ptr<::gloo::Context>, 2> contexts;
  if (options.world_size > 1) {
    for (int c = 0; c < 2; ++c) {
      try {
        ::gloo::transport::tcp::attr attr;
        attr.hostname = options.hostname;
        // A device per context: its own event loop thread.
        auto device = ::gloo::transport::tcp::CreateDevice(attr);
        auto rendezvous = std::make_shared<::gloo::rendezvous::Context>(
            options.rank, options.world_size);
        rendezvous->setTimeout(ToChrono(options.timeout));
        KvGlooStore store(kv, absl::StrCat(options.key_prefix, c, "/"),
                          options.timeout);
        try {
          rendezvous->connectFullMesh(store, device);
        } catch (const std::exception& e) {
          if (!store.error().ok()) {
            return absl::Status(
                store.error().code(),
                absl::StrCat("rendezvous of rank ", options.rank, " of ",
                             options.world_size, ": ", store.error().message()));
          }
          throw;
        }
        contexts[c] = std::move(rendezvous);
      } catch (const std::exception& e) {
        return FromGlooException(
            e, absl::StrCat("connecting rank ", options.rank, " of ",
                            options.world_size, " (listening on ",
                            options.hostname, ")"));
      }
    }
  }
  std::vector<std::unique_ptr<ShmChannel>> shm_out(2 * options.world_size);
  std::vector<std::unique_ptr<ShmChannel>> shm_in(2 * options.world_size);
  if (options.world_size > 1 && options.shared_memory) {
    absl::Status status = ConnectSharedMemory(options, kv, shm_out, shm_in);
    if (!status.ok()) return status;
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(
      options, std::move(contexts), std::move(shm_out), std::move(shm_in)));
}

}  // namespace pshard::worker
