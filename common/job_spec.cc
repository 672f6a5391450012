#include "common/job_spec.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec_json.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"

namespace pshard {
namespace {

using v1::JobSpec;
using v1::OptimizerHyperParameters;
using v1::OptimizerSpec;

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// Checks that `value` is finite and within [lo, hi] (or (lo, hi] when
// `lo_open`), naming `field` when it is not.
absl::Status CheckRange(absl::string_view field, double value, double lo,
                        double hi, bool lo_open, bool hi_open = false) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                  (hi_open ? value < hi : value <= hi);
  if (ok) return absl::OkStatus();
  return FieldError(field, absl::StrFormat("must be in %c%g, %g%c, got %g",
                                           lo_open ? '(' : '[', lo, hi,
                                           hi_open ? ')' : ']', value));
}

template <typename Int>
absl::Status CheckIntRange(absl::string_view field, Int value, Int lo, Int hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return FieldError(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ",
                                        value));
}

// A field that must be set, where 0 is proto3's "not set" (missing from the
// JSON, or given as 0).
template <typename Int>
absl::Status CheckRequiredInt(absl::string_view field, Int value, Int lo,
                              Int hi) {
  if (value == 0) {
    return FieldError(field, absl::StrCat("required: an integer in [", lo, ", ",
                                          hi, "]"));
  }
  return CheckIntRange(field, value, lo, hi);
}

