// The CUDA state a kernel launches under: this thread's current device and each device's
// current stream, as torch.cuda keeps them (per thread; a device's stream starts as the legacy
// default stream). Plain C++, no CUDA header, so every layer can include it in every build;
// the definitions exist only where actorch has CUDA (ACTORCH_HAVE_CUDA), and core/cuda/
// builds the user's streams, events and guards on them.
#pragma once

namespace actorch::kernels::cuda {

/// The device this thread's CUDA calls go to (cudaGetDevice).
int current_device();
/// Makes `device` this thread's current device (cudaSetDevice) by choice (torch.cuda.set_device):
/// the first device a thread of the process chooses is the process's home device.
void set_device(int device);
/// Makes `device` current for a while (a device guard's switch and its way back): no choice.
void switch_device(int device);
/// Before a CUDA call that makes CUDA state without naming a device (cudaHostAlloc): a thread
/// that never chose a device takes the home device first, if there is one, instead of making a
/// context on GPU 0 in a process that uses another GPU (PyTorch's pin-memory thread sets its
/// device for the same reason).
void adopt_home_device();

/// This thread's current stream on `device`, a cudaStream_t (nullptr: the legacy default
/// stream). Kernels launch on current_stream(current_device()).
void* current_stream(int device);
void set_current_stream(int device, void* stream);

} // namespace actorch::kernels::cuda
