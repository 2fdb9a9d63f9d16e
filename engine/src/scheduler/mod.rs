//! FIFO continuous-batching scheduler with chunked prefill and preemption by recompute.

pub mod io;
