//! CUDA kernel sources (`src/*.cu`) and the loader that compiles them with NVRTC.
