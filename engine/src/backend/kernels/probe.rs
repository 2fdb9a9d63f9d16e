//! Kernel declarations of the lab's probes and skeletons (`kernels/lab/probe.cu`, the `lab`
//! feature only; see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

/// probe.cu's 16-byte chunk (`u32x4`), as a pointee.
#[allow(non_camel_case_types)]
pub enum u32x4 {}
/// probe.cu's stage record (`SkelStage`: offset, bytes, producers and flags), as a pointee.
pub enum SkelStage {}

kernels! {
    Probe [sync_probe_empty] (sink: *mut u32);
    Probe [sync_probe_barriers] (bar: *mut u32, rounds: i32);
    Probe [sync_probe_ring] (counter: *mut u32, rounds: i32);
    Probe [decode_skeleton, decode_skeleton_ring] (weights: *const u32x4, stages: *const SkelStage, n: i32, done: *mut u32, out: *mut u32, failed: *mut u32, mode: i32);
    Probe [decode_skeleton_tma] (weights: *const u32x4, stages: *const SkelStage, n: i32, done: *mut u32, out: *mut u32, failed: *mut u32, mode: i32, dense: i32, routed: i32, slot: i32);
}