// The rules of LrSchedule in job_spec.proto: the kind's own fields in
// range, required ones set, the other kinds' fields absent.
absl::Status ValidateLrSchedule(const std::string& path,
                                const v1::LrSchedule& schedule) {
  using v1::LrSchedule;
  auto field = [&path](absl::string_view name) {
    return absl::StrCat(path, ".", name);
  };
  if (!LrSchedule::Kind_IsValid(schedule.kind())) {
    return FieldError(field("kind"),
                      UnknownEnumValueMessage(*LrSchedule::Kind_descriptor(),
                                              absl::StrCat(schedule.kind())));
  }
  const LrSchedule::Kind kind = schedule.kind() == LrSchedule::KIND_UNSPECIFIED
                                    ? LrSchedule::CONSTANT
                                    : schedule.kind();
  const std::string kind_name = LrSchedule::Kind_Name(kind);
  RETURN_IF_ERROR(CheckIntRange<int64_t>(
      field("warmup_steps"), schedule.warmup_steps(), 0, kMaxSteps));
  if (schedule.has_warmup_start_factor()) {
    if (schedule.warmup_steps() == 0) {
      return FieldError(field("warmup_start_factor"),
                        "only applies with warmup_steps > 0");
    }
    RETURN_IF_ERROR(CheckRange(field("warmup_start_factor"),
                               schedule.warmup_start_factor(), 0, 1,
                               /*lo_open=*/true));
  }
  // Each kind's own fields; any other set field is an error.
  struct Owned {
    const char* name;
    bool set;
    LrSchedule::Kind kind;
  };
  const Owned owned[] = {
      {"start_factor", schedule.has_start_factor(), LrSchedule::LINEAR},
      {"end_factor", schedule.has_end_factor(), LrSchedule::LINEAR},
      {"total_iters", schedule.has_total_iters(), LrSchedule::LINEAR},
      {"t_max", schedule.t_max() != 0, LrSchedule::COSINE},
      {"eta_min", schedule.has_eta_min(), LrSchedule::COSINE},
      {"step_size", schedule.step_size() != 0, LrSchedule::STEP},
      {"gamma", schedule.has_gamma(), LrSchedule::STEP},
  };
  for (const Owned& o : owned) {
    if (o.set && o.kind != kind) {
      return FieldError(field(o.name),
                        absl::StrCat("only applies to kind ",
                                     LrSchedule::Kind_Name(o.kind), ", not ",
                                     kind_name));
    }
  }
  switch (kind) {
    case LrSchedule::LINEAR:
      if (schedule.has_start_factor()) {
        RETURN_IF_ERROR(CheckRange(field("start_factor"),
                                   schedule.start_factor(), 0, 1,
                                   /*lo_open=*/true));
      }
      if (schedule.has_end_factor()) {
        RETURN_IF_ERROR(CheckRange(field("end_factor"), schedule.end_factor(),
                                   0, 1, false));
      }
      if (schedule.has_total_iters()) {
        RETURN_IF_ERROR(CheckIntRange<int64_t>(
            field("total_iters"), schedule.total_iters(), 1, kMaxSteps));
      }
      break;
    case LrSchedule::COSINE:
      if (schedule.t_max() == 0) {
        return FieldError(field("t_max"),
                          absl::StrCat("required for COSINE: an integer in [1, ",
                                       kMaxSteps, "]"));
      }
      RETURN_IF_ERROR(CheckIntRange<int64_t>(field("t_max"), schedule.t_max(),
                                             1, kMaxSteps));
      if (schedule.has_eta_min()) {
        RETURN_IF_ERROR(CheckRange(field("eta_min"), schedule.eta_min(), 0,
                                   1e6, false));
      }
      break;
    case LrSchedule::STEP:
      if (schedule.step_size() == 0) {
        return FieldError(field("step_size"),
                          absl::StrCat("required for STEP: an integer in [1, ",
                                       kMaxSteps, "]"));
      }
      RETURN_IF_ERROR(CheckIntRange<int64_t>(
          field("step_size"), schedule.step_size(), 1, kMaxSteps));
      if (schedule.has_gamma()) {
        RETURN_IF_ERROR(CheckRange(field("gamma"), schedule.gamma(), 0, 1,
                                   /*lo_open=*/true));
      }
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

// "SGD", "SGD and RMSPROP", "ADAM, ADAMW and LION".
std::string KindList(const std::vector<OptimizerSpec::Kind>& kinds) {
  std::string out;
  size_t i = 0;
  for (OptimizerSpec::Kind k : kinds) {
    if (i > 0) absl::StrAppend(&out, i + 1 == kinds.size() ? " and " : ", ");
    absl::StrAppend(&out, OptimizerSpec::Kind_Name(k));
    ++i;
  }
  return out;
}

// The hyper-parameters of some optimizer kinds only (the others: every
// kind's).
struct KindField {
  absl::string_view name;
  std::vector<OptimizerSpec::Kind> kinds;
};
const std::vector<KindField>& KindFields() {
  static const auto* const fields = new std::vector<KindField>{
      {"momentum", {OptimizerSpec::SGD, OptimizerSpec::RMSPROP}},
      {"dampening", {OptimizerSpec::SGD}},
      {"nesterov", {OptimizerSpec::SGD}},
      {"betas",
       {OptimizerSpec::ADAM, OptimizerSpec::ADAMW, OptimizerSpec::LION}},
      {"eps",
       {OptimizerSpec::ADAM, OptimizerSpec::ADAMW, OptimizerSpec::ADAGRAD,
        OptimizerSpec::RMSPROP}},
      {"lr_decay", {OptimizerSpec::ADAGRAD}},
      {"initial_accumulator_value", {OptimizerSpec::ADAGRAD}},
      {"alpha", {OptimizerSpec::RMSPROP}},
      {"centered", {OptimizerSpec::RMSPROP}},
      {"amsgrad", {OptimizerSpec::ADAM, OptimizerSpec::ADAMW}},
  };
  return *fields;
}

// Whether optimizers of `kind` use hyper-parameter `name`.
bool KindUsesField(OptimizerSpec::Kind kind, absl::string_view name) {
  for (const KindField& f : KindFields()) {
    if (f.name == name) return absl::c_linear_search(f.kinds, kind);
  }
  return true;
}

absl::Status ValidateHyperParameters(absl::string_view path,
                                     OptimizerSpec::Kind kind,
                                     const OptimizerHyperParameters& hp) {
  auto field = [&path](absl::string_view name) {
    return absl::StrCat(path, ".", name);
  };
  if (hp.has_lr()) {
    RETURN_IF_ERROR(CheckRange(field("lr"), hp.lr(), 0, 1e6, /*lo_open=*/true));
  }
  if (hp.has_weight_decay()) {
    RETURN_IF_ERROR(
        CheckRange(field("weight_decay"), hp.weight_decay(), 0, 1e6, false));
  }
  if (hp.has_lr_schedule()) {
    RETURN_IF_ERROR(ValidateLrSchedule(field("lr_schedule"), hp.lr_schedule()));
  }
  // The fields of some kinds only; any other kind refuses them.
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  hp.GetReflection()->ListFields(hp, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (KindUsesField(kind, f->name())) continue;
    const auto owner = absl::c_find_if(
        KindFields(), [f](const KindField& k) { return k.name == f->name(); });
    return FieldError(field(f->name()),
                      absl::StrCat("only applies to ", KindList(owner->kinds),
                                   ", not ", OptimizerSpec::Kind_Name(kind)));
  }
  // Ranges: torch's lower bounds (lion-pytorch's for LION), finite upper
  // bounds as for every other field.
  if (hp.has_momentum()) {
    RETURN_IF_ERROR(CheckRange(field("momentum"), hp.momentum(), 0, 1, false,
                               /*hi_open=*/true));
  }
  if (hp.has_dampening()) {
    RETURN_IF_ERROR(
        CheckRange(field("dampening"), hp.dampening(), 0, 1, false));
  }
  if (hp.betas_size() != 0 && hp.betas_size() != 2) {
    return FieldError(field("betas"),
                      absl::StrCat("must have exactly 2 values, got ",
                                   hp.betas_size()));
  }
  for (int i = 0; i < hp.betas_size(); ++i) {
    RETURN_IF_ERROR(CheckRange(absl::StrCat(path, ".betas[", i, "]"),
                               hp.betas(i), 0, 1, false,
                               /*hi_open=*/kind != OptimizerSpec::LION));
  }
  if (hp.has_eps()) {
    const bool adam =
        kind == OptimizerSpec::ADAM || kind == OptimizerSpec::ADAMW;
    RETURN_IF_ERROR(CheckRange(field("eps"), hp.eps(), 0, 1,
                               /*lo_open=*/adam));
  }
  if (hp.has_lr_decay()) {
    RETURN_IF_ERROR(CheckRange(field("lr_decay"), hp.lr_decay(), 0, 1e6, false));
  }
  if (hp.has_initial_accumulator_value()) {
    RETURN_IF_ERROR(CheckRange(field("initial_accumulator_value"),
                               hp.initial_accumulator_value(), 0, 1e6, false));
  }
  if (hp.has_alpha()) {
    RETURN_IF_ERROR(CheckRange(field("alpha"), hp.alpha(), 0, 1, false));
  }
  return absl::OkStatus();
}

// Sets in `hp` the fields `h` sets.
void ApplyHyperParameters(const OptimizerHyperParameters& h,
                          HyperParameters* hp) {
  if (h.has_lr()) hp->lr = h.lr();
  if (h.has_momentum()) hp->momentum = h.momentum();
  if (h.has_dampening()) hp->dampening = h.dampening();
  if (h.has_nesterov()) hp->nesterov = h.nesterov();
  if (h.has_weight_decay()) hp->weight_decay = h.weight_decay();
  if (h.betas_size() == 2) {
    hp->beta1 = h.betas(0);
    hp->beta2 = h.betas(1);
  }
  if (h.has_eps()) hp->eps = h.eps();
  if (h.has_lr_decay()) hp->lr_decay = h.lr_decay();
  if (h.has_initial_accumulator_value()) {
    hp->initial_accumulator_value = h.initial_accumulator_value();
  }
  if (h.has_alpha()) hp->alpha = h.alpha();
  if (h.has_centered()) hp->centered = h.centered();
  if (h.has_amsgrad()) hp->amsgrad = h.amsgrad();
  if (h.has_lr_schedule()) hp->lr_schedule = ResolveLrSchedule(h.lr_schedule());
}

// Hyper-parameters after fallbacks: `group` (may be null), then `base`, then
// PyTorch's defaults for `kind`.
HyperParameters MergeHyperParameters(OptimizerSpec::Kind kind,
                                     const OptimizerHyperParameters& base,
                                     const OptimizerHyperParameters* group) {
  HyperParameters hp;
  switch (kind) {
    case OptimizerSpec::ADAM:
      hp.lr = 1e-3;
      break;
    case OptimizerSpec::ADAMW:
      hp.lr = 1e-3;
      hp.weight_decay = 1e-2;
      break;
    case OptimizerSpec::ADAGRAD:
      hp.lr = 1e-2;
      hp.eps = 1e-10;
      break;
    case OptimizerSpec::RMSPROP:
      hp.lr = 1e-2;
      break;
    case OptimizerSpec::LION:
      hp.lr = 1e-4;
      hp.beta2 = 0.99;
      break;
    default:
      break;
  }
  ApplyHyperParameters(base, &hp);
  if (group != nullptr) ApplyHyperParameters(*group, &hp);
  return hp;
}

absl::Status ValidateOptimizer(const OptimizerSpec& optimizer) {
  if (!OptimizerSpec::Kind_IsValid(optimizer.kind()) ||
      optimizer.kind() == OptimizerSpec::KIND_UNSPECIFIED) {
    return FieldError("optimizer.kind",
                      "required: one of SGD, ADAM, ADAMW, ADAGRAD, RMSPROP, "
                      "LION");
  }
  RETURN_IF_ERROR(ValidateHyperParameters("optimizer.hyper_parameters",
                                          optimizer.kind(),
                                          optimizer.hyper_parameters()));
  if (optimizer.param_groups_size() > kMaxParamGroups) {
    return FieldError("optimizer.param_groups",
                      absl::StrCat("at most ", kMaxParamGroups, " groups, got ",
                                   optimizer.param_groups_size()));
  }
  for (int g = 0; g < optimizer.param_groups_size(); ++g) {
    const v1::ParamGroup& group = optimizer.param_groups(g);
    const std::string path = absl::StrCat("optimizer.param_groups[", g, "]");
    if (group.params_size() == 0) {
      return FieldError(absl::StrCat(path, ".params"),
                        "needs at least one parameter-name pattern");
    }
    for (int p = 0; p < group.params_size(); ++p) {
      const std::string& pattern = group.params(p);
      if (pattern.empty() || pattern.size() > kMaxPatternLength) {
        return FieldError(absl::StrCat(path, ".params[", p, "]"),
                          absl::StrCat("must be 1..", kMaxPatternLength,
                                       " characters, got ", pattern.size()));
      }
    }
    RETURN_IF_ERROR(ValidateHyperParameters(
        absl::StrCat(path, ".hyper_parameters"), optimizer.kind(),
        group.hyper_parameters()));
  }
  if (optimizer.has_max_grad_norm()) {
    const double max_norm = optimizer.max_grad_norm();
    if (!std::isfinite(max_norm) || max_norm <= 0) {
      return FieldError("optimizer.max_grad_norm",
                        absl::StrCat("must be finite and > 0, got ", max_norm));
    }
  }
  const double norm_type = optimizer.norm_type();
  if (norm_type != 0 || std::signbit(norm_type)) {
    if (norm_type != 2 && norm_type != kInfinityNorm) {
      return FieldError("optimizer.norm_type",
                        absl::StrCat("must be 2 or infinity (JSON "
                                     "\"Infinity\"), got ",
                                     norm_type));
    }
    if (!optimizer.has_max_grad_norm()) {
      return FieldError("optimizer.norm_type",
                        "only with optimizer.max_grad_norm");
    }
  }
  // Checks that need the resolved values of every group: SGD needs an lr,
  // and Nesterov needs momentum > 0 and no dampening (as torch.optim.SGD).
  const OptimizerHyperParameters& base = optimizer.hyper_parameters();
  for (int g = -1; g < optimizer.param_groups_size(); ++g) {
    const OptimizerHyperParameters* group =
        g < 0 ? nullptr : &optimizer.param_groups(g).hyper_parameters();
    const std::string path =
        g < 0 ? "optimizer.hyper_parameters"
              : absl::StrCat("optimizer.param_groups[", g, "].hyper_parameters");
    if (optimizer.kind() != OptimizerSpec::SGD) continue;
    const bool has_lr = base.has_lr() || (group != nullptr && group->has_lr());
    if (!has_lr) return FieldError(absl::StrCat(path, ".lr"), "required for SGD");
    const HyperParameters hp =
        MergeHyperParameters(optimizer.kind(), base, group);
    if (hp.nesterov && (hp.momentum <= 0 || hp.dampening != 0)) {
      return FieldError(absl::StrCat(path, ".nesterov"),
                        "requires momentum > 0 and dampening 0");
    }
  }
  return absl::OkStatus();
}

// Bytes of a string with its terminating NUL, as execve counts them.
int64_t ExecBytes(const std::string& s) {
  return static_cast<int64_t>(s.size()) + 1;
}

absl::Status CheckNoNul(absl::string_view field, const std::string& value) {
  if (value.find('\0') == std::string::npos) return absl::OkStatus();
  return FieldError(field, "contains a NUL byte");
}

// A path the coordinator and workers use as given: absolute, bounded, no NUL.
absl::Status CheckAbsolutePath(absl::string_view field,
                               const std::string& path) {
  RETURN_IF_ERROR(CheckNoNul(field, path));
  if (path.empty()) return FieldError(field, "required: an absolute path");
  if (path[0] != '/') {
    return FieldError(field, absl::StrCat("must be an absolute path, got \"",
                                          absl::CHexEscape(path), "\""));
  }
  if (path.size() > kMaxPathLength) {
    return FieldError(field,
                      absl::StrCat("at most ", kMaxPathLength, " characters"));
  }
  return absl::OkStatus();
}

bool IsPosixName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

absl::Status ValidateProgram(const v1::ProgramWorkload& program) {
  if (program.argv_size() == 0) {
    return FieldError("program.argv", "required: the command line to run");
  }
  if (program.argv_size() > kMaxProgramArgs) {
    return FieldError("program.argv",
                      absl::StrCat("at most ", kMaxProgramArgs,
                                   " arguments, got ", program.argv_size()));
  }
  if (program.argv(0).empty()) {
    return FieldError("program.argv[0]", "must name the program to run");
  }
  int64_t argv_bytes = 0;
  for (int i = 0; i < program.argv_size(); ++i) {
    RETURN_IF_ERROR(
        CheckNoNul(absl::StrCat("program.argv[", i, "]"), program.argv(i)));
    argv_bytes += ExecBytes(program.argv(i));
  }
  if (argv_bytes > kMaxProgramArgvBytes) {
    return FieldError("program.argv",
                      absl::StrCat("at most ", kMaxProgramArgvBytes,
                                   " bytes in all, got ", argv_bytes));
  }
  if (program.env_size() > kMaxProgramEnvVars) {
    return FieldError("program.env",
                      absl::StrCat("at most ", kMaxProgramEnvVars,
                                   " variables, got ", program.env_size()));
  }
  // A map has no order; check names in sorted order so the error named for
  // a spec with several bad entries is always the same one.
  std::vector<const std::string*> names;
  names.reserve(program.env_size());
  for (const auto& [name, value] : program.env()) names.push_back(&name);
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  int64_t env_bytes = 0;
  for (const std::string* name : names) {
    const std::string field = absl::StrCat("program.env[\"",
                                           absl::CHexEscape(*name), "\"]");
    if (name->size() > static_cast<size_t>(kMaxProgramEnvNameLength)) {
      return FieldError(field, absl::StrCat("name longer than ",
                                            kMaxProgramEnvNameLength,
                                            " characters"));
    }
    if (!IsPosixName(*name)) {
      return FieldError(field,
                        "not a valid variable name (letters, digits and _, "
                        "not starting with a digit)");
    }
    if (absl::StartsWith(*name, kProgramEnvReservedPrefix) ||
        absl::c_linear_search(kTorchrunEnvNames, *name)) {
      return FieldError(field,
                        "set by the worker's agent for each rank; a job may "
                        "not override it");
    }
    const std::string& value = program.env().at(*name);
    RETURN_IF_ERROR(CheckNoNul(field, value));
    // "NAME=value" and its NUL.
    env_bytes += ExecBytes(*name) + ExecBytes(value);
  }
  if (env_bytes > kMaxProgramEnvBytes) {
    return FieldError("program.env",
                      absl::StrCat("at most ", kMaxProgramEnvBytes,
                                   " bytes in all, got ", env_bytes));
  }
  if (!program.working_dir().empty()) {
    RETURN_IF_ERROR(
        CheckAbsolutePath("program.working_dir", program.working_dir()));
  }
  const double grace = program.grace_period_seconds();
  if (grace != 0 || std::signbit(grace) || std::isnan(grace)) {
    RETURN_IF_ERROR(CheckRange("program.grace_period_seconds", grace, 0,
                               kMaxProgramGracePeriodSeconds,
                               /*lo_open=*/true));
  }
  return absl::OkStatus();
}

absl::Status ValidateWorkload(const JobSpec& spec) {
  switch (spec.workload_case()) {
    case JobSpec::kMlp: {
      const v1::MlpWorkload& mlp = spec.mlp();
      RETURN_IF_ERROR(CheckRequiredInt("mlp.input_dim", mlp.input_dim(), 1, kMaxLayerWidth));
      RETURN_IF_ERROR(CheckRequiredInt("mlp.output_dim", mlp.output_dim(), 1, kMaxLayerWidth));
      RETURN_IF_ERROR(CheckRequiredInt("mlp.batch_size", mlp.batch_size(), 1, kMaxLayerWidth));
      if (mlp.hidden_dims_size() > kMaxHiddenLayers) {
        return FieldError("mlp.hidden_dims",
                          absl::StrCat("at most ", kMaxHiddenLayers,
                                       " layers, got ", mlp.hidden_dims_size()));
      }
      for (int i = 0; i < mlp.hidden_dims_size(); ++i) {
        RETURN_IF_ERROR(CheckIntRange(absl::StrCat("mlp.hidden_dims[", i, "]"),
                                      mlp.hidden_dims(i), 1, kMaxLayerWidth));
      }
      // Bound the model so a spec cannot ask a worker for absurd memory.
      int64_t params = 0;
      int prev = mlp.input_dim();
      for (int width : mlp.hidden_dims()) {
        params += int64_t{prev} * width + width;
        prev = width;
      }
      params += int64_t{prev} * mlp.output_dim() + mlp.output_dim();
      if (params > kMaxSyntheticParameters) {
        return FieldError("mlp", absl::StrCat("model has ", params,
                                              " parameters; at most ",
                                              kMaxSyntheticParameters));
      }
      return absl::OkStatus();
    }
    case JobSpec::kSynthetic: {
      const v1::SyntheticWorkload& s = spec.synthetic();
      RETURN_IF_ERROR(CheckRequiredInt<int64_t>("synthetic.num_parameters",
                                             s.num_parameters(), 1,
                                             kMaxSyntheticParameters));
      if (s.tensor_numel() != 0) {
        RETURN_IF_ERROR(CheckIntRange<int64_t>("synthetic.tensor_numel",
                                               s.tensor_numel(), 1,
                                               kMaxSyntheticParameters));
      }
      return absl::OkStatus();
    }
    case JobSpec::kReplay: {
      const v1::ReplayWorkload& r = spec.replay();
      if (r.params_path().empty()) return FieldError("replay.params_path", "required");
      if (r.gradients_dir().empty()) return FieldError("replay.gradients_dir", "required");
      if (r.params_path().size() > kMaxPathLength) {
        return FieldError("replay.params_path", "too long");
      }
      if (r.gradients_dir().size() > kMaxPathLength) {
        return FieldError("replay.gradients_dir", "too long");
      }
      return absl::OkStatus();
    }
    case JobSpec::kProgram:
      return ValidateProgram(spec.program());
    case JobSpec::WORKLOAD_NOT_SET:
      break;
  }
  return FieldError("workload",
                    "required: one of mlp, synthetic, replay, program");
}

absl::Status CheckEnum(absl::string_view field,
                       const google::protobuf::EnumDescriptor* type, int value) {
  if (type->FindValueByNumber(value) != nullptr) return absl::OkStatus();
  return FieldError(field, UnknownEnumValueMessage(*type, absl::StrCat(value)));
}

// precision: known dtypes (every backend and workload: a program's session
// takes it as its default).
absl::Status ValidatePrecision(const JobSpec& spec) {
  if (!spec.has_precision()) return absl::OkStatus();
  const v1::PrecisionSpec& precision = spec.precision();
  for (const auto& [field, dtype] :
       {std::pair<const char*, int>{"precision.param_dtype",
                                    precision.param_dtype()},
        std::pair<const char*, int>{"precision.reduce_dtype",
                                    precision.reduce_dtype()}}) {
    if (!v1::PrecisionSpec::DType_IsValid(dtype)) {
      return FieldError(field, absl::StrCat("must be FP32 or BF16, got ", dtype));
    }
  }
  return absl::OkStatus();
}

// checkpoint, max_restarts, min_world_size, from_checkpoint and
// restart_on_program_failure (issue 14).
absl::Status ValidateFaultTolerance(const JobSpec& spec) {
  const bool is_program = spec.has_program();
  if (spec.has_checkpoint()) {
    const v1::CheckpointSpec& checkpoint = spec.checkpoint();
    RETURN_IF_ERROR(CheckAbsolutePath("checkpoint.dir", checkpoint.dir()));
    if (!is_program || checkpoint.every_steps() != 0) {
      RETURN_IF_ERROR(CheckRequiredInt<int64_t>(
          "checkpoint.every_steps", checkpoint.every_steps(), 1, kMaxSteps));
    }
    RETURN_IF_ERROR(CheckIntRange<int64_t>(
        "checkpoint.keep_last", checkpoint.keep_last(), 0, kMaxKeepLast));
  }
  RETURN_IF_ERROR(CheckIntRange<int64_t>("max_restarts", spec.max_restarts(),
                                         0, kMaxRestarts));
  if (spec.min_world_size() != 0) {
    RETURN_IF_ERROR(CheckIntRange<int64_t>(
        "min_world_size", spec.min_world_size(), 1, spec.world_size()));
  }
  if (!spec.from_checkpoint().empty()) {
    RETURN_IF_ERROR(
        CheckAbsolutePath("from_checkpoint", spec.from_checkpoint()));
  }
  if (spec.restart_on_program_failure() && !is_program) {
    return FieldError("restart_on_program_failure",
                      "only for a program workload");
  }
  return absl::OkStatus();
}

}  // namespace

bool operator==(const HyperParameters& a, const HyperParameters& b) {
  return a.lr == b.lr && a.momentum == b.momentum &&
         a.dampening == b.dampening && a.nesterov == b.nesterov &&
         a.weight_decay == b.weight_decay && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps &&
         a.lr_decay == b.lr_decay &&
         a.initial_accumulator_value == b.initial_accumulator_value &&
         a.alpha == b.alpha && a.centered == b.centered &&
         a.amsgrad == b.amsgrad && a.lr_schedule == b.lr_schedule &&
         a.group == b.group;
}

LrSchedule ResolveLrSchedule(const v1::LrSchedule& schedule) {
  LrSchedule out;
  switch (schedule.kind()) {
    case v1::LrSchedule::LINEAR:
      out.kind = LrSchedule::Kind::kLinear;
      break;
    case v1::LrSchedule::COSINE:
      out.kind = LrSchedule::Kind::kCosine;
      break;
    case v1::LrSchedule::STEP:
      out.kind = LrSchedule::Kind::kStep;
      break;
    default:
      out.kind = LrSchedule::Kind::kConstant;
      break;
  }
  out.warmup_steps = schedule.warmup_steps();
  if (schedule.has_warmup_start_factor()) {
    out.warmup_start_factor = schedule.warmup_start_factor();
  }
  if (schedule.has_start_factor()) out.start_factor = schedule.start_factor();
  if (schedule.has_end_factor()) out.end_factor = schedule.end_factor();
  if (schedule.has_total_iters()) out.total_iters = schedule.total_iters();
  if (schedule.t_max() != 0) out.t_max = schedule.t_max();
  if (schedule.has_eta_min()) out.eta_min = schedule.eta_min();
  if (schedule.step_size() != 0) out.step_size = schedule.step_size();
  if (schedule.has_gamma()) out.gamma = schedule.gamma();
  return out;
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.name().empty()) return FieldError("name", "required");
  if (spec.name().size() > kMaxJobNameLength) {
    return FieldError("name", absl::StrCat("at most ", kMaxJobNameLength,
                                           " characters, got ", spec.name().size()));
  }
  RETURN_IF_ERROR(CheckRequiredInt("world_size", spec.world_size(), 1, kMaxWorldSize));
  RETURN_IF_ERROR(CheckIntRange<int64_t>("priority", spec.priority(),
                                         kMinPriority, kMaxPriority));
  RETURN_IF_ERROR(
      CheckEnum("backend", JobSpec::Backend_descriptor(), spec.backend()));
  RETURN_IF_ERROR(CheckEnum("assignment_policy",
                            JobSpec::AssignmentPolicy_descriptor(),
                            spec.assignment_policy()));
  RETURN_IF_ERROR(
      CheckEnum("comm_mode", JobSpec::CommMode_descriptor(), spec.comm_mode()));
  RETURN_IF_ERROR(ValidateWorkload(spec));
  // 0 means "default"; anything set must be a sane size.
  if (spec.bucket_cap_mb() != 0 || std::signbit(spec.bucket_cap_mb()) ||
      std::isnan(spec.bucket_cap_mb())) {
    RETURN_IF_ERROR(CheckRange("bucket_cap_mb", spec.bucket_cap_mb(), 0,
                               kMaxBucketCapMb, /*lo_open=*/true));
  }
  // A program states its own optimizer through the client library, and runs
  // as many steps as it likes: both are optional there, checked when set.
  const bool is_program = spec.has_program();
  if (spec.has_optimizer()) {
    RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  } else if (!is_program) {
    return FieldError("optimizer", "required");
  }
  if (!is_program || spec.steps() != 0) {
    RETURN_IF_ERROR(CheckRequiredInt<int64_t>("steps", spec.steps(), 1, kMaxSteps));
  }
  if (spec.output_dir().size() > kMaxPathLength) {
    return FieldError("output_dir", absl::StrCat("at most ", kMaxPathLength,
                                                 " characters"));
  }
  if (spec.progress_every() != 0) {
    RETURN_IF_ERROR(CheckIntRange<int64_t>("progress_every", spec.progress_every(),
                                           1, kMaxSteps));
  }
  if (spec.gradient_accumulation_steps() != 0) {
    RETURN_IF_ERROR(CheckIntRange<int64_t>(
        "gradient_accumulation_steps", spec.gradient_accumulation_steps(), 1,
        kMaxGradientAccumulationSteps));
    if (is_program && spec.gradient_accumulation_steps() != 1) {
      return FieldError("gradient_accumulation_steps",
                        "built-in workloads only: a program accumulates with "
                        "ShardedOptimizer.no_sync() (docs/user-guide.md)");
    }
  }
  if (spec.collective_timeout_seconds() != 0 ||
      std::signbit(spec.collective_timeout_seconds()) ||
      std::isnan(spec.collective_timeout_seconds())) {
    RETURN_IF_ERROR(CheckRange("collective_timeout_seconds",
                               spec.collective_timeout_seconds(), 0, 86400,
                               /*lo_open=*/true));
  }
  RETURN_IF_ERROR(ValidatePrecision(spec));
  return ValidateFaultTolerance(spec);
}

absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json) {
  JobSpec spec;
  RETURN_IF_ERROR(ParseStrictJson(json, "", &spec));
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

absl::StatusOr<OptimizerSpec> ParseOptimizerSpecJson(absl::string_view json) {
  OptimizerSpec optimizer;
  RETURN_IF_ERROR(ParseStrictJson(json, "optimizer", &optimizer));
  RETURN_IF_ERROR(ValidateOptimizer(optimizer));
  return optimizer;
}

JobSpec ApplyJobSpecDefaults(JobSpec spec) {
  if (spec.backend() == JobSpec::BACKEND_UNSPECIFIED) spec.set_backend(JobSpec::AUTO);
  if (spec.assignment_policy() == JobSpec::ASSIGNMENT_POLICY_UNSPECIFIED) {
    spec.set_assignment_policy(JobSpec::BALANCED);
  }
  if (spec.comm_mode() == JobSpec::COMM_MODE_UNSPECIFIED) {
    spec.set_comm_mode(JobSpec::REDUCE_BROADCAST);
  }
  if (spec.bucket_cap_mb() == 0) spec.set_bucket_cap_mb(25);
  if (spec.progress_every() == 0) spec.set_progress_every(1);
  if (spec.gradient_accumulation_steps() == 0) {
    spec.set_gradient_accumulation_steps(1);
  }
  if (spec.min_world_size() == 0) spec.set_min_world_size(spec.world_size());
  if (spec.collective_timeout_seconds() == 0) spec.set_collective_timeout_seconds(60);
  if (spec.has_program() && spec.program().grace_period_seconds() == 0) {
    spec.mutable_program()->set_grace_period_seconds(
        kDefaultProgramGracePeriodSeconds);
  }
  if (spec.has_synthetic() && spec.synthetic().tensor_numel() == 0) {
    spec.mutable_synthetic()->set_tensor_numel(int64_t{1} << 20);
  }
  return spec;
}

int ParamGroupIndex(const OptimizerSpec& optimizer, absl::string_view parameter_name) {
  const std::string name(parameter_name);
  for (int g = 0; g < optimizer.param_groups_size(); ++g) {
    for (const std::string& pattern : optimizer.param_groups(g).params()) {
      if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return g;
    }
  }
  return -1;
}

HyperParameters ResolveHyperParameters(const OptimizerSpec& optimizer,
                                       absl::string_view parameter_name) {
  return ResolveGroupHyperParameters(optimizer,
                                     ParamGroupIndex(optimizer, parameter_name));
}

HyperParameters ResolveGroupHyperParameters(const OptimizerSpec& optimizer,
                                            int group_index) {
  const bool is_group =
      group_index >= 0 && group_index < optimizer.param_groups_size();
  HyperParameters hp = MergeHyperParameters(
      optimizer.kind(), optimizer.hyper_parameters(),
      is_group ? &optimizer.param_groups(group_index).hyper_parameters()
               : nullptr);
  hp.group = is_group ? group_index : -1;
  return hp;
}

absl::Status CheckParamGroupIndex(const OptimizerSpec& optimizer, int group) {
  const int groups = optimizer.param_groups_size();
  if (group >= -1 && group < groups) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "parameter group ", group, " does not exist: -1 is the default group, ",
      "0..", groups - 1, " the optimizer's param_groups (", groups,
      groups == 1 ? " group)" : " groups)"));
}

