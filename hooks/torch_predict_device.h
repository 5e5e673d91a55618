// A stand-in CUDA device for predicting a job on a machine without a GPU (fragscope.predict).
//
// Under torch's FakeTensorMode, CUDA tensors dispatch as on a GPU (autocast, the CUDA kernels'
// choices, their meta functions), but PyTorch's C++ autograd engine asks the CUDA runtime about
// the device, and a machine without one fails: Note [Backward without a GPU] in
// torch_predict_device.cc says where and what this file changes so that the real engine runs.
//
// Process-wide while active; Begin/End pair up, and End restores exactly what Begin replaced.
#pragma once

#include "absl/status/status.h"

namespace fragscope::torch_hooks {

// Makes the CUDA hooks report a primary context on every device and installs the stand-in CUDA
// device guard. kFailedPrecondition if already active.
absl::Status BeginPredictDevice();

// Installs the stand-in guard again (FakeTensorMode replaces the CUDA guard each time it is
// entered on a machine without a GPU). A no-op unless active.
void ReinstallPredictGuard();

// Restores the CUDA hooks and the CUDA device guard that Begin found. A no-op unless active.
void EndPredictDevice();

// Whether Begin is in effect.
bool PredictDeviceActive();

}  // namespace fragscope::torch_hooks
