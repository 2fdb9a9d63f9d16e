//! Every kernel of `metrale-kernels`, declared once: its C symbol, its [`Module`] and its
//! parameters with their C types (written as Rust types: `*const bf16` is `const bf16*`, `i32` is
//! `int`, `u8` is `unsigned char`). Each declaration is a constant [`Kernel`] whose launcher
//! (`Kernel::launch`, in `cuda/typed_launch.rs`) takes exactly the Rust values of those parameters, in
//! order, as one tuple: device pointers as `u64`, the scalars as themselves. Kernels instantiated
//! per type or shape share one parameter list, so a `match` on a typed key picks one of them.
//!
//! This table is compiled with and without the `cuda` feature: `tests.rs` checks it against the
//! `extern "C" __global__` signatures of `Module::source()` (expanded by the C preprocessor).
#![allow(non_upper_case_globals, dead_code)]

use std::marker::PhantomData;

pub use metrale_kernels::Module;

mod attention;
mod flash;
mod gemv;
mod hybrid;
mod mla;
mod moe;
#[cfg(feature = "lab")]
mod probe;
mod sample;
mod small;
#[cfg(test)]
mod tests;

pub use attention::*;
pub use flash::*;
pub use gemv::*;
pub use hybrid::*;
pub use mla::*;
pub use moe::*;
#[cfg(feature = "lab")]
pub use probe::*;
pub use sample::*;
pub use small::*;

/// The kernels' 16-bit float, as a pointee (the host never holds one).
#[allow(non_camel_case_types)]
pub enum bf16 {}
pub use std::ffi::c_void;

/// A kernel parameter's C type, as the launcher's Rust type.
pub trait CParam {
    type Rust;
}
impl<T> CParam for *const T {
    type Rust = u64;
}
impl<T> CParam for *mut T {
    type Rust = u64;
}
macro_rules! scalar_params {
    ($($t:ty),*) => { $(impl CParam for $t { type Rust = $t; })* };
}
scalar_params!(i32, u32, u64, f32);

/// A kernel's identity and C parameter types, as the check against the sources sees them.
#[derive(Debug)]
pub struct Decl {
    pub module: Module,
    pub name: &'static str,
    pub params: &'static [&'static str],
}

/// One declared kernel; `A` is the tuple of its launch arguments.
pub struct Kernel<A> {
    pub decl: Decl,
    args: PhantomData<fn(A)>,
}

impl<A> Kernel<A> {
    pub const fn name(&self) -> &'static str {
        self.decl.name
    }
}

/// Declares kernels: `Module [symbol, ...] (param: CType, ...);` one entry per parameter list,
/// with every symbol of the entry taking that list. Emits one constant `Kernel` per symbol and
/// `DECLS`, the table of all of them.
macro_rules! kernels {
    ($($module:ident [$($name:ident),+ $(,)?] $params:tt;)*) => {
        $($(kernels!(@one $module $name $params);)+)*
        pub(super) const DECLS: &[&Decl] = &[$($(&$name.decl,)+)*];
    };
    (@one $module:ident $name:ident ($($p:ident: $t:ty),* $(,)?)) => {
        pub const $name: Kernel<($(<$t as CParam>::Rust,)*)> = Kernel {
            decl: Decl {
                module: Module::$module,
                name: stringify!($name),
                params: &[$(stringify!($t)),*],
            },
            args: PhantomData,
        };
    };
}
use kernels;

/// Every declaration, all files together.
pub fn all() -> impl Iterator<Item = &'static Decl> {
    [
        attention::DECLS,
        flash::DECLS,
        gemv::DECLS,
        hybrid::DECLS,
        mla::DECLS,
        moe::DECLS,
        sample::DECLS,
        small::DECLS,
        #[cfg(feature = "lab")]
        probe::DECLS,
    ]
    .into_iter()
    .flatten()
    .copied()
}
