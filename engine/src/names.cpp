// Names of the public enumerations, as printed in reports and parsed from command lines.
#include <stdexcept>
#include <string>

#include "flashot/flashot.hpp"

namespace flashot {

std::string to_string(Cost c) {
  return c == Cost::kSquaredEuclidean ? "sqeuclidean" : "half_sqeuclidean";
}

std::string to_string(Scheme s) { return s == Scheme::kSymmetric ? "symmetric" : "alternating"; }

std::string to_string(BackendKind b) {
  switch (b) {
    case BackendKind::kAuto: return "auto";
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "unknown";
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kDefault: return "default";
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
  }
  return "unknown";
}

std::string to_string(Screening s) {
  switch (s) {
    case Screening::kAuto: return "auto";
    case Screening::kOff: return "off";
    case Screening::kOn: return "on";
  }
  return "unknown";
}

std::string to_string(ScoreKernel k) {
  switch (k) {
    case ScoreKernel::kAuto: return "auto";
    case ScoreKernel::kRegister: return "register";
    case ScoreKernel::kTiled: return "tiled";
    case ScoreKernel::kTensor: return "tensor";
    case ScoreKernel::kTensorBias: return "tensor-bias";
  }
  return "unknown";
}

std::string to_string(SubtileOverlap o) {
  switch (o) {
    case SubtileOverlap::kOff: return "off";
    case SubtileOverlap::kWithinTile: return "on";
    case SubtileOverlap::kAcrossTiles: return "across";
  }
  return "unknown";
}

std::string to_string(Multiscale m) {
  switch (m) {
    case Multiscale::kAuto: return "auto";
    case Multiscale::kOn: return "on";
    case Multiscale::kOff: return "off";
  }
  return "unknown";
}

std::string to_string(PointOrder o) {
  switch (o) {
    case PointOrder::kAuto: return "auto";
    case PointOrder::kInput: return "input";
    case PointOrder::kLocality: return "locality";
  }
  return "unknown";
}

std::string to_string(CpuIsa i) {
  switch (i) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::string to_string(StopReason r) {
  switch (r) {
    case StopReason::kTolerance: return "tolerance";
    case StopReason::kIterationBudget: return "iteration_budget";
    case StopReason::kFixedIterations: return "fixed_iterations";
    case StopReason::kNonFinite: return "non_finite";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

BackendKind parse_backend(const std::string& text) {
  for (BackendKind b : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda})
    if (to_string(b) == text) return b;
  throw std::invalid_argument("backend must be auto, cpu or cuda (got '" + text + "')");
}

Scheme parse_scheme(const std::string& text) {
  for (Scheme s : {Scheme::kSymmetric, Scheme::kAlternating})
    if (to_string(s) == text) return s;
  throw std::invalid_argument("scheme must be symmetric or alternating (got '" + text + "')");
}

Precision parse_precision(const std::string& text) {
  for (Precision p : {Precision::kDefault, Precision::kFp32, Precision::kTf32, Precision::kBf16})
    if (to_string(p) == text) return p;
  throw std::invalid_argument("precision must be default, fp32, tf32 or bf16 (got '" + text + "')");
}

Screening parse_screening(const std::string& text) {
  for (Screening s : {Screening::kAuto, Screening::kOff, Screening::kOn})
    if (to_string(s) == text) return s;
  throw std::invalid_argument("screening must be auto, off or on (got '" + text + "')");
}

ScoreKernel parse_score_kernel(const std::string& text) {
  for (ScoreKernel k : {ScoreKernel::kAuto, ScoreKernel::kRegister, ScoreKernel::kTiled, ScoreKernel::kTensor,
                        ScoreKernel::kTensorBias})
    if (to_string(k) == text) return k;
  throw std::invalid_argument("kernel must be auto, register, tiled, tensor or tensor-bias (got '" + text + "')");
}

SubtileOverlap parse_subtile_overlap(const std::string& text) {
  for (SubtileOverlap o : {SubtileOverlap::kOff, SubtileOverlap::kWithinTile, SubtileOverlap::kAcrossTiles})
    if (to_string(o) == text) return o;
  throw std::invalid_argument("subtile overlap must be off, on or across (got '" + text + "')");
}

CpuIsa parse_cpu_isa(const std::string& text) {
  for (CpuIsa i : {CpuIsa::kAuto, CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (to_string(i) == text) return i;
  throw std::invalid_argument("CPU instruction set must be auto, generic, avx2 or avx512 (got '" + text + "')");
}

Multiscale parse_multiscale(const std::string& text) {
  for (Multiscale m : {Multiscale::kAuto, Multiscale::kOn, Multiscale::kOff})
    if (to_string(m) == text) return m;
  throw std::invalid_argument("multiscale must be auto, on or off (got '" + text + "')");
}

PointOrder parse_point_order(const std::string& text) {
  for (PointOrder o : {PointOrder::kAuto, PointOrder::kInput, PointOrder::kLocality})
    if (to_string(o) == text) return o;
  throw std::invalid_argument("point order must be auto, input or locality (got '" + text + "')");
}

}  // namespace flashot
