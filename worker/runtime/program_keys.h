// The rendezvous keys a program job's agents and its ranks' sessions
// (worker/api/session.h) share, in the job attempt's KV scope (job, epoch):
// one list, so that neither side spells the other's keys.
#ifndef PSHARD_WORKER_RUNTIME_PROGRAM_KEYS_H_
#define PSHARD_WORKER_RUNTIME_PROGRAM_KEYS_H_

namespace pshard::worker {

// Rank 0's agent publishes MASTER_ADDR:MASTER_PORT here.
inline constexpr char kProgramMasterAddrKey[] = "pshard/program/master_addr";
// Rank R's agent publishes its worker id under <prefix>R before it starts
// the program, so that a session can name the worker of a rank that never
// joined.
inline constexpr char kProgramAgentKeyPrefix[] = "pshard/program/agent/";
// Rank R's session publishes its worker id under <prefix>R when the
// program calls pshardSessionOpen (pshard.init()), before it joins the
// communicator.
inline constexpr char kProgramJoinedKeyPrefix[] = "pshard/program/joined/";

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRAM_KEYS_H_