absl::Status HyperParameterOverrides::Set(
    const OptimizerSpec& optimizer, int group,
    const OptimizerHyperParameters& changes) {
  RETURN_IF_ERROR(CheckParamGroupIndex(optimizer, group));
  // Named as the job spec field each change replaces.
  const std::string path = group < 0
                               ? "optimizer.hyper_parameters"
                               : absl::StrCat("optimizer.param_groups[", group,
                                              "].hyper_parameters");
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  changes.GetReflection()->ListFields(changes, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (!absl::c_linear_search(kSettableFields, f->name())) {
      return FieldError(
          absl::StrCat(path, ".", f->name()),
          absl::StrCat("is fixed by the job spec (fields that change while "
                       "training: ",
                       absl::StrJoin(kSettableFields, ", "), ")"));
    }
  }
  RETURN_IF_ERROR(ValidateHyperParameters(path, optimizer.kind(), changes));
  const HyperParameters spec = ResolveGroupHyperParameters(optimizer, group);
  if (changes.has_momentum()) {
    // Exactly torch's update needs the momentum buffer to stay in use: a
    // group without one (momentum 0 in the spec) keeps none to update.
    if (spec.momentum == 0) {
      return FieldError(absl::StrCat(path, ".momentum"),
                        "the group keeps no momentum buffer (its momentum in "
                        "the job spec is 0); give it a momentum > 0 there to "
                        "change it while training");
    }
    if (!(changes.momentum() > 0)) {
      return FieldError(absl::StrCat(path, ".momentum"),
                        absl::StrCat("must be > 0 while training (the group "
                                     "keeps a momentum buffer), got ",
                                     changes.momentum()));
    }
  }
  const size_t slot = static_cast<size_t>(group + 1);
  if (by_group_.size() <= slot) by_group_.resize(slot + 1);
  Changed next = by_group_[slot].value_or(Changed{});
  if (changes.betas_size() > 0) next.changes.clear_betas();  // not appended
  next.changes.MergeFrom(changes);
  next.resolved = spec;
  ApplyHyperParameters(next.changes, &next.resolved);
  if (next.changes.has_lr()) next.resolved.lr_schedule = LrSchedule();
  by_group_[slot] = std::move(next);
  return absl::OkStatus();
}

