// Early-return helpers for absl::Status and absl::StatusOr.
//
// Abseil 20220623 ships no status macros; these are the project's only ones.
//
//   RETURN_IF_ERROR(DoThing());
//   ASSIGN_OR_RETURN(std::unique_ptr<Foo> foo, MakeFoo());
#ifndef PSHARD_COMMON_STATUS_MACROS_H_
#define PSHARD_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PSHARD_STATUS_CONCAT_INNER_(a, b) a##b
#define PSHARD_STATUS_CONCAT_(a, b) PSHARD_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function if it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status pshard_status_ = (expr);                    \
    if (!pshard_status_.ok()) return pshard_status_;           \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise moves the value into `lhs`, which may be a declaration.
#define ASSIGN_OR_RETURN(lhs, rexpr)                                        \
  PSHARD_ASSIGN_OR_RETURN_IMPL_(                                            \
      PSHARD_STATUS_CONCAT_(pshard_statusor_, __LINE__), lhs, rexpr)

#define PSHARD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = *std::move(statusor)

#endif  // PSHARD_COMMON_STATUS_MACROS_H_
