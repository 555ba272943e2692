// The CUDA state a kernel launches under: this thread's current device and each device's
// current stream, as torch.cuda keeps them (per thread; a device's stream starts as the legacy
// default stream). Plain C++, no CUDA header, so every layer can include it in every build;
// the definitions exist only where actorch has CUDA (ACTORCH_HAVE_CUDA), and core/cuda/
// builds the user's streams, events and guards on them.
#pragma once

namespace actorch::kernels::cuda {

/// The device this thread's CUDA calls go to (cudaGetDevice).
int current_device();
/// Makes `device` this thread's current device (cudaSetDevice).
void set_device(int device);

/// This thread's current stream on `device`, a cudaStream_t (nullptr: the legacy default
/// stream). Kernels launch on current_stream(current_device()).
void* current_stream(int device);
void set_current_stream(int device, void* stream);

} // namespace actorch::kernels::cuda