const HyperParameters* HyperParameterOverrides::Get(int group) const {
  const size_t slot = static_cast<size_t>(group + 1);
  if (group < -1 || slot >= by_group_.size() || !by_group_[slot]) {
    return nullptr;
  }
  return &by_group_[slot]->resolved;
}

const HyperParameters& EffectiveHyperParameters(
    const HyperParameters& hp, const HyperParameterOverrides& overrides) {
  const HyperParameters* set = overrides.Get(hp.group);
  return set != nullptr ? *set : hp;
}

OptimizerHyperParameters SettableHyperParameters(
    const OptimizerSpec& optimizer, int group,
    const HyperParameterOverrides& overrides) {
  const HyperParameters hp = EffectiveHyperParameters(
      ResolveGroupHyperParameters(optimizer, group), overrides);
  const OptimizerSpec::Kind kind = optimizer.kind();
  OptimizerHyperParameters out;
  out.set_lr(hp.lr);
  out.set_weight_decay(hp.weight_decay);
  if (KindUsesField(kind, "momentum")) out.set_momentum(hp.momentum);
  if (KindUsesField(kind, "betas")) {
    out.add_betas(hp.beta1);
    out.add_betas(hp.beta2);
  }
  if (KindUsesField(kind, "eps")) out.set_eps(hp.eps);
  if (KindUsesField(kind, "alpha")) out.set_alpha(hp.alpha);
  if (KindUsesField(kind, "lr_decay")) out.set_lr_decay(hp.lr_decay);
  return out;
}

double StepLearningRate(const HyperParameters& hp, int64_t step,
                        const HyperParameterOverrides& overrides) {
  const HyperParameters& effective = EffectiveHyperParameters(hp, overrides);
  return ScheduledLearningRate(effective.lr, effective.lr_schedule, step - 1);
}

double DefaultGroupLearningRate(const OptimizerSpec& optimizer, int64_t step,
                                const HyperParameterOverrides& overrides) {
  if (step < 1) return 0;
  return StepLearningRate(ResolveGroupHyperParameters(optimizer, -1), step,
                          overrides);
}

}  // namespace pshard
